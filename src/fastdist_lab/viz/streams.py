"""Pictures of generator streams (matplotlib ``Figure``s, never pyplot).

``plot_streams``: rank x generator, each cell coloured by its stream (same colour = identical numbers).
``plot_sharing``: rank x rank, filled where two ranks share one generator's stream, with the tensor groups
outlined and the data / pipeline boundaries drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.colors import ListedColormap, hsv_to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

if TYPE_CHECKING:
    from ..streams import StreamReport

_TAB20 = np.array(
    [
        (0.682, 0.780, 0.910), (1.000, 0.733, 0.471), (0.596, 0.875, 0.541), (1.000, 0.596, 0.588),
        (0.773, 0.690, 0.835), (0.769, 0.612, 0.580), (0.969, 0.714, 0.824), (0.859, 0.859, 0.553),
        (0.620, 0.855, 0.898), (0.851, 0.851, 0.851), (0.553, 0.827, 0.780), (1.000, 1.000, 0.702),
        (0.745, 0.729, 0.855), (0.992, 0.706, 0.384), (0.702, 0.871, 0.412), (0.988, 0.804, 0.898),
        (0.800, 0.922, 0.773), (1.000, 0.929, 0.435), (0.502, 0.694, 0.827), (0.984, 0.502, 0.447),
    ]
)  # fmt: skip

_LINES = {
    "pipeline": {"color": "#c0392b", "linewidth": 2.0, "linestyle": "-"},
    "data": {"color": "#2c6fbb", "linewidth": 1.0, "linestyle": "--"},
    "tensor": {"color": "#f39c12", "linewidth": 1.8, "linestyle": "-"},
}


def stream_colors(count: int) -> np.ndarray:
    """``count`` light RGB colours, neighbours in index order clearly distinct (vectorised for many)."""
    if count <= len(_TAB20):
        return _TAB20[:count].copy()
    index = np.arange(count)
    hsv = np.stack(
        [(index * 0.6180339887498949) % 1.0, 0.30 + 0.15 * (index // 7 % 3), 0.97 - 0.10 * (index // 3 % 2)], axis=1
    )
    return hsv_to_rgb(hsv)


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
    _, first, local = np.unique(ids.ravel(), return_index=True, return_inverse=True)
    renumber = np.empty(first.size, dtype=np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(first.size)
    local = renumber[np.asarray(local).ravel()].reshape(ids.shape)
    image = stream_colors(first.size)[local]

    count = len(report.generators)
    height = min(12.0, 1.6 + 0.28 * shown)
    fig = Figure(figsize=(1.6 + 1.3 * count, height), layout="constrained")
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
    fig = Figure(figsize=(size + 1.5, size), layout="constrained")
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
