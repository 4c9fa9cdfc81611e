"""The rank grid of a ``Layout`` coloured by the groups of one dim: ``grid_picture`` (pixels you can point at)
and ``plot_layout`` (the same picture as a matplotlib ``Figure``).

A picture colours each group of the dim apart while the shown ranks hold at most ``DISTINCT_COLORS`` groups. With
more (2,048 tensor groups at 16,384 ranks), one colour per group would cycle the palette and mean nothing, so the
picture colours by what the eye can use, and says so in its caption: the rank's position in its group
(``position_colouring``: with one cell per rank, or per node when a node's ranks share a position, e.g. the pipeline
stage a node holds), else how each node's ranks sit in the groups: one whole group, several whole groups, part of
one group that spans other nodes, or parts of several (``span_colouring``).
"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
from matplotlib.figure import Figure

from ..errors import LayoutError
from ..formatting import plural
from ..layout import Layout
from .aggregate import compose_aggregate, unit_name, unit_size
from .colors import BAD, DISTINCT_COLORS, GOOD, PALETTE, TEXT_DARK, gradient_colors, text_color
from .grid import cell_label, check_dim, check_highlight, describe, dim_title
from .picture import DETAIL_LIMIT, Colouring, GridPicture, Marks, compose_detail

SPANS: tuple[str, ...] = (
    "one whole {dim} group",
    "several whole {dim} groups",
    "part of one {dim} group that spans other {cell}s",
    "parts of several {dim} groups that span other {cell}s",
)
"""What a cell's colour says in ``span_colouring``, in the palette's first four colours."""


@lru_cache(maxsize=64)
def dim_colouring(layout: Layout, dim: str) -> Colouring:
    """Every rank's group of ``dim`` (``layout.group_index``), with the rank and its coordinates as cell text."""
    return Colouring(layout.group_index(check_dim(dim, layout)), f"{dim} group", partial(cell_label, layout))


def _too_many(layout: Layout, dim: str) -> str:
    groups = layout.world_size // int(layout.groups(dim).shape[1])
    return f"{plural(groups, dim + ' group')} are too many colours to tell apart"


@lru_cache(maxsize=64)
def position_colouring(layout: Layout, dim: str) -> Colouring:
    """Every rank's position in its group of ``dim`` (``layout.dim_rank``): the palette's colours for groups of
    up to ``DISTINCT_COLORS`` ranks, a light-to-dark gradient for bigger groups."""
    size = int(layout.groups(check_dim(dim, layout)).shape[1])
    colors = PALETTE[:size].copy() if size <= DISTINCT_COLORS else gradient_colors(size)
    ends = "every group is one rank" if size == 1 else f"0 to {size - 1}"
    ends += "" if size <= DISTINCT_COLORS else ", light to dark"
    legend = ((f"colour: each rank's position in its {dim} group ({ends}); {_too_many(layout, dim)}", TEXT_DARK),)
    return Colouring(layout.dim_rank(dim), f"{dim} position", partial(cell_label, layout), colors=colors, legend=legend)


