"""Expert parallelism on a Layout (issue 28, item 1): the rule, Megatron-Core's expert generator as oracle, errors,
and nothing changed without experts."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.conventions import MegatronParallelState
from fastdist_lab.conventions.megatron_state import expert_mismatch
from fastdist_lab.errors import LayoutError
from fastdist_lab.experts import EXPERT_DIM_NAMES

POWERS = st.sampled_from([1, 2, 4])


@st.composite
def moe_layouts(draw) -> dict:
    """Layout fields with experts that fit: sizes powers of two, so that most draws divide."""
    tp, pp, sdp, bdp = draw(POWERS), draw(POWERS), draw(st.sampled_from([1, 2])), draw(POWERS)
    stage = tp * sdp * bdp
    etp = draw(st.sampled_from([None, *[d for d in (1, 2, 4) if stage % d == 0]]))
    left = stage // (tp if etp is None else etp)
    ep = draw(st.sampled_from([d for d in (1, 2, 4, 8) if left % d == 0]))
    world = stage * pp
    local = draw(st.sampled_from([d for d in (tp, 2 * tp, 4 * tp) if world % d == 0]))
    return dict(
        world_size=world,
        local_world_size=local,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=draw(st.booleans()),
        expert_parallel=ep,
        expert_tensor_parallel=etp,
    )


def stage_index(layout: Layout) -> list[list[int]]:
    """The rule of ``fastdist_lab.experts`` written plainly, one stage at a time: (stage, i) per rank."""
    out = {}
    for stage, members in enumerate(layout.groups("tensor_and_data").tolist()):
        for i, rank in enumerate(sorted(members)):
            out[rank] = (stage, i)
    return [list(out[rank]) for rank in range(layout.world_size)]


@settings(max_examples=60, deadline=None)
@given(moe_layouts())
def test_expert_coordinates_follow_the_written_rule(fields):
    layout = Layout(**fields)
    sizes = layout.expert_sizes
    etp, ep = sizes["expert_tensor"], sizes["expert"]
    where = stage_index(layout)
    expected = {
        "expert_tensor": [i % etp for _, i in where],
        "expert": [(i // etp) % ep for _, i in where],
        "expert_data": [i // (etp * ep) for _, i in where],
    }
    for dim, ranks in expected.items():
        assert layout.dim_rank(dim).tolist() == ranks, dim
    for dim in EXPERT_DIM_NAMES:
        groups, index, position = layout.groups(dim), layout.group_index(dim), layout.dim_rank(dim)
        assert sorted(groups.reshape(-1).tolist()) == list(range(layout.world_size))  # a partition of the world
        assert groups[:, 0].tolist() == sorted(groups[:, 0].tolist())  # rows by first member
        assert (np.diff(groups, axis=1) > 0).all()  # members grow with group rank
        for rank in (0, layout.world_size - 1, layout.world_size // 2):
            assert groups[index[rank], position[rank]] == rank
            assert layout.group_of(dim, rank).tolist() == groups[index[rank]].tolist()
        members = {tuple(where[r][0] for r in row) for row in groups.tolist()}
        assert all(len(set(stages)) == 1 for stages in members)  # a group never leaves its pipeline stage


@settings(max_examples=60, deadline=None)
@given(moe_layouts())
def test_expert_groups_are_megatron_cores_for_every_order_both_share(fields):
    """Our model of ``initialize_model_parallel`` (itself checked against Megatron-Core's own code by
    ``tests/conventions/crosscheck_megatron_state.py``) builds the expert generator; wherever Megatron accepts the
    set-up, its four expert groups are the Layout's."""
    layout = Layout(**fields)
    order = "tp-pp-cp-ep-dp" if layout.pipeline_first else "tp-cp-ep-dp-pp"  # Fast-LLM's two orders
    try:
        state = MegatronParallelState(
            layout.world_size,
            tensor_model_parallel_size=layout.tensor_parallel,
            pipeline_model_parallel_size=layout.pipeline_parallel,
            context_parallel_size=layout.sequence_data_parallel,
            expert_model_parallel_size=layout.expert_parallel,
            expert_tensor_parallel_size=layout.expert_tensor_parallel,
            order=order,
            local_world_size=layout.local_world_size,
        )
    except ValueError as error:  # Megatron refuses (pipeline not last with another expert data size, ...)
        assert any(why in str(error) for why in ("pp-last", "not divisible", "Pipeline parallel groups")), error
        return
    assert expert_mismatch(layout, state) == ""
    equivalent, why = state.layout_equivalent()
    if equivalent is not None:  # the Layout Megatron's configuration reads as: the same groups, experts included
        for dim in (*DIM_NAMES, *EXPERT_DIM_NAMES):
            assert np.array_equal(equivalent.groups(dim), layout.groups(dim)), (dim, why)


