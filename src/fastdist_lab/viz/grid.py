"""Rank-grid placement and the small multiples of a ``Layout``: nodes as rows, local GPUs as columns.

``cell_grid`` / ``place_cells`` say where each rank (or cell) sits; ``plot_dims`` draws one grid per dim on a plain
``matplotlib.figure.Figure`` (never pyplot): colours are one ``imshow`` of an RGB array, lines are
``LineCollection``s. The single pointable grid (``grid_picture`` / ``plot_layout``) is composed pixel by pixel in
``viz.picture``, ``viz.aggregate`` and ``viz.layout_picture``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..config import DIM_NAMES
from ..errors import LayoutError
from ..experts import EXPERT_DIM_NAMES
from ..formatting import plural
from ..layout import Layout
from ..validation import check_int
from .canvas import cell_edges
from .colors import GROUP_LINE, NODE_LINE, NODE_LINE_DENSE, RANK_FRAME, fade, group_colors
from .render import InlineFigure
from .text import atlas, text_image

TEXT_LIMIT = 1024
"""Worlds up to this many ranks get the rank and its coordinates written in every cell."""

_EMPTY = np.array([0.97, 0.97, 0.97])


@dataclass(frozen=True)
class CellGrid:
    """Where each shown rank sits in the picture: ``row[i]``, ``col[i]`` of rank ``first_rank + i`` in a
    ``rows x cols`` grid (for the whole world, ``first_rank`` is 0 and the arrays are indexed by global rank).

    Nodes are rows and local GPUs columns; when there are many nodes of few GPUs each, ``nodes_per_row``
    nodes are placed side by side in one row so the picture keeps a readable shape; a node of more GPUs than
    a row holds wraps over ``rows_per_node`` rows of ``wrap`` cells.
    """

    rows: int
    cols: int
    nodes_per_row: int
    local_world_size: int
    row: np.ndarray
    col: np.ndarray
    first_rank: int = 0
    wrap: int = 0
    first_row: int = 0

    @property
    def first_node(self) -> int:
        """The node of the first shown rank."""
        return self.first_rank // self.local_world_size

    @property
    def rows_per_node(self) -> int:
        """How many rows one node takes (1 unless wrapped)."""
        return -(-self.local_world_size // self.wrap) if self.wrap else 1

    def image(self, values: np.ndarray, fill: np.ndarray | float) -> np.ndarray:
        """Place per-rank ``values`` (shape ``(shown,)`` or ``(shown, k)``) on the grid; empty cells get ``fill``."""
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

    def row_label(self, row: int, last_node: int) -> str:
        """The label of row ``row``: its node, the nodes it holds, or (wrapped) the local offset it starts at."""
        if self.wrap:
            absolute = self.first_row + row
            node, offset = divmod(absolute, self.rows_per_node)
            offset *= self.wrap
            if offset == 0:
                return f"node {node + self.first_node}"
            return f"node {node + self.first_node} +{offset}" if row == 0 else f"+{offset}"
        if self.nodes_per_row == 1:
            return f"node {self.first_node + row}"
        first = self.first_node + row * self.nodes_per_row
        return f"nodes {first}-{min(last_node, first + self.nodes_per_row - 1)}"

    def node_boundaries(self) -> tuple[list[int], list[int]]:
        """Row indices (y) and column indices (x) where one node ends and the next begins."""
        if self.wrap:
            first = -self.first_row % self.rows_per_node
            return list(range(first or self.rows_per_node, self.rows, self.rows_per_node)), []
        return list(range(1, self.rows)), list(range(self.local_world_size, self.cols, self.local_world_size))


def _wrap_width(local: int, max_cols: int) -> int:
    """Cells per row for a node wider than ``max_cols``: its largest divisor that fits, unless that is tiny."""
    best = max(d for d in range(1, max_cols + 1) if local % d == 0)
    return best if best * 2 > max_cols else max_cols


def place_cells(start: int, stop: int, group: int, max_cols: int, per_row: int | None = None) -> CellGrid:
    """Cells ``start .. stop - 1`` in runs of ``group`` (a node) per row: ``per_row`` runs side by side (by default
    enough to keep the picture about as wide as high), or one run wrapped over rows when ``group > max_cols``."""
    cells = np.arange(start, stop)
    first_node = start // group
    node = cells // group - first_node
    nodes = int(node[-1]) + 1
    if group > max_cols:
        wrap = _wrap_width(group, max_cols)
        per_node = -(-group // wrap)
        absolute = node * per_node + (cells % group) // wrap
        first_row = int(absolute[0])
        row = absolute - first_row
        col = (cells % group) % wrap
        return CellGrid(int(row[-1]) + 1, wrap, 1, group, row, col, start, wrap, first_row)
    if per_row is None:
        per_row = 1
        if nodes > 32 and group < 16:
            # widen until the picture is about as wide as high (cells are ~2x wider than high)
            per_row = max(1, min(nodes, int(round(np.sqrt(nodes / (2.0 * group))))))
    per_row = max(1, min(per_row, max(1, max_cols // group)))
    row = node // per_row
    col = (node % per_row) * group + cells % group
    return CellGrid(-(-nodes // per_row), min(nodes, per_row) * group, per_row, group, row, col, start)


def cell_grid(layout: Layout, start: int = 0, stop: int | None = None, max_cols: int = 32) -> CellGrid:
    """The placement of ranks ``start .. stop - 1`` of ``layout`` (all of them by default; see ``CellGrid``).

    At most ``max_cols`` columns: many small nodes share a row, a node of more GPUs wraps over several rows.
    """
    world = layout.world_size
    stop = world if stop is None else stop
    if not 0 <= start < stop <= world:
        raise LayoutError(f"ranks {start}..{stop - 1} are not a range of the {world} ranks")
    return place_cells(start, stop, layout.local_world_size, max_cols)


def check_highlight(layout: Layout, highlight: int | None) -> int | None:
    """``highlight`` as a rank of ``layout`` (or None); ``LayoutError`` naming the value otherwise."""
    if highlight is None:
        return None
    return check_int("highlight", highlight, minimum=0, maximum=layout.world_size - 1)


def check_dim(dim: str, layout: Layout | None = None) -> str:
    """``dim`` when ``layout`` has groups of it (``layout.group_dims``: the nine dims, and the expert dims when it has
    experts; the nine without ``layout``); ``LayoutError`` naming the dim and the choices otherwise."""
    if dim in EXPERT_DIM_NAMES:
        if layout is not None and layout.has_experts:
            return dim
        raise LayoutError(
            f"dim={dim!r} is an expert dim and this layout has expert_parallel=1 (its expert groups are the dense "
            "ones); give expert_parallel > 1 or colour by one of " + ", ".join(DIM_NAMES)
        )
    if dim not in DIM_NAMES:
        dims = DIM_NAMES if layout is None else layout.group_dims
        raise LayoutError(f"dim={dim!r} is not a dim; use one of {', '.join(dims)}")
    return dim


@lru_cache(maxsize=16)
def expert_coordinates(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every rank's expert, expert-tensor and expert-data ranks (arrays by global rank; ``layout.expert_grid``)."""
    experts = layout.expert_grid
    return experts.coordinate("expert"), experts.coordinate("expert_tensor"), experts.coordinate("expert_data")


