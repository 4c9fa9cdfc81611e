"""The cluster panel's *Train step*: the per-parameter table, the rank grid coloured by each rank's worst error
(green within the tolerance, red outside) and a rank's tensors on click, on a simulated world of threads."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.checks import TrainingFault  # noqa: E402
from fastdist_lab.cost import SCHEDULES, Training  # noqa: E402
from fastdist_lab.viz import training_marks  # noqa: E402
from fastdist_lab.viz.marks import error_note  # noqa: E402
from fastdist_lab.widgets import ClusterPanel  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LAYOUT = Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, backend="gloo")


@pytest.fixture(scope="module")
def panel():
    panel = ClusterPanel(LAYOUT, mode="threads")
    assert panel.train.button.disabled  # nothing runs yet
    assert panel.train_step() is None and "start a cluster" in panel.message
    assert panel.start()
    yield panel
    panel.close()


def test_the_button_runs_a_step_and_shows_the_table_and_grid(panel):
    assert not panel.train.button.disabled and list(panel.train.schedule.options) == list(SCHEDULES)
    panel.train.button.click()
    check = panel.train.check
    assert check is not None and check.ok and "everything agrees with one process" in panel.message
    assert "everything agrees" in panel.train.table.value and panel.train.table.value.count("<tr>") == 66
    assert panel.train.view.widget.layout.display == "flex" and panel.train.view.picture.value[:8] == PNG_MAGIC
    marks = training_marks(check)
    assert not marks.bad.any() and all(note.startswith("\u2713") for note in marks.notes)
    assert "within 1e-05 relative of one process" in marks.headline


def test_clicking_a_rank_lists_its_tensors(panel):
    panel.train_step()
    geometry = panel.train.view.geometry
    assert panel.train.view.click(*geometry.center(5)) == 5
    card = panel.train.view.card.value
    assert "<b>rank 5</b>: 33 tensors" in card and "layers.2.fc1.weight" in card and "embedding.word" not in card
    assert "tensor" in panel.train.view.hover_at(*geometry.center(5))


def test_a_broken_rank_is_red_on_the_grid(panel):
    check = panel.train_step(training=Training(zero_stage=0), fault=TrainingFault(unreduced=6))
    assert not check.ok and "something differs" in panel.message
    marks = training_marks(check)
    assert np.flatnonzero(marks.bad).tolist() == [6] and marks.notes[6].startswith("\u2717")
    assert "1 rank(s) outside 1e-05 relative" in marks.headline
    assert "FAILED: the loss matches one process but rank 6" in panel.train.table.value  # the cause first


def test_dropout_from_the_panel_shows_the_judgments(panel):
    panel.train.dropout.value = 0.1
    panel.train.schedule.value = "gpipe"
    try:
        check = panel.train_step()
    finally:
        panel.train.dropout.value = 0.0
        panel.train.schedule.value = "1f1b"
    assert check.ok and check.schedule == "gpipe" and check.settings["dropout"] == pytest.approx(0.1)
    assert "masks are the draws of each rank" in panel.train.table.value
    assert "dropout judged on the real masks: all passed" == training_marks(check).headline
    panel.train.select(2)
    assert "no tensor compared" in panel.train.view.card.value


def test_the_controls_and_a_loaded_set_up_make_the_training_that_runs(panel):
    view = panel.train
    loaded = Training(schedule="zero-bubble", num_microbatches=4, micro_batch_size=2, zero_stage=3, recompute="full")
    view.load(loaded)
    assert view.training() == loaded and "micro-batches: 4 of 2 sequence(s)" in view.setup.value
    view.schedule.value = "interleaved-1f1b"  # one stage per rank: the set-up line says what is wrong
    assert "needs virtual_pipeline_stages &gt;= 2" in view.setup.value
    view.virtual_stages.value = 2
    try:
        check = panel.train_step()
    finally:
        view.load(Training())
    assert check.ok and check.training == loaded.replace(schedule="interleaved-1f1b", virtual_pipeline_stages=2)
    assert check.settings["zero_stage"] == 3 and check.settings["recompute"] == "full"


def test_error_notes():
    assert error_note(3e-7, 1e-5) == "\u2713 3e-07" and error_note(0.2, 1e-5) == "\u2717 2e-01"
    assert error_note(float("inf"), 1e-5) == "\u2717 shard" and error_note(float("nan"), 1e-5) == "\u2013"
