"""LayoutPanel driven from Python: controls -> layout, error, picture and tables; no figure left open."""

from __future__ import annotations

import asyncio
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import pytest  # noqa: E402

from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.cost import divisors  # noqa: E402
from fastdist_lab.widgets import LayoutPanel  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tbody_rows(markup: str) -> int:
    body = re.search(r"<tbody>(.*)</tbody>", markup, re.S)
    assert body is not None
    return body.group(1).count("<tr>")


def default_layout(**kw) -> Layout:
    fields = dict(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    fields.update(kw)
    return Layout(backend="gloo", **fields)


def test_default_panel_shows_the_default_layout():
    panel = LayoutPanel()
    assert panel.layout == default_layout()
    assert panel.error == "" and panel.message.value == ""
    assert panel.png.startswith(PNG_MAGIC)
    assert tbody_rows(panel.ranks_table.value) == 8
    assert "tensor_and_data" in panel.topology_table.value
    assert "<td>[0, 1]</td>" in panel.groups_table.value  # a group prints as everywhere (fastdist_lab.formatting)


def test_css_classes_of_the_controls_and_outputs():
    panel = LayoutPanel()
    classes = {
        "fdl-layout-panel": panel.widget,
        "fdl-world-size": panel.world_size,
        "fdl-local-world-size": panel.local_world_size,
        "fdl-tensor-parallel": panel.tensor_parallel,
        "fdl-pipeline-parallel": panel.pipeline_parallel,
        "fdl-sequence-data-parallel": panel.sequence_data_parallel,
        "fdl-pipeline-first": panel.pipeline_first,
        "fdl-grid": panel.grid,
        "fdl-ranks-table": panel.ranks_table,
        "fdl-error": panel.message,
    }
    for name, widget in classes.items():
        assert name in widget._dom_classes, name
    assert panel.picture in panel.grid.children


def test_factor_controls_offer_only_values_that_can_be_valid():
    panel = LayoutPanel()
    assert panel.local_world_size.options == tuple((str(d), d) for d in divisors(8))
    assert [v for _, v in panel.tensor_parallel.options] == [1, 2, 4, 8]
    assert [v for _, v in panel.pipeline_parallel.options] == [1, 2, 4]  # divisors of 8 / tp
    assert [v for _, v in panel.sequence_data_parallel.options] == [1, 2]  # divisors of 8 / (tp * pp)
    panel.world_size.value = 12
    assert [v for _, v in panel.local_world_size.options] == [1, 2, 3, 4, 6, 8, 12]  # 8 kept: the current value


def test_setting_a_control_updates_layout_picture_and_tables():
    panel = LayoutPanel()
    first_png, renders = panel.png, panel.renders
    panel.sequence_data_parallel.value = 1
    assert panel.layout == default_layout(sequence_data_parallel=1)
    assert panel.png != first_png and panel.renders == renders + 1
    panel.pipeline_first.value = True
    assert panel.layout.pipeline_first and "pipeline-first" in panel.summary.value
    panel.world_size.value = 16  # two nodes of 8
    assert panel.layout == default_layout(world_size=16, sequence_data_parallel=1, pipeline_first=True)
    assert tbody_rows(panel.ranks_table.value) == 16 and "node 1" not in panel.ranks_table.value
    panel.set(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    assert panel.layout == default_layout(world_size=16, pipeline_first=True)
    assert tbody_rows(panel.ranks_table.value) == 16


def test_impossible_combination_sets_error_and_shows_it():
    panel = LayoutPanel()
    good_png = panel.png
    panel.tensor_parallel.value = 4
    assert panel.layout is None
    assert panel.error == (
        "sequence_data_parallel=2 must divide data_parallel=1 "
        "(world_size=8 / (tensor_parallel=4 * pipeline_parallel=2))"
    )
    assert panel.error in panel.message.value and "<" not in panel.error
    assert "no valid layout" in panel.summary.value
    assert panel.png == good_png  # the last valid picture stays
    panel.sequence_data_parallel.value = 1
    assert panel.error == "" and panel.message.value == ""
    assert panel.layout == default_layout(tensor_parallel=4, sequence_data_parallel=1)


def test_world_size_change_that_breaks_the_node_size_says_why():
    panel = LayoutPanel()
    panel.world_size.value = 6
    assert panel.layout is None
    assert "local_world_size=8 must divide world_size=6" in panel.error
    panel.set(local_world_size=6, tensor_parallel=2, pipeline_parallel=3, sequence_data_parallel=1)
    expected = default_layout(world_size=6, local_world_size=6, pipeline_parallel=3, sequence_data_parallel=1)
    assert panel.layout == expected
    assert tbody_rows(panel.ranks_table.value) == 6


def test_a_value_that_is_not_offered_can_still_be_set_from_python_and_is_explained():
    panel = LayoutPanel()
    panel.tensor_parallel.value = 3
    assert panel.tensor_parallel.value == 3
    assert "tensor_parallel=3 must divide local_world_size=8" in panel.error
    with pytest.raises(Exception, match="must be > 0"):
        panel.tensor_parallel.value = 0


def test_dim_and_rank_selectors_redraw_the_picture():
    panel = LayoutPanel()
    pictures = {panel.png}
    panel.dim.value = "pipeline"
    pictures.add(panel.png)
    panel.rank.value = 5
    pictures.add(panel.png)
    assert len(pictures) == 3
    assert "pipeline" in panel.groups_table.value
    panel.world_size.value = 4  # rank 5 no longer exists once a valid 4-rank layout is chosen
    panel.set(local_world_size=4, pipeline_parallel=1, sequence_data_parallel=2)
    assert panel.layout.world_size == 4 and panel.rank.value == -1 and panel.rank.max == 3


def test_hundred_control_changes_leave_no_open_figure():
    panel = LayoutPanel()
    assert plt.get_fignums() == []
    values = [1, 2, 4]
    for step in range(100):
        panel.pipeline_parallel.value = values[step % 3]
        if step % 10 == 0:
            panel.dim.value = ["tensor", "data", "pipeline"][step % 3]
    assert plt.get_fignums() == []
    assert panel.renders > 60


def test_inside_a_running_loop_changes_are_debounced_into_one_redraw():
    async def scenario() -> tuple[int, int, bool, int]:
        panel = LayoutPanel(debounce=0.05)
        start = panel.renders
        for value in (1, 2, 1, 2, 1):
            panel.sequence_data_parallel.value = value
        pending = panel.pending
        assert panel.layout == default_layout(sequence_data_parallel=1)  # the layout itself is immediate
        await asyncio.sleep(0.3)
        after_wait = panel.renders
        panel.sequence_data_parallel.value = 2
        panel.flush()
        return start, after_wait, pending, panel.renders

    start, after_wait, pending, flushed = asyncio.run(scenario())
    assert pending
    assert after_wait == start + 1
    assert flushed == after_wait + 1


def test_a_panel_from_a_layout_keeps_the_fields_without_a_control():
    layout = Layout(world_size=8, tensor_parallel=2, reproducible_init=True, tp_seed_shift=7, seed=99)
    panel = LayoutPanel.from_layout(layout)
    assert panel.layout.reproducible_init and panel.layout.tp_seed_shift == 7 and panel.layout.seed == 99
    assert panel.layout.fields() == {**layout.fields(), "backend": panel.layout.backend}
