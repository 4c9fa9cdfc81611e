"""Rank-grid pictures: placement, colours by group, highlight outlines, large worlds, no pyplot state."""

from __future__ import annotations

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fastdist_lab import Layout, LayoutError  # noqa: E402
from fastdist_lab.config import DIM_NAMES  # noqa: E402
from fastdist_lab.viz import grid_picture, layout_html, plot_dims, plot_layout, to_pixels, to_png  # noqa: E402
from fastdist_lab.viz.grid import TEXT_LIMIT, _edges, cell_grid, cell_labels, draw_grid  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def layout(**kw) -> Layout:
    fields = dict(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    fields.update(kw)
    return Layout(**fields)


def test_plot_layout_is_a_plain_figure_rendered_to_png_without_pyplot():
    before = plt.get_fignums()
    figure = plot_layout(layout(), "data", highlight=5)
    assert isinstance(figure, Figure)
    png = to_png(figure)
    assert png.startswith(PNG_MAGIC)
    pixels = to_pixels(figure)
    assert pixels.ndim == 3 and pixels.shape[2] == 4 and pixels.shape[0] > 100
    assert plt.get_fignums() == before == []


def test_cell_grid_puts_nodes_on_rows_and_local_gpus_on_columns():
    lay = layout(world_size=32, local_world_size=8)
    grid = cell_grid(lay)
    assert (grid.rows, grid.cols, grid.nodes_per_row) == (4, 8, 1)
    ranks = np.arange(32)
    assert np.array_equal(grid.row, ranks // 8)
    assert np.array_equal(grid.col, ranks % 8)


def test_many_small_nodes_are_folded_side_by_side_and_every_cell_is_used_once():
    lay = Layout(world_size=1024, local_world_size=2, tensor_parallel=2)
    grid = cell_grid(lay)
    assert grid.nodes_per_row > 1
    assert grid.cols == grid.nodes_per_row * 2
    cells = set(zip(grid.row.tolist(), grid.col.tolist()))
    assert len(cells) == 1024
    # a node stays inside one row, its GPUs in consecutive columns
    assert np.all(grid.row[0::2] == grid.row[1::2]) and np.all(grid.col[1::2] == grid.col[0::2] + 1)


@pytest.mark.parametrize("dim", DIM_NAMES)
@pytest.mark.parametrize("pipeline_first", [False, True])
def test_cells_share_a_colour_exactly_when_they_share_a_group(dim, pipeline_first):
    lay = layout(pipeline_first=pipeline_first)
    figure = Figure()
    ax = figure.add_subplot()
    draw_grid(ax, lay, dim, text=False)
    image = np.asarray(ax.images[0].get_array())
    grid = cell_grid(lay)
    colours = [tuple(image[grid.row[r], grid.col[r]]) for r in range(lay.world_size)]
    ids = lay.group_index(dim)
    for a in range(lay.world_size):
        for b in range(lay.world_size):
            assert (colours[a] == colours[b]) == (ids[a] == ids[b]), (dim, a, b)
    for members in lay.groups(dim):
        assert len(set(ids[members])) == 1


def test_highlight_fades_every_rank_outside_the_group_and_outlines_the_group():
    lay = layout()
    figure = Figure()
    ax = figure.add_subplot()
    draw_grid(ax, lay, "pipeline", highlight=5, text=False)
    image = np.asarray(ax.images[0].get_array())
    grid = cell_grid(lay)
    members = set(lay.group_of("pipeline", 5).tolist())
    assert members == {5, 13}
    brightness = {r: float(np.mean(image[grid.row[r], grid.col[r]])) for r in range(lay.world_size)}
    assert min(brightness[r] for r in range(16) if r not in members) > max(brightness[r] for r in members)
    # two cells, one above the other: 6 unit segments around the pair (the shared edge is inside)
    outline = ax.collections[-1]
    segments = outline.get_segments()
    mask = np.zeros((grid.rows, grid.cols), bool)
    mask[grid.row[[5, 13]], grid.col[[5, 13]]] = True
    assert len(segments) == len(_edges(mask)) == 6
    assert any(type(p).__name__ == "Rectangle" for p in ax.patches)


def test_edges_of_one_cell_and_of_a_two_cell_bar():
    one = np.zeros((3, 3), bool)
    one[1, 1] = True
    assert len(_edges(one)) == 4
    bar = np.zeros((2, 3), bool)
    bar[0, :2] = True
    assert len(_edges(bar)) == 6


def test_bad_highlight_and_bad_dim_raise_layout_error():
    lay = layout()
    with pytest.raises(LayoutError, match="highlight=16"):
        plot_layout(lay, highlight=16)
    with pytest.raises(LayoutError, match="highlight"):
        plot_layout(lay, highlight="3")
    with pytest.raises(LayoutError, match="not a dim"):
        plot_layout(lay, dim="nonsense")


def test_cell_text_has_coordinates_and_sequence_data_only_when_used():
    assert cell_labels(layout())[5] == "5\nt1 d2 p0\ns0 b1"
    plain = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
    assert cell_labels(plain)[5] == "5\nt1 d0 p1"


def test_small_and_large_worlds_are_one_composed_image_without_text_artists():
    small = plot_layout(layout())
    assert len(small.axes[0].images) == 1  # cells and text composed into one image
    assert len(small.axes[0].texts) == 0
    big = Layout(world_size=4096, local_world_size=8, tensor_parallel=2, pipeline_parallel=4)
    assert big.world_size > TEXT_LIMIT
    figure = plot_layout(big, "data", highlight=4095)
    ax = figure.axes[0]
    assert len(ax.images) == 1 and len(ax.texts) == 0
    image = np.asarray(ax.images[0].get_array())
    picture = grid_picture(big, "data", highlight=4095)
    assert image.shape == picture.pixels.shape  # the figure holds exactly the composed pixels
    assert picture.geometry.per_cell == 8 and picture.geometry.rows * picture.geometry.cols >= 512
    assert to_png(figure).startswith(PNG_MAGIC)


def test_text_is_actually_drawn_in_small_worlds():
    lay = Layout(world_size=8, local_world_size=8, tensor_parallel=2)
    image = np.asarray(plot_layout(lay).axes[0].images[0].get_array())
    dark = (image[..., :3].astype(int).sum(axis=2) < 200).sum()
    assert dark > 8 * 20  # every cell has some dark glyph pixels


def test_plot_dims_draws_one_panel_per_named_dim():
    figure = plot_dims(layout(), highlight=3)
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert len(titles) == len(DIM_NAMES)
    for dim, title in zip(DIM_NAMES, titles):
        assert title.startswith(f"{dim}:")
    assert to_png(figure).startswith(PNG_MAGIC)


def test_layout_html_shows_the_grid_inline():
    lay = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    page = layout_html(lay)
    assert "data:image/png;base64," in page and "Groups per dim" in page and "world_size" in page
    assert "data:image/png" not in lay._repr_html_()  # core draws no picture itself
    assert plt.get_fignums() == []


def test_in_ipython_a_layout_displays_with_its_grid_drawn_by_viz():
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "import fastdist_lab\n"
        "assert 'matplotlib' not in sys.modules  # registered lazily: nothing drawn yet\n"
        "data, _ = shell.display_formatter.format(fastdist_lab.Layout(world_size=4, tensor_parallel=2))\n"
        "assert 'data:image/png;base64,' in data['text/html'], data['text/html'][:200]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_objects_draw_their_own_pictures_through_the_painters():
    from fastdist_lab import Training, Transformer, estimate
    from fastdist_lab.painters import paint
    from fastdist_lab.streams import predict
    from fastdist_lab.viz import plot_cost, plot_sharing, plot_streams

    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
    report = predict(layout)
    cost = estimate(layout, Transformer.preset("llama2-7b"), Training(num_microbatches=4))
    pairs = [
        (layout.plot("data", highlight=5), plot_layout(layout, "data", highlight=5)),
        (layout.plot_dims(highlight=3), plot_dims(layout, highlight=3)),
        (report.plot(), plot_streams(report)),
        (report.plot("tp"), plot_sharing(report, "tp")),
        (cost.plot(), plot_cost(cost)),
    ]
    for method, function in pairs:
        assert isinstance(method, Figure) and to_png(method) == to_png(function)
    with pytest.raises(LookupError, match="no painter for 'sketch' pictures"):
        paint("sketch", layout)
