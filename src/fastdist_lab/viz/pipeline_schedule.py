"""A pipeline schedule drawn as time runs: one row per pipeline rank, one cell per action with its micro-batch.

``plot_schedule(step_or_schedule)`` takes a ``StepTime`` (``CostReport.step``: the actions at the times the step
model gives them, seconds on x) or a ``PipelineSchedule`` (``fastdist_lab.cost.schedule``: unit times, a forward
1 and a backward 2, as torch's schedule visualiser counts them in steps). Forward cells and backward cells have
two colours (``viz.colors.ACTION_COLORS``), each cell shows its micro-batch number (and its stage when a rank runs
several), and a rank's idle time, the bubble, is shaded grey (``BUBBLE_COLOR``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..cost import ACTION_KINDS, PipelineSchedule, StepTime, run, table_graph
from .colors import ACTION_COLORS, BUBBLE_COLOR
from .render import InlineFigure

LABEL_LIMIT = 800
"""Above this many actions the cells carry no micro-batch numbers (they would not be readable)."""

UNIT_SECONDS = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
"""Durations of a schedule drawn without a step time."""


def schedule_times(source: StepTime | PipelineSchedule) -> dict[str, Any]:
    """Start, end, rank, stage, kind and micro-batch of every action, the makespan and the x-axis unit."""
    if isinstance(source, StepTime):
        timeline, table, unit = source.timeline, source.schedule, "seconds"
    elif isinstance(source, PipelineSchedule):
        table = source
        graph = table_graph(table.kind, table.pipeline_parallel, table.num_microbatches, table.virtual_pipeline_stages)
        durations = np.tile([UNIT_SECONDS[kind] for kind in ACTION_KINDS], (1, table.num_stages, 1))
        timeline, unit = run(graph, durations, np.zeros((1, table.pipeline_parallel))), "time (forward = 1)"
    else:
        raise TypeError(f"plot_schedule() needs a StepTime or a PipelineSchedule, got {source!r}")
    start, end = timeline.start[0], timeline.end[0]
    graph = timeline.graph
    return {
        "table": table,
        "start": start,
        "end": end,
        "rank": graph.rank,
        "stage": graph.stage,
        "kind": np.array(ACTION_KINDS)[graph.kind],
        "microbatch": graph.microbatch,
        "makespan": float(end.max()) if len(end) else 0.0,
        "unit": unit,
    }


def plot_schedule(source: StepTime | PipelineSchedule, title: str | None = None) -> Figure:
    """The schedule of ``source`` (see the module docstring) as a matplotlib ``Figure``."""
    times = schedule_times(source)
    table: PipelineSchedule = times["table"]
    pp = table.pipeline_parallel
    width, height = 9.0, float(np.clip(1.3 + 0.32 * pp, 2.0, 9.5))
    figure = InlineFigure(figsize=(width, height), dpi=80.0)
    ax = figure.add_axes((0.8 / width, 0.95 / height, 1 - 1.0 / width, 1 - 1.3 / height))
    makespan = times["makespan"]
    for rank in range(pp):  # the bubble: everything of the row that no action covers
        ax.broken_barh([(0.0, makespan)], (rank - 0.4, 0.8), facecolors=BUBBLE_COLOR, hatch="//", edgecolor="white",
                       linewidth=0.0)  # fmt: skip
    starts, ends = times["start"], times["end"]
    for kind in ACTION_KINDS:
        chosen = times["kind"] == kind
        for rank in range(pp):
            cells = chosen & (times["rank"] == rank)
            if cells.any():
                spans = list(zip(starts[cells], ends[cells] - starts[cells]))
                ax.broken_barh(spans, (rank - 0.4, 0.8), facecolors=ACTION_COLORS[kind], edgecolor="white",
                               linewidth=0.4)  # fmt: skip
    if len(starts) <= LABEL_LIMIT:
        several = table.virtual_pipeline_stages > 1
        for s, e, r, stage, kind, mb in zip(starts, ends, times["rank"], times["stage"], times["kind"],
                                            times["microbatch"]):  # fmt: skip
            text = f"{kind}{mb}" if not several else f"{kind}{mb}\n s{stage}"
            if (e - s) / max(makespan, 1e-30) * width * 80 > 6 * len(text.split("\n")[0]):
                ax.text((s + e) / 2, r, text, ha="center", va="center", fontsize=6.5, clip_on=True)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_xlim(0, makespan * 1.01 if makespan else 1)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"rank {r}" for r in range(pp)], fontsize=8)
    ax.set_xlabel(times["unit"], fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    kinds = sorted(set(times["kind"]), key=ACTION_KINDS.index)
    names = {"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weights)"}
    handles = [Patch(facecolor=ACTION_COLORS[k], label=names[k]) for k in kinds]
    handles.append(Patch(facecolor=BUBBLE_COLOR, hatch="//", edgecolor="white", label="bubble (idle)"))
    figure.legend(handles=handles, loc="lower right", fontsize=7, ncol=len(handles), frameon=False,
                  bbox_to_anchor=(1.0, 0.0))  # fmt: skip
    if title is None:
        idle = 1 - (ends - starts).sum() / max(pp * makespan, 1e-30)
        title = (f"{table.kind}, {pp} ranks x {table.virtual_pipeline_stages} stages, {table.num_microbatches} "
                 f"micro-batches; bubble {idle:.0%} of the ranks' time")  # fmt: skip
    ax.set_title(title, fontsize=9, loc="left")
    return figure
