"""Pictures of rank conventions side by side (matplotlib ``Figure``, never pyplot).

``plot_conventions(a, b)`` draws the same GPUs twice, coloured by their group under each convention, and
outlines in red the ranks whose group differs. ``plot_seed_sharing(layout)`` draws one panel per random
stream (this project's, Megatron's, torchtitan's), ranks of one colour sharing a seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from ..conventions import Convention, as_convention, equivalent, seed_streams
from ..conventions.base import normalise_mapping
from ..conventions.equivalence import differing_ranks
from ..conventions.framework_seeds import STREAMS
from ..seeds import stream_ids
from .colors import group_colors
from .render import InlineFigure

TEXT_LIMIT = 256
"""Worlds up to this many ranks get their rank written in each cell."""

_DIFF = "#d62728"


def _shape(world: int, cols: int | None) -> tuple[int, int]:
    if cols is None:
        cols = min(world, 8)
    cols = max(1, min(int(cols), world))
    return -(-world // cols), cols


def _draw_panel(
    ax: Axes,
    values: np.ndarray,
    labels: list[str] | None,
    rows: int,
    cols: int,
    outline: np.ndarray | None,
    title: str,
) -> None:
    world = values.shape[0]
    image = np.ones((rows * cols, 3))
    image[:world] = group_colors(int(values.max()) + 1)[values]
    ax.imshow(image.reshape(rows, cols, 3), extent=(0, cols, rows, 0), interpolation="nearest", aspect="auto")
    if outline is not None and outline.any():
        ranks = np.nonzero(outline)[0]
        r, c = ranks // cols, ranks % cols
        segments = []
        for y, x in zip(r, c):
            x0, y0, x1, y1 = x + 0.06, y + 0.08, x + 0.94, y + 0.92
            segments += [[(x0, y0), (x1, y0)], [(x1, y0), (x1, y1)], [(x1, y1), (x0, y1)], [(x0, y1), (x0, y0)]]
        ax.add_collection(LineCollection(segments, colors=_DIFF, linewidths=2.2))
    if labels is not None:
        size = max(5.0, min(9.0, 90.0 / max(cols, rows)))
        for rank, label in enumerate(labels):
            ax.text(rank % cols + 0.5, rank // cols + 0.5, label, ha="center", va="center", fontsize=size)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)


def _cols_for(obj: Any, cols: int | None) -> int | None:
    if cols is None and hasattr(obj, "local_world_size") and not isinstance(obj, Convention):
        return int(obj.local_world_size)
    return cols


def plot_conventions(
    left: Any,
    right: Any,
    spec: Any = None,
    mapping: Mapping[Any, Any] | None = None,
    cols: int | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Two conventions on the same GPU grid, each cell coloured by the rank's group of ``spec`` (an axis, dim or
    tuple of axes of ``left``, mapped into ``right`` by ``mapping``); ranks whose group differs are outlined red.

    ``left`` is a ``Layout`` or a ``Convention``, ``right`` a ``Convention``. Without ``spec``, the first axis set
    whose groups differ is shown (or, when all agree, the first mapped axis of size > 1). Cell text: the rank and
    its index inside the group. Colours are matched: equal groups get equal colours in both panels.
    """
    a, b = as_convention(left), as_convention(right)
    result = equivalent(a, b, mapping)
    entries = normalise_mapping(a, b, mapping)
    if spec is None:
        if result.difference is not None:
            left_axes = result.difference.left_axes
        else:
            sized = [e for e in entries if np.prod([a.size(x) for x in e[0]]) > 1]
            left_axes = (sized or entries)[0][0]
    else:
        left_axes = a.canonical_axes(spec)
    lookup = {x: e for e in entries for x in e[0]}
    missing = [x for x in left_axes if x not in lookup]
    if missing:
        raise ValueError(f"axes {missing} of {a.name} are not in the mapping {[e[0] for e in entries]}")
    right_axes = b.canonical_axes(tuple(dict.fromkeys(y for x in left_axes for y in lookup[x][1])))
    left_axes = a.canonical_axes(left_axes)
    if a.world_size != b.world_size:
        raise ValueError(f"world sizes differ: {a.name} has {a.world_size} ranks, {b.name} {b.world_size}")
    world = a.world_size
    ga, gb = a.rank_grid.groups(left_axes), b.rank_grid.groups(right_axes)
    differs = differing_ranks(a, left_axes, b, right_axes)
    ids_a = a.rank_grid.group_index(left_axes)
    # match colours: a right group identical (as a set) to a left group takes that group's colour
    key_a = {tuple(sorted(g)): i for i, g in zip(ids_a[ga[:, 0]], ga.tolist())}
    colour_b = np.empty(world, dtype=np.int64)
    spare = int(ids_a.max()) + 1
    for row in gb.tolist():
        colour = key_a.get(tuple(sorted(row)))
        if colour is None:
            colour, spare = spare, spare + 1
        colour_b[row] = colour
    rows, ncols = _shape(world, _cols_for(left, cols))
    if figsize is None:
        figsize = (min(16.0, 1.6 + 0.75 * ncols) * 2, min(12.0, 1.2 + 0.55 * rows))
    fig = InlineFigure(figsize=figsize, layout="constrained")
    panels = ((a, left_axes, ids_a, "+"), (b, right_axes, colour_b, "-"))
    for ax, (convention, axes, ids, joint) in zip(fig.subplots(1, 2), panels):
        position = convention.rank_grid.group_rank(axes)
        labels = [f"{r}\n#{position[r]}" for r in range(world)] if world <= TEXT_LIMIT else None
        _draw_panel(ax, ids, labels, rows, ncols, differs, f"{convention.name}: {joint.join(axes)}")
    count = int(differs.sum())
    verdict = "same groups" if count == 0 else f"{count} of {world} ranks in a different group (red)"
    fig.suptitle(f"{'+'.join(left_axes)} vs {'-'.join(right_axes)}: {verdict}", fontsize=11)
    return fig


