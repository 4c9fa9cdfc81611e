"""Fingerprints of the cost model's outputs: a few thousand predictions, search rows, bands, report texts, command
outputs and panel values, each reduced to a hash, kept in ``tests/cost/fingerprints.json`` (issue 44: a move of code
changes none of them).

Each case is a plain description (what a user states: a layout's fields, a model preset, ``Training`` fields, a
hardware preset; a search's arguments; a command line; a panel's settings) stored beside its hash, so the check reads
its cases from the file and does not depend on how they were drawn. ``--write`` draws the cases (seeded) and writes
the file; a check recomputes every hash and lists the cases whose output changed::

    python scripts/fingerprints.py --check [--groups estimate,search,band,cli,compare]   # exit 1 on a change
    python scripts/fingerprints.py --write     # after a deliberate change of outputs, in the same commit

Groups: ``estimate`` (``estimate(...)``'s report as text and as a document with its step time and band), ``search``
(the whole frame of ``search(...)`` and its ranked text, rows as ``Layout`` and ``Training``), ``band``
(``band_for``), ``cli`` (``fastdist-lab cost`` / ``search`` output and exit code), ``compare`` (``compare``'s table),
``panel`` (the cost panel's and the Advisor's texts; imports ipywidgets) and ``validate`` (every published run's
prediction). Floats are written with ``repr``: a hash changes with the last bit.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import random
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

FILE = Path(__file__).resolve().parents[1] / "tests" / "cost" / "fingerprints.json"
QUICK_GROUPS = ("estimate", "band", "cli", "compare")
SLOW_GROUPS = ("search", "panel", "validate")
GROUPS = QUICK_GROUPS + SLOW_GROUPS


def digest(text: str) -> str:
    """The first 20 hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def plain(value: Any) -> Any:
    """``value`` as JSON-able Python with floats as their ``repr`` (exact), numpy scalars unwrapped."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        value = value.item()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------- outputs
def _hardware(spec: dict[str, Any]) -> Any:
    from fastdist_lab.cost import Hardware

    hardware = Hardware.preset(spec["hardware"])
    return hardware.with_network(spec.get("inter_node_GBps"))


def _model(spec: dict[str, Any]) -> Any:
    from fastdist_lab.cost import Transformer

    model = spec["model"]
    if isinstance(model, str):
        return Transformer.preset(model, **spec.get("model_changes", {}))
    return Transformer(**model)


def _training(fields: dict[str, Any]) -> Any:
    from fastdist_lab.cost import Training

    fields = dict(fields)
    if fields.get("layers_per_stage") is not None:
        fields["layers_per_stage"] = tuple(fields["layers_per_stage"])
    return Training(**fields)


def estimate_output(spec: dict[str, Any]) -> str:
    """``estimate(...)``: the report's text and document on the hardware (the step, its band and breakdown among
    them), or the error's type and message."""
    from fastdist_lab import Layout
    from fastdist_lab.cost import estimate

    try:
        report = estimate(Layout(**spec["layout"]), _model(spec), _training(spec["training"]))
        hardware = _hardware(spec)
        step = report.step(hardware)
        parts = [
            report.to_text(hardware),
            report.fits(hardware).to_csv(float_format=repr), report.communication.to_csv(float_format=repr),
            report.communication_time(hardware).to_csv(float_format=repr),
            json.dumps(plain({name: step.parts[name] for name in sorted(step.parts)})),
            json.dumps(plain(report.summary()["parameters"])), repr(step.band), step.trust_text(), repr(report.kind),
            repr(step.mfu_flag), repr(step.fits), repr(step.critical_rank),
        ]  # fmt: skip
    except ValueError as error:
        parts = [type(error).__name__, str(error)]
    return "\n".join(parts)


def search_output(spec: dict[str, Any]) -> str:
    """``search(...)``: the whole frame, the summary and ranked text, and the first rows as a layout and training."""
    from fastdist_lab.cost import ranked_legend, ranked_lines, search, search_summary

    arguments = dict(spec["arguments"])
    for name, value in list(arguments.items()):
        if isinstance(value, list):
            arguments[name] = tuple(value)
    if "hardware" in arguments and "inter_node_GBps" in spec:
        arguments["hardware"] = _hardware({"hardware": arguments["hardware"], **spec})
    try:
        result = search(spec["model"], spec["gpus"], **arguments)
    except ValueError as error:
        return f"{type(error).__name__}\n{error}"
    rows = [repr((result.layout(i).fields(), result.training(i))) for i in range(min(len(result), 5))]
    return "\n".join([
        result.frame.to_csv(float_format=repr), repr(result), search_summary(result), *ranked_lines(result),
        ranked_legend(result), *rows, repr((result.searched, result.dropped, result.pruned)),
    ])  # fmt: skip


