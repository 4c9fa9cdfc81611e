"""The step-time model next to measured runs: predictions, errors, and the fit of the calibrated constants.

``validate()`` predicts every ``PUBLISHED_RUNS`` entry and returns one row per run with the measured and
predicted seconds and the error; ``error_summary`` gives the mean and worst absolute error of the calibration
runs and of the others (held out); ``calibrate`` fits the constants ``Efficiency`` marks as calibrated on the
calibration runs only (``benchmarks/bench_validation.py --calibrate``). ``validate(PUBLISHED_MOE_RUNS)`` does the
same for the mixture-of-experts runs, all held out (``published_moe``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...layout import Layout
from ...lazy import warn_deprecated
from ...setup import DEFAULT_EFFICIENCY, SUSTAINED, Efficiency, Training, setup_kind
from ..formulas.memory import as_numbers, stage_memory
from ..formulas.sizes import one_setup
from ..formulas.step import model_flops, step_columns
from .published import HELD_OUT_RUNS, PUBLISHED_RUNS, PublishedRun

if TYPE_CHECKING:
    import pandas as pd

CALIBRATED: tuple[str, ...] = ("sustained[ampere]", "sustained[hopper]", "memory_efficiency", "kernel_overhead_s")
"""The constants fitted on the calibration runs: ``hardware.SUSTAINED`` of each family with published runs and
the ``Efficiency`` fields marked calibrated."""

VALIDATION_COLUMNS: tuple[str, ...] = (
    "run", "hardware", "gpus", "layout", "settings", "measured_seconds", "predicted_seconds", "error", "fits",
    "calibration", "source", "measured_from", "engine", "family", "kind",
)  # fmt: skip
"""Columns of ``validate``."""


def training_of(run: PublishedRun, combo: dict[str, Any]) -> Training:
    """The ``Training`` of ``run`` with the unknown settings ``combo`` (one of its ``choices``): its engine, the
    schedule its virtual stages imply, and Llama 3's lighter first and last stages when ``lighter_ends``."""
    fields = {**run.training, **combo, "engine": run.engine}
    v = fields.get("virtual_pipeline_stages", 1)
    fields.setdefault("schedule", "interleaved-1f1b" if v > 1 else "1f1b")
    if run.lighter_ends:
        layers = run.model["num_layers"] + 2
        chunks = run.pipeline_parallel * v
        split = [layers // chunks] * chunks
        split[0] -= 1
        split[-1] -= 1
        fields["layers_per_stage"] = tuple(split)
    return Training(**fields)


def predict(run: PublishedRun, efficiency: Efficiency | None = None,
            sustained: dict[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """The predicted step of ``run``: the fastest of its ``choices``, as ``seconds``, ``fits`` (whether the
    memory model says it fits; the run did) and the ``settings`` taken. ``sustained`` overrides
    ``hardware.SUSTAINED`` per family."""
    hardware = run.machine()
    if sustained and hardware.family in sustained:
        hardware = hardware.replace(sustained=sustained[hardware.family])
    layout = Layout(
        world_size=run.gpus,
        local_world_size=8,
        tensor_parallel=run.tensor_parallel,
        pipeline_parallel=run.pipeline_parallel,
        sequence_data_parallel=run.sequence_data_parallel,
        expert_parallel=run.expert_parallel,
        expert_tensor_parallel=run.expert_tensor_parallel,
    )
    model = run.transformer()
    names = list(run.choices)
    best: dict[str, Any] | None = None
    for values in itertools.product(*(run.choices[name] for name in names)):
        combo = dict(zip(names, values))
        if "micro_batch_size" in combo:
            per_rank = run.global_batch_size // (layout.data_parallel // layout.sequence_data_parallel)
            if per_rank % combo["micro_batch_size"]:
                continue
            combo["num_microbatches"] = per_rank // combo["micro_batch_size"]
        try:
            _, setups = one_setup(layout, model, training_of(run, combo))
        except ValueError:
            continue
        columns, _ = step_columns(setups, hardware, DEFAULT_EFFICIENCY if efficiency is None else efficiency)
        fits = bool(np.all(hardware.fits(stage_memory(as_numbers(setups))["total_bytes"])))
        found = {"seconds": float(columns["seconds"][0]), "fits": fits, "settings": combo}
        if best is None or found["seconds"] < best["seconds"]:
            best = found
    if best is None:
        raise ValueError(f"no set-up of run {run.name!r} splits over its layout")
    return best


def run_kind(run: PublishedRun) -> str:
    """The kind of parallelism of ``run`` (``setup_kind`` of its sizes and ZeRO stage): ``"tp+pp+dp"``."""
    data = run.gpus // (run.tensor_parallel * run.pipeline_parallel * run.sequence_data_parallel)
    return setup_kind(run.tensor_parallel, run.pipeline_parallel, data, run.sequence_data_parallel,
                      run.expert_parallel, run.training.get("zero_stage", 0))  # fmt: skip


def parallelism_kind(run: PublishedRun) -> str:
    """Deprecated: ``run_kind`` (``setup_kind``, the one classifier of a set-up's kind of parallelism; it names
    ``"dp"`` what this called ``"dp-only"`` and ``"dp+zero3"`` what it called ``"zero3/fsdp"``)."""
    warn_deprecated("fastdist_lab.cost.parallelism_kind", "fastdist_lab.setup.setup_kind")
    return run_kind(run)


def validate(runs: Sequence[PublishedRun] = PUBLISHED_RUNS, efficiency: Efficiency | None = None,
             sustained: dict[str, float] | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per run (``VALIDATION_COLUMNS``): measured and predicted seconds, ``error`` = predicted /
    measured - 1 (``efficiency`` and ``sustained`` as in ``predict``)."""
    import pandas as pd

    rows = []
    for run in runs:
        found = predict(run, efficiency, sustained)
        dp = run.gpus // (run.tensor_parallel * run.pipeline_parallel)
        rows.append({
            "run": run.name, "hardware": run.hardware, "gpus": run.gpus,
            "layout": f"tp{run.tensor_parallel} pp{run.pipeline_parallel} dp{dp}"
                      + (f" (sdp{run.sequence_data_parallel})" if run.sequence_data_parallel > 1 else "")
                      + (f" ep{run.expert_parallel}" if run.expert_parallel > 1 else "")
                      + (f" etp{run.expert_tensor_parallel}" if run.expert_tensor_parallel is not None else ""),
            "settings": ", ".join(f"{k}={v}" for k, v in found["settings"].items() if k != "num_microbatches"),
            "measured_seconds": run.seconds, "predicted_seconds": found["seconds"],
            "error": found["seconds"] / run.seconds - 1, "fits": found["fits"], "calibration": run.calibration,
            "source": run.source, "measured_from": run.measured_from, "engine": run.engine,
            "family": run.machine().family, "kind": run_kind(run),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(VALIDATION_COLUMNS))


def error_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs, sources, mean and worst absolute error of the calibration runs, the held-out runs and all; then the
    held-out runs split into the 19 of issue 21 and those added for issue 27 (``HELD_OUT_RUNS``)."""
    import pandas as pd

    added = frame["run"].isin({run.name for run in HELD_OUT_RUNS})
    held_out = ~frame["calibration"]
    parts = {
        "calibration": frame[frame["calibration"]], "held out": frame[held_out], "all": frame,
        "held out, issue 21 runs": frame[held_out & ~added], "held out, issue 27 runs": frame[held_out & added],
    }  # fmt: skip
    rows = {
        name: {
            "runs": len(part),
            "sources": part["source"].str.split(",").str[0].nunique(),
            "mean_abs_error": float(part["error"].abs().mean()) if len(part) else float("nan"),
            "worst_abs_error": float(part["error"].abs().max()) if len(part) else float("nan"),
        }
        for name, part in parts.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index")


BREAKDOWN_BY: tuple[str, ...] = ("set", "engine", "family", "kind")
"""The groupings of ``error_breakdown``: calibration or held out, training engine, GPU family, parallelism kind."""


def error_breakdown(frame: pd.DataFrame, by: Sequence[str] = BREAKDOWN_BY, held_out_only: bool = True) -> pd.DataFrame:
    """Errors per group of ``validate``'s rows: for each grouping in ``by`` (``BREAKDOWN_BY``) and each of its
    values, the runs, the mean and worst absolute error and the mean signed error (under 0: predicted too fast).
    ``held_out_only`` leaves the calibration runs out of every grouping but ``"set"``. Rows are indexed by
    ``(by, group)``."""
    import pandas as pd

    sets = frame.assign(set=frame["calibration"].map({True: "calibration", False: "held out"}))
    rows = []
    for grouping in by:
        part = sets if grouping == "set" or not held_out_only else sets[~sets["calibration"]]
        for group, runs in part.groupby(grouping, sort=True):
            errors = runs["error"]
            rows.append({
                "by": grouping, "group": group, "runs": len(runs), "mean_abs_error": float(errors.abs().mean()),
                "worst_abs_error": float(errors.abs().max()), "mean_error": float(errors.mean()),
            })  # fmt: skip
    return pd.DataFrame(rows).set_index(["by", "group"])


def calibrate(
    runs: Sequence[PublishedRun] = PUBLISHED_RUNS,
    start: Efficiency = DEFAULT_EFFICIENCY,
    rounds: int = 4,
    progress: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """The ``CALIBRATED`` constants fitted to the calibration runs of ``runs``: the mean absolute log error, by
    coordinate search (each constant in turn on a multiplicative grid that halves every round), starting from
    ``start`` and ``hardware.SUSTAINED``. Returns ``{name: value}``."""
    chosen = [run for run in runs if run.calibration]
    values = {f"sustained[{family}]": value for family, value in SUSTAINED.items()}
    values.update({name: getattr(start, name) for name in CALIBRATED if not name.startswith("sustained")})

    def loss(trial: dict[str, float]) -> float:
        efficiency = start.replace(**{k: v for k, v in trial.items() if not k.startswith("sustained")})
        sustained = {k[len("sustained[") : -1]: v for k, v in trial.items() if k.startswith("sustained")}
        errors = [np.log(predict(run, efficiency, sustained)["seconds"] / run.seconds) for run in chosen]
        return float(np.mean(np.abs(errors)))

    score, step = loss(values), 0.2
    for round_ in range(rounds):
        for name in CALIBRATED:
            for factor in (1 - step, 1 + step):
                trial = {**values, name: values[name] * factor}
                if name != "kernel_overhead_s" and trial[name] > 1:
                    continue
                trial_score = loss(trial)
                if trial_score < score:
                    values, score = trial, trial_score
        if progress is not None:
            progress(f"round {round_ + 1}: mean |log error| {score:.4f} with {values}")
        step /= 2
    return values


def trust_rows(runs: Sequence[PublishedRun] | None = None) -> list[tuple[Any, ...]]:
    """One row of ``trust.TRUST_RUNS`` per validated run (``PUBLISHED_RUNS`` and ``PUBLISHED_MOE_RUNS`` by default):
    name, engine, hardware family, ``run_kind``, GPUs, the model's error (``validate``), the MFU the run measured
    (``step.model_flops`` over its measured seconds and its GPUs' peak), both rounded to 6 decimals, and its sequence
    length."""
    from .published import PUBLISHED_MOE_RUNS

    chosen = tuple(PUBLISHED_RUNS) + tuple(PUBLISHED_MOE_RUNS) if runs is None else tuple(runs)
    errors = validate(chosen)["error"].tolist()
    rows = []
    for run, error in zip(chosen, errors):
        hardware = run.machine()
        kind = run_kind(run)
        model = run.transformer()
        flops = float(model_flops(model, run.global_batch_size, run.tensor_parallel))
        mfu = flops / run.seconds / run.gpus / 1e12 / hardware.peak_tflops
        rows.append((run.name, run.engine, hardware.family, kind, run.gpus, round(float(error), 6), round(mfu, 6),
                     int(model.seq_length)))  # fmt: skip
    return rows