def plot_seed_sharing(
    layout: Any,
    seed: int | None = None,
    streams: Any = None,
    cols: int | None = None,
    step: int = 0,
    phase: str = "training",
    data_parallel_random_init: bool = False,
    device: str = "cuda",
) -> Figure:
    """One panel per random stream (``conventions.framework_seeds.STREAMS`` or the names in ``streams``) on ``layout``'s
    GPUs: ranks of one colour share that stream (on ``device``: CPU generators read only 32 bits of the seed).
    Cell text: the rank and its stream id."""
    names = list(STREAMS) if streams is None else [streams] if isinstance(streams, str) else list(streams)
    unknown = [n for n in names if n not in STREAMS]
    if unknown:
        raise ValueError(f"unknown stream(s) {unknown}; use {list(STREAMS)}")
    frame = seed_streams(layout, seed, step, phase, data_parallel_random_init)
    world = int(layout.world_size)
    rows, ncols = _shape(world, _cols_for(layout, cols))
    per_row = min(len(names), 2 if ncols > 4 else 3)
    grid_rows = -(-len(names) // per_row)
    width = min(18.0, per_row * (1.0 + 0.6 * ncols))
    height = min(16.0, grid_rows * (0.9 + 0.5 * rows))
    fig = InlineFigure(figsize=(width, height), layout="constrained")
    axes = np.atleast_1d(fig.subplots(grid_rows, per_row)).ravel()
    show_text = world <= TEXT_LIMIT
    for ax, name in zip(axes, names):
        ids = stream_ids(frame[name], device)
        labels = [f"{r}\ns{ids[r]}" for r in range(world)] if show_text else None
        _draw_panel(ax, ids, labels, rows, ncols, None, f"{name}: {int(ids.max()) + 1} streams")
    for ax in axes[len(names) :]:
        ax.set_axis_off()
    fig.suptitle("Ranks sharing a dropout stream (same colour = same seed)", fontsize=11)
    return fig