def cell_label(layout: Layout, rank: int) -> str:
    """One rank's cell text: the rank, then ``t d p`` coordinates (and ``s b`` when sequence-data > 1, then
    ``e et ed``, its expert, expert-tensor and expert-data ranks, when the layout has experts)."""
    c = layout.coordinates
    text = f"{rank}\nt{c['tensor_rank'][rank]} d{c['data_rank'][rank]} p{c['pipeline_rank'][rank]}"
    if layout.sequence_data_parallel > 1:
        text += f"\ns{c['sequence_data_rank'][rank]} b{c['batch_data_rank'][rank]}"
    if layout.has_experts:
        expert, expert_tensor, expert_data = expert_coordinates(layout)
        text += f"\ne{expert[rank]} et{expert_tensor[rank]} ed{expert_data[rank]}"
    return text


def cell_labels(layout: Layout) -> list[str]:
    """Each rank's cell text (see ``cell_label``)."""
    return [cell_label(layout, rank) for rank in range(layout.world_size)]


_edges = cell_edges  # the one implementation lives in canvas


def _node_lines(grid: CellGrid) -> np.ndarray:
    ys, xs = grid.node_boundaries()
    segments = [[(0, y), (grid.cols, y)] for y in ys] + [[(x, 0), (x, grid.rows)] for x in xs]
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
    dim = check_dim(dim, layout)
    highlight = check_highlight(layout, highlight)
    grid = cell_grid(layout)
    world = layout.world_size
    if text is None:
        text = world <= TEXT_LIMIT
    colors, members = rank_colors(layout, dim, highlight)
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
    ax.set_yticks(yt + 0.5, [grid.row_label(i, layout.num_nodes - 1) for i in yt])
    ax.tick_params(axis="both", length=0, labelsize=max(6.0, fontsize))
    ax.xaxis.set_ticks_position("top")
    for spine in ax.spines.values():
        spine.set_color(NODE_LINE)


