"""Rank-grid pictures you can point at: composed pixel by pixel, with the map from pixels back to ranks.

A ``GridPicture`` is an RGB pixel array plus its ``GridGeometry`` (which cell, hence which ranks, lies under
each pixel). Small worlds (up to ``DETAIL_LIMIT`` shown ranks) get one cell per rank with its text; larger
ones one cell per node (``viz.aggregate``). What the cells show is a ``Colouring`` (a category per rank: its
group of a dim, its stream of a generator) and optional ``Marks`` (results: a verdict per rank, groups that
failed). The parts that do not change when another rank is highlighted are cached, so pointing at a rank
only recomposes the highlight.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..layout import Layout
from .canvas import blend, frame, outline_cells, png_bytes, rgb8
from .colors import BAD, GROUP_LINE, NODE_LINE, RANK_FRAME, TEXT_DARK, group_colors
from .colors import GOOD as GOOD  # the verdict colours, for the pictures that mark checks
from .grid import CellGrid, cell_grid
from .render import InlineFigure
from .text import atlas

DETAIL_LIMIT = 256
"""Up to this many shown ranks the grid has one cell per rank, with its text; above, one cell per node."""

MAX_WIDTH = 980
"""Pictures are laid out to fit this many pixels across (a notebook's output area)."""

DPI = 100.0
EMPTY = np.array([0.97, 0.97, 0.97])


@dataclass(frozen=True, eq=False)
class Colouring:
    """What the cells show: ``ids[rank]``, a category per rank (equal ids share a colour), called ``name``
    (``"tensor group"``, ``"tp stream"``), and ``label(rank)``, a cell's text (lines split by newlines; the
    rank alone by default). ``colors`` (one per id) defaults to the palette's ``group_colors``; ``legend`` holds
    caption lines (text, colour) saying what the colours mean when they are not simply the ids of ``name``.
    Compared by identity: the picture cache keeps one entry per object."""

    ids: np.ndarray
    name: str
    label: Callable[[int], str] | None = None
    colors: np.ndarray | None = field(default=None, repr=False)
    legend: tuple[tuple[str, tuple[float, float, float]], ...] = ()

    def __post_init__(self) -> None:
        if self.colors is None:
            object.__setattr__(self, "colors", group_colors(int(self.ids.max()) + 1 if self.ids.size else 1))


@dataclass(frozen=True, eq=False)
class Marks:
    """Results written on the grid: ``notes[rank]`` (a short line, ``""`` for none), ``bad[rank]`` (red when
    True, green otherwise), ``red_groups`` (rank lists outlined in red) and a ``headline`` for the title."""

    notes: Sequence[str]
    bad: np.ndarray
    red_groups: Sequence[Sequence[int]] = ()
    headline: str = ""

    @property
    def ok(self) -> bool:
        """Whether no rank is marked bad."""
        return not bool(np.any(self.bad))


@dataclass(frozen=True, eq=False)
class GridGeometry:
    """Where the cells of a ``GridPicture`` are: cell (0, 0) at pixel ``origin`` (x, y), cells of ``cell``
    (width, height) pixels in ``rows x cols``; ``first[row, col]`` is the first rank of a cell (-1: empty) and
    each cell holds ``per_cell`` consecutive ranks (1 unless aggregated)."""

    origin: tuple[int, int]
    cell: tuple[int, int]
    first: np.ndarray
    per_cell: int
    shown: tuple[int, int]
    world_size: int
    unit: str = "rank"

    @property
    def rows(self) -> int:
        """Cell rows."""
        return int(self.first.shape[0])

    @property
    def cols(self) -> int:
        """Cell columns."""
        return int(self.first.shape[1])

    @property
    def aggregated(self) -> bool:
        """Whether a cell holds several ranks."""
        return self.per_cell > 1 or self.unit != "rank"

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """The (row, col) of the cell under pixel (x, y), None outside every cell."""
        col = int(np.floor((x - self.origin[0]) / self.cell[0]))
        row = int(np.floor((y - self.origin[1]) / self.cell[1]))
        if not (0 <= row < self.rows and 0 <= col < self.cols) or self.first[row, col] < 0:
            return None
        return row, col

    def ranks_at(self, x: float, y: float) -> range | None:
        """The ranks of the cell under pixel (x, y) (one rank unless aggregated), None outside every cell."""
        cell = self.cell_at(x, y)
        if cell is None:
            return None
        first = int(self.first[cell])
        return range(first, first + self.per_cell)

    def rank_at(self, x: float, y: float) -> int | None:
        """The rank under pixel (x, y) (the first rank of an aggregated cell), None outside every cell."""
        ranks = self.ranks_at(x, y)
        return None if ranks is None else ranks.start

    def position(self, rank: int) -> tuple[int, int] | None:
        """The (row, col) of the cell holding ``rank``, None when it is not shown."""
        if not self.shown[0] <= rank < self.shown[1]:
            return None
        hits = np.argwhere((self.first >= 0) & (self.first <= rank) & (rank < self.first + self.per_cell))
        return (int(hits[0][0]), int(hits[0][1])) if len(hits) else None

    def box(self, rank: int) -> tuple[int, int, int, int] | None:
        """The pixel box (x0, y0, x1, y1; x1, y1 exclusive) of the cell holding ``rank``, None when not shown."""
        cell = self.position(rank)
        if cell is None:
            return None
        x0 = self.origin[0] + cell[1] * self.cell[0]
        y0 = self.origin[1] + cell[0] * self.cell[1]
        return x0, y0, x0 + self.cell[0], y0 + self.cell[1]

    def center(self, rank: int) -> tuple[float, float] | None:
        """The pixel centre of the cell holding ``rank`` (where to click to point at it), None when not shown."""
        box = self.box(rank)
        return None if box is None else ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)


