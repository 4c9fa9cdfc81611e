"""Big worlds: one cell per node (or per block of ranks), coloured when the whole cell agrees, striped when not.

Above ``DETAIL_LIMIT`` shown ranks a cell stands for ``unit_size`` consecutive ranks: a node when there are
between ``MIN_UNITS`` and ``MAX_UNITS`` nodes, several whole nodes when there are more, and an aligned block of
a node's GPUs when there are fewer (one large node). A cell whose ranks all share one category (one group of
the chosen dim, one stream) has that category's colour; a cell that splits is striped with the colours of
(up to four of) its categories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..layout import Layout
from ..numbering import divisors
from .canvas import blend, frame, rgb8, stripe_slots
from .colors import BAD, GOOD, NODE_LINE, TEXT_DARK, fade
from .grid import CellGrid, place_cells
from .picture import (
    DPI,
    EMPTY,
    MAX_WIDTH,
    Colouring,
    GridGeometry,
    GridPicture,
    LayerCache,
    Marks,
    highlighted,
    red_cells,
    with_title,
)
from .text import atlas

MIN_UNITS = 64
"""Fewer nodes than this are split into blocks of GPUs (so a one-node world still shows a pattern)."""

MAX_UNITS = 2048
"""More nodes than this are merged, several nodes per cell."""

MAX_STRIPES = 4


def unit_size(layout: Layout, start: int, stop: int) -> int:
    """How many consecutive ranks one cell of the aggregated picture of ranks ``start .. stop - 1`` holds."""
    count, local = stop - start, layout.local_world_size
    if start % local == 0 and count % local == 0:
        nodes = count // local
        if MIN_UNITS <= nodes <= MAX_UNITS:
            return local
        if nodes > MAX_UNITS:
            return local * next(k for k in divisors(nodes) if nodes // k <= MAX_UNITS)
    block = math.gcd(count, local, start)
    return next((d for d in divisors(block) if count // d <= MAX_UNITS), block)


def unit_name(layout: Layout, per_cell: int) -> str:
    """What one cell is, in words: ``"node"``, ``"4 nodes"``, ``"block of 8 GPUs"`` or ``"rank"``."""
    local = layout.local_world_size
    if per_cell == local:
        return "node"
    if per_cell > local:
        return f"{per_cell // local} nodes"
    return "rank" if per_cell == 1 else f"block of {per_cell} GPUs"


def unit_label(layout: Layout, first: int, per_cell: int) -> str:
    """Where the cell starting at rank ``first`` is: ``node 3``, ``nodes 8-11`` or ``node 0, GPUs 8-15``."""
    local = layout.local_world_size
    node = first // local
    if per_cell == local:
        return f"node {node}"
    if per_cell > local:
        return f"nodes {node}-{node + per_cell // local - 1}"
    offset = first % local
    if per_cell == 1:
        return f"rank {first} (node {node}, GPU {offset})"
    return f"node {node}, GPUs {offset}-{offset + per_cell - 1}"


@dataclass(eq=False)
class AggregateLayers:
    """The parts of an aggregated picture that do not depend on the highlight."""

    normal: np.ndarray
    faded: np.ndarray
    grid: CellGrid
    origin: tuple[int, int]
    cell: tuple[int, int]
    per_cell: int
    split: int
    red: np.ndarray | None


def _unit_colors(colouring: Colouring, start: int, stop: int, per_cell: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cell: the colours of up to ``MAX_STRIPES`` of its categories (cells, 4, 3) and how many it has."""
    ids = np.sort(colouring.ids[start:stop].reshape(-1, per_cell), axis=1)
    new = np.ones(ids.shape, dtype=bool)
    new[:, 1:] = ids[:, 1:] != ids[:, :-1]
    counts = new.sum(axis=1)
    order = np.cumsum(new, axis=1)  # 1-based index of the distinct value each position holds
    slots = np.empty((ids.shape[0], MAX_STRIPES), dtype=ids.dtype)
    for j in range(MAX_STRIPES):
        position = np.argmax(order == (j % counts[:, None]) + 1, axis=1)
        slots[:, j] = ids[np.arange(ids.shape[0]), position]
    return colouring.colors[slots], counts


