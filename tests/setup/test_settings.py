"""Training's fields are declared once (``setup.TRAINING_SETTINGS``), and the commands, the panels' controls and the
search are generated from those declarations: every field shows where its declaration says, with its check."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import cli
from fastdist_lab.cost import LIMITS, SETUP_COLUMNS
from fastdist_lab.cost.search.candidates import FIXED, SEARCH_SETTINGS
from fastdist_lab.errors import CostError
from fastdist_lab.setup import (
    ENGINE_REGISTRY,
    ENGINE_TRAITS,
    ENGINES,
    SCHEDULE_KINDS,
    TRAINING_SETTINGS,
    Setting,
    Training,
    engine_record,
    schedule_kind,
)
from fastdist_lab.setup.settings import defaults_of


def _help(command: str) -> str:
    parser = cli.build_parser()
    return parser._subparsers._group_actions[0].choices[command].format_help()  # noqa: SLF001


def test_every_field_of_training_is_declared_with_its_setting():
    assert list(TRAINING_SETTINGS) == [field.name for field in dataclasses.fields(Training)]
    for spec in TRAINING_SETTINGS.values():
        assert isinstance(spec, Setting) and spec.help and spec.flag.startswith("--")


@pytest.mark.parametrize("command", ["cost", "train-step"])
def test_every_field_is_a_flag_of_cost_and_train_step_with_its_help(command):
    text = " ".join(_help(command).split())
    defaults = defaults_of(Training)
    for name, spec in TRAINING_SETTINGS.items():
        assert spec.cli_flag(defaults[name]) in text, name
        assert " ".join(spec.help.split()[:4]) in text, name


def test_the_search_takes_each_field_it_varies_or_fixes_and_its_limits_come_from_the_declarations():
    text = " ".join(_help("search").split())
    for name, spec in SEARCH_SETTINGS.items():
        assert spec.flag in text or spec.cli_flag(LIMITS[name]) in text, name
    varied = {name for name, spec in TRAINING_SETTINGS.items() if spec.search == "varied"}
    fixed = {name for name, spec in TRAINING_SETTINGS.items() if spec.search == "fixed"}
    assert set(FIXED) == fixed and varied <= set(SETUP_COLUMNS)
    assert {name: LIMITS[name] for name in varied} == {name: TRAINING_SETTINGS[name].tried for name in varied}
    assert {name: LIMITS[name] for name in fixed} == {name: getattr(Training(), name) for name in fixed}
    assert set(LIMITS) == {*SEARCH_SETTINGS, "allow_smaller_batch", "top"}


def test_a_command_line_gives_the_training_it_describes(capsys):
    args = cli.build_parser().parse_args(
        ["cost", "--micro-batch-size", "2", "--micro-batches", "8", "--zero-stage", "3", "--recompute", "full",
         "--schedule", "interleaved-1f1b", "--virtual-stages", "2", "--no-flash-attention", "--overlap-tensor-parallel",
         "--expert-load-imbalance", "1.5", "--engine", "fsdp2", "--torch-compile", "--layers-per-stage", "1", "1", "1",
         "1", "--bytes-per-gradient", "2"]
    )  # fmt: skip
    from fastdist_lab.commands.flags import training_from_args

    assert training_from_args(args) == Training(
        micro_batch_size=2, num_microbatches=8, zero_stage=3, recompute="full", schedule="interleaved-1f1b",
        virtual_pipeline_stages=2, flash_attention=False, overlap_tensor_parallel=True, expert_load_imbalance=1.5,
        engine="fsdp2", torch_compile=True, layers_per_stage=(1, 1, 1, 1), bytes_per_gradient=2,
    )  # fmt: skip


@given(st.sampled_from(sorted(TRAINING_SETTINGS)), st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True), st.text(max_size=8),
    st.tuples(st.integers(-3, 3)), st.just(float("inf")),
))  # fmt: skip
def test_a_field_takes_a_value_of_its_kind_in_its_range_or_names_itself_and_the_value(name, value):
    spec = TRAINING_SETTINGS[name]
    try:
        checked = spec.check(name, value)
    except CostError as error:
        assert str(error).startswith(f"{name}="), error
        assert "\n" not in str(error)
        return
    if spec.kind in ("int", "optional int") and checked is not None:
        assert type(checked) is int and not isinstance(value, bool)
        assert spec.minimum is None or checked >= spec.minimum
        assert spec.maximum is None or checked <= spec.maximum
    elif spec.kind == "flag":
        assert type(checked) is bool and type(value) is bool
    elif spec.kind == "choice":
        assert checked in spec.choices
    elif spec.kind == "number":
        assert math.isfinite(checked) and not isinstance(value, bool)


def test_a_bool_is_not_an_integer_nor_nan_a_number():
    with pytest.raises(CostError, match="micro_batch_size=True must be an integer, not a bool"):
        Training(micro_batch_size=True)
    with pytest.raises(CostError, match="expert_load_imbalance=nan"):
        Training(expert_load_imbalance=float("nan"))
    with pytest.raises(CostError, match="flash_attention='False' must be True or False"):
        Training(flash_attention="False")


def test_counts_are_bounded_in_length_and_size_and_an_endless_iterable_ends():
    assert Training(layers_per_stage=[3, 4]).layers_per_stage == (3, 4)
    with pytest.raises(CostError, match=r"layers_per_stage=\(0, 1, 2, 3, 4, 5, 6, 7, \.\.\.\) must hold at most 16384"):
        Training(layers_per_stage=itertools.count())
    with pytest.raises(CostError, match=r"layers_per_stage=\(1, 1048576\) must hold integers from 0 to 16384"):
        Training(layers_per_stage=(1, 2**20))
    with pytest.raises(CostError, match=r"layers_per_stage='ab' must be a sequence of layer counts"):
        Training(layers_per_stage="ab")
    with pytest.raises(CostError, match=r"layers_per_stage=\(True,\) must hold integers"):
        Training(layers_per_stage=[True])


# ---------------------------------------------------------------------------------------------------- the records
def test_engines_are_records_of_one_registry_and_the_rest_is_read_off_it():
    assert ENGINES == tuple(ENGINE_REGISTRY) and ENGINES[0] == "megatron"
    assert ENGINE_TRAITS == {name: record.traits for name, record in ENGINE_REGISTRY.items()}
    for name, record in ENGINE_REGISTRY.items():
        assert record.name == name and record.description and record.sources and record.band[0] == name
    assert engine_record("megatron").band == ("megatron", "megatron-2021")
    with pytest.raises(CostError, match="engine='tpu' must be one of 'megatron'"):
        engine_record("tpu")


def test_a_training_carries_its_schedule_and_engine_records_across_a_process():
    training = Training(engine="fsdp2", schedule="zero-bubble", virtual_pipeline_stages=2)
    assert training.engine_spec is ENGINE_REGISTRY["fsdp2"] and training.schedule_spec is SCHEDULE_KINDS["zero-bubble"]
    again = pickle.loads(pickle.dumps(training))
    assert again == training and again.engine_spec is training.engine_spec
    assert again.schedule_spec is schedule_kind("zero-bubble")
    assert training.replace(engine="deepspeed", schedule="1f1b", virtual_pipeline_stages=1).engine_spec.name == (
        "deepspeed"
    )


def test_a_schedule_and_an_engine_are_looked_up_once_on_the_way_from_the_command_line_to_the_step(monkeypatch):
    import fastdist_lab.setup.engines as engines
    import fastdist_lab.setup.schedule_kinds as kinds
    import fastdist_lab.setup.training as training_module

    looked_up: list[str] = []

    def counting(function):
        def wrapped(name, *args, **kwargs):
            if isinstance(name, str):
                looked_up.append(name)
            return function(name, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(training_module, "engine_record", counting(engines.engine_record))
    monkeypatch.setattr(training_module, "schedule_kind", counting(kinds.schedule_kind))
    monkeypatch.setattr(kinds, "schedule_kind", counting(kinds.schedule_kind))
    code = cli.main(["cost", "--world-size", "16", "--tp", "2", "--pp", "4", "--micro-batches", "8", "--schedule",
                     "zero-bubble", "--engine", "fsdp2", "--model", "llama2-7b", "--format", "json"])  # fmt: skip
    assert code == 0
    assert sorted(looked_up) == ["fsdp2", "zero-bubble"]  # once each: Training resolves them; the step reads records


def test_the_dead_fields_of_a_schedule_are_gone_and_warn():
    kind = SCHEDULE_KINDS["1f1b"]
    assert "priced" not in {field.name for field in dataclasses.fields(kind)}
    with pytest.warns(DeprecationWarning, match="ScheduleKind.priced is deprecated"):
        assert kind.priced is True
    with pytest.warns(DeprecationWarning, match="ScheduleKind.runnable is deprecated"):
        assert kind.runnable is True
