"""A check that can fail: one thing broken at a time (``TrainingFault``), and the training check names it.

The main job's layout, 8 ranks: tensor 2, pipeline 2, sequence-data 2 (ranks 0-3 hold pipeline stage 0 with
layers 0-1, ranks 4-7 stage 1; tensor groups are pairs of consecutive ranks)."""

from __future__ import annotations

import math

import pytest

from fastdist_lab import Layout, SimulatedCluster
from fastdist_lab.checks import TrainingFault, check_training
from fastdist_lab.cost import Training
from fastdist_lab.viz import training_marks

LAYOUT = Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, backend="gloo")


@pytest.fixture(scope="module")
def threads():
    with SimulatedCluster(8, "threads", timeout=60, progress=False) as cluster:
        yield cluster


def test_a_tensor_rank_that_loads_the_wrong_shard(threads):
    check = check_training(threads, LAYOUT, fault=TrainingFault(wrong_shard=3))
    assert not check.ok
    assert check.problems[0].startswith("rank 3 started from another shard of embedding.word and ")
    assert "(tensor shard 1/2)" in check.problems[0]
    assert math.isinf(check.rank_errors[3]) and not math.isinf(check.rank_errors[2])
    assert check.rank_tensors(3)["initial_abs"].max() > 0 and check.rank_tensors(2)["initial_abs"].max() == 0
    marks = training_marks(check)
    assert marks.notes[3] == "\u2717 shard" and marks.bad[3]


def test_a_pipeline_stage_that_skips_a_layer(threads):
    check = check_training(threads, LAYOUT, fault=TrainingFault(skip_layer=1))
    assert not check.ok
    assert check.problems[0].startswith(
        "15 tensors of layer(s) 1 have a zero gradient where one process has none (held by ranks [0, 1, 2, 3]): "
        "their pipeline stage left them out of the step"
    )
    rows = check.table.set_index("name")
    assert rows.loc["layers.1.fc1.weight", "grad_rel"] == pytest.approx(1.0)
    assert rows.loc["layers.1.fc1.weight", "note"] == "gradient zero on some rank"
    assert rows.loc["layers.0.fc1.weight", "note"] == ""


def test_a_data_rank_that_does_not_reduce_its_gradients(threads):
    check = check_training(threads, LAYOUT, fault=TrainingFault(unreduced=5))  # ZeRO 0 (Training's default)
    assert not check.ok
    assert check.problems[0].startswith("the loss matches one process but rank 5's gradients do not")
    assert check.problems[0].endswith("the forward pass was right and the gradient reduction was not; rank 5's "
                                      "gradients are not the sum over its data group")
    assert check.problems[1] == "ranks outside the tolerance: [5]"
    assert check.rank_errors.drop(5).max() <= 1e-5 and check.rank_errors[5] > 1e-3
    assert (check.table.loc[~check.table["ok"], "worst_rank"] == 5).all()


def test_with_zero_1_the_unreduced_slice_reaches_the_data_group(threads):
    check = check_training(threads, LAYOUT, training=Training(zero_stage=1), fault=TrainingFault(unreduced=5))
    assert check.problems[0].startswith("the loss matches one process but rank 5's gradients do not")
    assert check.problems[1] == "ranks outside the tolerance: [5, 7]"  # rank 7 all-gathers rank 5's slice


def test_a_wrong_tp_seed_shift_gives_masks_that_do_not_match(threads):
    check = check_training(threads, LAYOUT, dropout=0.1, fault=TrainingFault(tp_seed_shift=(3, 12345)))
    assert not check.ok
    failed = check.dropout[~check.dropout["ok"]]
    assert failed["check"].tolist() == ["masks are the draws of each rank's seeded generators"]
    assert failed["detail"].iloc[0].startswith("rank 3: ") and "'tp' masks" in failed["detail"].iloc[0]
    assert len(check.problems) == 1


@pytest.mark.parametrize(("dim", "rank", "expected"), [("tensor", 2, [3, 2]), ("pipeline", 1, [5, 1])])
def test_a_swapped_member_in_a_group(threads, dim, rank, expected):
    check = check_training(threads, LAYOUT, fault=TrainingFault(swapped=(dim, rank)))
    assert not check.ok
    wanted = sorted(expected)
    assert check.problems == [
        f"rank {wanted[0]} used the {dim} group {expected}; the layout's is {wanted}",
        f"rank {wanted[1]} used the {dim} group {expected}; the layout's is {wanted}",
        "no training step ran: the ranks' groups are not the layout's",
    ]
    assert check.table is None and check.loss is None


def test_faults_on_gloo_processes_are_named_the_same_way(gloo):
    gpipe = Training(schedule="gpipe")
    swapped = check_training(gloo, LAYOUT, training=gpipe, fault=TrainingFault(swapped=("pipeline", 0)))
    unreduced = check_training(gloo, LAYOUT, fault=TrainingFault(unreduced=6))
    assert swapped.problems[:2] == [
        "rank 0 used the pipeline group [4, 0]; the layout's is [0, 4]",
        "rank 4 used the pipeline group [4, 0]; the layout's is [0, 4]",
    ]
    assert "FAILED" in swapped.summary().splitlines()[-1]
    assert unreduced.problems[0].startswith("the loss matches one process but rank 6's gradients do not")
    assert unreduced.problems[1] == "ranks outside the tolerance: [6]"


def test_nothing_broken_is_ok(threads):
    assert check_training(threads, LAYOUT, fault=TrainingFault()).ok
