"""The measured training runs from published sources the step-time model is held against, read from their files
(``runs/*.toml``, one per source, each citing where its numbers come from: ``load_runs``).

Each ``PublishedRun`` gives the model, the GPUs and their layout, the training set-up and the measured step time as
its source reports it. Settings a source does not report are listed in ``choices``: the validation takes, among them,
the set-up the model predicts fastest (the authors tuned theirs; memory is not used to choose, the run did fit), never
the one closest to the measurement. ``calibration`` marks the runs the calibrated constants were fitted on
(``docs/validation.md``): from each of the first four sources some runs, spanning its sizes. Every other run is held
out: the runs added for issue 27 (``HELD_OUT_RUNS``: ZeRO-3 / FSDP up to 2,240 GPUs, H100 FSDP, DeepSpeed and FSDP
engines, BLOOM's layout search; the calibration set was fixed before they were looked at) and the mixtures of experts
of issue 28 (``PUBLISHED_MOE_RUNS``: ``calibrate`` fits ``PUBLISHED_RUNS`` only, so these test constants fitted on
dense models). ``bloom_run`` and ``llm_foundry_run`` make a run of a row of those two sources' tables (their files
give the rows; scripts/ price more rows of them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .published_run import PublishedRun, measured_seconds, read_source
from .source_rows import JEAN_ZAY_ADAPTER_BUSBW_GBPS, JEAN_ZAY_INTER_NODE_GBPS, bloom_run, llm_foundry_run

__all__ = [
    "FIRST_SOURCES", "HELD_OUT_RUNS", "HELD_OUT_SOURCES", "JEAN_ZAY_ADAPTER_BUSBW_GBPS", "JEAN_ZAY_INTER_NODE_GBPS",
    "MAKERS", "MOE_SOURCES", "PUBLISHED_MOE_RUNS", "PUBLISHED_RUNS", "PublishedRun", "bloom_run", "llm_foundry_run",
    "load_runs",
]  # fmt: skip

MAKERS: dict[str, Callable[..., PublishedRun]] = {"bloom_run": bloom_run, "llm_foundry_run": llm_foundry_run}
"""The makers a source's entries may name (``maker``): the entry gives the row of the source's table as it reads, the
maker the run (``source_rows``)."""


@functools.cache
def load_runs(name: str) -> tuple[PublishedRun, ...]:
    """The runs of ``runs/<name>.toml``, in the file's order: each entry over the file's ``[defaults]``, a run with
    its measurement as the source gives it (``published_run.measured_seconds``), or a row for its ``maker``."""
    document = read_source(name)
    defaults = document.get("defaults", {})
    runs = []
    for raw in document["runs"]:
        entry = {**defaults, **raw}
        if "maker" in entry:
            runs.append(MAKERS[entry.pop("maker")](**entry))
            continue
        fields = {key: value for key, value in entry.items() if key not in ("measured", "measured_as", "flops")}
        fields["choices"] = {key: tuple(values) for key, values in fields.get("choices", {}).items()}
        runs.append(PublishedRun(**fields, seconds=measured_seconds(entry)))
    return tuple(runs)


FIRST_SOURCES: tuple[str, ...] = (
    "korthikanti-2022", "narayanan-2021-table1", "megatron-core-r0.8", "dubey-2024-llama3",
)  # fmt: skip
"""The sources of the first 29 runs (issue 21), 10 of them the calibration runs."""

HELD_OUT_SOURCES: tuple[str, ...] = (
    "narayanan-2021-table2", "smith-2022-mt-nlg", "bigscience-bloom-search", "torchtitan", "llm-foundry",
)  # fmt: skip
"""The sources of the runs added for issue 27, every one held out."""

MOE_SOURCES: tuple[str, ...] = ("megatron-core-moe-r0.8", "megatron-bridge-26.02")
"""The sources of the mixture-of-experts runs (issue 28), held out."""

HELD_OUT_RUNS: tuple[PublishedRun, ...] = tuple(run for name in HELD_OUT_SOURCES for run in load_runs(name))
"""The runs added for issue 27 (52 runs, all held out); part of ``PUBLISHED_RUNS``."""

PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    tuple(run for name in FIRST_SOURCES for run in load_runs(name)) + HELD_OUT_RUNS
)
"""The measured runs ``validate`` compares with (dense models): the 29 runs of issue 21 from 4 sources, 10 of them
the calibration runs, then ``HELD_OUT_RUNS`` (issue 27, all held out)."""

PUBLISHED_MOE_RUNS: tuple[PublishedRun, ...] = tuple(run for name in MOE_SOURCES for run in load_runs(name))
"""Measured mixture-of-experts runs, all held out (2 runs from 2 sources; ``validate(PUBLISHED_MOE_RUNS)``)."""