@dataclass(eq=False)
class GridPicture:
    """A composed rank grid: ``pixels`` (height, width, 3) uint8 and ``geometry`` (pixels -> ranks)."""

    pixels: np.ndarray
    geometry: GridGeometry
    title: str = ""

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return int(self.pixels.shape[1]), int(self.pixels.shape[0])

    def png(self) -> bytes:
        """The picture as PNG bytes (encoded directly from the pixels)."""
        return png_bytes(self.pixels)

    def _repr_png_(self) -> bytes:
        return self.png()  # the last expression of a notebook cell shows the picture itself

    def __repr__(self) -> str:
        width, height = self.size
        first = self.title.splitlines()[0] if self.title else "rank grid"
        shown = self.geometry.shown[1] - self.geometry.shown[0]
        return f"GridPicture({first}; {width}x{height} px, {shown:,} ranks, one cell = {self.geometry.unit})"

    def figure(self) -> Figure:
        """A matplotlib ``Figure`` of exactly these pixels (one image, 1:1, axes in cell units)."""
        width, height = self.size
        figure = InlineFigure(figsize=(width / DPI, height / DPI), dpi=DPI)
        ax = figure.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        (x0, y0), (cw, ch) = self.geometry.origin, self.geometry.cell
        extent = (-x0 / cw, (width - x0) / cw, (height - y0) / ch, -y0 / ch)
        ax.imshow(self.pixels, extent=extent, aspect="auto", interpolation="nearest")
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        return figure


# ---------------------------------------------------------------------------------------------- shared pieces


class LayerCache:
    """A small LRU of composed layers, keyed by tuples of objects compared by identity (held, so never reused)."""

    caches: list[LayerCache] = []

    def __init__(self, size: int = 6):
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        LayerCache.caches.append(self)

    def clear(self) -> None:
        """Empty this cache."""
        self._items.clear()

    def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """The cached value of ``key``, made by ``make()`` on a miss."""
        value = self._items.get(key)
        if value is None:
            value = make()
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return value


def fill_cells(area: np.ndarray, colors: np.ndarray, cell: tuple[int, int]) -> None:
    """Paint ``colors`` (rows, cols, 3 uint8) as cells of ``cell`` (width, height) pixels with 1-pixel white gaps."""
    cw, ch = cell
    view = area.view()
    view.shape = (colors.shape[0], ch, colors.shape[1], cw, 3)  # raises rather than copy: writes land in area
    view[...] = colors[:, None, :, None, :]
    area[ch::ch, :] = 255
    area[:, cw::cw] = 255


def fade_pixels(area: np.ndarray) -> None:
    """Fade uint8 RGB pixels 60 % of the way to white, in place (cells that are not pointed at)."""
    faded = area.astype(np.uint16)
    faded *= 2
    faded += 3 * 255
    faded //= 5
    area[...] = faded


