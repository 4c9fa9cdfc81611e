"""One real training step on a layout's groups against one process: layouts and ``cost.Training`` set-ups (every
schedule of the registry, ZeRO 0-3, recompute) chosen at random on threads, a handful on gloo processes, threads and
gloo giving the same numbers, dropout judged on real masks, the old keywords deprecated.

Every layout of up to 16 ranks with factors in {1, 2, 4} (770 cases with the schedules, sequence-tensor parallel and
both orders) is swept by ``python tests/checks/crosscheck_training_layouts.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdist_lab import ClusterError, Layout, LayoutError, SimulatedCluster
from fastdist_lab.checks import TinyGPT, TrainingCheck, check_training
from fastdist_lab.checks.train_rank import TrainingFault, TrainingPlan, train_rank
from fastdist_lab.cost import SCHEDULE_KINDS, SCHEDULES, Training
from fastdist_lab.streams import predict

MAIN = Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, backend="gloo")


@pytest.fixture(scope="module")
def worlds():
    """Simulated worlds of threads by size, started on first use."""
    clusters: dict[int, SimulatedCluster] = {}

    def world(size: int) -> SimulatedCluster:
        if size not in clusters:
            clusters[size] = SimulatedCluster(size, "threads", timeout=60, progress=False)
        return clusters[size]

    yield world
    for cluster in clusters.values():
        cluster.close()


FACTORS = st.sampled_from((1, 2, 4))


@st.composite
def training_cases(draw):
    tp = draw(FACTORS)
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if tp * p <= 16]))
    sdp = draw(st.sampled_from([s for s in (1, 2, 4) if tp * pp * s <= 16]))
    bdp = draw(st.sampled_from([b for b in (1, 2, 4) if tp * pp * sdp * b <= 16]))
    layout = Layout(
        world_size=tp * pp * sdp * bdp,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        sequence_tensor_parallel=tp > 1 and draw(st.booleans()),
        pipeline_first=draw(st.booleans()),
        backend="gloo",
    )
    schedule = draw(st.sampled_from(SCHEDULES))
    pp_m = draw(st.sampled_from((1, 2)))  # micro-batches: the pipeline size (the default) or twice it
    kind = SCHEDULE_KINDS[schedule]
    v = draw(st.sampled_from((kind.min_virtual_stages, 2))) if kind.multi_stage else 1
    training = Training(schedule=schedule, zero_stage=draw(st.sampled_from((0, 1, 2, 3))),
                        micro_batch_size=draw(st.sampled_from((1, 2))), virtual_pipeline_stages=v,
                        num_microbatches=None if pp_m == 1 else 2 * pp,
                        recompute=draw(st.sampled_from(("none", "selective", "full"))))  # fmt: skip
    options = {"training": training}
    if v * pp > 4:
        options["model"] = TinyGPT(layers=8)
    return layout, options


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=training_cases())
def test_random_layouts_and_schedules_train_like_one_process(worlds, case):
    layout, options = case
    check = check_training(worlds(layout.world_size), layout, **options)
    assert check.ok, check.summary()
    assert check.table["ok"].all() and float(check.table[["grad_rel", "weight_rel"]].max().max()) <= 1e-5
    assert check.loss == pytest.approx(check.reference_loss, rel=1e-5)
    assert set(check.tensors["rank"]) == set(range(layout.world_size))  # every rank's shards were compared
    assert (check.table["ranks"] >= 1).all() and (check.rank_errors <= 1e-5).all()


def test_the_main_layout_on_gloo_processes(gloo):
    check = check_training(gloo, MAIN)
    assert isinstance(check, TrainingCheck) and check.ok and check.mode == "processes"
    assert len(check.table) == 65 and (check.table["ranks"] == 4).all()  # a stage: 2 tensor x 2 data ranks
    text = check.summary()
    assert "65 parameter tensors compared on 260 shards" in text and text.splitlines()[-1] == "result: OK"


def test_sequence_tensor_parallel_and_interleaving_on_gloo(gloo):
    layout = MAIN.replace(sequence_tensor_parallel=True, pipeline_first=True)
    training = Training(schedule="interleaved-1f1b", virtual_pipeline_stages=2, num_microbatches=4)
    check = check_training(gloo, layout, training=training)
    assert check.ok, check.summary()
    assert check.layout.sequence_tensor_parallel and check.settings["virtual_stages"] == 2
    assert check.training == training


def test_zero_bubble_zero_3_and_full_recompute_on_gloo(gloo):
    """What an Advisor row may say, on real processes: torch's ScheduleInterleavedZeroBubble, sharded weights, the
    layers recomputed in the backward, sequence tensor parallel turned on by the training set-up."""
    training = Training(schedule="zero-bubble", zero_stage=3, recompute="full", sequence_tensor_parallel=True)
    check = check_training(gloo, MAIN, training=training)
    assert check.ok, check.summary()
    assert check.layout.sequence_tensor_parallel and check.schedule == "zero-bubble"
    assert check.settings["zero_stage"] == 3 and check.settings["recompute"] == "full"


def _shards(cluster, layout, plan):
    cluster.apply(layout)
    values = sorted(cluster.run(train_rank, plan).values, key=lambda value: value["rank"])
    return [(v["loss"], [(s["name"], s["updated"], s["grad"]) for s in v["shards"]]) for v in values]


def test_threads_and_gloo_give_the_same_numbers(gloo, worlds):
    model = TinyGPT()
    tokens = torch.randint(
        model.vocab_size, (2 * 4, model.sequence_length + 1), generator=torch.Generator().manual_seed(5)
    )
    plan = TrainingPlan(model, model.initial_weights(5), tokens, Training(num_microbatches=4, zero_stage=1))
    layout = MAIN.replace(pipeline_first=True)
    processes, threads = _shards(gloo, layout, plan), _shards(worlds(8), layout, plan)
    for (loss_p, shards_p), (loss_t, shards_t) in zip(processes, threads):
        assert (loss_p is None) == (loss_t is None) and (loss_p is None or loss_p == pytest.approx(loss_t, rel=1e-6))
        for (name, weight_p, grad_p), (other, weight_t, grad_t) in zip(shards_p, shards_t):
            assert name == other
            torch.testing.assert_close(weight_p, weight_t, rtol=1e-6, atol=1e-7)
            if grad_p is not None:
                assert grad_p[:2] == grad_t[:2]
                torch.testing.assert_close(grad_p[2], grad_t[2], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("where", ["threads", "gloo"])
def test_dropout_masks_follow_the_seed_design(where, worlds, gloo):
    cluster = gloo if where == "gloo" else worlds(8)
    check = check_training(cluster, MAIN, dropout=0.1)
    assert check.ok, check.summary()
    assert check.table is None and check.reference_loss is None and check.loss is not None
    assert check.dropout["ok"].all() and (check.dropout["compared"] > 0).all()
    report = predict(check.layout)  # the ranks that share a pp stream share every pp mask
    streams = report.stream_ids[:, report.generator_index("pp")]
    assert _same_partition(check.mask_sharing, streams)


def _same_partition(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return all(len(set(b[a == value])) == 1 for value in set(a)) and all(len(set(a[b == v])) == 1 for v in set(b))


def test_sequence_tensor_parallel_dropout_uses_the_tensor_generator(worlds):
    check = check_training(worlds(8), MAIN.replace(sequence_tensor_parallel=True), dropout=0.2)
    assert check.ok, check.summary()
    assert (check.mask_sharing == -1).all()  # nothing drew from pp: every dropout is per tensor rank


def test_a_layout_whose_tensor_ranks_share_a_generator_fails_the_dropout_judgment(worlds):
    check = check_training(worlds(8), MAIN.replace(tp_seed_shift=0), dropout=0.1)
    assert not check.ok
    failed = check.dropout[~check.dropout["ok"]]
    assert failed["check"].tolist() == ["pp masks identical, tp masks different across each tensor group"]
    assert "drew the same mask" in failed["detail"].iloc[0]


def test_what_cannot_run_is_refused(worlds):
    with pytest.raises(LayoutError, match="dropout=1.0 must be a probability"):
        check_training(worlds(8), MAIN, dropout=1.0)
    with pytest.raises(LayoutError, match="recompute='full' with dropout=0.1"):
        check_training(worlds(8), MAIN, training=Training(recompute="full"), dropout=0.1)
    with pytest.raises(LayoutError, match="needs num_microbatches >= pipeline_parallel=2 to run, got 1"):
        check_training(worlds(8), MAIN, training=Training(num_microbatches=1))
    with pytest.raises(LayoutError, match="layers_per_stage"):
        check_training(worlds(8), MAIN, training=Training(layers_per_stage=(2, 2)))
    with pytest.raises(LayoutError, match="training=.* must be a fastdist_lab.cost.Training"):
        check_training(worlds(8), MAIN, training={"schedule": "1f1b"})
    with SimulatedCluster(4, "fake", progress=False) as fake, pytest.raises(ClusterError, match="fake process groups"):
        check_training(fake, MAIN.replace(world_size=4, local_world_size=4, sequence_data_parallel=1))


def test_the_old_keywords_still_work_with_a_deprecation_naming_the_field(worlds):
    with pytest.warns(DeprecationWarning) as caught:
        check = check_training(worlds(8), MAIN, schedule="looped-bfs", virtual_stages=2, zero_stage=0)
    assert [str(w.message).split(" is deprecated: ")[1] for w in caught] == [
        "use training=Training(schedule=...) (the old keyword goes in the next release)",
        "use training=Training(virtual_pipeline_stages=...) (the old keyword goes in the next release)",
        "use training=Training(zero_stage=...) (the old keyword goes in the next release)",
    ]
    assert check.ok and check.training == Training(
        schedule="looped-bfs", virtual_pipeline_stages=2, num_microbatches=4, zero_stage=0
    )  # the old defaults kept
    with pytest.warns(DeprecationWarning), pytest.raises(LayoutError, match="schedule='interleaved' must be one of"):
        check_training(worlds(8), MAIN, schedule="interleaved")
    with pytest.raises(LayoutError, match="not both"):
        check_training(worlds(8), MAIN, training=Training(), zero_stage=1)
    with pytest.raises(TypeError, match="'micro_batch'"):
        check_training(worlds(8), MAIN, micro_batch=2)
    import fastdist_lab.checks

    with pytest.warns(DeprecationWarning, match="fastdist_lab.checks.SCHEDULES is deprecated"):
        old = fastdist_lab.checks.SCHEDULES
    assert old == {name: kind.torch_class for name, kind in SCHEDULE_KINDS.items()}


def test_zero_3_weights_are_gathered_and_a_rank_that_keeps_its_slice_is_named(worlds):
    sharded = check_training(worlds(8), MAIN, training=Training(zero_stage=3))
    assert sharded.ok, sharded.summary()
    broken = check_training(worlds(8), MAIN, training=Training(zero_stage=3), fault=TrainingFault(ungathered=5))
    assert not broken.ok
    assert any(problem.startswith("rank 5 started from another shard") for problem in broken.problems)
    assert broken.rank_errors[5] == float("inf") and (broken.rank_errors.drop(5) < float("inf")).any()


def test_recompute_runs_the_blocks_again_in_the_backward():
    from fastdist_lab.checks.tiny_gpt import Parallel, StageModule

    model = TinyGPT(layers=2)
    calls = {"none": [], "selective": [], "full": []}
    for recompute, seen in calls.items():
        module = StageModule(model, range(2), True, True, Parallel(recompute=recompute))
        module.load(model.initial_weights(0), 0, 1)
        block, core = module.layers["0"], module.layers["0"].attention
        block.fc1.register_forward_hook(lambda *_, seen=seen: seen.append("mlp"))
        original = core.core
        core.core = lambda *a, seen=seen, original=original: seen.append("core") or original(*a)
        module(torch.randint(64, (1, 16))).sum().backward()
    assert calls["none"] == ["core", "mlp"]
    assert calls["selective"] == ["core", "mlp", "core"]  # the attention core again in the backward
    assert calls["full"] == ["core", "mlp", "core", "mlp"]  # the whole block again
