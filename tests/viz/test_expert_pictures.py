"""The rank grid coloured by an expert dim: every picture path colours ranks by that dim's groups, dense layouts
refuse expert dims in one line, the small multiples show the expert dims only when the layout has experts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from fastdist_lab import Layout, LayoutError
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.experts import EXPERT_DIM_NAMES
from fastdist_lab.viz import grid_picture, plot_dims, plot_layout
from fastdist_lab.viz.canvas import rgb8
from fastdist_lab.viz.colors import DISTINCT_COLORS, PALETTE, gradient_colors, group_colors
from fastdist_lab.viz.grid import cell_grid, cell_label, check_dim, draw_grid, rank_colors
from fastdist_lab.viz.layout_picture import colouring_of, dim_colouring, position_colouring, span_colouring

MOE = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4)
DENSE = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)


def background(picture, rank: int) -> tuple[int, ...]:
    """A pixel of ``rank``'s cell away from its text and its frame."""
    x0, y0, _, _ = picture.geometry.box(rank)
    return tuple(int(v) for v in picture.pixels[int(y0 + 7), int(x0 + 7)])


def expected_colours(layout: Layout, dim: str) -> tuple[np.ndarray, np.ndarray]:
    """(per-rank id, colour table) the picture of ``dim`` must use: one colour per group while they are few,
    else each rank's position in its group."""
    ids = layout.group_index(dim)
    if ids.max() + 1 <= DISTINCT_COLORS:
        return ids, rgb8(group_colors(int(ids.max()) + 1))
    size = layout.groups(dim).shape[1]
    return layout.dim_rank(dim), rgb8(PALETTE[:size] if size <= DISTINCT_COLORS else gradient_colors(size))


