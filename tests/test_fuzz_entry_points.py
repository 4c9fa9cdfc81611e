"""Every public entry point fuzzed (issue 45): ``Layout``, ``Training``, ``Transformer``, ``Hardware``, ``estimate`` and
``.step``, ``search``, ``compare``, ``load_config`` and the commands, each given values drawn from what its fields take,
from the boundary values people mistype and from garbage. Every call must end within 5 s in a result or the project's
error of one line naming a field (exit 2 with one line on the command line). The counts are printed; the whole suite
(CI) makes at least 5,000 calls, the quick loop (``-m "not slow"``) a tenth of them (``fuzz_entry_points.py`` says how
a call is drawn and judged)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import load_config
from fastdist_lab.cost import compare, estimate, search
from fastdist_lab.setup import Efficiency, Hardware, Training, Transformer

_spec = importlib.util.spec_from_file_location("fuzz_entry_points", Path(__file__).with_name("fuzz_entry_points.py"))
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

TALLY = fuzz.Tally()
SCALE = 1 if settings.default.max_examples <= 10 else 10
"""The quick loop's profile draws 10 examples a test (tests/conftest.py): a tenth of the whole suite's calls."""

CI_CALLS = 5000


def examples(count: int) -> Any:
    """Hypothesis settings for ``count`` calls in the whole suite (a tenth in the quick loop)."""
    return settings(max_examples=max(10, count * SCALE // 10), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


def _build(kind: type, fields: dict[str, Any]) -> Any:
    try:
        return kind(**fields)
    except ValueError:
        return None


ARGUMENT_FIELDS = [f.name for kind in (Layout, Transformer, Training) for f in dataclasses.fields(kind)]
"""What an error of ``estimate`` or ``compare`` may name: an argument, or a field of one (``num_query_groups``)."""

TINY = {"hidden_size": 256, "num_layers": 8, "num_attention_heads": 8, "vocab_size": 1000, "seq_length": 256}
H100 = Hardware.preset("h100-sxm-80gb")


@examples(1000)
@given(fields=fuzz.layout_fields())
def test_layout(fields):
    TALLY.call("Layout", fields, lambda: Layout(**fields))


@examples(1000)
@given(fields=fuzz.training_fields())
def test_training(fields):
    TALLY.call("Training", fields, lambda: Training(**fields))


@examples(600)
@given(fields=fuzz.model_fields())
def test_transformer(fields):
    TALLY.call("Transformer", fields, lambda: Transformer(**fields))


@examples(500)
@given(fields=fuzz.hardware_fields())
def test_hardware(fields):
    TALLY.call("Hardware", fields, lambda: Hardware(**fields))


@examples(700)
@given(layout=fuzz.layout_fields(), model=st.one_of(fuzz.model_fields(), st.sampled_from(["llama2-7b", "gpt3-1.3b"])),
       training=fuzz.training_fields(), hardware=fuzz.field_values(st.sampled_from(["h100-sxm-80gb", "b200"])),
       efficiency=fuzz.field_values(st.sampled_from([None, Efficiency()])), swap=st.sampled_from(
           [None, "layout", "model", "training"]), junk=fuzz.GARBAGE)  # fmt: skip
def test_estimate_and_its_step(layout, model, training, hardware, efficiency, swap, junk):
    built = {
        "layout": _build(Layout, layout) or Layout(world_size=8, tensor_parallel=2),
        "model": model if isinstance(model, str) else (_build(Transformer, model) or Transformer(**TINY)),
        "training": _build(Training, training) or Training(),
    }
    if swap is not None:
        built[swap] = junk  # one argument garbage
    report = TALLY.call("estimate", ["layout", "model", "training", *ARGUMENT_FIELDS], lambda: estimate(**built))
    if report is not None:
        TALLY.call("CostReport.step", ["hardware", "efficiency", "peak_tflops", "memory"],
                   lambda: report.step(hardware, efficiency))  # fmt: skip


LIMIT_VALUES = {
    "tensor_parallel": st.sampled_from([1, 2, (1, 2), (2, 4)]), "pipeline_parallel": st.sampled_from([1, 2, (1, 2)]),
    "sequence_data_parallel": st.sampled_from([1, (1, 2)]), "micro_batch_size": st.sampled_from([1, (1, 2)]),
    "zero_stage": st.sampled_from([0, 1, (0, 3)]), "recompute": st.sampled_from(["none", ("none", "full")]),
    "schedule": st.sampled_from(["1f1b", ("1f1b", "zero-bubble")]), "engine": st.sampled_from(["megatron", "fsdp2"]),
    "virtual_pipeline_stages": st.sampled_from([1, (1, 2)]), "pipeline_first": st.booleans(),
    "sequence_tensor_parallel": st.booleans(), "flash_attention": st.booleans(), "torch_compile": st.booleans(),
    "expert_load_imbalance": st.floats(1.0, 2.0), "allow_smaller_batch": st.booleans(),
}  # fmt: skip


@examples(250)
@given(gpus=fuzz.field_values(st.sampled_from([8, 16, 32])), batch=fuzz.field_values(st.sampled_from([16, 32, 64])),
       seq=st.one_of(st.none(), fuzz.field_values(st.sampled_from([128, 256]))), limits=st.fixed_dictionaries(
           {"top": fuzz.field_values(st.integers(1, 5))},
           optional={name: fuzz.field_values(values) for name, values in LIMIT_VALUES.items()}),
       extra=st.sampled_from([None, None, None, "tp", "gpu", "\u00e9"]))  # fmt: skip
def test_search(gpus, batch, seq, limits, extra):
    if extra:
        limits = {**limits, extra: 1}  # a misspelt limit
    names = ["gpus", "global_batch_size", "seq_length", "layout", "search", *limits]
    TALLY.call("search", names, lambda: search(Transformer(**TINY), gpus, hardware=H100, global_batch_size=batch,
                                               seq_length=seq, **limits))  # fmt: skip


@examples(300)
@given(layouts=st.lists(fuzz.layout_fields(), min_size=2, max_size=3), keep=st.sampled_from([None] * 6 + [0, 1]),
       junk=fuzz.field_values(st.none()), model=st.sampled_from(["gpt3-1.3b"] * 3 + ["x"]),
       training=fuzz.training_fields(), names=fuzz.field_values(st.none()))  # fmt: skip
def test_compare(layouts, keep, junk, model, training, names):
    built = [_build(Layout, fields) or Layout(world_size=8, tensor_parallel=2) for fields in layouts][:keep]
    if junk is not None:
        built[-1:] = [junk]  # one layout garbage
    trained = _build(Training, training)
    TALLY.call("compare", ["layout", "model", "training", "names", "compare", *ARGUMENT_FIELDS],
               lambda: compare(*built, model=model, training=trained, names=names))  # fmt: skip


CONFIG_TEXT = st.one_of(
    st.text(max_size=200), st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    st.builds(lambda tp, pp: f"torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size {tp} "
              f"--pipeline-model-parallel-size {pp}", fuzz.GARBAGE, fuzz.GARBAGE),
    st.builds(lambda tp: f"model:\n  distributed:\n    tensor_parallel: {tp}\n    world_size: 8\n", fuzz.GARBAGE),
)  # fmt: skip


@examples(400)
@given(text=CONFIG_TEXT, world_size=st.one_of(st.none(), fuzz.field_values(st.sampled_from([8, 16]))))
def test_load_config(text, world_size):
    names = ["text", "config", "world_size", "framework", "line", "tensor", "pipeline", "world", "size", "--", "="]
    TALLY.call("load_config", names, lambda: load_config(text, world_size=world_size))


FLAG_VALUES = st.one_of(st.sampled_from(["0", "-1", "1", "2", "8", "nan", "inf", "1e400", "10" * 20, "abc", "", "1.5",
                                         "True", "2**4", "--help-me"]), st.text(max_size=6))  # fmt: skip
COMMAND_FLAGS = {
    "layout": ["--world-size", "--local-world-size", "--tp", "--pp", "--sdp", "--ep", "--etp", "--rank", "--seed"],
    "cost": ["--world-size", "--tp", "--pp", "--sdp", "--micro-batch-size", "--micro-batches", "--zero-stage",
             "--recompute", "--schedule", "--virtual-stages", "--engine", "--seq-length", "--inter-node-GBps",
             "--expert-load-imbalance", "--hardware", "--model", "--bytes-per-weight"],
    "search": ["--gpus", "--global-batch-size", "--tp", "--pp", "--sdp", "--micro-batch-size", "--zero-stage",
               "--schedule", "--engine", "--top", "--seq-length", "--gpus-per-node", "--expert-load-imbalance"],
}  # fmt: skip
REFUSED_ONLY = {  # commands that start ranks: only values their flags refuse
    "check": ["--world-size", "--tp", "--timeout"], "streams": ["--step", "--world-size"],
    "train-step": ["--rows", "--tolerance", "--dropout", "--layers", "--micro-batch-size", "--schedule"],
}


@examples(600)
@given(command=st.sampled_from(sorted(COMMAND_FLAGS)), data=st.data())
def test_commands(command, data):
    flags = data.draw(st.lists(st.sampled_from(COMMAND_FLAGS[command]), min_size=1, max_size=4, unique=True))
    argv = [command]
    for flag in flags:
        argv += [flag, data.draw(FLAG_VALUES)]
    if command == "search":
        argv += ["--model", "gpt3-1.3b", "--quiet", "--top", "3"] + (
            [] if "--gpus" in flags else ["--gpus", "8"]) + ([] if "--global-batch-size" in flags else [
            "--global-batch-size", "16"])  # fmt: skip
    if command == "cost":
        argv += ["--model", "gpt3-1.3b"] if "--model" not in flags else []
    TALLY.command(argv)


@examples(200)
@given(command=st.sampled_from(sorted(REFUSED_ONLY)), data=st.data())
def test_commands_that_start_ranks_refuse_bad_values_before(command, data):
    flag = data.draw(st.sampled_from(REFUSED_ONLY[command]))
    bad = {"--timeout": ["0", "-1", "nan", "abc"], "--tolerance": ["0", "-1", "nan"], "--dropout": ["1", "-0.5", "x"],
           "--schedule": ["bogus", "1F1B"], "--rows": ["-1", "abc"], "--step": ["-1", "abc", "1.5"],
           "--layers": ["0", "-1", "abc", "10" * 20, "70000"]}.get(flag, ["0", "-1", "abc", "10" * 20])  # fmt: skip
    TALLY.command([command, flag, data.draw(st.sampled_from(bad))], refused=True)


def test_every_call_kept_the_promise(capsys):
    """The last test of the file: the tally of every call above (printed), none broken, and enough of them."""
    with capsys.disabled():
        print("\n" + TALLY.summary())
    assert TALLY.broken == [], "\n".join(TALLY.broken[:30])
    if SCALE == 10:
        assert TALLY.total() >= CI_CALLS


def test_a_call_that_breaks_the_promise_is_reported():
    tally = fuzz.Tally()
    tally.call("raw", ["x"], lambda: 1 / 0)  # a raw exception
    tally.call("long", ["x"], lambda: (_ for _ in ()).throw(fuzz.CostError("x=1\nsecond line")))
    tally.call("nameless", ["tensor_parallel"], lambda: (_ for _ in ()).throw(fuzz.CostError("something is off")))
    tally.call("fine", ["x"], lambda: (_ for _ in ()).throw(fuzz.CostError("x=0 must be > 0")))
    assert [line.split(":")[0] for line in tally.broken] == ["raw", "long", "nameless"]
    assert tally.counts["fine", "refused"] == 1


@pytest.mark.parametrize("argv", [["cost", "--tp", "0"], ["search", "--gpus", "9" * 30, "--global-batch-size", "8"]])
def test_a_command_that_refuses_says_one_line_and_exits_2(argv):
    tally = fuzz.Tally()
    tally.command(argv)
    assert tally.broken == [] and sum(n for (_, outcome), n in tally.counts.items() if outcome == "refused") == 1