@lru_cache(maxsize=64)
def describe(layout: Layout) -> str:
    """One line with the sizes and the ordering of ``layout``."""
    s = layout.summary()
    sizes = f"tp {s['tensor_parallel']}  pp {s['pipeline_parallel']}  dp {s['data_parallel']}"
    if layout.sequence_data_parallel > 1:
        sizes += f" (sdp {s['sequence_data_parallel']} x bdp {s['batch_data_parallel']})"
    nodes, gpus = plural(s["num_nodes"], "node"), plural(s["local_world_size"], "GPU")
    return f"world {s['world_size']:,} = {nodes} x {gpus};  {sizes};  {s['order']}"


def dim_title(layout: Layout, dim: str) -> str:
    """``"tensor: 4 groups of 2"``."""
    groups = layout.groups(dim)
    return f"{dim}: {plural(groups.shape[0], 'group')} of {groups.shape[1]:,}"


def rank_colors(layout: Layout, dim: str, highlight: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Every rank's colour by its group of ``dim`` (faded outside ``highlight``'s group) and that group as a mask."""
    ids = layout.group_index(check_dim(dim, layout))
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
                colors=NODE_LINE_DENSE if dense else NODE_LINE,
                linewidths=1.6 if text else (0.3 if dense else 0.8),
            )
        )
    if highlight is not None and members is not None:
        mask = grid.image(members, False)
        ax.add_collection(LineCollection(_edges(mask), colors=GROUP_LINE, linewidths=2.2))
        ax.add_patch(
            Rectangle(
                (grid.col[highlight] + 0.06, grid.row[highlight] + 0.06),
                0.88,
                0.88,
                fill=False,
                edgecolor=RANK_FRAME,
                linewidth=2.4,
            )
        )


def plot_dims(layout: Layout, highlight: int | None = None) -> Figure:
    """Small multiples: the rank grid once per dim of ``layout.group_dims`` (the nine named dims, then the four
    expert dims when the layout has experts), each coloured by that dim's groups.

    Cells show the rank number when the world has at most 64 ranks; ``highlight`` outlines the rank and its
    group in every panel.
    """
    grid = cell_grid(layout)
    dims = layout.group_dims
    text = layout.world_size <= 64
    cell_w, cell_h = (0.32, 0.24) if text else (0.12, 0.09)
    panel_w = float(np.clip(grid.cols * cell_w, 2.4, 5.0))
    panel_h = float(np.clip(grid.rows * cell_h, 1.2, 4.0))
    ncols, nrows = 3, -(-len(dims) // 3)
    width, height = ncols * (panel_w + 0.9), nrows * (panel_h + 0.75) + 0.5
    figure = InlineFigure(figsize=(width, height), dpi=72.0)
    axes = figure.subplots(nrows, ncols, squeeze=False)
    figure.subplots_adjust(
        left=0.75 / width, right=1 - 0.1 / width, top=1 - 0.55 / height, bottom=0.1 / height, wspace=0.35, hspace=0.55
    )
    for ax, dim in zip(axes.flat, dims):
        draw_grid(ax, layout, dim, highlight, text=text, fontsize=6.0, short_labels=True)
        ax.set_title(dim_title(layout, dim), fontsize=8, pad=12)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(dims) :]:
        ax.set_visible(False)
    figure.suptitle(describe(layout), fontsize=9, y=1 - 0.1 / height, va="top")
    return figure
