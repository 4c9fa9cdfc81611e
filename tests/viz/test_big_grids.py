"""Big grids that mean something: with more groups than colours can tell apart, a grid colours by what the eye can
use (a rank's position in its group, or how a node's ranks sit in the groups) and says so in its caption."""

from __future__ import annotations

import numpy as np
import pytest

from fastdist_lab import Layout
from fastdist_lab.viz import grid_picture
from fastdist_lab.viz.canvas import rgb8
from fastdist_lab.viz.colors import DISTINCT_COLORS, PALETTE, gradient_colors
from fastdist_lab.viz.layout_picture import colouring_of

BIG = Layout(world_size=16384, local_world_size=8, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2)


def cell_color(picture, rank: int) -> tuple[int, ...]:
    """The colour at the centre of the cell holding ``rank`` (an aggregated cell has no text at this size)."""
    x, y = picture.geometry.center(rank)
    return tuple(int(v) for v in picture.pixels[int(y), int(x)])


def sample(layout: Layout) -> range:
    return range(0, layout.world_size, 8 * 37)


def test_2048_tensor_groups_show_that_every_node_is_one_whole_group():
    picture = grid_picture(BIG, "tensor")
    assert "2,048 tensor groups are too many colours to tell apart" in picture.title
    assert "one whole tensor group: 2,048 nodes" in picture.title
    assert {cell_color(picture, rank) for rank in sample(BIG)} == {tuple(rgb8(PALETTE[0]))}


@pytest.mark.parametrize(
    "layout, dim, text, category",
    [
        (BIG.replace(tensor_parallel=2), "tensor", "several whole tensor groups: 2,048 nodes", 1),
        (BIG, "tensor_and_sequence_data", "part of one tensor_and_sequence_data group that spans other nodes: 2,048",
         2),
        (Layout(world_size=16384, local_world_size=8, tensor_parallel=4, pipeline_parallel=8), "data",
         "parts of several data groups that span other nodes: 2,048", 3),  # 32 groups; a node: 2 positions of 2
    ],
)  # fmt: skip
def test_how_a_nodes_ranks_sit_in_the_groups_is_its_colour(layout, dim, text, category):
    picture = grid_picture(layout, dim)
    assert text in picture.title, picture.title
    assert {cell_color(picture, rank) for rank in sample(layout)} == {tuple(rgb8(PALETTE[category]))}


def test_pipeline_stages_of_a_big_world_are_coloured_by_position():
    picture = grid_picture(BIG, "pipeline")  # 4,096 groups of 4: a node's ranks share one pipeline stage
    assert "each rank's position in its pipeline group (0 to 3)" in picture.title
    stage = BIG.dim_rank("pipeline")
    for rank in sample(BIG):
        assert cell_color(picture, rank) == tuple(rgb8(PALETTE[stage[rank]]))
    data = grid_picture(BIG.replace(pipeline_first=True), "data")  # 512 positions: light to dark
    position = BIG.replace(pipeline_first=True).dim_rank("data")
    gradient = rgb8(gradient_colors(512))
    assert "(0 to 511, light to dark)" in data.title
    for rank in sample(BIG):
        assert cell_color(data, rank) == tuple(gradient[position[rank]])


def test_few_groups_keep_one_colour_each_and_zooming_in_brings_them_back():
    layout = Layout(world_size=4096, local_world_size=8, tensor_parallel=8, pipeline_parallel=4)
    assert colouring_of(layout, "pipeline", 0, 4096).name == "pipeline position"  # 1,024 groups
    assert colouring_of(layout, "tensor_and_data", 0, 4096).name == "tensor_and_data group"  # 4 groups
    zoomed = grid_picture(BIG, "tensor", ranks=(0, 64))  # 8 nodes: 8 tensor groups, each its own colour
    assert "too many colours" not in zoomed.title
    assert len({cell_color(zoomed, rank) for rank in range(0, 64, 8)}) == 8
    assert DISTINCT_COLORS == len(PALETTE)


def test_rank_cells_with_many_groups_show_each_ranks_position():
    layout = Layout(world_size=256, local_world_size=8, tensor_parallel=1, pipeline_parallel=2)  # 256 tensor groups
    colouring = colouring_of(layout, "tensor", 0, 256)
    assert colouring.name == "tensor position" and np.all(colouring.ids == 0)
    picture = grid_picture(layout, "tensor")
    assert "every group is one rank" in picture.title and "256 tensor groups are too many" in picture.title
