"""Published comparisons of layouts of one model on the same GPUs and batch, as ranking rows (issue 27, item 4).

A ``PublishedComparison`` holds two or more measured runs (``PublishedRun``) of one model, on the same number of
GPUs of one kind, with the same global batch, that differ in their layout (or, ``kind="set-up"``, in how they
train: recompute, sequence parallel). ``validate_rankings()`` asks whether the layout the step-time model predicts
fastest is the one measured fastest, and the *regret*: the measured step of the predicted pick over the measured
best, minus 1 (0 when the pick is right). A single-run error can be small while the ranking is wrong; this is the
check that fails when it is.

Sources (``docs/validation.md``, "Rankings"):

- Narayanan et al. 2021, Table 2: PTD-P against ZeRO-3 without model parallelism, 174.6B on 384, 768 and 1,536 A100
  (batch 1536) and 529.6B on 1,120 and 2,240 (batch 2240); the runs are ``PUBLISHED_RUNS``' (``published_held_out``).
  Its 529.6B ZeRO-3 row on 640 GPUs has no PTD-P partner on 640 GPUs and is no comparison.
- Narayanan et al. 2021, Figure 13: 162.2B GPT (32 layers, 128 heads, hidden 20480) on 64 A100, batch 128, micro-batch
  1, (pipeline, tensor) = (8, 8), (16, 4), (32, 2); settings from Megatron-LM ``examples/sc21/run_figure_13.sh``
  (6985e58938: fp16, local DDP, full recompute). **Read off the plot**, not a table: about 165, 145 and 100 TFLOP/s per
  GPU, each +-10 (the readings of two independent summaries of the paper agree; the image could not be viewed here); its
  runs are ``runs/narayanan-2021-figure13.toml``. Its (2, 32) and (4, 16) points put tensor parallel across nodes, which
  ``Layout`` does not express (tensor parallel must divide the GPUs of a node); they are left out, and at about 75 and
  125 TFLOP/s they were not the best.
- BigScience's BLOOM topology search (``train/tr11-176B-ml/chronicles-prequel.md`` at 053adafee8; 5 comparisons):
  each table of one model (hidden x layers, 64 heads) and one global batch on 384 A100, its layouts (data, tensor,
  pipeline) and micro-batch sizes; the runs are ``PUBLISHED_RUNS``' (``published_held_out``). Times of one iteration
  (the second), which "can fluctuate a bit": rows a few percent apart are near-ties.
- Korthikanti et al. 2022, Table 5 (``kind="set-up"``): full recompute against selective recompute with sequence
  parallelism, for each of its four models on the layout of Table 3 (the runs are ``PUBLISHED_RUNS``').
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...setup import Efficiency
from .accuracy import predict
from .published import PUBLISHED_RUNS, load_runs
from .published_run import PublishedRun

if TYPE_CHECKING:
    import pandas as pd

RANKING_COLUMNS: tuple[str, ...] = (
    "comparison", "kind", "model", "hardware", "gpus", "global_batch_size", "layouts", "measured_seconds",
    "predicted_seconds", "measured_fastest", "predicted_fastest", "hit", "regret", "source",
)  # fmt: skip
"""Columns of ``validate_rankings``."""


@dataclass(frozen=True)
class PublishedComparison:
    """One published comparison: ``runs`` (two or more ``PublishedRun``) of one model on the same GPUs and batch,
    each with its measured seconds; ``kind`` is ``"layout"`` (they differ in parallel sizes or sharding) or
    ``"set-up"`` (same sizes, different recompute / sequence parallel); ``note`` says how the values were read."""

    name: str
    source: str
    runs: tuple[PublishedRun, ...]
    kind: str = "layout"
    note: str = ""

    def problems(self) -> list[str]:
        """What makes this not a comparison: fewer than two runs, or runs that differ in model, hardware, GPUs or
        global batch, or a run whose sizes do not divide its GPUs or batch (empty when well-formed)."""
        found = []
        if len(self.runs) < 2:
            found.append(f"{self.name}: {len(self.runs)} run(s), a comparison needs two")
        for what in ("model", "hardware", "gpus", "global_batch_size"):
            values = {repr(getattr(run, what)) for run in self.runs}
            if len(values) > 1:
                found.append(f"{self.name}: the runs differ in {what}")
        for run in self.runs:
            model = run.tensor_parallel * run.pipeline_parallel
            if run.gpus % model or run.global_batch_size % (run.gpus // model):
                found.append(f"{self.name}: {run.name} does not split {run.gpus} GPUs / batch {run.global_batch_size}")
        return found


def layout_label(run: PublishedRun) -> str:
    """A run's layout and the set-up its comparison varies, e.g. ``"tp8 pp12 dp4"``, ``"tp1 pp1 dp384 zero3"`` or
    ``"tp4 pp12 dp8 mbs2"`` (the micro-batch size when the run fixes it and it is not 1)."""
    dp = run.gpus // (run.tensor_parallel * run.pipeline_parallel)
    label = f"tp{run.tensor_parallel} pp{run.pipeline_parallel} dp{dp}"
    if run.training.get("micro_batch_size", 1) > 1 and run.training.get("zero_stage") != 3:
        label += f" mbs{run.training['micro_batch_size']}"
    if run.training.get("zero_stage") == 3:
        label += " zero3"
    if "recompute" in run.training and run.training["recompute"] != "full":
        label += f" {run.training['recompute']} recompute"
    if run.training.get("sequence_tensor_parallel"):
        label += " +sp"
    return label


def _by_source(prefix: str) -> list[PublishedRun]:
    return [run for run in PUBLISHED_RUNS if run.source.startswith(prefix)]


def _table_2() -> list[PublishedComparison]:
    runs = _by_source("Narayanan et al. 2021, Table 2")
    found = []
    for name, gpus in (("174.6B", 384), ("174.6B", 768), ("174.6B", 1536), ("529.6B", 1120), ("529.6B", 2240)):
        pair = tuple(run for run in runs if f", {name}, {gpus} GPUs row" in run.source)
        found.append(PublishedComparison(
            name=f"GPT {name} on {gpus:,} A100: PTD-P vs ZeRO-3",
            source=f"Narayanan et al. 2021, Table 2, {name}, {gpus} GPUs rows", runs=pair,
        ))  # fmt: skip
    return found


def _figure_13() -> PublishedComparison:
    runs = load_runs("narayanan-2021-figure13")
    return PublishedComparison(
        name="GPT 162.2B on 64 A100, batch 128: tensor x pipeline",
        source="Narayanan et al. 2021, Figure 13, batch 128 (settings: run_figure_13.sh)", runs=runs,
        note="read off the plot: about 165, 145, 100 TFLOP/s per GPU (+-10); tensor 32 and 16 left out",
    )  # fmt: skip


def _bloom() -> list[PublishedComparison]:
    groups: dict[str, list[PublishedRun]] = {}
    for run in _by_source("BigScience tr11 chronicles-prequel"):
        groups.setdefault(run.source.split(", DP ")[0], []).append(run)
    found = []
    for source, runs in groups.items():
        first = runs[0]
        model = f"BLOOM search {first.model['hidden_size']}x{first.model['num_layers']}"
        found.append(PublishedComparison(
            name=f"{model} on 384 A100, batch {first.global_batch_size}: {len(runs)} layouts",
            source=f"{source} table", runs=tuple(runs),
            note="seconds of iteration 2, which can fluctuate a bit (the author)",
        ))  # fmt: skip
    return found


def _korthikanti() -> list[PublishedComparison]:
    runs = _by_source("Korthikanti et al. 2022")
    found = []
    for name in ("22B", "175B", "530B", "1T"):
        pair = tuple(run for run in runs if run.name.startswith(f"{name} "))
        found.append(PublishedComparison(
            name=f"GPT {name} on {pair[0].gpus} A100: full vs selective recompute + sequence parallel",
            source=f"Korthikanti et al. 2022, Table 5, {name} row", runs=pair, kind="set-up",
        ))  # fmt: skip
    return found


PUBLISHED_COMPARISONS: tuple[PublishedComparison, ...] = (*_table_2(), _figure_13(), *_bloom(), *_korthikanti())
"""The published comparisons ``validate_rankings`` checks: 11 of layouts, 4 of set-ups (module docstring)."""


def validate_rankings(comparisons: Sequence[PublishedComparison] = PUBLISHED_COMPARISONS,
                      efficiency: Efficiency | None = None,
                      sustained: dict[str, float] | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per comparison (``RANKING_COLUMNS``): its layouts, measured and predicted seconds of each, the
    measured-fastest and predicted-fastest layout, ``hit`` (they are the same) and ``regret`` (measured seconds of
    the predicted pick over the measured best, minus 1). ``efficiency`` and ``sustained`` as in ``predict``."""
    import pandas as pd

    rows = []
    for comparison in comparisons:
        runs = comparison.runs
        measured = [run.seconds for run in runs]
        predicted = [predict(run, efficiency, sustained)["seconds"] for run in runs]
        best = min(range(len(runs)), key=measured.__getitem__)
        pick = min(range(len(runs)), key=predicted.__getitem__)
        labels = [layout_label(run) for run in runs]
        rows.append({
            "comparison": comparison.name, "kind": comparison.kind, "model": comparison.name.split(" on ")[0],
            "hardware": runs[0].hardware, "gpus": runs[0].gpus, "global_batch_size": runs[0].global_batch_size,
            "layouts": "; ".join(labels), "measured_seconds": tuple(measured), "predicted_seconds": tuple(predicted),
            "measured_fastest": labels[best], "predicted_fastest": labels[pick], "hit": pick == best,
            "regret": measured[pick] / measured[best] - 1, "source": comparison.source,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(RANKING_COLUMNS))