def _hatch(counts: np.ndarray, ch: int, cw: int) -> np.ndarray:
    """Per cell and pixel, which colour slot it shows: all slot 0 for a cell of one category; diagonal stripes
    cycling through its (up to ``MAX_STRIPES``) categories on white (slot ``MAX_STRIPES``) for a split cell."""
    period = max(4, min(cw, ch) // 3)
    y, x = np.mgrid[0:ch, 0:cw]
    on = (x + y) % period < (period + 1) // 2
    stripe = stripe_slots(ch, cw, period, 12)
    maps = [np.zeros((ch, cw), dtype=np.int64)]
    maps += [np.where(on, stripe % k, MAX_STRIPES) for k in range(2, MAX_STRIPES + 1)]
    return np.stack(maps)[np.minimum(counts, MAX_STRIPES) - 1]


def _row_labels(layout: Layout, placement: CellGrid, per_cell: int) -> list[str]:
    local = layout.local_world_size
    labels = []
    for row in range(placement.rows):
        cells = np.flatnonzero(placement.row == row)
        first = (placement.first_rank + int(cells[0])) * per_cell
        last = (placement.first_rank + int(cells[-1]) + 1) * per_cell - 1
        if per_cell >= local or placement.nodes_per_row > 1 and not placement.wrap:
            a, b = first // local, last // local
            labels.append(f"node {a}" if a == b else f"nodes {a}-{b}")
        elif first % local == 0:
            labels.append(f"node {first // local}")
        else:
            labels.append(f"+{first % local}")
    return labels


def _aggregate_layers(
    layout: Layout, colouring: Colouring, marks: Marks | None, start: int, stop: int
) -> AggregateLayers:
    per_cell = unit_size(layout, start, stop)
    local = layout.local_world_size
    cells = (stop - start) // per_cell
    group = local // per_cell if per_cell <= local else 1
    target = int(np.clip(round(math.sqrt(2 * cells)), 4, 64))
    placement = place_cells(start // per_cell, stop // per_cell, group, target, per_row=max(1, target // group))
    glyphs = atlas(7.5, DPI)
    row_labels = _row_labels(layout, placement, per_cell)
    left = max(glyphs.width(label) for label in row_labels) + 14
    cw = int(np.clip((MAX_WIDTH - left - 12) // placement.cols, 6, 64))
    ch = int(np.clip(round(cw * 0.7), 6, 30)) if cw >= 24 else cw
    top, right, bottom = glyphs.line_height + 8, 8, 6
    width, height = left + placement.cols * cw + right, top + placement.rows * ch + bottom

    colors, counts = _unit_colors(colouring, start, stop, per_cell)
    which = _hatch(counts, ch, cw)
    text = np.zeros((placement.rows * ch, placement.cols * cw), dtype=np.uint8)
    if cw >= 30 and ch >= glyphs.line_height + 2:
        for index in range(cells):
            first = (placement.first_rank + index) * per_cell
            label = f"n{first // local}" if per_cell >= local else str(first)
            if glyphs.width(label) <= cw - 4:
                cx = (placement.col[index] + 0.5) * cw
                glyphs.stamp(text, [label], cx, placement.row[index] * ch + glyphs.line_height / 2 + 3)
    margin = np.zeros((height, width), dtype=np.uint8)
    step = max(1, -(-44 // cw))
    for j in range(0, placement.cols, step):
        offset = j * per_cell % local if per_cell < local else j * per_cell // local
        label = str(offset) if per_cell < local else f"+{offset}"
        glyphs.stamp(margin, [label], left + (j + 0.5) * cw, top / 2)
    row_step = max(1, -(-(glyphs.line_height + 1) // ch))
    for i in range(0, placement.rows, row_step):
        glyphs.stamp(margin, [row_labels[i]], left - 7, top + (i + 0.5) * ch, align="right")

    bad = good = None
    if marks is not None:
        unit_bad = np.asarray(marks.bad[start:stop], dtype=bool).reshape(cells, per_cell).any(axis=1)
        bad, good = placement.image(unit_bad, False), placement.image(~unit_bad, False)
    red = red_cells(marks, layout.world_size, start, stop)
    red = placement.image(red.reshape(cells, per_cell).any(axis=1), False) if red is not None else None
    ys, xs = placement.node_boundaries() if group > 1 else ([], [])

    layers = {}
    for name in ("normal", "faded"):
        palette = colors if name == "normal" else fade(colors.reshape(-1, 3), np.ones(colors.size // 3, bool))
        palette = np.concatenate([rgb8(palette.reshape(colors.shape)), np.full((cells, 1, 3), 255, np.uint8)], axis=1)
        blocks = np.take_along_axis(palette[:, None, None, :, :], which[..., None, None], axis=3)[..., 0, :]
        grid = np.empty((placement.rows, placement.cols, ch, cw, 3), dtype=np.uint8)
        grid[...] = rgb8(EMPTY)
        grid[placement.row, placement.col] = blocks
        body = np.full((height, width, 3), 255, dtype=np.uint8)
        area = body[top : top + placement.rows * ch, left : left + placement.cols * cw]
        area[...] = grid.transpose(0, 2, 1, 3, 4).reshape(area.shape)
        if cw >= 8:
            area[ch::ch, :] = 255
            area[:, cw::cw] = 255
        blend(area, text, TEXT_DARK)
        for y in ys:
            area[max(0, y * ch - 1) : y * ch + 1, :] = rgb8(NODE_LINE)
        for x in xs:
            area[:, max(0, x * cw - 1) : x * cw + 1] = rgb8(NODE_LINE)
        if bad is not None:
            _verdict_marks(area, bad, good, (cw, ch))
        frame(body, (left - 1, top - 1, left + placement.cols * cw + 1, top + placement.rows * ch + 1), NODE_LINE, 1)
        blend(body, margin, TEXT_DARK)
        layers[name] = body
    split = int((counts > 1).sum())
    return AggregateLayers(layers["normal"], layers["faded"], placement, (left, top), (cw, ch), per_cell, split, red)


def _verdict_marks(area: np.ndarray, bad: np.ndarray, good: np.ndarray, cell: tuple[int, int]) -> None:
    """Bad cells: a red frame and (when it fits) a red cross; good cells (when it fits) a green tick."""
    cw, ch = cell
    glyphs = atlas(7.5 if ch >= 16 else 6.0, DPI)
    fits = ch >= glyphs.line_height and cw >= 14
    width = 2 if min(cw, ch) >= 10 else 1
    ticks, crosses = np.zeros(area.shape[:2], np.uint8), np.zeros(area.shape[:2], np.uint8)
    for row, col in np.argwhere(bad):
        x0, y0 = col * cw, row * ch
        frame(area, (x0 + 1, y0 + 1, x0 + cw, y0 + ch), BAD, width)
        if fits:
            glyphs.stamp(crosses, ["\u2717"], x0 + cw - 8, y0 + ch - glyphs.line_height / 2 - 1)
    if fits:
        for row, col in np.argwhere(good):
            glyphs.stamp(ticks, ["\u2713"], col * cw + cw - 8, row * ch + ch - glyphs.line_height / 2 - 1)
    blend(area, ticks, GOOD)
    blend(area, crosses, BAD)


_CACHE = LayerCache()


def compose_aggregate(
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
    """One cell per node (or block) of ranks ``start .. stop - 1``; cells holding a ``members`` rank stay bright
    and are outlined, the cell of ``highlight`` gets a red frame."""
    layers: AggregateLayers = _CACHE.get(
        (layout, colouring, marks, start, stop), lambda: _aggregate_layers(layout, colouring, marks, start, stop)
    )
    placement, per_cell = layers.grid, layers.per_cell
    (left, top), (cw, ch) = layers.origin, layers.cell
    member_cells = rank_cell = None
    if members is not None:
        inside = np.asarray(members[start:stop], dtype=bool).reshape(-1, per_cell).any(axis=1)
        member_cells = placement.image(inside, False)
        if highlight is not None and start <= highlight < stop:
            index = (highlight - start) // per_cell
            rank_cell = (int(placement.row[index]), int(placement.col[index]))
    body = highlighted(layers, member_cells, rank_cell)
    what = unit_name(layout, per_cell)
    legend = f"one cell = one {what}" if not what[0].isdigit() else f"one cell = {what}"
    if per_cell > 1:
        legend += f" ({per_cell} ranks)"
        if not colouring.legend:  # a colouring with its own legend says what a cell's colour means
            legend += f"; striped: its ranks are in several {colouring.name}s"
            legend += f" ({layers.split} of {(stop - start) // per_cell} cells)" if layers.split else " (none is)"
    image, band = with_title(body, [*title, (legend, TEXT_DARK)])
    first = placement.image((np.arange(start // per_cell, stop // per_cell)) * per_cell, -1)
    geometry = GridGeometry((left, top + band), (cw, ch), first, per_cell, (start, stop), layout.world_size, what)
    return GridPicture(image, geometry, "\n".join(text for text, _ in title))
