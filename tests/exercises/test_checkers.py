"""Every exercise's check: the right answer prints ``correct``, a wrong one raises ``WrongAnswer`` with a hint (the
typical mistakes get their own), a stub's ``...`` asks for an answer. Checks that need no cluster."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdist_lab as fdl
from fastdist_lab import exercises as ex
from fastdist_lab.errors import WrongAnswer


def right(capsys, check, *args):
    check(*args)
    out = capsys.readouterr().out
    assert out.startswith("correct: "), out


def hint(check, *args) -> str:
    with pytest.raises(WrongAnswer) as caught:
        check(*args)
    assert str(caught.value).startswith("not yet: ")
    return str(caught.value)


def test_inputs_are_ten_r_plus_i():
    assert ex.collective_inputs(4)[1].tolist() == [10, 11, 12, 13]


@pytest.mark.parametrize(
    ("check", "answer", "mistake", "says"),
    [
        (ex.check_all_reduce, [60, 64, 68, 72], ex.collective_inputs(), "before"),
        (ex.check_all_reduce, [[60, 64, 68, 72]] * 4, [15, 15, 15, 15], "wrong"),
        (ex.check_all_gather, ex.collective_inputs(), [[60, 64, 68, 72]] * 4, "copies"),
        (ex.check_reduce_scatter, [[60], [64], [68], [72]], [[60, 64, 68, 72]] * 4, "all-reduce"),
        (ex.check_reduce_scatter, [60, 64, 68, 72], [0, 11, 22, 33], "summed over every rank"),
        (ex.check_all_to_all, ex.collective_inputs().T, ex.collective_inputs(), "chunk r"),
    ],
)  # fmt: skip
def test_collective_predictions(capsys, check, answer, mistake, says):
    right(capsys, check, answer)
    message = hint(check, mistake)
    assert says in message or "would not hold" in message
    assert "replace" in hint(check, ...)


def test_a_prediction_of_the_wrong_size_says_how_many_numbers():
    assert "4 ranks hold 1 each" in hint(ex.check_reduce_scatter, [1, 2, 3])


def test_the_real_collectives_agree_with_the_expected_results():
    # the four collectives, on four threads ranks with torch's own ops, leave collective_results on every rank
    import torch
    import torch.distributed as dist

    def run(ctx):
        group = ctx.distributed.tensor_group
        x = torch.tensor(ex.collective_inputs()[ctx.rank])
        reduced = x.clone()
        dist.all_reduce(reduced, group=group)
        gathered = [torch.zeros_like(x) for _ in range(4)]
        dist.all_gather(gathered, x, group=group)
        scattered = torch.zeros(1, dtype=x.dtype)
        dist.reduce_scatter(scattered, list(x.clone().chunk(4)), group=group)
        return reduced.tolist(), torch.stack(gathered).tolist(), scattered.tolist()

    with fdl.SimulatedCluster(4, mode="threads", progress=False) as cluster:
        cluster.apply(fdl.Layout(world_size=4, tensor_parallel=4))
        values = cluster.run(run).values
    assert np.array_equal([v[0] for v in values], ex.collective_results("all_reduce"))
    assert np.array_equal([v[1] for v in values], ex.collective_results("all_gather"))
    assert np.array_equal([v[2] for v in values], ex.collective_results("reduce_scatter"))


def test_ring_cost(capsys):
    right(capsys, ex.check_ring_cost, 6, 1.5 * (1 << 20))
    assert "one phase" in hint(ex.check_ring_cost, 3, 1.5 * (1 << 20))
    assert "1/p" in hint(ex.check_ring_cost, 6, 6 * (1 << 20))


@settings(max_examples=30, deadline=None)
@given(
    alpha=st.floats(1e-6, 1e-2),
    bandwidth=st.floats(1e6, 1e11),
    noise=st.lists(st.floats(-0.01, 0.01), min_size=5, max_size=5),
)
def test_alpha_beta_accepts_the_least_squares_fit_and_refuses_others(alpha, bandwidth, noise):
    sizes = np.array([1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22], dtype=float)
    seconds = (alpha + sizes / bandwidth) * (1 + np.array(noise))
    slope, intercept = np.polyfit(sizes, seconds, 1)
    ex.check_alpha_beta(sizes, seconds, intercept, 1 / slope)
    with pytest.raises(WrongAnswer):
        ex.check_alpha_beta(sizes, seconds, intercept + 10 * seconds.max(), 1 / slope)


def test_alpha_beta_of_latency_bound_timings_accepts_the_fit_and_refuses_a_negative_bandwidth_otherwise():
    sizes, flat = [1e3, 1e4, 1e5], [2e-3, 2e-3, 1.9e-3]  # the best slope is negative
    slope, intercept = np.polyfit(sizes, flat, 1)
    ex.check_alpha_beta(sizes, flat, intercept, 1 / slope)
    assert "positive bandwidth" in hint(ex.check_alpha_beta, sizes, [1e-3, 2e-3, 3e-3], 1e-3, -1e6)


def test_alpha_beta_says_beta_is_a_bandwidth():
    sizes, seconds = [1e3, 1e6], [1e-4, 1e-3]
    slope, intercept = np.polyfit(sizes, seconds, 1)
    assert "bytes per second" in hint(ex.check_alpha_beta, sizes, seconds, intercept, slope)


def test_tensor_collectives(capsys):
    right(capsys, ex.check_tensor_collectives_per_layer, 4)
    assert "forward pass alone" in hint(ex.check_tensor_collectives_per_layer, 2)
    report = fdl.estimate(fdl.Layout(world_size=4, tensor_parallel=2, pipeline_parallel=2), "llama2-7b",
                          fdl.Training(num_microbatches=4))  # fmt: skip
    right(capsys, ex.check_tensor_collectives_per_step, 4 * (16 * 4 + 1), report)
    assert "micro-batches" in hint(ex.check_tensor_collectives_per_step, 4 * 16 * 4, report)


def test_slowest_link(capsys):
    # A layout refuses a tensor group across nodes: the same group on links as slow as the network.
    report = fdl.estimate(fdl.Layout(world_size=16, local_world_size=8, tensor_parallel=8), "llama2-7b",
                          fdl.Training(num_microbatches=4))  # fmt: skip
    hardware = fdl.Hardware.preset("dgx-h100")
    steps = [report.step(hw) for hw in (hardware, hardware.replace(intra_node_GBps=hardware.inter_node_GBps))]
    right(capsys, ex.check_slowest_link, "tensor communication", *steps)
    assert "grows by" in hint(ex.check_slowest_link, "forward", *steps)
    assert "not a component" in hint(ex.check_slowest_link, "network", *steps)


def test_zero_bytes_per_parameter(capsys):
    right(capsys, ex.check_zero_bytes_per_parameter, {0: 18, 1: 7.5, 2: 4, 3: 2.25})
    assert "ZeRO 2" in hint(ex.check_zero_bytes_per_parameter, {0: 18, 1: 7.5, 2: 7.5, 3: 2.25})
    assert "one entry per ZeRO stage" in hint(ex.check_zero_bytes_per_parameter, [18, 7.5, 4, 2.25])


@pytest.fixture(scope="module")
def recompute_reports():
    layout = fdl.Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2)
    setups = {
        "none, fused": fdl.Training(recompute="none"),
        "none, unfused": fdl.Training(recompute="none", flash_attention=False),
        "selective, unfused": fdl.Training(recompute="selective", flash_attention=False),
        "full": fdl.Training(recompute="full"),
    }
    return {name: fdl.estimate(layout, "llama2-7b", training) for name, training in setups.items()}


def test_activation_exercises(capsys, recompute_reports):
    right(capsys, ex.check_fewest_activations, "full", recompute_reports)
    assert "keeps" in hint(ex.check_fewest_activations, "none, fused", recompute_reports)
    right(capsys, ex.check_same_activations, ("none, fused", "selective, unfused"), recompute_reports)
    assert "fused attention" in hint(ex.check_same_activations, ("none, fused", "full"), recompute_reports)


def test_recompute_seconds(capsys):
    layout = fdl.Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2)
    step = fdl.estimate(layout, "llama2-7b", fdl.Training(recompute="selective")).step("dgx-h100")
    right(capsys, ex.check_recompute_seconds, 0, step)
    hint(ex.check_recompute_seconds, 0.1, step)


def test_global_batch(capsys):
    layout = fdl.Layout(world_size=16, tensor_parallel=2, sequence_data_parallel=2)
    training = fdl.Training(micro_batch_size=2, num_microbatches=4)
    right(capsys, ex.check_global_batch, 2 * 4 * 4, layout, training)
    assert "sequence-data" in hint(ex.check_global_batch, 2 * 4 * 8, layout, training)


@pytest.mark.parametrize(
    ("kind", "share", "in_flight"),
    [("gpipe", 3 / 11, [8, 8, 8, 8]), ("1f1b", 3 / 11, [4, 3, 2, 1]), ("interleaved-1f1b", 3 / 19, [11, 9, 7, 5]),
     ("zero-bubble", 1 / 9, [4, 4, 4, 4])],
)  # fmt: skip
def test_schedule_exercises(capsys, kind, share, in_flight):
    right(capsys, ex.check_bubble, kind, share)
    right(capsys, ex.check_in_flight, kind, in_flight)
    hint(ex.check_bubble, kind, share + 0.05)
    hint(ex.check_in_flight, kind, [1, 2, 3, 4])
    assert "one number per pipeline rank" in hint(ex.check_in_flight, kind, [1])


def test_bubble_of_the_ideal_time_is_told_apart():
    assert "ideal time" in hint(ex.check_bubble, "1f1b", 3 / 8)


def test_challenge(capsys):
    good = fdl.Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=4)
    right(capsys, ex.check_challenge, good, fdl.Training(num_microbatches=8, distributed_optimizer=True,
                                                          sequence_tensor_parallel=True, recompute="selective"))
    too_small = fdl.Layout(world_size=64, local_world_size=8, tensor_parallel=2)
    assert "shard it further" in hint(ex.check_challenge, too_small, fdl.Training())
    assert "64 GPUs" in hint(ex.check_challenge, fdl.Layout(world_size=32, tensor_parallel=8), fdl.Training())


def test_fault_puzzles_are_repeatable_and_hidden(capsys):
    layout = fdl.Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    puzzles = {ex.fault_puzzle(layout, seed) for seed in range(30)}
    assert {p.kind for p in puzzles} == set(ex.FAULT_KINDS)
    puzzle = ex.fault_puzzle(layout, seed=3)
    assert puzzle == ex.fault_puzzle(layout, seed=3) and "hidden" in repr(puzzle)
    assert getattr(puzzle.fault, puzzle.kind) == puzzle.where
    right(capsys, ex.check_diagnosis, puzzle, puzzle.kind, puzzle.where)
    other = next(k for k in ex.FAULT_KINDS if k != puzzle.kind)
    assert f"not {other!r}" in hint(ex.check_diagnosis, puzzle, other, puzzle.where)
    assert "wrong" in hint(ex.check_diagnosis, puzzle, puzzle.kind, puzzle.where + 1)
    assert "one of" in hint(ex.check_diagnosis, puzzle, "gremlins", 0)
