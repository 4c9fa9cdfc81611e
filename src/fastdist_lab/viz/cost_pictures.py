"""Pictures of what a layout costs: memory per pipeline stage as stacked bars, and inter-node traffic on the
rank grid.

The traffic picture colours the rank grid (``grid.draw_grid``: nodes as rows, node boundaries drawn) by the
groups of the dim that moves the most bytes per rank across nodes (``traffic_dim``), so the groups that leave
their node are the ones coloured; when no group crosses nodes it shows the busiest dim and says so.
Plain matplotlib ``Figure``s (never pyplot), in the one palette of ``viz.colors``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..cost import CostReport, format_bytes, heaviest_inter_node_dim, layout_name
from .colors import PALETTE
from .grid import draw_grid
from .render import InlineFigure

MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    ("weights_bytes", "weights"),
    ("gradients_bytes", "gradients"),
    ("optimizer_bytes", "optimizer"),
    ("activations_bytes", "activations"),
    ("temporaries_bytes", "temporaries"),
)
"""The stacked parts of a memory bar: (column of ``CostReport.memory``, legend label), bottom first."""

GRID_TEXT_LIMIT = 64
"""Worlds up to this many ranks get the rank number written in each cell of the traffic grid."""

_GIB = float(1 << 30)
_EDGE = "#555555"
_BAR = 0.8


def draw_memory(ax: Axes, report: CostReport, ymax: float | None = None, title: str | None = None) -> None:
    """Stacked bars of the bytes one rank of each pipeline stage holds (GiB), the most loaded stage outlined.

    One ``PolyCollection`` for all bars (fast for many stages). ``ymax`` (GiB) fixes the scale, so that several
    layouts compare bar for bar; ``title`` replaces the default one.
    """
    memory = report.memory
    count = len(memory)
    parts = np.stack([memory[column].to_numpy(dtype=np.float64) / _GIB for column, _ in MEMORY_PARTS])
    tops = np.cumsum(parts, axis=0)
    bottoms = tops - parts
    x0 = np.arange(count) - _BAR / 2
    x1 = x0 + _BAR
    # one rectangle (4 corners) per (part, stage), parts outermost
    boxes = np.stack(
        [np.stack(np.broadcast_arrays(x, y), -1) for x, y in ((x0, bottoms), (x1, bottoms), (x1, tops), (x0, tops))],
        axis=2,
    ).reshape(-1, 4, 2)
    colors = np.repeat(PALETTE[: len(MEMORY_PARTS)], count, axis=0)
    ax.add_collection(PolyCollection(boxes, facecolors=colors, edgecolors=_EDGE, linewidths=0.4))
    peak = report.most_loaded_stage
    total = tops[-1]
    ax.add_patch(Rectangle((peak - _BAR / 2, 0), _BAR, total[peak], fill=False, edgecolor="#111111", linewidth=1.6))
    ax.set_xlim(-0.6, count - 0.4)
    ax.set_ylim(0, (ymax if ymax is not None else float(total.max())) * 1.15 or 1.0)
    step = max(1, -(-count // 12))
    ax.set_xticks(np.arange(0, count, step), [str(s) for s in range(0, count, step)])
    ax.set_xlabel("pipeline stage", fontsize=8)
    ax.set_ylabel("GiB per rank", fontsize=8)
    ax.tick_params(labelsize=7)
    if title is None:
        title = f"memory per rank: peak {format_bytes(report.peak_bytes)} (stage {peak})"
    ax.set_title(title, fontsize=8.5, loc="left")
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)


def _legend(ax: Axes) -> None:
    handles = [
        Patch(facecolor=color, edgecolor=_EDGE, linewidth=0.4, label=label)
        for (_, label), color in zip(MEMORY_PARTS, PALETTE)
    ]
    ax.legend(handles=handles, fontsize=6.5, loc="upper right", ncols=2, frameon=False)


def traffic_dim(report: CostReport) -> tuple[str, int, bool]:
    """The dim the traffic grid shows: (dim, its bytes per rank per step, whether it crosses nodes).

    The dim moving the most bytes across nodes; when no group crosses nodes, the dim moving the most bytes.
    """
    dim, crossing = heaviest_inter_node_dim(report)
    if dim is not None:
        return dim, crossing, True
    comm = report.communication
    if comm.empty:
        return "tensor", 0, False
    per_dim = comm.groupby("dim", sort=False)["bytes_per_step"].sum()
    return str(per_dim.idxmax()), int(per_dim.max()), False


def traffic_title(report: CostReport, detail: bool = True) -> str:
    """What the traffic grid shows, in words (``detail``: with the bytes per rank per step)."""
    dim, nbytes, crossing = traffic_dim(report)
    if not nbytes:
        return "no communication"
    if crossing:
        comm = report.communication
        spanned = int(comm.loc[comm["dim"] == dim, "nodes_spanned"].max())
        title = f"{dim} groups cross nodes (each spans {spanned})"
        return f"{title}: {format_bytes(nbytes)} per rank per step" if detail else title
    title = f"no group crosses nodes; busiest: {dim} groups"
    return f"{title}, {format_bytes(nbytes)} per rank per step" if detail else title


def draw_traffic(ax: Axes, report: CostReport, detail: bool = True) -> None:
    """The rank grid coloured by the groups of ``traffic_dim(report)``, titled ``traffic_title``."""
    layout = report.layout
    dim = traffic_dim(report)[0]
    text = layout.world_size <= GRID_TEXT_LIMIT
    draw_grid(ax, layout, dim, text=text, fontsize=6.0, short_labels=True, max_ticks=8)
    ax.set_title(traffic_title(report, detail), fontsize=8.5, loc="left", pad=14)
    ax.tick_params(labelsize=6.5)


def plot_memory(reports: CostReport | Sequence[CostReport], names: Sequence[str] | None = None) -> Figure:
    """Memory per stage of one report, or of several side by side on one scale (titled by ``names``)."""
    reports = [reports] if isinstance(reports, CostReport) else list(reports)
    if not reports:
        raise ValueError("plot_memory() needs at least one report")
    width, height = 4.6 * len(reports) + 0.3, 3.0
    figure = InlineFigure(figsize=(width, height), dpi=80.0)
    axes = figure.subplots(1, len(reports), squeeze=False)[0]
    figure.subplots_adjust(left=0.65 / width, right=1 - 0.15 / width, top=1 - 0.45 / height, bottom=0.5 / height,
                           wspace=0.3)  # fmt: skip
    ymax = max(r.peak_bytes for r in reports) / _GIB
    for i, (ax, report) in enumerate(zip(axes, reports)):
        title = None
        if len(reports) > 1:
            name = layout_name(report.layout) if names is None else names[i]
            title = f"{name}: peak {format_bytes(report.peak_bytes)}"
        draw_memory(ax, report, ymax=ymax, title=title)
    _legend(axes[0])
    return figure


def plot_traffic(report: CostReport, detail: bool = True) -> Figure:
    """Inter-node traffic of one report on its rank grid (see the module docstring)."""
    grid_rows = report.layout.num_nodes
    width, height = 5.0, float(np.clip(0.9 + 0.22 * grid_rows, 2.2, 4.2))
    figure = InlineFigure(figsize=(width, height), dpi=80.0)
    ax = figure.add_axes((0.75 / width, 0.1 / height, 1 - 0.9 / width, 1 - 0.75 / height))
    draw_traffic(ax, report, detail)
    return figure


def plot_cost(report: CostReport) -> Figure:
    """Memory per stage (left) and inter-node traffic on the rank grid (right) of one ``CostReport``."""
    return plot_cost_comparison([report], names=[layout_name(report.layout)])


def plot_cost_comparison(reports: Sequence[CostReport], names: Sequence[str] | None = None) -> Figure:
    """One row per report (memory bars on one common scale, traffic grid), e.g. data-first vs pipeline-first."""
    reports = list(reports)
    if not reports:
        raise ValueError("plot_cost_comparison() needs at least one report")
    names = [layout_name(r.layout) for r in reports] if names is None else list(names)
    width, height = 10.0, 0.4 + 3.0 * len(reports)
    figure = InlineFigure(figsize=(width, height), dpi=80.0)
    axes = figure.subplots(len(reports), 2, squeeze=False, gridspec_kw={"width_ratios": (1.0, 1.25)})
    figure.subplots_adjust(left=0.7 / width, right=1 - 0.15 / width, top=1 - 0.75 / height, bottom=0.45 / height,
                           wspace=0.3, hspace=0.5)  # fmt: skip
    ymax = max(r.peak_bytes for r in reports) / _GIB
    for row, (report, name) in enumerate(zip(reports, names)):
        peak = f"{name}: peak {format_bytes(report.peak_bytes)} per rank (stage {report.most_loaded_stage})"
        draw_memory(axes[row, 0], report, ymax=ymax, title=peak)
        draw_traffic(axes[row, 1], report)
    _legend(axes[0, 0])
    m, t = reports[0].model, reports[0].training
    figure.suptitle(
        f"h={m.hidden_size} L={m.num_layers} seq={m.seq_length}; micro-batch {t.micro_batch_size} x "
        f"{reports[0].sizes.microbatches}, ZeRO {t.zero_stage}, recompute {t.recompute}",
        fontsize=9, x=0.7 / width, ha="left", y=1 - 0.1 / height, va="top",
    )  # fmt: skip
    return figure
