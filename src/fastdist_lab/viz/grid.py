"""Rank-grid pictures of a ``Layout``: nodes as rows, local GPUs as columns, cells coloured by group.

Everything is drawn on a plain ``matplotlib.figure.Figure`` (never pyplot), so nothing is registered
globally and a figure is freed as soon as it is no longer referenced. Colours are one ``imshow`` of an
RGB array, lines are ``LineCollection``s; only small worlds get per-cell text, so large worlds stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..config import DIM_NAMES, LayoutError
from ..layout import Layout
from .colors import fade, group_colors
from .text import atlas, text_image

TEXT_LIMIT = 1024
"""Worlds up to this many ranks get the rank and its coordinates written in every cell."""

_EMPTY = np.array([0.97, 0.97, 0.97])
_NODE_LINE = "#333333"
_HIGHLIGHT_GROUP = "#111111"
_HIGHLIGHT_RANK = "#d62728"


@dataclass(frozen=True)
class CellGrid:
    """Where each global rank sits in the picture: ``row[rank]``, ``col[rank]`` in a ``rows x cols`` grid.

    Nodes are rows and local GPUs columns; when there are many nodes of few GPUs each, ``nodes_per_row``
    nodes are placed side by side in one row so the picture keeps a readable shape.
    """

    rows: int
    cols: int
    nodes_per_row: int
    local_world_size: int
    row: np.ndarray
    col: np.ndarray

    def image(self, values: np.ndarray, fill: np.ndarray | float) -> np.ndarray:
        """Place per-rank ``values`` (shape ``(world,)`` or ``(world, k)``) on the grid; empty cells get ``fill``."""
        shape = (self.rows, self.cols, *values.shape[1:])
        out = np.empty(shape, dtype=values.dtype)
        out[...] = fill
        out[self.row, self.col] = values
        return out

    def column_label(self, col: int) -> str:
        """The header of column ``col``: the local GPU (``+k``, the k-th node of the row, for one-GPU nodes)."""
        if self.local_world_size == 1 and self.nodes_per_row > 1:
            return f"+{col}"
        return str(col % self.local_world_size)


def cell_grid(layout: Layout) -> CellGrid:
    """The placement of every rank of ``layout`` (see ``CellGrid``)."""
    local, nodes = layout.local_world_size, layout.num_nodes
    per_row = 1
    if nodes > 32 and local < 16:
        # widen until the picture is about as wide as high (cells are ~2x wider than high)
        per_row = max(1, min(nodes, int(round(np.sqrt(nodes / (2.0 * local))))))
        per_row = max(1, min(per_row, max(1, 32 // local)))
    ranks = np.arange(layout.world_size)
    node = ranks // local
    row = node // per_row
    col = (node % per_row) * local + ranks % local
    rows = -(-nodes // per_row)
    return CellGrid(rows, per_row * local, per_row, local, row, col)


def _check_highlight(layout: Layout, highlight: int | None) -> int | None:
    if highlight is None:
        return None
    if isinstance(highlight, bool) or not isinstance(highlight, (int, np.integer)):
        raise LayoutError(f"highlight={highlight!r} must be a global rank (an integer) or None")
    if not 0 <= int(highlight) < layout.world_size:
        raise LayoutError(f"highlight={highlight} must be in [0, world_size={layout.world_size})")
    return int(highlight)


def _check_dim(dim: str) -> str:
    if dim not in DIM_NAMES:
        raise LayoutError(f"dim={dim!r} is not a dim; use one of {', '.join(DIM_NAMES)}")
    return dim


def cell_labels(layout: Layout) -> list[str]:
    """Each rank's cell text: the rank, then ``t d p`` coordinates (and ``s b`` when sequence-data > 1)."""
    c = layout.coordinates
    t, d, p = c["tensor_rank"], c["data_rank"], c["pipeline_rank"]
    if layout.sequence_data_parallel > 1:
        s, b = c["sequence_data_rank"], c["batch_data_rank"]
        return [f"{r}\nt{t[r]} d{d[r]} p{p[r]}\ns{s[r]} b{b[r]}" for r in range(layout.world_size)]
    return [f"{r}\nt{t[r]} d{d[r]} p{p[r]}" for r in range(layout.world_size)]


def _edges(mask: np.ndarray) -> np.ndarray:
    """Unit segments ``(n, 2, 2)`` (x, y) along the border of the True cells of a ``rows x cols`` mask."""
    padded = np.pad(mask, 1)
    horizontal = padded[1:, 1:-1] != padded[:-1, 1:-1]  # (rows + 1, cols): edge at y = i
    vertical = padded[1:-1, 1:] != padded[1:-1, :-1]  # (rows, cols + 1): edge at x = j
    hi, hj = np.nonzero(horizontal)
    vi, vj = np.nonzero(vertical)
    h = np.stack([np.stack([hj, hi], 1), np.stack([hj + 1, hi], 1)], 1)
    v = np.stack([np.stack([vj, vi], 1), np.stack([vj, vi + 1], 1)], 1)
    return np.concatenate([h, v]).astype(float)