@lru_cache(maxsize=64)
def span_colouring(layout: Layout, dim: str, start: int, stop: int) -> Colouring:
    """For the aggregated picture of ranks ``start .. stop - 1`` (one cell per node or block): every rank gets its
    cell's category of ``SPANS``, i.e. whether the cell's ranks form whole groups of ``dim`` or parts of groups
    that span other cells, and whether they are one group or several."""
    per_cell = unit_size(layout, start, stop)
    size = int(layout.groups(check_dim(dim, layout)).shape[1])
    ids = np.sort(layout.group_index(dim)[start:stop].reshape(-1, per_cell), axis=1)
    starts = np.ones(ids.shape, dtype=bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    several = starts.sum(axis=1) > 1
    # a group is whole in a cell when all of its members are there: its run in the sorted row is the group size
    edges = np.flatnonzero(np.append(starts.ravel(), True))
    runs = np.diff(edges)
    cell_of_run = edges[:-1] // per_cell
    whole = np.ones(ids.shape[0], dtype=bool)
    np.logical_and.at(whole, cell_of_run, runs == size)
    category = np.where(whole, 0, 2) + several.astype(int)
    world = np.zeros(layout.world_size, dtype=np.int64)
    world[start:stop] = np.repeat(category, per_cell)
    what = unit_name(layout, per_cell)
    cell = "node" if what == "node" else "cell"
    each = "each node" if what == "node" else f"each cell ({what})"
    counts = np.bincount(category, minlength=len(SPANS))
    lines = [(f"colour: how the ranks of {each} sit in the {dim} groups; {_too_many(layout, dim)}", TEXT_DARK)]
    for index, text in enumerate(SPANS):
        if counts[index]:
            line = f"\u25a0 {text.format(dim=dim, cell=cell)}: {plural(int(counts[index]), cell)}"
            lines.append((line, text_color(PALETTE[index])))
    return Colouring(world, f"{dim} span", colors=PALETTE[: len(SPANS)].copy(), legend=tuple(lines))


def colouring_of(layout: Layout, dim: str, start: int, stop: int) -> Colouring:
    """How the picture of ranks ``start .. stop - 1`` colours ``dim``: one colour per group while the shown ranks
    hold at most ``DISTINCT_COLORS`` groups, else ``position_colouring`` (one cell per rank, or one per node or
    block when all of a cell's ranks sit at one position) or ``span_colouring`` (cells whose ranks sit at several
    positions)."""
    groups = dim_colouring(layout, dim)
    if (start, stop) == (0, layout.world_size):
        shown = layout.world_size // int(layout.groups(dim).shape[1])
    else:
        shown = int(np.unique(groups.ids[start:stop]).size)
    if shown <= DISTINCT_COLORS:
        return groups
    position = position_colouring(layout, dim)
    if stop - start <= DETAIL_LIMIT:
        return position
    cells = position.ids[start:stop].reshape(-1, unit_size(layout, start, stop))
    if bool((cells == cells[:, :1]).all()):  # every cell's ranks sit at one position: the positions show a pattern
        return position
    return span_colouring(layout, dim, start, stop)


def check_ranks(layout: Layout, ranks: tuple[int, int] | None) -> tuple[int, int]:
    """``ranks`` as a (start, stop) range of ``layout``'s ranks (the whole world for None); ``LayoutError`` if not."""
    if ranks is None:
        return 0, layout.world_size
    try:
        start, stop = (int(v) for v in ranks)
    except (TypeError, ValueError):
        raise LayoutError(f"ranks={ranks!r} must be (start, stop), a range of global ranks") from None
    if not 0 <= start < stop <= layout.world_size:
        raise LayoutError(f"ranks={ranks!r} must satisfy 0 <= start < stop <= world_size={layout.world_size}")
    return start, stop


def zoom_note(layout: Layout, start: int, stop: int) -> str:
    """The title line of a zoomed picture: which ranks (and nodes) of the world it shows."""
    if (start, stop) == (0, layout.world_size):
        return ""
    first, last = start // layout.local_world_size, (stop - 1) // layout.local_world_size
    nodes = f"node {first}" if first == last else f"nodes {first}-{last}"
    return f"zoomed: ranks {start}-{stop - 1} ({nodes}) of {layout.world_size}"


def compose(
    layout: Layout,
    colouring: Colouring,
    start: int,
    stop: int,
    *,
    highlight: int | None,
    members: np.ndarray | None,
    marks: Marks | None,
    title: list[tuple[str, tuple[float, float, float]]],
) -> GridPicture:
    """One cell per rank up to ``DETAIL_LIMIT`` shown ranks, one per node (or block) above."""
    note = zoom_note(layout, start, stop)
    lines = [*title, *([(note, TEXT_DARK)] if note else []), *colouring.legend]
    if marks is not None and marks.headline:
        lines.append((marks.headline, GOOD if marks.ok else BAD))
    draw = compose_detail if stop - start <= DETAIL_LIMIT else compose_aggregate
    return draw(layout, colouring, start, stop, highlight=highlight, members=members, marks=marks, title=lines)


def grid_picture(
    layout: Layout,
    dim: str = "tensor",
    highlight: int | None = None,
    *,
    ranks: tuple[int, int] | None = None,
    marks: Marks | None = None,
) -> GridPicture:
    """The rank grid of ``layout`` coloured by the groups of ``dim``, with the map from pixels to ranks.

    Up to ``DETAIL_LIMIT`` ranks every cell is one rank with its coordinates (``t d p``, plus ``s b`` when
    sequence-data > 1); above, a cell is one node (striped when its ranks are in several groups of ``dim``).
    Each group has its colour while the shown ranks hold at most ``DISTINCT_COLORS`` groups; with more, the
    colours say what the eye can use (see the module docstring), and the caption says which.
    ``highlight=rank`` outlines that rank (red) and every rank of its ``dim`` group (black), fading the rest;
    ``ranks=(start, stop)`` zooms to those ranks; ``marks`` writes results (verdicts) on the cells.
    """
    dim = check_dim(dim, layout)
    highlight = check_highlight(layout, highlight)
    start, stop = check_ranks(layout, ranks)
    members = None
    head = dim_title(layout, dim)
    if highlight is not None:
        members = np.zeros(layout.world_size, dtype=bool)
        members[layout.group_of(dim, highlight)] = True
        head += f";  rank {highlight} and its {dim} group outlined"
    title = [(head, TEXT_DARK), (describe(layout), TEXT_DARK)]
    colouring = colouring_of(layout, dim, start, stop)
    return compose(layout, colouring, start, stop, highlight=highlight, members=members, marks=marks, title=title)


def plot_layout(
    layout: Layout,
    dim: str = "tensor",
    highlight: int | None = None,
    *,
    ranks: tuple[int, int] | None = None,
    marks: Marks | None = None,
) -> Figure:
    """The rank grid of ``layout`` coloured by the groups of ``dim``, as a ``Figure`` (see ``grid_picture``).

    Nodes are rows and local GPUs columns; each cell shows the global rank and its coordinates; thick lines are
    node boundaries. Worlds of more than ``DETAIL_LIMIT`` ranks show one cell per node.
    """
    return grid_picture(layout, dim, highlight, ranks=ranks, marks=marks).figure()
