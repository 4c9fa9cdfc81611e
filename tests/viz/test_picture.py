"""Pointable rank grids: the pixel -> rank map, colours by group, highlight, node-aggregated big worlds, zoom."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fastdist_lab import Layout, LayoutError
from fastdist_lab.viz import DETAIL_LIMIT, grid_picture, plot_layout, to_pixels
from fastdist_lab.viz.aggregate import MAX_UNITS, unit_size
from fastdist_lab.viz.canvas import png_bytes, rgb8
from fastdist_lab.viz.colors import group_colors
from fastdist_lab.viz.picture import GROUP_LINE, RANK_FRAME

SMALL = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
BIG = Layout(world_size=16384, local_world_size=8, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2)


def pixel(picture, x: float, y: float) -> tuple[int, ...]:
    return tuple(int(v) for v in picture.pixels[int(y), int(x)])


def background(picture, rank: int) -> tuple[int, ...]:
    """A pixel of ``rank``'s cell away from its text and its frame (top-left area, left of the rank number)."""
    x0, y0, _, _ = picture.geometry.box(rank)
    return pixel(picture, x0 + 7, y0 + 7)


@pytest.mark.parametrize(
    "layout",
    [
        SMALL,
        Layout(world_size=256, local_world_size=8, tensor_parallel=2, pipeline_parallel=4),
        Layout(world_size=256, local_world_size=256, tensor_parallel=8, pipeline_parallel=4),  # one node, wrapped
        Layout(world_size=96, local_world_size=1, tensor_parallel=1, pipeline_parallel=4),  # nodes side by side
        Layout(world_size=1024, local_world_size=2, tensor_parallel=2, pipeline_parallel=4),
        BIG,
        Layout(world_size=16384, local_world_size=16384, tensor_parallel=8, pipeline_parallel=4),
    ],
    ids=lambda lay: f"{lay.world_size}x{lay.local_world_size}",
)
def test_the_centre_of_every_cell_points_back_at_its_ranks(layout):
    geometry = grid_picture(layout, "data").geometry
    ranks = range(layout.world_size) if layout.world_size <= 1024 else range(0, layout.world_size, 97)
    for rank in ranks:
        x, y = geometry.center(rank)
        assert rank in geometry.ranks_at(x, y)
        assert geometry.rank_at(x, y) == rank - (rank - geometry.shown[0]) % geometry.per_cell
    assert geometry.rank_at(0, 0) is None and geometry.ranks_at(-5, 10**6) is None
    assert (geometry.per_cell == 1) == (layout.world_size <= DETAIL_LIMIT)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.sampled_from([1, 2, 3, 4, 8]),
    local=st.sampled_from([1, 2, 4, 8, 24]),
    tp=st.sampled_from([1, 2]),
    pipeline_first=st.booleans(),
    dim=st.sampled_from(["tensor", "data", "pipeline", "tensor_and_data"]),
)
def test_every_cell_is_coloured_by_its_group_and_maps_to_its_rank(nodes, local, tp, pipeline_first, dim):
    if local % tp:
        tp = 1
    layout = Layout(world_size=nodes * local, local_world_size=local, tensor_parallel=tp, pipeline_first=pipeline_first)
    picture = grid_picture(layout, dim)
    ids = layout.group_index(dim)
    colors = rgb8(group_colors(int(ids.max()) + 1))
    for rank in range(layout.world_size):
        assert background(picture, rank) == tuple(colors[ids[rank]])
        assert picture.geometry.rank_at(*picture.geometry.center(rank)) == rank


def test_highlight_keeps_the_group_bright_outlines_it_and_frames_the_rank():
    plain = grid_picture(SMALL, "pipeline")
    picture = grid_picture(SMALL, "pipeline", highlight=5)
    members = set(SMALL.group_of("pipeline", 5).tolist())
    assert members == {5, 13}
    for rank in range(16):
        same = background(picture, rank) == background(plain, rank)
        assert same == (rank in members), rank
    x0, y0, x1, y1 = picture.geometry.box(5)
    assert pixel(picture, x0 + 3, (y0 + y1) / 2) == tuple(rgb8(RANK_FRAME))
    # the group's outline runs along the left edge of rank 13's cell, not along rank 12's
    x0, y0, _, y1 = picture.geometry.box(13)
    assert pixel(picture, x0, (y0 + y1) / 2) == tuple(rgb8(GROUP_LINE))
    x0, y0, _, y1 = picture.geometry.box(12)
    assert pixel(picture, x0, (y0 + y1) / 2) != tuple(rgb8(GROUP_LINE))
    # pointing at a rank does not move the cells
    assert (picture.geometry.origin, picture.geometry.cell) == (plain.geometry.origin, plain.geometry.cell)
    assert np.array_equal(picture.geometry.first, plain.geometry.first)