def band_output(spec: dict[str, Any]) -> str:
    """``band_for(...)``: the band, its text and range."""
    from fastdist_lab.cost import band_for

    band = band_for(spec["engine"], spec["family"], spec["kind"], spec["gpus"], seq_length=spec["seq_length"])
    return "\n".join([repr(band), band.text(), band.short(), repr(band.range(1.0))])


def cli_output(spec: dict[str, Any]) -> str:
    """``fastdist-lab ARGS``: exit code, standard output and standard error."""
    from fastdist_lab import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(spec["argv"])
        except SystemExit as exit_:
            code = exit_.code
    return f"{code}\n{out.getvalue()}\n{err.getvalue()}"


def compare_output(spec: dict[str, Any]) -> str:
    """``compare(...)``: the table of layouts side by side."""
    from fastdist_lab import Layout
    from fastdist_lab.cost import compare

    layouts = [Layout(**fields) for fields in spec["layouts"]]
    frame = compare(*layouts, model=_model(spec), training=_training(spec["training"]), hardware=_hardware(spec))
    return frame.to_csv(float_format=repr)


def panel_output(spec: dict[str, Any]) -> str:
    """The cost panel's texts for a layout and set-up (``CostPanel.load``), or the Advisor's for a search."""
    from fastdist_lab import Layout
    from fastdist_lab.widgets import AdvisorPanel, CostPanel

    if spec["panel"] == "advisor":
        panel = AdvisorPanel(**spec["inputs"])
        panel.search()
        options = [label for label, _ in panel.rows.options]
        status = re.sub(r"searched in [0-9.]+ s", "searched in (time)", panel.status.value)  # the time it took
        return "\n".join([status, panel.header.value, panel.legend.value, panel.error, *options])
    panel = CostPanel(layout=Layout(**spec["layout"]), model=spec["model"])
    panel.load(training=_training(spec["training"]), hardware=spec["hardware"],
               inter_node_GBps=spec.get("inter_node_GBps", 0.0))  # fmt: skip
    panel.flush()
    view = panel.step_view
    return "\n".join([panel.status.value, view.headline.value, view.breakdown.value, panel.tables.value])


def validate_output(spec: dict[str, Any]) -> str:
    """Every published run's prediction (``validate``): measured and predicted seconds, whether it fits and the
    settings taken, per run (the kind column is left out: issue 44 made it ``setup_kind``'s)."""
    from fastdist_lab.cost import PUBLISHED_MOE_RUNS, PUBLISHED_RUNS, validate

    runs = PUBLISHED_RUNS if spec["runs"] == "dense" else PUBLISHED_MOE_RUNS
    frame = validate(runs)
    columns = ["run", "measured_seconds", "predicted_seconds", "error", "fits", "settings", "calibration"]
    return frame[columns].to_csv(float_format=repr)


OUTPUTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "estimate": estimate_output, "search": search_output, "band": band_output, "cli": cli_output,
    "compare": compare_output, "panel": panel_output, "validate": validate_output,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------------- cases
MODELS = ("llama2-7b", "llama2-70b", "gpt3-175b", "gpt3-1.3b", "mistral-7b", "llama3-8b", "mixtral-8x7b",
          "qwen3-30b-a3b", "qwen3-235b-a22b")  # fmt: skip
ENGINES = ("megatron", "deepspeed", "fsdp2", "deepspeed-0.3", "deepspeed-0.5", "composer-fsdp", "megatron-2021")
HARDWARE = ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200", "dgx-a100", "pcie-100gbe")