def _node_lines(grid: CellGrid) -> np.ndarray:
    segments = [[(0, y), (grid.cols, y)] for y in range(1, grid.rows)]
    segments += [[(x, 0), (x, grid.rows)] for x in range(grid.local_world_size, grid.cols, grid.local_world_size)]
    return np.array(segments, dtype=float).reshape(-1, 2, 2)


def _ticks(count: int, limit: int = 32) -> np.ndarray:
    step = max(1, -(-count // limit))
    return np.arange(0, count, step)


def _draw_labels(ax: Axes, grid: CellGrid, labels: list[str], members: np.ndarray | None, fontsize: float) -> None:
    """Write each rank's label in its cell as one pasted-glyph image (dark; grey outside ``members``)."""
    figure = ax.figure
    position = ax.get_position()
    width = int(round(position.width * figure.get_figwidth() * figure.dpi))
    height = int(round(position.height * figure.get_figheight() * figure.dpi))
    glyphs = atlas(fontsize, figure.dpi)
    cell_w, cell_h = width / grid.cols, height / grid.rows
    split = [label.split("\n") for label in labels]
    widest = max(glyphs.width(line) for lines in split[:64] + split[-64:] for line in lines)
    if widest > cell_w - 2 or glyphs.line_height * max(len(s) for s in split) > cell_h:
        split = [lines[:1] for lines in split]  # too small for coordinates: the rank only
        if glyphs.width(split[-1][0]) > cell_w - 2 or glyphs.line_height > cell_h:
            return
    dark = np.zeros((height, width), dtype=np.uint8)
    grey = np.zeros((height, width), dtype=np.uint8) if members is not None else dark
    for rank, lines in enumerate(split):
        canvas = dark if members is None or members[rank] else grey
        glyphs.stamp(canvas, lines, (grid.col[rank] + 0.5) * cell_w, (grid.row[rank] + 0.5) * cell_h)
    extent = (0, grid.cols, grid.rows, 0)
    for canvas, color in ((dark, (0.13, 0.13, 0.13)), (grey, (0.55, 0.55, 0.55))):
        if canvas is dark or members is not None:
            ax.imshow(text_image(canvas, color), extent=extent, aspect="auto", interpolation="nearest", zorder=2.5)


def draw_grid(
    ax: Axes,
    layout: Layout,
    dim: str = "tensor",
    highlight: int | None = None,
    *,
    text: bool | None = None,
    fontsize: float = 7.0,
    short_labels: bool = False,
    max_ticks: int = 32,
) -> None:
    """Draw ``layout``'s rank grid coloured by the groups of ``dim`` on ``ax`` (see ``plot_layout``).

    At most ``max_ticks`` node and GPU labels per axis (fewer draw faster in small pictures).
    """
    dim = _check_dim(dim)
    highlight = _check_highlight(layout, highlight)
    grid = cell_grid(layout)
    world = layout.world_size
    if text is None:
        text = world <= TEXT_LIMIT
    colors, members = _rank_colors(layout, dim, highlight)
    image = grid.image(colors, _EMPTY)
    ax.imshow(image, extent=(0, grid.cols, grid.rows, 0), aspect="auto", interpolation="nearest")
    ax.set_xlim(0, grid.cols)
    ax.set_ylim(grid.rows, 0)

    if text:
        cells = np.array(
            [[(x, 0), (x, grid.rows)] for x in range(1, grid.cols)]
            + [[(0, y), (grid.cols, y)] for y in range(1, grid.rows)],
            dtype=float,
        ).reshape(-1, 2, 2)
        ax.add_collection(LineCollection(cells, colors="white", linewidths=0.8))
        labels = [str(r) for r in range(world)] if short_labels else cell_labels(layout)
        _draw_labels(ax, grid, labels, members, fontsize)
    _draw_outlines(ax, grid, highlight, members, text=bool(text))

    xt, yt = _ticks(grid.cols, max_ticks), _ticks(grid.rows, max_ticks)
    ax.set_xticks(xt + 0.5, [grid.column_label(j) for j in xt])
    if grid.nodes_per_row == 1:
        ylabels = [f"node {i}" for i in yt]
    else:
        last = layout.num_nodes - 1
        ylabels = [f"nodes {i * grid.nodes_per_row}-{min(last, (i + 1) * grid.nodes_per_row - 1)}" for i in yt]
    ax.set_yticks(yt + 0.5, ylabels)
    ax.tick_params(axis="both", length=0, labelsize=max(6.0, fontsize))
    ax.xaxis.set_ticks_position("top")
    for spine in ax.spines.values():
        spine.set_color(_NODE_LINE)


def describe(layout: Layout) -> str:
    """One line with the sizes and the ordering of ``layout``."""
    s = layout.summary()
    sizes = f"tp {s['tensor_parallel']}  pp {s['pipeline_parallel']}  dp {s['data_parallel']}"
    if layout.sequence_data_parallel > 1:
        sizes += f" (sdp {s['sequence_data_parallel']} x bdp {s['batch_data_parallel']})"
    return (
        f"world {s['world_size']} = {s['num_nodes']} node(s) x {s['local_world_size']} GPU(s);  {sizes};  {s['order']}"
    )


def _dim_title(layout: Layout, dim: str) -> str:
    groups = layout.groups(dim)
    return f"{dim}: {groups.shape[0]} group(s) of {groups.shape[1]}"


def _rank_colors(layout: Layout, dim: str, highlight: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    ids = layout.group_index(dim)
    colors = group_colors(int(ids.max()) + 1)[ids]
    if highlight is None:
        return colors, None
    members = np.zeros(layout.world_size, dtype=bool)
    members[layout.group_of(dim, highlight)] = True
    return fade(colors, ~members), members


def _draw_outlines(ax: Axes, grid: CellGrid, highlight: int | None, members: np.ndarray | None, text: bool) -> None:
    if grid.rows <= 64 or (grid.rows <= 512 and grid.nodes_per_row > 1):
        dense = grid.rows > 64
        ax.add_collection(
            LineCollection(
                _node_lines(grid),
                colors="#777777" if dense else _NODE_LINE,
                linewidths=1.6 if text else (0.3 if dense else 0.8),
            )
        )
    if highlight is not None and members is not None:
        mask = grid.image(members, False)
        ax.add_collection(LineCollection(_edges(mask), colors=_HIGHLIGHT_GROUP, linewidths=2.2))
        ax.add_patch(
            Rectangle(
                (grid.col[highlight] + 0.06, grid.row[highlight] + 0.06),
                0.88,
                0.88,
                fill=False,
                edgecolor=_HIGHLIGHT_RANK,
                linewidth=2.4,
            )
        )


def _blend(area: np.ndarray, alpha: np.ndarray, rgb: tuple[float, float, float]) -> None:
    """Paint ``rgb`` over the RGBA uint8 ``area`` with the uint8 opacity ``alpha`` (in place, only where inked)."""
    rows, cols = np.nonzero(alpha)  # ``area`` may be a strided view: index it in 2-D so writes land in it
    if rows.size == 0:
        return
    a = alpha[rows, cols, None].astype(np.float32) * (1 / 255)
    color = np.asarray(rgb, dtype=np.float32) * 255
    under = area[rows, cols, :3].astype(np.float32)
    area[rows, cols, :3] = (under + (color - under) * a + 0.5).astype(np.uint8)


def _composed_grid(figure: Figure, layout: Layout, dim: str, highlight: int | None, title_px: int) -> None:
    """Small worlds: the cells, their text and the axis labels composed as one pixel-exact image."""
    dpi = figure.dpi
    grid = cell_grid(layout)
    glyphs = atlas(7.5, dpi)
    labels = [label.split("\n") for label in cell_labels(layout)]
    widest = max(glyphs.width(line) for lines in labels[:64] + labels[-64:] for line in lines)
    cw = max(56, widest + 10)
    ch = glyphs.line_height * len(labels[0]) + 8
    ylabels = (
        [f"node {i}" for i in range(grid.rows)]
        if grid.nodes_per_row == 1
        else [
            f"nodes {i * grid.nodes_per_row}-{min(layout.num_nodes, (i + 1) * grid.nodes_per_row) - 1}"
            for i in range(grid.rows)
        ]
    )
    left = max(glyphs.width(label) for label in ylabels) + 14
    top, right, bottom = glyphs.line_height + 8, 8, 6
    width, height = left + grid.cols * cw + right, top + grid.rows * ch + bottom
    figure.set_size_inches(max(width, 560) / dpi, (height + title_px) / dpi)
    fig_w = max(width, 560)
    ax = figure.add_axes((0, 0, width / fig_w, height / (height + title_px)))
    ax.set_axis_off()

    colors, members = _rank_colors(layout, dim, highlight)
    image = np.full((height, width, 4), 255, dtype=np.uint8)  # RGBA: matplotlib resamples it fastest
    cells = np.concatenate([grid.image(colors, _EMPTY), np.ones((grid.rows, grid.cols, 1))], axis=2)
    cells = (cells * 255).round().astype(np.uint8)
    area = image[top : top + grid.rows * ch, left : left + grid.cols * cw]
    area[...] = np.repeat(np.repeat(cells, ch, axis=0), cw, axis=1)
    area[ch::ch, :] = 255
    area[:, cw::cw] = 255
    dark = np.zeros(area.shape[:2], dtype=np.uint8)
    grey = np.zeros_like(dark)
    for rank, lines in enumerate(labels):
        canvas = dark if members is None or members[rank] else grey
        glyphs.stamp(canvas, lines, (grid.col[rank] + 0.5) * cw, (grid.row[rank] + 0.5) * ch)
    _blend(area, dark, (0.13, 0.13, 0.13))
    if members is not None:
        _blend(area, grey, (0.55, 0.55, 0.55))
    margin = np.zeros(image.shape[:2], dtype=np.uint8)
    for j in range(grid.cols):
        glyphs.stamp(margin, [grid.column_label(j)], left + (j + 0.5) * cw, top / 2)
    for i, label in enumerate(ylabels):
        glyphs.stamp(margin, [label], left - 7, top + (i + 0.5) * ch, align="right")
    _blend(image, margin, (0.13, 0.13, 0.13))

    extent = (-left / cw, (width - left) / cw, (height - top) / ch, -top / ch)
    ax.imshow(image, extent=extent, aspect="auto", interpolation="nearest")
    ax.set_xlim(extent[0], extent[1])
    ax.set_ylim(extent[2], extent[3])
    ax.add_patch(Rectangle((0, 0), grid.cols, grid.rows, fill=False, edgecolor=_NODE_LINE, linewidth=1.0))
    _draw_outlines(ax, grid, highlight, members, text=True)


def plot_layout(layout: Layout, dim: str = "tensor", highlight: int | None = None) -> Figure:
    """The rank grid of ``layout`` coloured by the groups of ``dim``.

    Nodes are rows and local GPUs columns; each cell shows the global rank and its coordinates
    (``t d p``, plus ``s b`` when sequence-data > 1); thick lines are node boundaries.
    ``highlight=rank`` outlines that rank (red) and every rank of its ``dim`` group (black), fading the rest.
    Worlds of more than ``TEXT_LIMIT`` ranks are drawn without per-cell text.
    """
    dim = _check_dim(dim)
    highlight = _check_highlight(layout, highlight)
    title_px = 40
    if layout.world_size <= TEXT_LIMIT:
        figure = Figure(dpi=100.0)
        _composed_grid(figure, layout, dim, highlight, title_px)
    else:
        grid = cell_grid(layout)
        dpi = 90.0
        left, right, bottom = 90, 20, 10
        top = title_px + 30
        axes_w = 900 - left - right
        axes_h = int(np.clip(grid.rows / grid.cols * axes_w * 0.5, 200, 1000))
        width_px, height_px = 900, axes_h + top + bottom
        figure = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
        ax = figure.add_axes((left / width_px, bottom / height_px, axes_w / width_px, axes_h / height_px))
        draw_grid(ax, layout, dim, highlight, text=False)
    height = figure.get_figheight() * figure.dpi
    title = _dim_title(layout, dim)
    if highlight is not None:
        title += f";  rank {highlight} and its group outlined"
    figure.suptitle(f"{title}\n{describe(layout)}", fontsize=9, y=1 - 4 / height, va="top")
    return figure


def plot_dims(layout: Layout, highlight: int | None = None) -> Figure:
    """Small multiples: the rank grid once per named dim, each coloured by that dim's groups.

    Cells show the rank number when the world has at most 64 ranks; ``highlight`` outlines the rank and its
    group in every panel.
    """
    grid = cell_grid(layout)
    text = layout.world_size <= 64
    cell_w, cell_h = (0.32, 0.24) if text else (0.12, 0.09)
    panel_w = float(np.clip(grid.cols * cell_w, 2.4, 5.0))
    panel_h = float(np.clip(grid.rows * cell_h, 1.2, 4.0))
    ncols, nrows = 3, -(-len(DIM_NAMES) // 3)
    width, height = ncols * (panel_w + 0.9), nrows * (panel_h + 0.75) + 0.5
    figure = Figure(figsize=(width, height), dpi=72.0)
    axes = figure.subplots(nrows, ncols, squeeze=False)
    figure.subplots_adjust(
        left=0.75 / width, right=1 - 0.1 / width, top=1 - 0.55 / height, bottom=0.1 / height, wspace=0.35, hspace=0.55
    )
    for ax, dim in zip(axes.flat, DIM_NAMES):
        draw_grid(ax, layout, dim, highlight, text=text, fontsize=6.0, short_labels=True)
        ax.set_title(_dim_title(layout, dim), fontsize=8, pad=12)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(DIM_NAMES) :]:
        ax.set_visible(False)
    figure.suptitle(describe(layout), fontsize=9, y=1 - 0.1 / height, va="top")
    return figure
