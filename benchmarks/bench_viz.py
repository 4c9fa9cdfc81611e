"""Benchmark of the rank-grid pictures and the panels (one run prints every figure with its ratio).

Each figure is a median wall time, printed with a baseline measured in the same run and the ratio
baseline / ours (> 1: ours is faster).

1. 256-rank grid (32 nodes x 8 GPUs, every cell with its rank and coordinates) drawn cold to PNG bytes
   (``grid_picture(...).png()``): target < 100 ms. Baseline: the naive drawing, one matplotlib ``Rectangle`` and
   one ``Text`` per cell. Also shown: the same picture as a ``Figure`` through matplotlib's Agg (``plot_layout``).
2. 16,384-rank grid (2,048 nodes x 8 GPUs, one cell per node) drawn cold to PNG: target < 1 s. Baseline: the
   one-cell-per-rank drawing that big worlds had before (``draw_grid`` without text: an image of every rank plus
   line collections). Also shown: 4,096 ranks.
3. Click to updated picture at 256 ranks, kernel side: ``LayoutPanel.click(x, y)`` on a cell (what an ipyevents
   click runs) until the panel holds the new PNG, the side card and the highlight box: target < 150 ms. Baseline:
   redrawing the highlighted grid the naive way (per-cell artists). Hover (the text line only) is shown too.
4. ``LayoutPanel``: a control change to the new picture and tables (8 and 256 ranks, drawn cold); ratio against
   the picture alone.

Run: ``python benchmarks/bench_viz.py`` (``--quick`` for fewer repetitions).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from fastdist_lab import Layout
from fastdist_lab.viz import grid_picture, plot_layout, to_png
from fastdist_lab.viz.colors import fade, group_colors
from fastdist_lab.viz.grid import cell_grid, cell_labels, draw_grid
from fastdist_lab.viz.layout_picture import LayerCache, dim_colouring


def clear_caches() -> None:
    """Forget every cached colouring and layer: the next picture is drawn cold."""
    dim_colouring.cache_clear()
    for cache in LayerCache.caches:
        cache.clear()


def median_seconds(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> float:
    """Median wall time of ``repeat`` calls of ``fn`` (after one warm-up call); ``before`` runs untimed first."""
    fn()
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def naive_grid(layout: Layout, dim: str = "data", text: bool = True, highlight: int | None = None) -> Figure:
    """The straightforward drawing: one Rectangle (and one Text artist when ``text``) per rank."""
    grid = cell_grid(layout)
    ids = layout.group_index(dim)
    colors = group_colors(int(ids.max()) + 1)[ids]
    if highlight is not None:
        members = set(layout.group_of(dim, highlight).tolist())
        colors = fade(colors, [rank not in members for rank in range(layout.world_size)])
    figure = Figure(figsize=(grid.cols * 0.7 + 1, grid.rows * 0.45 + 1), dpi=100)
    ax = figure.add_subplot()
    for rank, label in enumerate(cell_labels(layout)):
        x, y = grid.col[rank], grid.row[rank]
        edge = "red" if rank == highlight else "white"
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colors[rank], edgecolor=edge))
        if text:
            ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, grid.cols)
    ax.set_ylim(grid.rows, 0)
    return figure


def rank_per_cell_grid(layout: Layout, dim: str, highlight: int | None) -> bytes:
    """Big worlds as they were drawn before node cells: every rank one pixel-cell, lines, no text (900 px wide)."""
    grid = cell_grid(layout)
    axes_h = int(min(1000, max(200, grid.rows / grid.cols * 790 * 0.5)))
    figure = Figure(figsize=(900 / 90, (axes_h + 80) / 90), dpi=90)
    ax = figure.add_axes((90 / 900, 10 / (axes_h + 80), 790 / 900, axes_h / (axes_h + 80)))
    draw_grid(ax, layout, dim, highlight, text=False)
    return to_png(figure)


def report(name: str, seconds: float, target: float | None, baseline_name: str, baseline: float) -> None:
    """One line: our time, the baseline's, their ratio and (when given) the target's verdict."""
    verdict = ""
    if target is not None:
        verdict = f"  target < {target * 1e3:.0f} ms: {'PASS' if seconds < target else 'FAIL'}"
    print(
        f"{name:58s} {seconds * 1e3:8.2f} ms   {baseline_name} {baseline * 1e3:8.1f} ms   "
        f"ratio {baseline / seconds:6.2f}x{verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    repeat = 5 if args.quick else 15

    medium = Layout(
        world_size=256, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, sequence_data_parallel=2
    )
    huge = Layout(
        world_size=16384, local_world_size=8, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2
    )
    big = Layout(world_size=4096, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, sequence_data_parallel=2)

    # 1. 256 ranks, one cell per rank with its text
    picture = grid_picture(medium, "data", highlight=3)
    print(f"256 ranks: {medium!r}\n  picture {picture.size[0]}x{picture.size[1]} px, per-cell text")
    naive = median_seconds(lambda: to_png(naive_grid(medium)), max(3, repeat // 5))
    ours = median_seconds(lambda: grid_picture(medium, "data", highlight=3).png(), repeat, before=clear_caches)
    report("256-rank grid -> PNG, cold (median)", ours, 0.100, "naive per-cell artists", naive)
    agg = median_seconds(lambda: to_png(plot_layout(medium, "data", highlight=3)), max(3, repeat // 3), clear_caches)
    report("256-rank grid as a Figure -> Agg -> PNG, cold (median)", agg, None, "naive per-cell artists", naive)

    # 2. big worlds, one cell per node
    for layout, dim in ((big, "data"), (huge, "data")):
        picture = grid_picture(layout, dim, highlight=3)
        world = f"{layout.world_size:,}"
        print(
            f"{world} ranks: {layout!r}\n  picture {picture.size[0]}x{picture.size[1]} px, "
            f"one cell per {picture.geometry.unit} ({picture.geometry.per_cell} ranks)"
        )
        before = median_seconds(lambda: rank_per_cell_grid(layout, dim, 3), 3)  # noqa: B023
        ours = median_seconds(lambda: grid_picture(layout, dim, highlight=3).png(), repeat // 2 + 1, clear_caches)  # noqa: B023
        report(f"{world}-rank node grid -> PNG, cold (median)", ours, 1.0, "one cell per rank", before)

    # 3. click to updated picture, kernel side
    from fastdist_lab.widgets import LayoutPanel

    panel = LayoutPanel(world_size=256, local_world_size=8, tensor_parallel=2, pipeline_parallel=4)
    panel.dim.value = "data"
    ranks = [3, 130, 77, 250, 9, 200]
    times = []
    for index in range(repeat):
        rank = ranks[index % len(ranks)]
        x, y = panel.geometry.center(rank)
        before_png = panel.png
        start = time.perf_counter()
        selected = panel.click(x, y)  # outside an event loop the panel redraws synchronously
        times.append(time.perf_counter() - start)
        assert selected == rank and panel.png != before_png and f"rank {rank}</b>" in panel.card.value
    layout = panel.layout
    naive_click = median_seconds(lambda: to_png(naive_grid(layout, "data", highlight=130)), max(3, repeat // 5))
    report(
        "click -> new picture + card, 256 ranks (median)", statistics.median(times), 0.150, "naive redraw", naive_click
    )
    x, y = panel.geometry.center(42)
    hover = median_seconds(lambda: panel.hover(x, y), repeat)
    report("hover -> hover line, 256 ranks (median)", hover, None, "naive redraw", naive_click)

    # 4. control change -> new picture and tables
    for world, local, values, picture_only in (
        (8, 8, (1, 2), lambda: grid_picture(Layout(world_size=8, local_world_size=8, tensor_parallel=2)).png()),
        (256, 8, (4, 2), lambda: grid_picture(medium).png()),
    ):
        panel = LayoutPanel(world_size=world, local_world_size=local, tensor_parallel=2, pipeline_parallel=2)
        times = []
        for index in range(repeat):
            before_png = panel.png
            clear_caches()  # a layout change draws a new picture cold, as "picture alone" does
            start = time.perf_counter()
            panel.pipeline_parallel.value = values[index % 2]
            changed = panel.png != before_png  # the panel renders synchronously outside an event loop
            times.append(time.perf_counter() - start)
            assert changed and panel.error == "", panel.error
        alone = median_seconds(picture_only, repeat, before=clear_caches)
        report(
            f"LayoutPanel {world} ranks: control change -> new picture",
            statistics.median(times),
            None,
            "picture alone",
            alone,
        )


if __name__ == "__main__":
    main()
