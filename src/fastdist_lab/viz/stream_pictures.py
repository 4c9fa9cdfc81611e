"""Pictures of generator streams (matplotlib ``Figure``s, never pyplot).

``plot_streams``: rank x generator, each cell coloured by its stream (same colour = identical numbers).
``plot_sharing``: rank x rank, filled where two ranks share one generator's stream, with the tensor groups
outlined and the data / pipeline boundaries drawn.
``stream_picture``: the rank grid (nodes x GPUs) coloured by one generator's stream, with real-draw marks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from ..seeds import number_streams
from .colors import group_colors
from .grid import check_highlight, describe
from .layout_picture import check_ranks, compose
from .picture import TEXT_DARK, Colouring, GridPicture, LayerCache, Marks
from .render import InlineFigure

if TYPE_CHECKING:
    from ..streams import StreamReport

_LINES = {
    "pipeline": {"color": "#c0392b", "linewidth": 2.0, "linestyle": "-"},
    "data": {"color": "#2c6fbb", "linewidth": 1.0, "linestyle": "--"},
    "tensor": {"color": "#f39c12", "linewidth": 1.8, "linestyle": "-"},
}


def _shown(report: StreamReport, max_ranks: int) -> tuple[int, str]:
    world = report.seeds.shape[0]
    if max_ranks < 1:
        raise ValueError(f"max_ranks={max_ranks} must be >= 1")
    shown = min(world, max_ranks)
    note = "" if shown == world else f" (first {shown} of {world} ranks)"
    return shown, note


def _where(report: StreamReport) -> str:
    return f"{report.source}, step {report.step}, {report.phase.name}"


def _boundaries(report: StreamReport, shown: int) -> dict[str, np.ndarray]:
    """Positions ``r`` (between rank r-1 and r) where the pipeline rank or the data rank changes."""
    coords = report.layout.ranks.iloc[:shown]
    out = {}
    for dim in ("pipeline", "data"):
        values = coords[f"{dim}_rank"].to_numpy()
        out[dim] = np.flatnonzero(values[1:] != values[:-1]) + 1
    out["data"] = np.setdiff1d(out["data"], out["pipeline"])
    return out


def plot_streams(report: StreamReport, *, max_ranks: int = 256, annotate: bool | None = None) -> Figure:
    """Rank (rows) x generator (columns), each cell coloured by its stream id: equal colours = equal streams.

    Shows the first ``max_ranks`` ranks. Cells show the stream id when ``annotate`` (default: when the
    picture has at most 200 cells). Thin lines separate the tensor groups.
    """
    shown, note = _shown(report, max_ranks)
    ids = report.stream_ids[:shown]
    local, first, _ = number_streams(ids.astype(np.uint64))  # the shown streams, numbered by first appearance
    image = group_colors(first.size)[local]

    count = len(report.generators)
    height = min(12.0, 1.6 + 0.28 * shown)
    fig = InlineFigure(figsize=(1.6 + 1.3 * count, height), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(count), report.generators)
    ax.set_xlabel("generator")
    ax.set_ylabel("rank")
    ax.set_title(f"Generator streams ({_where(report)}){note}\nsame colour = same stream")
    if shown <= 64:
        ax.set_yticks(range(shown))
    if annotate is None:
        annotate = shown * count <= 200
    if annotate:
        for (row, col), value in np.ndenumerate(ids):
            ax.text(col, row, str(value), ha="center", va="center", fontsize=7)
    tp = report.layout.tensor_parallel
    if tp > 1 and shown // tp <= 128:
        for edge in range(tp, shown, tp):
            ax.axhline(edge - 0.5, color="#333333", linewidth=0.8)
    return fig


def plot_sharing(report: StreamReport, generator: str = "tp", *, max_ranks: int = 512) -> Figure:
    """Rank x rank, filled where two ranks share ``generator``'s stream, with layout boundaries drawn.

    Tensor groups are outlined on the diagonal; solid red lines mark where the pipeline rank changes, dashed
    blue lines where the data rank changes. Shows the first ``max_ranks`` ranks.
    """
    column = report.generator_index(generator)
    shown, note = _shown(report, max_ranks)
    ids = report.stream_ids[:shown, column]
    shares = ids[:, None] == ids[None, :]

    size = min(10.0, 3.0 + 0.25 * shown)
    fig = InlineFigure(figsize=(size + 1.5, size), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(shares, cmap=ListedColormap(["#ffffff", "#4c72b0"]), vmin=0, vmax=1, interpolation="nearest")
    ax.set_xlabel("rank")
    ax.set_ylabel("rank")
    groups = len(report.sharing(generator))
    title = f"Ranks sharing the {generator} stream ({_where(report)}){note}"
    ax.set_title(f"{title}\n{groups} distinct {generator} streams")
    if shown <= 32:
        ax.set_xticks(range(shown))
        ax.set_yticks(range(shown))
    for dim, positions in _boundaries(report, shown).items():
        if positions.size > 48:
            continue
        for position in positions:
            ax.axhline(position - 0.5, **_LINES[dim])
            ax.axvline(position - 0.5, **_LINES[dim])
    tp = report.layout.tensor_parallel
    if tp > 1 and shown // tp <= 64:
        for start in range(0, shown - shown % tp, tp):
            ax.add_patch(Rectangle((start - 0.5, start - 0.5), tp, tp, fill=False, **_LINES["tensor"]))
    handles = [
        Rectangle((0, 0), 1, 1, color="#4c72b0", label="same stream"),
        Line2D([], [], label="tensor group", **_LINES["tensor"]),
        Line2D([], [], label="data rank changes", **_LINES["data"]),
        Line2D([], [], label="pipeline rank changes", **_LINES["pipeline"]),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


_COLOURINGS = LayerCache(8)


def stream_colouring(report: StreamReport, generator: str) -> Colouring:
    """Every rank's stream of ``generator`` (numbered 0.. by first appearance), with ``#n`` as cell text."""

    def make() -> Colouring:
        _, ids = np.unique(report.stream_ids[:, report.generator_index(generator)], return_inverse=True)
        ids = ids.reshape(-1)
        return Colouring(ids, f"{generator} stream", lambda rank: f"{rank}\n{generator} #{ids[rank]}")

    return _COLOURINGS.get((report, generator), make)  # one object per report: the picture cache keys by it


def stream_picture(
    report: StreamReport,
    generator: str = "tp",
    highlight: int | None = None,
    *,
    ranks: tuple[int, int] | None = None,
    marks: Marks | None = None,
) -> GridPicture:
    """The rank grid (nodes x GPUs, as ``grid_picture``) coloured by ``generator``'s stream: same colour = same
    numbers. ``highlight`` outlines the rank and every rank sharing its stream; ``marks`` (``stream_marks``)
    flags the ranks whose real draws differ from the prediction."""
    layout = report.layout
    highlight = check_highlight(layout, highlight)
    start, stop = check_ranks(layout, ranks)
    colouring = stream_colouring(report, generator)
    count = int(colouring.ids.max()) + 1
    head = f"{generator} stream of every rank ({_where(report)}): {count} distinct; same colour = same stream"
    members = None
    if highlight is not None:
        members = colouring.ids == colouring.ids[highlight]
        head += f";  rank {highlight} and the {int(members.sum())} rank(s) sharing its stream outlined"
    title = [(head, TEXT_DARK), (describe(layout), TEXT_DARK)]
    return compose(layout, colouring, start, stop, highlight=highlight, members=members, marks=marks, title=title)