def _estimate_cases(count: int, rng: random.Random) -> list[dict[str, Any]]:
    from fastdist_lab import Layout
    from fastdist_lab.cost import Transformer, estimate

    cases: list[dict[str, Any]] = []
    tries = 0
    while len(cases) < count and tries < count * 50:
        tries += 1
        name = rng.choice(MODELS)
        model = Transformer.preset(name)
        tp, pp, sdp, bdp = (rng.choice(c) for c in ((1, 2, 4, 8), (1, 2, 4, 8), (1, 1, 2, 4), (1, 2, 4, 8, 16)))
        world = tp * pp * sdp * bdp
        layout = dict(world_size=world, local_world_size=min(8, world), tensor_parallel=tp, pipeline_parallel=pp,
                      sequence_data_parallel=sdp, pipeline_first=rng.random() < 0.3)  # fmt: skip
        if model.is_moe and rng.random() < 0.8:
            stage = world // pp
            layout["expert_parallel"] = rng.choice([ep for ep in (1, 2, 4, 8) if stage % ep == 0])
            if rng.random() < 0.4:
                layout["expert_tensor_parallel"] = 1
        schedule = rng.choice(("1f1b", "1f1b", "interleaved-1f1b", "gpipe", "zero-bubble", "looped-bfs"))
        v = 1 if schedule in ("1f1b", "gpipe") else rng.choice((1, 2, 4) if schedule != "interleaved-1f1b" else (2, 4))
        m = rng.choice((None, pp, 2 * pp, 4 * pp, 8))
        training = dict(micro_batch_size=rng.choice((1, 1, 2, 4)), num_microbatches=m, schedule=schedule,
                        virtual_pipeline_stages=v, zero_stage=rng.choice((0, 1, 2, 3)),
                        recompute=rng.choice(("none", "selective", "full")),
                        sequence_tensor_parallel=rng.random() < 0.5, engine=rng.choice(ENGINES))  # fmt: skip
        for flag, chance in (("flash_attention", 0.15), ("overlap_data_parallel", 0.2),
                             ("overlap_pipeline_parallel", 0.15)):  # fmt: skip
            if rng.random() < chance:
                training[flag] = False
        for flag, chance in (("overlap_tensor_parallel", 0.3), ("torch_compile", 0.2)):
            if rng.random() < chance:
                training[flag] = True
        if model.is_moe and rng.random() < 0.3:
            training["expert_load_imbalance"] = rng.choice((1.1, 1.25, 1.5))
        spec = {"layout": layout, "model": name, "training": training, "hardware": rng.choice(HARDWARE)}
        if rng.random() < 0.2:
            spec["model_changes"] = {"seq_length": rng.choice((1024, 2048, 8192, 16384))}
        if rng.random() < 0.1:
            spec["inter_node_GBps"] = rng.choice((12.5, 25.0, 100.0))
        try:
            estimate(Layout(**layout), _model(spec), _training(training))
        except ValueError:
            if rng.random() > 0.03:  # keep a few refusals: their messages are outputs too
                continue
        cases.append(spec)
    return cases


def _search_cases() -> list[dict[str, Any]]:
    base = [
        ("llama2-7b", 16, dict(hardware="h100-sxm-80gb", global_batch_size=64, top=40)),
        ("llama2-7b", 64, dict(hardware="a100-sxm-80gb", global_batch_size=256, top=100)),
        ("llama2-70b", 512, dict(hardware="h100-sxm-80gb", global_batch_size=1024, top=100)),
        ("gpt3-175b", 256, dict(hardware="a100-sxm-80gb", global_batch_size=512, top=30, tensor_parallel=[8])),
        ("gpt3-1.3b", 8, dict(hardware="pcie-100gbe", global_batch_size=30, top=150, allow_smaller_batch=True)),
        ("mistral-7b", 32, dict(hardware="b200", global_batch_size=128, top=50, engine="fsdp2", torch_compile=True)),
        ("llama3-8b", 64, dict(hardware="h100-sxm-80gb", global_batch_size=128, top=50, engine="deepspeed")),
        ("llama2-70b", 256, dict(hardware="h200-sxm-141gb", global_batch_size=512, top=30, engine="megatron-2021",
                                 schedule=["1f1b", "interleaved-1f1b", "looped-bfs"])),
        ("mixtral-8x7b", 64, dict(hardware="h100-sxm-80gb", global_batch_size=256, top=50)),
        ("qwen3-30b-a3b", 32, dict(hardware="h100-sxm-80gb", global_batch_size=128, top=50,
                                   expert_load_imbalance=1.25)),
        ("gpt3-1.3b", 32, dict(hardware="a100-sxm-80gb", global_batch_size=128, top=40, recompute="full",
                               flash_attention=False, overlap_data_parallel=False, zero_stage=[0, 1],
                               tensor_parallel=[1, 2], pipeline_parallel=[1, 2, 4])),
        ("llama2-7b", 48, dict(hardware="h100-sxm-80gb", global_batch_size=96, top=30, seq_length=8192,
                               overlap_tensor_parallel=True, engine="composer-fsdp")),
    ]
    cases = [{"model": model, "gpus": gpus, "arguments": arguments} for model, gpus, arguments in base]
    cases.append({"model": "llama2-70b", "gpus": 64, "arguments": dict(hardware="a100-sxm-80gb",
                  global_batch_size=32, top=40, tensor_parallel=[8], pipeline_parallel=[4, 8]),
                  "inter_node_GBps": 12.5})  # fmt: skip
    return cases