def with_title(body: np.ndarray, lines: Sequence[tuple[str, tuple[float, float, float]]]) -> tuple[np.ndarray, int]:
    """``body`` below a white band holding the title ``lines`` (``(text, colour)``, left-aligned, one per row); returns
    (image, band height)."""
    glyphs = atlas(8.5, DPI)
    band = 6 + len(lines) * (glyphs.line_height + 2) + 4
    width = max(body.shape[1], max((glyphs.width(text) for text, _ in lines), default=0) + 16, 420)
    image = np.full((band + body.shape[0], width, 3), 255, dtype=np.uint8)
    image[band:, : body.shape[1]] = body
    y = 6
    for text, color in lines:
        if text:
            alpha = np.zeros((glyphs.line_height + 2, width), dtype=np.uint8)
            glyphs.stamp(alpha, [text], 8, alpha.shape[0] / 2, align="left")
            blend(image[y : y + alpha.shape[0]], alpha[: image.shape[0] - y], color)
        y += glyphs.line_height + 2
    return image, band


def highlighted(layers: Any, member_cells: np.ndarray | None, rank_cell: tuple[int, int] | None) -> np.ndarray:
    """The body of a grid picture from its ``layers`` (``DetailLayers`` or ``aggregate.AggregateLayers``): a copy of
    ``layers.normal`` or, given ``member_cells`` (bool per cell of ``layers.grid``), of ``layers.faded`` with those
    cells bright and outlined (dark) and ``rank_cell`` framed (red, inside the cell); failing groups on top."""
    (left, top), (cw, ch) = layers.origin, layers.cell
    if member_cells is None:
        body = layers.normal.copy()
    else:
        body = layers.faded.copy()
        pixels = np.repeat(np.repeat(member_cells, ch, axis=0), cw, axis=1)
        area = (slice(top, top + layers.grid.rows * ch), slice(left, left + layers.grid.cols * cw))
        np.copyto(body[area], layers.normal[area], where=pixels[..., None])
        big = min(cw, ch) >= 12
        outline_cells(body, member_cells, (left, top), (cw, ch), GROUP_LINE, 3 if big else 2)
        if rank_cell is not None:
            x0, y0, inset = left + rank_cell[1] * cw, top + rank_cell[0] * ch, 2 if big else 0
            frame(body, (x0 + inset, y0 + inset, x0 + cw - inset, y0 + ch - inset), RANK_FRAME, 3 if big else 2)
    if layers.red is not None:  # failing groups on top of everything
        outline_cells(body, layers.red, (left, top), (cw, ch), BAD, 2)
    return body


# ---------------------------------------------------------------------------------------------- one cell per rank


@dataclass(eq=False)
class DetailLayers:
    """The parts of a one-cell-per-rank picture that do not depend on the highlight."""

    normal: np.ndarray
    faded: np.ndarray
    grid: CellGrid
    origin: tuple[int, int]
    cell: tuple[int, int]
    red: np.ndarray | None


def red_cells(marks: Marks | None, world: int, start: int, stop: int) -> np.ndarray | None:
    """Per shown rank, whether it is in a group ``marks`` outlines in red (None when there is none)."""
    if marks is None or not marks.red_groups:
        return None
    red = np.zeros(world, dtype=bool)
    for members in marks.red_groups:
        red[np.asarray(members, dtype=np.int64)] = True
    return red[start:stop]