def test_a_layout_with_other_experts_is_reported_as_not_megatrons():
    state = MegatronParallelState(16, tensor_model_parallel_size=2, expert_model_parallel_size=4)
    right = Layout(world_size=16, tensor_parallel=2, expert_parallel=4)
    assert expert_mismatch(right, state) == ""
    wrong = right.replace(expert_parallel=2)
    assert "EXPERT_MODEL_PARALLEL_GROUP" in expert_mismatch(wrong, state)
    layout, why = state.layout_equivalent()
    assert layout == right and "so are the expert groups" in why


@settings(max_examples=30, deadline=None)
@given(moe_layouts())
def test_without_experts_every_dense_group_and_seed_is_unchanged(fields):
    moe = Layout(**fields)
    dense = moe.replace(expert_parallel=1, expert_tensor_parallel=None)
    for dim in DIM_NAMES:
        assert np.array_equal(moe.groups(dim), dense.groups(dim)), dim
    assert moe.seed_table(3).equals(dense.seed_table(3))
    assert moe.config(0) == dense.config(0)
    assert not dense.has_experts and "expert" not in repr(dense) and list(dense.topology().index) == list(DIM_NAMES)


def test_experts_take_part_in_equality_hash_pickle_and_the_summary():
    moe = Layout(world_size=16, local_world_size=8, tensor_parallel=2, expert_parallel=4)
    assert moe != moe.replace(expert_parallel=2) and moe == pickle.loads(pickle.dumps(moe))
    assert len({moe, moe.replace(expert_parallel=2), pickle.loads(pickle.dumps(moe))}) == 2
    assert moe.summary()["expert_parallel"] == 4 and moe.summary()["expert_data_parallel"] == 2
    assert "expert_parallel=4" in repr(moe)
    assert list(moe.topology().index[-4:]) == list(EXPERT_DIM_NAMES)
    assert bool(moe.topology().loc["expert_data", "intra_node"]) is False  # 0 and 8 sit on two nodes


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(expert_parallel=3), "expert_tensor_parallel=2 * expert_parallel=3 = 6 must divide"),
        (dict(expert_parallel=0), "expert_parallel=0"),
        (dict(expert_parallel="4"), "expert_parallel='4'"),
        (dict(expert_tensor_parallel=0), "expert_tensor_parallel=0"),
        (dict(expert_tensor_parallel=4, expert_parallel=4), "= 16 must divide the ranks of one pipeline stage"),
        (dict(expert_nope=2), "expert_nope"),
    ],
)
def test_bad_expert_sizes_name_the_value_and_what_must_divide(fields, message):
    with pytest.raises(LayoutError, match=None) as caught:
        Layout(world_size=16, tensor_parallel=2, pipeline_parallel=2, **fields)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_million_ranks_with_experts_stay_vectorised():
    layout = Layout(world_size=2**20, local_world_size=8, tensor_parallel=8, pipeline_parallel=16, expert_parallel=64)
    groups = layout.groups("expert")
    assert groups.shape == (2**20 // 64, 64)
    assert layout.group_of("expert", 2**20 - 1)[-1] == 2**20 - 1


def test_the_layout_command_lists_the_expert_groups(capsys):
    from fastdist_lab.cli import main

    assert main(["layout", "--world-size", "16", "--local-world-size", "8", "--tp", "2", "--ep", "4"]) == 0
    out = capsys.readouterr().out
    assert "expert_parallel=4, expert_tensor_parallel=2, expert_data_parallel=2" in out
    assert "expert (size 4, 4 groups): [0 2 4 6] [1 3 5 7] [8 10 12 14] [9 11 13 15]" in out
    assert main(["layout", "--world-size", "16", "--tp", "2", "--ep", "4", "--etp", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["groups"]["expert"][0] == [0, 1, 2, 3] and doc["layout"]["expert_tensor_parallel"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["layout", "--world-size", "16", "--tp", "2", "--ep", "3"], "expert_parallel=3 = 6 must divide"),
        (["layout", "--world-size", "16", "--rank", "3", "--num-experts", "8"], "--num-experts 8 needs a layout"),
        (["cost", "--world-size", "16", "--tp", "2", "--ep", "4"], "expert_parallel=4 needs a model with experts"),
        (["cost", "--world-size", "16", "--ep", "4", "--model", "mixtral-8x7b", "--replay"], "no expert groups yet"),
        (["train-step", "--world-size", "8", "--ep", "4", "--zero-stage", "3"], "zero_stage=3 with experts"),
        (["train-step", "--world-size", "8", "--ep", "4", "--num-experts", "6"], "must divide num_experts=6"),
    ],
)
def test_expert_flags_a_command_cannot_honour_exit_2_in_one_line(argv, message, capsys):
    from fastdist_lab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