def _band_cases() -> list[dict[str, Any]]:
    kinds = ("single", "tp", "dp", "tp+pp", "tp+dp", "tp+pp+dp", "dp+zero3", "tp+dp+zero3", "pp+dp+ep", "tp+pp+dp+sdp",
             "tp+dp+ep", "pp+dp", "tp+pp+dp+ep+zero3")  # fmt: skip
    families = ("ampere", "hopper", "blackwell")
    gpus = (8, 384, 16384)
    return [
        {"engine": engine, "family": family, "kind": kind, "gpus": g, "seq_length": seq}
        for engine, family, kind, g, seq in itertools.product(ENGINES, families, kinds, gpus, (None, 32768))
    ]


def _cli_cases() -> list[dict[str, Any]]:
    lines = [
        "cost --model llama2-7b",
        "cost --world-size 64 --local-world-size 8 --tp 8 --pp 2 --model llama2-70b --micro-batches 16 "
        "--recompute full --sequence-tensor-parallel --hardware h100-sxm-80gb",
        "cost --world-size 64 --tp 4 --pp 4 --model gpt3-175b --format json --zero-stage 1 --schedule interleaved-1f1b "
        "--virtual-stages 2 --micro-batches 8",
        "cost --world-size 16 --tp 2 --model llama3-8b --format csv --engine fsdp2 --torch-compile --zero-stage 3",
        "cost --world-size 32 --ep 8 --model mixtral-8x7b --expert-load-imbalance 1.2 --hardware h100-sxm-80gb",
        "cost --world-size 16 --tp 2 --pp 2 --model llama2-7b --schedule zero-bubble --micro-batches 8 "
        "--inter-node-GBps 12.5",
        "cost --world-size 8 --tp 3 --model llama2-7b",
        "cost --world-size 8 --tp 2 --model llama2-7b --engine deepspeed --schedule gpipe --pp 2",
        "search --model llama2-7b --gpus 16 --global-batch-size 64 --quiet",
        "search --model llama2-70b --gpus 256 --global-batch-size 512 --hardware a100-sxm-80gb --top 10 --quiet",
        "search --model mixtral-8x7b --gpus 64 --global-batch-size 256 --format csv --top 15 --quiet",
        "search --model llama2-7b --gpus 32 --global-batch-size 128 --format json --tp 2 4 --recompute full --quiet "
        "--engine fsdp2 --torch-compile",
        "search --model gpt3-175b --gpus 64 --global-batch-size 7 --quiet",
        "search --model llama2-7b --gpus 16 --global-batch-size 64 --schedule 1f1b zero-bubble --zero-stage 0 1 "
        "--sequence-tensor-parallel --pipeline-first off --no-overlap-data-parallel --quiet",
    ]
    return [{"argv": line.split()} for line in lines]


def _compare_cases() -> list[dict[str, Any]]:
    cases = []
    for model, world, hardware in (("llama2-7b", 16, "h100-sxm-80gb"), ("llama2-70b", 128, "a100-sxm-80gb"),
                                   ("gpt3-175b", 256, "h100-sxm-80gb")):  # fmt: skip
        layouts = [dict(world_size=world, local_world_size=8, tensor_parallel=tp, pipeline_parallel=pp,
                        pipeline_first=first)
                   for tp, pp, first in itertools.product((2, 8), (1, 4), (False, True)) if world % (tp * pp) == 0]
        cases.append({"layouts": layouts, "model": model, "training": {"recompute": "full", "num_microbatches": 8},
                      "hardware": hardware})  # fmt: skip
    return cases