def _detail_layers(layout: Layout, colouring: Colouring, marks: Marks | None, start: int, stop: int) -> DetailLayers:
    glyphs = atlas(7.5, DPI)
    label = colouring.label if colouring.label is not None else str
    lines = [label(r).split("\n") for r in range(start, stop)]
    notes = [marks.notes[r] for r in range(start, stop)] if marks is not None else None
    sample = lines[:64] + lines[-64:]
    widest = max(glyphs.width(line) for cell in sample for line in cell)
    if notes is not None:
        widest = max(widest, max((glyphs.width(n) for n in notes), default=0))
    count = max(len(cell) for cell in lines) + (1 if notes is not None else 0)
    cw, ch = max(46, widest + 10), glyphs.line_height * count + 8
    grid = cell_grid(layout, start, stop, max_cols=max(4, (MAX_WIDTH - 90) // cw))
    last_node = layout.num_nodes - 1
    row_labels = [grid.row_label(i, last_node) for i in range(grid.rows)]
    left = max(glyphs.width(label) for label in row_labels) + 14
    top, right, bottom = glyphs.line_height + 8, 8, 6
    width, height = left + grid.cols * cw + right, top + grid.rows * ch + bottom

    shown = np.arange(start, stop)
    cells = grid.image(colouring.colors[colouring.ids[shown]], EMPTY)
    dark = np.zeros((height, width), dtype=np.uint8)  # text canvases span the whole body: blends stay flat
    good, bad = np.zeros_like(dark), np.zeros_like(dark)
    block = glyphs.line_height * count / 2
    for index, cell_lines in enumerate(lines):
        cx, cy = left + (grid.col[index] + 0.5) * cw, top + (grid.row[index] + 0.5) * ch
        glyphs.stamp(dark, cell_lines, cx, cy - (glyphs.line_height / 2 if notes is not None else 0))
        if notes is not None and notes[index]:
            canvas = bad if marks.bad[start + index] else good
            glyphs.stamp(canvas, [notes[index]], cx, cy + block - glyphs.line_height / 2)
    margin = np.zeros((height, width), dtype=np.uint8)
    for j in range(grid.cols):
        glyphs.stamp(margin, [grid.column_label(j)], left + (j + 0.5) * cw, top / 2)
    for i, label in enumerate(row_labels):
        glyphs.stamp(margin, [label], left - 7, top + (i + 0.5) * ch, align="right")

    bad_cells = None
    if marks is not None and np.any(marks.bad[start:stop]):
        bad_cells = grid.image(np.asarray(marks.bad[start:stop], dtype=bool), False)
    red = red_cells(marks, layout.world_size, start, stop)
    red = grid.image(red, False) if red is not None else None
    ys, xs = grid.node_boundaries()
    body = np.full((height, width, 3), 255, dtype=np.uint8)
    area = body[top : top + grid.rows * ch, left : left + grid.cols * cw]
    fill_cells(area, rgb8(cells), (cw, ch))
    blend(body, dark, TEXT_DARK)
    blend(body, good, GOOD)
    blend(body, bad, BAD)
    if bad_cells is not None:
        for row, col in np.argwhere(bad_cells):
            frame(area, (col * cw + 1, row * ch + 1, (col + 1) * cw, (row + 1) * ch), BAD, 1)
    for y in ys:
        area[max(0, y * ch - 1) : y * ch + 1, :] = rgb8(NODE_LINE)
    for x in xs:
        area[:, max(0, x * cw - 1) : x * cw + 1] = rgb8(NODE_LINE)
    frame(body, (left - 1, top - 1, left + grid.cols * cw + 1, top + grid.rows * ch + 1), NODE_LINE, 1)
    blend(body, margin, TEXT_DARK)
    faded = body.copy()
    fade_pixels(faded[top : top + grid.rows * ch, left : left + grid.cols * cw])
    blend(faded, good, GOOD)  # verdicts stay readable on faded cells
    blend(faded, bad, BAD)
    return DetailLayers(body, faded, grid, (left, top), (cw, ch), red)


_DETAIL_CACHE = LayerCache()


def compose_detail(
    layout: Layout,
    colouring: Colouring,
    start: int,
    stop: int,
    *,
    highlight: int | None = None,
    members: np.ndarray | None = None,
    marks: Marks | None = None,
    title: Sequence[tuple[str, tuple[float, float, float]]] = (),
) -> GridPicture:
    """One cell per rank of ``start .. stop - 1``, each with its text (and note); ``members`` (bool per rank)
    stay bright and are outlined, the rest faded; ``highlight``'s cell gets a red frame."""
    layers: DetailLayers = _DETAIL_CACHE.get(
        (layout, colouring, marks, start, stop), lambda: _detail_layers(layout, colouring, marks, start, stop)
    )
    grid, (cw, ch), (left, top) = layers.grid, layers.cell, layers.origin
    member_cells = rank_cell = None
    if members is not None:
        member_cells = grid.image(np.asarray(members[start:stop], dtype=bool), False)
        if highlight is not None and start <= highlight < stop:
            rank_cell = (int(grid.row[highlight - start]), int(grid.col[highlight - start]))
    image, band = with_title(highlighted(layers, member_cells, rank_cell), title)
    first = grid.image(np.arange(start, stop), -1)
    geometry = GridGeometry((left, top + band), (cw, ch), first, 1, (start, stop), layout.world_size)
    return GridPicture(image, geometry, "\n".join(text for text, _ in title))
