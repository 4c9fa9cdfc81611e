"""Pointing at the panels' grids from Python: the same path a browser click, hover or double-click takes."""

from __future__ import annotations

import numpy as np
import pytest

from fastdist_lab import Layout, LayoutError
from fastdist_lab.checks.group_check import group_problems
from fastdist_lab.runtime import RankResult, RankResults, Verification
from fastdist_lab.runtime.verification import expected_groups
from fastdist_lab.seeds import generator_seeds
from fastdist_lab.widgets import LayoutPanel, StreamsPanel

SIXTEEN = dict(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
BIG = dict(world_size=16384, local_world_size=8, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2)


def broken_verification(layout: Layout, rank: int) -> Verification:
    """The verification of ``layout`` as the ranks' real checks report it, ``rank``'s tensor all-gather wrong."""
    records = []
    for r in range(layout.world_size):
        dims = []
        for name, dim in layout.config(r).distributed_dims.items():
            members = list(dim.global_ranks)
            gathered = members[::-1] if r == rank and name == "tensor" else members
            dims.append({"dim": name, "members": members, "gathered": gathered, "sum": sum(members)})
        records.append(RankResult(r, "ok", {"rank": r, "dims": dims, "seeds_ok": True}))
    return Verification.from_rank_rows(
        expected_groups(layout), RankResults(records), layout.fields(), "gloo", judge=group_problems
    )


def test_a_click_on_a_cell_highlights_that_rank_and_shows_its_card():
    panel = LayoutPanel(**SIXTEEN)
    before = panel.png
    assert "Click a cell" in panel.card.value
    x, y = panel.geometry.center(13)
    assert panel.click(x, y) == 13
    assert panel.highlight == 13 and panel.rank.value == 13 and panel.png != before
    card = panel.card.value
    layout = panel.layout
    assert "rank 13</b> · node 1, GPU 5" in card
    for seed in generator_seeds(layout.config(13)).values():
        assert str(seed) in card
    assert ", ".join(map(str, layout.group_of("tensor", 13))) in card
    assert "tensor_and_data" in card and "model_and_sequence_data" in card
    assert panel.click(1, 1) is None and panel.highlight is None and "Click a cell" in panel.card.value


def test_browser_events_take_the_same_path():
    panel = LayoutPanel(**SIXTEEN)
    x, y = panel.geometry.center(6)
    panel.view._on_click_event({"type": "click", "dataX": x, "dataY": y})
    assert panel.highlight == 6
    panel.view._on_move_event({"type": "mousemove", "dataX": x, "dataY": y})
    c = panel.layout.coordinates
    where = f"t{c['tensor_rank'][6]} d{c['data_rank'][6]} p{c['pipeline_rank'][6]}"
    assert panel.view.hover.value.startswith(f"rank 6 · node 0, GPU 6 · {where}")
    panel.view._on_move_event({"type": "mouseleave"})
    assert panel.view.hover.value == "&nbsp;"
    panel.view._on_click_event({"type": "dblclick", "dataX": x, "dataY": y})  # one rank per cell: nothing to zoom
    assert panel.zoom is None and panel.highlight == 6
    assert panel.view.clicks.source is panel.picture and set(panel.view.clicks.watched_events) == {"click", "dblclick"}


def test_the_highlight_attribute_and_the_highlight_box_are_one_state():
    panel = LayoutPanel(**SIXTEEN)
    panel.highlight = 5
    assert panel.rank.value == 5 and "rank 5</b>" in panel.card.value
    panel.rank.value = 7  # typed in the box
    panel.flush()
    assert panel.highlight == 7 and "rank 7</b>" in panel.card.value
    panel.highlight = None
    assert panel.rank.value == -1 and panel.highlight is None
    with pytest.raises(LayoutError, match="highlight=16"):
        panel.highlight = 16
    with pytest.raises(LayoutError, match="highlight='3'"):
        panel.highlight = "3"


def test_a_big_world_shows_nodes_and_zooms_in():
    panel = LayoutPanel(**BIG)
    geometry = panel.geometry
    assert geometry.per_cell == 8 and geometry.unit == "node"
    assert panel.view.zoom_bar.layout.display == "flex" and panel.view.zoom.max == 2047
    x, y = geometry.center(800)
    assert panel.click(x, y) == 800  # a node's cell selects its first rank
    assert "node 100: ranks 800-807" in panel.hover(x, y)
    panel.view.double_click(x, y)
    assert panel.zoom == (768, 1024) and panel.geometry.per_cell == 1
    assert panel.geometry.rank_at(*panel.geometry.center(801)) == 801
    panel.view.zoom.value = (10, 20)  # the slider counts nodes
    assert panel.zoom == (80, 168) and panel.geometry.shown == (80, 168)
    panel.view.whole.click()
    assert panel.zoom is None and panel.geometry.per_cell == 8
    panel.zoom_nodes(0, 511)
    assert panel.zoom == (0, 4096) and panel.geometry.per_cell == 8
    with pytest.raises(LayoutError, match="ranks"):
        panel.zoom_to((0, 10**6))
    panel.set(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
    assert panel.zoom is None and panel.view.zoom_bar.layout.display == "none"


def test_verdicts_are_drawn_while_the_verified_layout_is_shown():
    panel = LayoutPanel(**SIXTEEN)
    plain = panel.geometry
    panel.show_verification(broken_verification(panel.layout, rank=5))
    assert panel.verification is not None and panel.geometry.cell[1] > plain.cell[1]  # a verdict line per cell
    panel.select_rank(4)
    assert "failed: tensor" in panel.card.value and "FAILED" in panel.card.value
    panel.select_rank(0)
    assert "every check of this rank passed" in panel.card.value
    panel.pipeline_parallel.value = 1
    assert panel.verification is None and panel.geometry.cell == plain.cell  # another layout: no verdicts
    panel.pipeline_parallel.value = 2
    assert panel.verification is not None
    panel.show_verification(None)
    assert panel.verification is None


def test_the_streams_grid_points_at_ranks_and_their_streams():
    layout = Layout(**SIXTEEN)
    panel = StreamsPanel(layout)
    assert panel.view.value == "grid"
    geometry = panel.grid_view.geometry
    assert panel.click(*geometry.center(3)) == 3 and panel.highlight == 3
    card = panel.grid_view.card.value
    report = panel.predicted
    column = report.generator_index("tp")
    assert "rank 3</b>" in card and str(report.seeds[3, column]) in card
    sharing = int((report.stream_ids[:, column] == report.stream_ids[3, column]).sum())
    assert f"shared by {sharing} rank(s)" in panel.grid_view.hover_at(*geometry.center(3))
    panel.view.value = "sharing"
    assert panel.grid_view.geometry is None and panel.click(10, 10) is None
    with pytest.raises(ValueError, match="rank=16"):
        panel.select_rank(16)
    assert np.array_equal(panel.predicted.stream_ids, report.stream_ids)
