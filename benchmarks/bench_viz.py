"""Benchmark of the rank-grid pictures and the layout panel (one run prints every figure with its ratio).

1. A 256-rank grid (32 nodes x 8 GPUs, every cell with its rank and coordinates) rendered to pixels and to PNG:
   median time, target < 150 ms; baseline measured in the same run: the naive drawing with one matplotlib
   ``Text`` and one ``Rectangle`` per cell.
2. A 4,096-rank grid (no per-cell text) rendered to pixels: target < 1 s; baseline: the naive drawing with
   one matplotlib ``Rectangle`` per cell (no text).
3. ``LayoutPanel``: time from a control change to the new picture in the panel (layout, grid PNG, ranks
   table, groups and topology), for the 8-rank default and a 256-rank layout; ratio against the picture alone.

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
from fastdist_lab.viz import plot_layout, to_pixels, to_png
from fastdist_lab.viz.colors import group_colors
from fastdist_lab.viz.grid import cell_grid, cell_labels


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls of ``fn`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def naive_grid(layout: Layout, dim: str = "data", text: bool = True) -> Figure:
    """The straightforward drawing: one Rectangle (and one Text artist when ``text``) per rank."""
    grid = cell_grid(layout)
    ids = layout.group_index(dim)
    colors = group_colors(int(ids.max()) + 1)
    figure = Figure(figsize=(grid.cols * 0.7 + 1, grid.rows * 0.45 + 1), dpi=100)
    ax = figure.add_subplot()
    for rank, label in enumerate(cell_labels(layout)):
        x, y = grid.col[rank], grid.row[rank]
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colors[ids[rank]], edgecolor="white"))
        if text:
            ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, grid.cols)
    ax.set_ylim(grid.rows, 0)
    return figure


def report(name: str, seconds: float, target: float | None, baseline_name: str, baseline: float) -> None:
    verdict = ""
    if target is not None:
        verdict = f"  target < {target * 1e3:.0f} ms: {'PASS' if seconds < target else 'FAIL'}"
    print(
        f"{name:52s} {seconds * 1e3:8.1f} ms   {baseline_name} {baseline * 1e3:8.1f} ms   "
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
    big = Layout(world_size=4096, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, sequence_data_parallel=2)
    pixels = to_pixels(plot_layout(medium, "data", highlight=3))
    print(f"256 ranks: {medium!r}\n  picture {pixels.shape[1]}x{pixels.shape[0]} px, per-cell text")

    ours = median_seconds(lambda: to_pixels(plot_layout(medium, "data", highlight=3)), repeat)
    naive = median_seconds(lambda: to_pixels(naive_grid(medium)), max(3, repeat // 5))
    report("plot_layout 256 ranks -> pixels (median)", ours, 0.150, "naive per-cell artists", naive)
    ours_png = median_seconds(lambda: to_png(plot_layout(medium, "data", highlight=3)), repeat)
    report("plot_layout 256 ranks -> PNG bytes (median)", ours_png, 0.150, "naive per-cell artists", naive)

    figure = plot_layout(big, "data", highlight=4095)
    pixels = to_pixels(figure)
    print(f"4,096 ranks: {big!r}\n  picture {pixels.shape[1]}x{pixels.shape[0]} px, no per-cell text")
    naive_big = median_seconds(lambda: to_pixels(naive_grid(big, text=False)), 1)
    ours_big = median_seconds(lambda: to_pixels(plot_layout(big, "data", highlight=4095)), max(3, repeat // 3))
    report("plot_layout 4,096 ranks -> pixels (median)", ours_big, 1.0, "naive per-cell patches", naive_big)
    ours_big_png = median_seconds(lambda: to_png(plot_layout(big, "data", highlight=4095)), max(3, repeat // 3))
    report("plot_layout 4,096 ranks -> PNG bytes (median)", ours_big_png, 1.0, "naive per-cell patches", naive_big)

    from fastdist_lab.widgets import LayoutPanel

    for world, local, values, picture_only in (
        (8, 8, (1, 2), lambda: to_png(plot_layout(Layout(world_size=8, local_world_size=8, tensor_parallel=2)))),
        (256, 8, (4, 2), lambda: to_png(plot_layout(medium))),
    ):
        panel = LayoutPanel(world_size=world, local_world_size=local, tensor_parallel=2, pipeline_parallel=2)
        times = []
        for index in range(repeat):
            before = panel.png
            start = time.perf_counter()
            panel.pipeline_parallel.value = values[index % 2]
            changed = panel.png != before  # the panel renders synchronously outside an event loop
            times.append(time.perf_counter() - start)
            assert changed and panel.error == "", panel.error
        alone = median_seconds(picture_only, repeat)
        report(
            f"LayoutPanel {world} ranks: control change -> new picture",
            statistics.median(times),
            None,
            "picture alone",
            alone,
        )


if __name__ == "__main__":
    main()
