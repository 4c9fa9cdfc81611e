"""The rank grid of a ``Layout`` coloured by the groups of one dim: ``grid_picture`` (pixels you can point at)
and ``plot_layout`` (the same picture as a matplotlib ``Figure``)."""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
from matplotlib.figure import Figure

from ..errors import LayoutError
from ..layout import Layout
from .aggregate import compose_aggregate
from .grid import cell_label, check_dim, check_highlight, describe, dim_title
from .picture import BAD, DETAIL_LIMIT, GOOD, TEXT_DARK, Colouring, GridPicture, Marks, compose_detail


@lru_cache(maxsize=64)
def dim_colouring(layout: Layout, dim: str) -> Colouring:
    """Every rank's group of ``dim`` (``layout.group_index``), with the rank and its coordinates as cell text."""
    return Colouring(layout.group_index(check_dim(dim)), f"{dim} group", partial(cell_label, layout))


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
    local = layout.local_world_size
    nodes = f"node {start // local}" if start // local == (stop - 1) // local else f"nodes {start // local}-"
    nodes += "" if start // local == (stop - 1) // local else str((stop - 1) // local)
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
    lines = [*title, *([(note, TEXT_DARK)] if note else [])]
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
    ``highlight=rank`` outlines that rank (red) and every rank of its ``dim`` group (black), fading the rest;
    ``ranks=(start, stop)`` zooms to those ranks; ``marks`` writes results (verdicts) on the cells.
    """
    dim = check_dim(dim)
    highlight = check_highlight(layout, highlight)
    start, stop = check_ranks(layout, ranks)
    members = None
    head = dim_title(layout, dim)
    if highlight is not None:
        members = np.zeros(layout.world_size, dtype=bool)
        members[layout.group_of(dim, highlight)] = True
        head += f";  rank {highlight} and its {dim} group outlined"
    title = [(head, TEXT_DARK), (describe(layout), TEXT_DARK)]
    colouring = dim_colouring(layout, dim)
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