def test_big_worlds_show_one_cell_per_node_coloured_when_the_node_agrees_and_striped_when_it_splits():
    tensor = grid_picture(BIG, "tensor")  # tensor 8 = a whole node: every node is one group
    geometry = tensor.geometry
    assert geometry.per_cell == 8 and geometry.unit == "node" and geometry.rows * geometry.cols >= 2048
    ids = BIG.group_index("tensor")
    colors = rgb8(group_colors(int(ids.max()) + 1))
    for rank in (0, 8, 800, 16376):
        x0, y0, x1, y1 = geometry.box(rank)
        cell = tensor.pixels[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1].reshape(-1, 3)
        assert {tuple(c) for c in cell} == {tuple(colors[ids[rank]])}
    data = grid_picture(BIG, "data")  # a node holds ranks of 8 data groups: striped
    x0, y0, x1, y1 = data.geometry.box(800)
    cell = {tuple(c) for c in data.pixels[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1].reshape(-1, 3)}
    node_groups = np.unique(BIG.group_index("data")[800:808])
    expected = {tuple(c) for c in rgb8(group_colors(int(BIG.group_index("data").max()) + 1))[node_groups]}
    assert (255, 255, 255) in cell and len(cell & expected) >= 2  # stripes of its groups' colours on white


def test_a_big_world_is_readable_in_a_thousand_pixels():
    picture = grid_picture(BIG, "data", highlight=3)
    width, height = picture.size
    assert width <= 1000 and height <= 1000
    assert min(picture.geometry.cell) >= 10  # cells stay big enough to see and to click


def test_cells_are_nodes_blocks_or_merged_nodes_by_how_many_there_are():
    assert unit_size(Layout(world_size=1024, local_world_size=8), 0, 1024) == 8  # 128 nodes
    assert unit_size(Layout(world_size=16384, local_world_size=2), 0, 16384) == 2 * 4  # 8192 nodes: 4 per cell
    assert unit_size(Layout(world_size=16384, local_world_size=16384), 0, 16384) * MAX_UNITS >= 16384
    assert unit_size(Layout(world_size=512, local_world_size=512), 0, 512) == 1  # one node: one rank per cell


def test_zoom_shows_a_range_of_nodes_rank_by_rank():
    picture = grid_picture(BIG, "data", highlight=800, ranks=(768, 1024))
    geometry = picture.geometry
    assert geometry.shown == (768, 1024) and geometry.per_cell == 1
    assert geometry.position(767) is None and geometry.position(1024) is None
    assert geometry.rank_at(*geometry.center(800)) == 800
    assert "zoomed: ranks 768-1023 (nodes 96-127)" in picture.title
    wide = grid_picture(BIG, "data", ranks=(0, 8192))
    assert wide.geometry.per_cell == 8 and wide.geometry.shown == (0, 8192)
    with pytest.raises(LayoutError, match="ranks"):
        grid_picture(BIG, "data", ranks=(100, 50))


def test_png_and_figure_hold_exactly_the_composed_pixels():
    picture = grid_picture(SMALL, "tensor", highlight=2)
    decoded = np.asarray(Image.open(io.BytesIO(picture.png())).convert("RGB"))
    assert np.array_equal(decoded, picture.pixels)
    rgba = to_pixels(plot_layout(SMALL, "tensor", highlight=2))
    assert rgba.shape[:2] == picture.pixels.shape[:2]
    assert np.abs(rgba[..., :3].astype(int) - picture.pixels.astype(int)).max() <= 1
    with pytest.raises(ValueError, match="uint8"):
        png_bytes(np.zeros((2, 2, 3), dtype=np.float32))
