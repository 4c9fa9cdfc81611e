"""The public names removed without a deprecation come back for one release: each old spelling, used as a user's code
uses it, warns with its new spelling and gives what the new spelling gives."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fastdist_lab import conventions, errors
from fastdist_lab.conventions import DeepSpeed, Megatron, MegatronParallelState


def _warns(old: str, new: str):
    return pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is deprecated: use {re.escape(new)}")


def test_megatron_from_args_warns_and_reads_the_command_line_as_the_state_does():
    line = (
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py "
        "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2"
    )
    with _warns(
        "fastdist_lab.conventions.Megatron.from_args", "fastdist_lab.conventions.MegatronParallelState.from_args"
    ):
        old = Megatron.from_args(line)
    new = MegatronParallelState.from_args(line)
    assert isinstance(old, MegatronParallelState)
    assert old.named_groups().keys() == new.named_groups().keys()
    assert all(np.array_equal(old.named_groups()[k], new.named_groups()[k]) for k in new.named_groups())
    assert (old.world_size, old.source_notes) == (new.world_size, new.source_notes)


def test_megatron_from_args_keeps_its_world_size_arguments_and_refusals():
    with _warns("fastdist_lab.conventions.Megatron.from_args", "fastdist_lab.conventions.MegatronParallelState"):
        old = Megatron.from_args(["--tensor-model-parallel-size", "2"], world_size=8, local_world_size=4)
    assert old == MegatronParallelState.from_args(["--tensor-model-parallel-size", "2"], 8, 4)
    assert old.local_world_size == 4
    with pytest.warns(DeprecationWarning), pytest.raises(errors.ConventionError, match="tensor-model-parallel-size 3"):
        Megatron.from_args("--tensor-model-parallel-size 3", world_size=8)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((8,), {}),
        ((16,), {"tp": 2, "pp": 2, "ep": 2}),
        ((16,), {"tp": 2, "ep": 4, "expert_tp": 1}),
        ((16, 2, 1, 2, None, "tp-cp-ep-dp-pp", 2), {}),  # positional, as the old signature took them
        ((16,), {"tp": 2, "pp": 2, "order": "tp-cp-ep-pp-dp"}),
    ],
)
def test_megatron_expert_warns_and_is_the_states_expert_generator(args, kwargs):
    names = ("world_size", "tp", "pp", "ep", "expert_tp", "order", "cp")
    given = {"tp": 1, "pp": 1, "ep": 1, "expert_tp": None, "order": "tp-cp-ep-dp-pp", "cp": 1, **dict(zip(names, args))}
    given.update(kwargs)
    with _warns("fastdist_lab.conventions.Megatron.expert", "fastdist_lab.conventions.MegatronParallelState("):
        old = Megatron.expert(*args, **kwargs)
    new = MegatronParallelState(
        given["world_size"],
        tensor_model_parallel_size=given["tp"],
        pipeline_model_parallel_size=given["pp"],
        context_parallel_size=given["cp"],
        expert_model_parallel_size=given["ep"],
        expert_tensor_parallel_size=given["expert_tp"],
        order=given["order"],
    ).expert
    assert old == new and type(old) is Megatron
    for token in ("tp", "ep", "dp", "pp", "tp-ep"):
        assert np.array_equal(old.groups(token), new.groups(token))


def test_megatron_expert_refuses_what_initialize_model_parallel_refuses():
    with pytest.warns(DeprecationWarning), pytest.raises(errors.ConventionError, match="refuses"):
        Megatron.expert(12, tp=8)


def test_a_state_still_holds_its_expert_generator_not_the_old_method():
    state = MegatronParallelState(16, tensor_model_parallel_size=2, expert_model_parallel_size=2)
    assert isinstance(state.expert, Megatron)  # the instance attribute, no warning (warnings are errors here)


@pytest.mark.parametrize(("pipe", "data", "model"), [(1, 1, 1), (2, 2, 2), (4, 1, 2), (2, 3, 4)])
def test_deepspeed_rank_of_warns_and_is_the_grid_at_those_coordinates(pipe, data, model):
    topology = DeepSpeed(pipe=pipe, data=data, model=model)
    for p, d, m in np.ndindex(pipe, data, model):
        with _warns("fastdist_lab.conventions.DeepSpeed.rank_of", "int(convention.grid[index])"):
            old = topology.rank_of(pipe=p, data=d, model=m)
        assert old == int(topology.grid[p, d, m])  # DeepSpeed's own get_rank: model fastest, pipe slowest
        assert old == (p * data + d) * model + m


def test_rank_of_fills_left_out_axes_with_zero_and_names_bad_coordinates():
    topology = DeepSpeed(pipe=2, data=2, model=2)
    with pytest.warns(DeprecationWarning):
        assert topology.rank_of(data=1) == 2
    with pytest.warns(DeprecationWarning), pytest.raises(errors.ConventionError, match=r"model=2 must be <= 1"):
        topology.rank_of(model=2)
    with pytest.warns(DeprecationWarning), pytest.raises(errors.ConventionError, match=r"unknown axes \['tp'\]"):
        topology.rank_of(tp=0)
    with pytest.warns(DeprecationWarning, match=r"fastdist_lab\.conventions\.Megatron\.rank_of is deprecated"):
        assert Megatron(tp=2, dp=2).rank_of(tp=1, dp=1) == 3  # every convention kept it


@pytest.mark.parametrize("name", ["ConventionError", "ConventionWorldSizeNeeded", "WorldSizeNeeded"])
def test_an_exception_imported_from_conventions_warns_and_is_the_one_in_errors(name):
    with _warns(f"fastdist_lab.conventions.{name}", f"fastdist_lab.errors.{name}"):
        old = getattr(conventions, name)
    assert old is getattr(errors, name)
    assert name not in dir(conventions)


def test_an_old_convention_error_import_still_catches_what_the_package_raises():
    with pytest.warns(DeprecationWarning, match="fastdist_lab.errors.ConventionError"):
        from fastdist_lab.conventions import ConventionError
    with pytest.raises(ConventionError, match="tp=0"):
        Megatron(tp=0)


def test_an_unknown_name_of_conventions_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        conventions.Nothing  # noqa: B018