def _panel_cases() -> list[dict[str, Any]]:
    cases = []
    for layout, model, training, hardware in (
        (dict(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2), "llama2-7b", {}, "dgx-h100"),
        (dict(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2), "llama2-70b",
         {"num_microbatches": 16, "recompute": "full", "sequence_tensor_parallel": True}, "h100-sxm-80gb"),
        (dict(world_size=32, local_world_size=8, tensor_parallel=4, pipeline_parallel=4), "gpt3-175b",
         {"zero_stage": 1, "schedule": "interleaved-1f1b", "virtual_pipeline_stages": 2, "num_microbatches": 8},
         "a100-sxm-80gb"),
        (dict(world_size=32, local_world_size=8, expert_parallel=8), "mixtral-8x7b",
         {"expert_load_imbalance": 1.25, "engine": "megatron"}, "h100-sxm-80gb"),
        (dict(world_size=16, local_world_size=8, tensor_parallel=2), "llama3-8b",
         {"engine": "fsdp2", "torch_compile": True, "zero_stage": 3}, "b200"),
    ):  # fmt: skip
        cases.append({"panel": "cost", "layout": layout, "model": model, "training": training, "hardware": hardware})
    for inputs in (
        dict(model="llama2-7b", gpus=16, global_batch_size=64, hardware="h100-sxm-80gb", top=12),
        dict(model="llama2-70b", gpus=256, global_batch_size=512, hardware="a100-sxm-80gb", top=20, engine="deepspeed"),
        dict(model="mixtral-8x7b", gpus=64, global_batch_size=256, hardware="h100-sxm-80gb", top=15),
    ):  # fmt: skip
        cases.append({"panel": "advisor", "inputs": inputs})
    return cases


def draw_cases() -> dict[str, list[dict[str, Any]]]:
    """Every group's cases (seeded)."""
    rng = random.Random(44)
    return {
        "estimate": _estimate_cases(800, rng),
        "search": _search_cases(),
        "band": _band_cases(),
        "cli": _cli_cases(),
        "compare": _compare_cases(),
        "panel": _panel_cases(),
        "validate": [{"runs": "dense"}, {"runs": "moe"}],
    }


def outputs_counted(group: str, spec: dict[str, Any], text: str) -> int:
    """How many outputs one case stands for: a search's rows, a validation's runs, else 1."""
    if group in ("search", "validate", "compare"):
        return max(1, text.count("\n") - 1)
    return 1


def check(
    groups: Iterable[str], progress: Callable[[str], None] | None = None, stride: int = 1
) -> tuple[list[str], int]:
    """The cases of ``groups`` whose output's hash differs from the file's (``group #index``) and how many outputs
    were compared; ``stride`` > 1 compares every ``stride``-th case of each group only (the suite's share)."""
    stored = json.loads(FILE.read_text())
    changed, outputs = [], 0
    for group in groups:
        for index, case in enumerate(stored[group]):
            if index % stride:
                continue
            text = OUTPUTS[group](case["spec"])
            outputs += outputs_counted(group, case["spec"], text)
            if digest(text) != case["hash"]:
                changed.append(f"{group} #{index}: {json.dumps(case['spec'])[:300]}")
        if progress is not None:
            progress(f"{group}: {len(stored[group])} cases")
    return changed, outputs


def write() -> None:
    """Draw the cases and write every hash to ``FILE``."""
    document = {}
    for group, cases in draw_cases().items():
        document[group] = [{"spec": spec, "hash": digest(OUTPUTS[group](spec))} for spec in cases]
        print(f"{group}: {len(cases)} cases", flush=True)
    FILE.write_text(json.dumps(document, indent=0, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="draw the cases and write their hashes")
    parser.add_argument("--check", action="store_true", help="recompute every hash (the default)")
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated of {', '.join(GROUPS)}")
    parser.add_argument("--stride", type=int, default=1, help="compare every N-th case only (default: every case)")
    args = parser.parse_args(argv)
    if args.write:
        write()
        return 0
    groups = [g for g in args.groups.split(",") if g]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        print(f"unknown group(s) {', '.join(unknown)}; use {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    if args.stride < 1:
        print(f"--stride={args.stride} must be >= 1", file=sys.stderr)
        return 2
    changed, outputs = check(groups, progress=print, stride=args.stride)
    print(f"{outputs} outputs compared, {len(changed)} case(s) changed")
    for line in changed[:20]:
        print("  " + line)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