@st.composite
def moe_layouts(draw) -> Layout:
    """Small layouts with experts (at most 128 ranks: one cell per rank), both orders, ETP given or not."""
    local = draw(st.sampled_from([2, 4, 8]))
    world = local * draw(st.sampled_from([1, 2, 4, 8, 16]))
    tp = draw(st.sampled_from([d for d in (1, 2, 4) if local % d == 0]))
    pp = draw(st.sampled_from([d for d in (1, 2, 4) if (world // tp) % d == 0]))
    stage = world // pp
    etp = draw(st.sampled_from([None, *(d for d in (1, 2, 4) if stage % d == 0)]))
    ep = draw(st.sampled_from([d for d in (2, 4, 8) if stage % (d * (tp if etp is None else etp)) == 0] or [1]))
    return Layout(world_size=world, local_world_size=local, tensor_parallel=tp, pipeline_parallel=pp,
                  expert_parallel=ep, expert_tensor_parallel=etp, pipeline_first=draw(st.booleans()))  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(layout=moe_layouts(), dim=st.sampled_from(EXPERT_DIM_NAMES))
def test_the_picture_of_an_expert_dim_colours_every_rank_by_its_group(layout, dim):
    if not layout.has_experts:
        return
    picture = grid_picture(layout, dim)
    ids, colours = expected_colours(layout, dim)
    for rank in range(layout.world_size):
        assert background(picture, rank) == tuple(colours[ids[rank]]), (dim, rank)
        assert picture.geometry.rank_at(*picture.geometry.center(rank)) == rank


def test_the_colour_check_fails_on_a_picture_of_another_dim():
    """The check above is not vacuous: the tensor picture's colours do not follow the expert groups."""
    ids, colours = expected_colours(MOE, "expert")
    picture = grid_picture(MOE, "expert")
    assert all(background(picture, r) == tuple(colours[ids[r]]) for r in range(16))
    other = grid_picture(MOE, "tensor")
    assert any(background(other, r) != tuple(colours[ids[r]]) for r in range(16))


def test_highlight_outlines_the_ranks_expert_group():
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, expert_parallel=2)
    assert layout.expert_sizes == {"expert_tensor": 2, "expert": 2, "expert_data": 4}
    members = layout.group_of("expert_data", 3).tolist()
    assert members == [3, 7, 11, 15]
    plain = grid_picture(layout, "expert_data")
    picture = grid_picture(layout, "expert_data", highlight=3)
    faded = {r for r in range(16) if background(picture, r) != background(plain, r)}
    assert faded == set(range(16)) - set(members)
    assert "rank 3 and its expert_data group outlined" in picture.title


def test_a_big_world_colours_expert_dims_by_position_or_span_with_its_caption():
    big = Layout(world_size=4096, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, expert_parallel=8)
    for dim in EXPERT_DIM_NAMES:
        colouring = colouring_of(big, dim, 0, big.world_size)
        assert colouring.ids.shape == (4096,)
        picture = grid_picture(big, dim, highlight=4095)
        assert picture.geometry.per_cell > 1 and dim in picture.title
    assert np.array_equal(dim_colouring(big, "expert").ids, big.group_index("expert"))
    assert np.array_equal(position_colouring(big, "expert").ids, big.dim_rank("expert"))
    assert span_colouring(big, "expert_data", 0, 4096).ids.shape == (4096,)
    zoomed = grid_picture(big, "expert", ranks=(0, 64))  # 8 expert groups shown: one colour per group again
    ids = big.group_index("expert")
    assert np.unique(ids[:64]).size == 8
    colours = rgb8(group_colors(int(ids.max()) + 1))
    assert all(background(zoomed, r) == tuple(colours[ids[r]]) for r in range(64))


@pytest.mark.parametrize("dim", EXPERT_DIM_NAMES)
def test_a_dense_layout_refuses_an_expert_dim_everywhere_in_one_line(dim):
    pattern = f"dim='{dim}' is an expert dim and this layout has expert_parallel=1"
    calls = [
        lambda: grid_picture(DENSE, dim),
        lambda: plot_layout(DENSE, dim),
        lambda: DENSE.plot(dim),
        lambda: check_dim(dim, DENSE),
        lambda: rank_colors(DENSE, dim, None),
        lambda: dim_colouring(DENSE, dim),
        lambda: position_colouring(DENSE, dim),
        lambda: span_colouring(DENSE, dim, 0, 16),
        lambda: colouring_of(DENSE, dim, 0, 16),
        lambda: draw_grid(Figure().add_subplot(), DENSE, dim),
    ]
    for call in calls:
        with pytest.raises(LayoutError, match=pattern) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert check_dim(dim, MOE) == dim


def test_an_unknown_dim_lists_the_expert_dims_only_for_a_layout_with_experts():
    with pytest.raises(LayoutError, match="not a dim; use one of .*model_and_sequence_data, expert, expert_tensor"):
        grid_picture(MOE, "experts")
    with pytest.raises(LayoutError, match="not a dim") as caught:
        grid_picture(DENSE, "experts")
    assert "expert" not in str(caught.value).split("use one of")[1]


def test_draw_grid_colours_cells_alike_exactly_when_they_share_an_expert_group():
    for dim in EXPERT_DIM_NAMES:
        ax = Figure().add_subplot()
        draw_grid(ax, MOE, dim, text=False)
        image = np.asarray(ax.images[0].get_array())
        grid = cell_grid(MOE)
        colours = [tuple(image[grid.row[r], grid.col[r]]) for r in range(16)]
        ids = MOE.group_index(dim)
        for a in range(16):
            for b in range(16):
                assert (colours[a] == colours[b]) == (ids[a] == ids[b]), (dim, a, b)


def test_plot_dims_adds_the_four_expert_panels_only_with_experts():
    titles = [ax.get_title() for ax in plot_dims(MOE, highlight=3).axes if ax.get_visible()]
    assert [t.split(":")[0] for t in titles] == [*DIM_NAMES, *EXPERT_DIM_NAMES]
    assert titles[-4] == "expert: 4 groups of 4"
    dense = [ax.get_title() for ax in plot_dims(DENSE).axes if ax.get_visible()]
    assert [t.split(":")[0] for t in dense] == list(DIM_NAMES)


def test_cell_text_adds_the_expert_coordinates_only_with_experts():
    assert cell_label(MOE, 5) == "5\nt1 d2 p0\ne2 et1 ed0"
    assert cell_label(DENSE, 5) == "5\nt1 d2 p0"
    assert MOE.group_of("expert", 5).tolist() == [1, 3, 5, 7]
