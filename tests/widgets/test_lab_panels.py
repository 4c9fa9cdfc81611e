"""ClusterPanel, StreamsPanel and lab(): linked panels, a real 4-rank gloo cluster, errors shown as text."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import pytest  # noqa: E402

import fastdist_lab  # noqa: E402
from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.viz import grid_picture  # noqa: E402
from fastdist_lab.widgets import ClusterPanel, Lab, StreamsPanel  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def ok_cells(markup: str) -> list[str]:
    """The ``ok`` column of the first table in ``markup``."""
    header = re.findall(r"<th>(.*?)</th>", markup.split("</thead>")[0])
    column = header.index("ok")
    body = markup.split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body)
    return [re.findall(r"<td>(.*?)</td>", row)[column] for row in rows]


LAB_IMPORTS = """
import sys, threading

importers = []  # the threads that import torch, if any does


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            importers.append(threading.current_thread().name)
        return None


sys.meta_path.insert(0, Watch())
import fastdist_lab

fastdist_lab.lab()
print("lab returned; torch imported by the calling thread:", threading.current_thread().name in importers)
"""


def test_the_first_lab_call_does_not_import_torch():
    # the streams panel predicts at once, in closed form: lab() returns without paying seconds for import torch in
    # the kernel's thread (only lab's prewarm imports it, in a background thread, for the cluster's Start)
    out = subprocess.run([sys.executable, "-c", LAB_IMPORTS], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "lab returned; torch imported by the calling thread: False", out.stdout + out.stderr


def test_lab_links_the_three_panels():
    app = fastdist_lab.lab()
    assert isinstance(app, Lab)
    for name in ("fdl-layout-panel", "fdl-cluster-panel", "fdl-streams-panel"):
        assert any(name in child._dom_classes for child in app.children), name
    lp, cp, sp = app.layout_panel, app.cluster_panel, app.streams_panel
    expected = Layout(
        world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2
    )
    assert lp.layout == cp.layout == sp.layout
    assert lp.layout.fields() == {**expected.fields(), "backend": lp.layout.backend}
    assert sp.png.startswith(PNG_MAGIC) and set(ok_cells(sp.checks.value)) == {"True"}
    before = sp.predicted
    lp.sequence_data_parallel.value = 1
    assert cp.layout == sp.layout == lp.layout and lp.layout.sequence_data_parallel == 1
    assert sp.predicted is not before and sp.predicted.layout == lp.layout
    lp.tensor_parallel.value = 8  # impossible with pipeline 2 on 8 GPUs? no: 8 * 2 does not divide 8
    assert lp.layout is None and cp.layout is None and sp.layout is None
    assert "fix the layout" in cp.message and cp.start_button.disabled
    assert "fix the layout" in sp.error
    assert cp.start() is False and cp.cluster is None
    assert plt.get_fignums() == []


def test_streams_panel_controls_change_the_prediction_and_picture():
    layout = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    panel = StreamsPanel(layout)
    first = panel.png
    panel.generator.value = "pp"
    assert panel.png != first
    assert panel.sharing.value.count("[") == len(panel.predicted.sharing("pp"))
    report = panel.predicted
    panel.step.value = 3
    assert panel.predicted is not report and panel.predicted.step == 3
    panel.phase.value = "validation"
    assert panel.predicted.phase.name == "validation"
    assert set(ok_cells(panel.checks.value)) == {"True"}
    assert panel.draw_button.disabled
    assert panel.draw_real() is False and "no running cluster" in panel.error


def test_a_new_report_is_drawn_even_when_its_id_is_reused(monkeypatch):
    # CPython reuses the id() of a freed object; a panel that keyed its picture on id(report) would think a new
    # report already drawn. Every object "sharing" one id shows it deterministically.
    import fastdist_lab.widgets.streams_panel as module

    layout = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    panel = StreamsPanel(layout)
    first = panel.png
    monkeypatch.setattr(module, "id", lambda obj: 0, raising=False)  # every id() in the panel's module is 0
    panel.layout = layout.replace(tensor_parallel=1, sequence_data_parallel=1)
    panel.flush()
    assert panel.png != first


def test_broken_seed_shift_shows_a_failing_check():
    layout = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, tp_seed_shift=0)
    panel = StreamsPanel(layout)
    assert "False" in ok_cells(panel.checks.value)
    assert "FAIL" in panel.status.value


@pytest.fixture(scope="module")
def running_lab():
    app = fastdist_lab.lab(
        world_size=4, tensor_parallel=2, pipeline_parallel=1, sequence_data_parallel=2, backend="gloo"
    )
    try:
        yield app
    finally:
        app.cluster_panel.stop()


def test_cluster_panel_starts_applies_and_shows_every_group_ok(running_lab):
    cp = running_lab.cluster_panel
    assert cp.cluster is None and not cp.start_button.disabled and cp.apply_button.disabled
    assert cp.start() is True
    assert cp.running and cp.cluster.world_size == 4
    assert "running" in cp.message and "every group ok" in cp.message
    cells = ok_cells(cp.verification.value)
    assert cells and set(cells) == {"True"}
    assert len(cells) == len(cp.last_verification.to_frame())
    assert cp.rank_output.value.count("<tr>") == 1 + 4  # header + one row per rank
    assert cp.start_button.disabled and not cp.apply_button.disabled and not cp.stop_button.disabled
    # the verdicts are on the layout panel's grid; the table is one click away (folded)
    lp = running_lab.layout_panel
    assert lp.verification is cp.last_verification and cp.verified_layout == lp.layout
    assert lp.geometry.cell[1] > grid_picture(lp.layout).geometry.cell[1]  # each cell has its verdict line
    assert cp.tables.selected_index is None and cp.view.widget.layout.display == "none"
    lp.select_rank(3)
    assert "every check of this rank passed" in lp.card.value


def test_the_rank_summary_does_not_make_workers_import_ipywidgets(running_lab):
    # The panel's per-rank function travels by reference: its module must be light on the workers.
    cp = running_lab.cluster_panel
    loaded = cp.cluster.run(
        lambda ctx: sorted(m for m in ("ipywidgets", "matplotlib") if m in __import__("sys").modules)
    )
    assert loaded.values == [[]] * 4


def test_real_streams_match_the_prediction(running_lab):
    sp = running_lab.streams_panel
    assert sp.cluster is running_lab.cluster_panel.cluster and not sp.draw_button.disabled
    assert sp.draw_real() is True
    assert "match the prediction exactly" in sp.comparison.value
    assert sp.marks is not None and sp.marks.ok and "match the prediction exactly" in sp.marks.headline


def test_changed_layout_is_applied_to_the_same_workers(running_lab):
    lp, cp = running_lab.layout_panel, running_lab.cluster_panel
    pids = list(cp.cluster.pids)
    lp.set(pipeline_parallel=2, sequence_data_parallel=1)
    assert "Apply" in cp.message
    assert cp.apply() is True
    assert cp.cluster.pids == pids and cp.cluster.layout == lp.layout


def test_world_size_mismatch_says_restart_needed(running_lab):
    lp, cp = running_lab.layout_panel, running_lab.cluster_panel
    lp.set(world_size=8, local_world_size=8)
    assert lp.layout is not None and lp.layout.world_size == 8
    assert "restart needed" in cp.message and cp.apply_button.disabled
    assert cp.apply() is False
    lp.set(world_size=4, local_world_size=4)
    assert lp.layout.world_size == 4 and "restart needed" not in cp.message


def test_errors_and_timeouts_are_text_in_the_panel(running_lab):
    cp = running_lab.cluster_panel

    def explode(ctx):
        if ctx.rank == 1:
            raise ValueError("rank one says no")
        return ctx.rank

    results = cp.run(explode)
    assert results is not None and not results.ok
    assert "some ranks failed" in cp.message
    assert "rank one says no" in cp.rank_output.value and "Traceback" not in cp.rank_output.value

    def hang(ctx):
        if ctx.rank == 0:
            time.sleep(60)
        return ctx.rank

    assert cp.run(hang, timeout=3) is None
    assert "Timeout" in cp.message and "Traceback" not in cp.status.value
    again = cp.run(lambda ctx: ctx.rank, timeout=60)  # the cluster recovers from the timeout
    assert again is not None and again.values == [0, 1, 2, 3]


def test_stop_leaves_nothing_running(running_lab):
    cp = running_lab.cluster_panel
    cluster = cp.cluster
    cp.stop()
    assert cp.cluster is None and not cluster.running and cp.message == "stopped"
    assert not cp.start_button.disabled and cp.stop_button.disabled
    assert running_lab.streams_panel.cluster is None


def test_lab_prewarms_a_worker_server_that_start_adopts():
    from fastdist_lab.runtime import supervisor
    from fastdist_lab.runtime.procs import wait_gone

    supervisor._stop_spare()
    fastdist_lab.lab(world_size=2, tensor_parallel=2, pipeline_parallel=1, sequence_data_parallel=1, mode="threads")
    assert supervisor._spare is None  # no process is started for a simulated world
    app = fastdist_lab.lab(
        world_size=2, tensor_parallel=2, pipeline_parallel=1, sequence_data_parallel=1, backend="gloo"
    )
    spare = supervisor._spare
    assert spare is not None and spare.launched
    guard = spare.process.pid
    cp = app.cluster_panel
    try:
        assert cp.start() is True, cp.message
        assert cp.cluster._server is spare and supervisor._spare is None  # adopted: Start only forked the ranks
        processes = [guard, cp.cluster.server_pid, *cp.cluster.pids]
    finally:
        cp.stop()
    assert not wait_gone(processes, 10)


def test_cluster_panel_alone_reports_missing_cluster():
    layout = Layout(world_size=2, local_world_size=2)
    panel = ClusterPanel(layout, backend="gloo")
    assert panel.apply() is False and "not running" in panel.message
    assert panel.run(lambda ctx: 1) is None


def test_a_cluster_panel_alone_draws_the_verdicts_on_its_own_grid():
    layout = Layout(world_size=2, local_world_size=2, tensor_parallel=2)
    panel = ClusterPanel(layout, backend="gloo")
    assert panel.view.widget.layout.display == "none"  # nothing checked yet
    try:
        assert panel.start() is True
        assert panel.view.widget.layout.display == "flex" and panel.last_verification.ok
        geometry = panel.view.geometry
        assert panel.view.click(*geometry.center(1)) == 1
        assert "rank 1</b>" in panel.view.card.value and "every check of this rank passed" in panel.view.card.value
    finally:
        panel.stop()


def test_panels_built_by_hand_follow_each_other():
    from fastdist_lab.widgets import LayoutPanel

    lp = LayoutPanel(world_size=4, tensor_parallel=2, pipeline_parallel=1, sequence_data_parallel=2)
    cp = ClusterPanel(lp, backend="gloo")
    sp = StreamsPanel(lp, cp)
    assert cp.layout == sp.layout == lp.layout
    lp.sequence_data_parallel.value = 1
    assert cp.layout == sp.layout == lp.layout and lp.layout.sequence_data_parallel == 1
    assert sp.cluster is None and sp.draw_button.disabled


def test_an_advisor_driving_panels_built_by_hand_hands_over_its_engine():
    """``AdvisorPanel.drive``: the chosen row's engine reaches the cost panel's dropdown and estimate; the cost
    panel's own dropdown then prices the same layout for another engine."""
    from fastdist_lab.widgets import AdvisorPanel, CostPanel, LayoutPanel

    lp = LayoutPanel(world_size=16, local_world_size=8)
    cp = CostPanel(lp)
    advisor = AdvisorPanel(gpus=16, global_batch_size=64, hardware="h100-sxm-80gb", top=5, engine="fsdp2")
    advisor.drive(lp, cp)
    advisor.search()
    choice = advisor.select(0)
    assert choice.training.engine == "fsdp2" and cp.engine.value == "fsdp2" and cp.error == ""
    assert cp.report.training == choice.training and lp.layout.fields() == {**choice.layout.fields(), "backend": "gloo"}
    assert cp.step_view.step.seconds == pytest.approx(advisor.result.frame.loc[0, "seconds"], rel=1e-9)
    fsdp2 = cp.step_view.headline.value
    cp.engine.value = "megatron"
    assert cp.report.training == choice.training.replace(engine="megatron") and cp.step_view.headline.value != fsdp2
