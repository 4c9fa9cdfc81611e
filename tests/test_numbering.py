"""The one numbering core (``RankGrid``): property tests of its arithmetic, and every user of it agrees."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import Layout, LayoutError, RankGrid
from fastdist_lab.conventions import DeviceMesh, Megatron


@st.composite
def grids(draw) -> RankGrid:
    count = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))
    axes = [f"a{i}" for i in range(count)]
    return RankGrid(axes, sizes)


@st.composite
def grid_and_axes(draw) -> tuple[RankGrid, tuple[str, ...]]:
    grid = draw(grids())
    chosen = draw(st.lists(st.sampled_from(grid.axes), min_size=1, max_size=len(grid.axes), unique=True))
    return grid, tuple(chosen)


@given(grids())
def test_rank_is_the_mixed_radix_number_of_its_coordinates(grid):
    for rank in range(grid.world_size):
        coordinates = grid.coordinates_of(rank)
        assert sum(coordinates[a] * grid.strides[a] for a in grid.axes) == rank
        for axis in grid.axes:
            assert grid.coordinate(axis)[rank] == coordinates[axis]
    assert grid.grid.shape == grid.sizes[::-1]
    assert grid.grid.ravel().tolist() == list(range(grid.world_size))


@given(grid_and_axes())
def test_groups_are_the_ranks_that_differ_only_along_the_member_axes(case):
    grid, members = case
    groups = grid.groups(members)
    others = [a for a in grid.axes if a not in members]
    assert sorted(groups.ravel().tolist()) == list(range(grid.world_size))  # a partition
    assert groups.shape[1] == grid.group_size(members)
    index, position = grid.group_index(members), grid.group_rank(members)
    for row, group in enumerate(groups.tolist()):
        first = grid.coordinates_of(group[0])
        for place, rank in enumerate(group):
            coordinates = grid.coordinates_of(rank)
            assert all(coordinates[a] == first[a] for a in others)
            assert index[rank] == row and position[rank] == place
            # group-rank order: the mixed-radix number over the member axes, first listed fastest
            expected = 0
            for axis in reversed(members):
                expected = expected * grid.size(axis) + coordinates[axis]
            assert expected == place
    assert (np.diff(groups[:, 0]) > 0).all()  # rows by first member
    table = grid.groups(members)[grid.group_index(members)]  # every rank's group
    assert (table[np.arange(grid.world_size), position] == np.arange(grid.world_size)).all()


def test_bad_axis_and_rank_name_the_value():
    grid = RankGrid(("tensor", "pipeline"), (2, 2), error=LayoutError)
    with pytest.raises(LayoutError, match="'data' is not an axis"):
        grid.groups(("data",))
    with pytest.raises(LayoutError, match=r"rank=9 must be in \[0, world_size=4\)"):
        grid.coordinates_of(9)
    with pytest.raises(LayoutError, match="repeat"):
        grid.groups(("tensor", "tensor"))


@pytest.mark.parametrize("pipeline_first", [False, True])
def test_layout_and_conventions_number_with_the_same_core(pipeline_first):
    layout = Layout(world_size=24, tensor_parallel=2, pipeline_parallel=3, sequence_data_parallel=2,
                    pipeline_first=pipeline_first)  # fmt: skip
    grid = layout.rank_grid
    assert grid.axes == layout.axes and grid.sizes == tuple(layout.axis_sizes().values())
    for dim in layout.dim_names:
        assert np.array_equal(layout.groups(dim), grid.groups(layout.dim_axes(dim)))
    megatron = Megatron.from_layout(layout)
    assert isinstance(megatron.rank_grid, RankGrid)
    shape, names, mesh = layout.device_mesh_spec()
    torch_like = DeviceMesh(shape, names)
    assert np.array_equal(torch_like.mesh, mesh) and np.array_equal(mesh, layout.grid)
    for size in itertools.product(range(1, 3), repeat=2):
        assert RankGrid(("x", "y"), size).world_size == size[0] * size[1]
