"""A mixture-of-experts training step (``checks.moe_layer``) on the pool's expert groups against one process.

Gloo, 8 processes (the session's cluster, ``conftest.gloo``): expert parallel 2 and 4, expert-tensor parallel 1 and
the tensor size (2), one case with 2 pipeline stages; the worker server killed during a step. Threads for the fault
and the arguments refused."""

from __future__ import annotations

import os
import signal
import threading

import psutil
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import ClusterError, Layout, SimulatedCluster
from fastdist_lab.checks import TrainingFault, check_training
from fastdist_lab.checks.moe_layer import MoE
from fastdist_lab.checks.tiny_gpt import Parallel, TinyGPT
from fastdist_lab.cost import Training
from fastdist_lab.errors import ClusterTimeout, LayoutError
from fastdist_lab.runtime.procs import wait_gone

GLOO_CASES = {
    "ep2-etp1-tp2": dict(tensor_parallel=2, expert_parallel=2, expert_tensor_parallel=1),
    "ep4-etp2-tp2": dict(tensor_parallel=2, expert_parallel=4, expert_tensor_parallel=2),
    "ep4-etp1": dict(expert_parallel=4, expert_tensor_parallel=1),
    "ep2-etp2-tp2-pp2": dict(tensor_parallel=2, pipeline_parallel=2, expert_parallel=2, expert_tensor_parallel=2),
}


@pytest.fixture(scope="module")
def threads():
    with SimulatedCluster(8, "threads", timeout=60, progress=False) as cluster:
        yield cluster


@pytest.mark.parametrize("sizes", GLOO_CASES.values(), ids=GLOO_CASES.keys())
def test_a_moe_step_on_gloo_matches_one_process(gloo, sizes):
    layout = Layout(world_size=8, backend="gloo", **sizes)
    check = check_training(gloo, layout)
    assert check.ok, check.summary()
    assert abs(check.loss - check.reference_loss) <= 1e-5 * abs(check.reference_loss)
    experts = check.table[check.table["name"].str.contains(".moe.experts.")]
    assert len(experts) == 4 * 3 * max(4, 2 * layout.expert_parallel)  # every expert's three tensors, every layer
    assert (experts["ranks"] == 8 // layout.pipeline_parallel // layout.expert_parallel).all()
    assert check.table["ok"].all()


def test_a_worker_server_killed_during_a_moe_step_is_named(gloo, monkeypatch):
    layout = Layout(world_size=8, backend="gloo", **GLOO_CASES["ep4-etp1"])
    run, processes = gloo.run, []

    def run_and_kill_the_server(fn, *args, **options):  # the cluster's own run; the server dies 0.25 s into the step
        if fn.__name__ == "train_rank":
            server = psutil.Process(gloo.server_pid)
            processes.extend([server.parent().pid, server.pid, *gloo.pids])  # its guard, itself, its workers
            threading.Timer(0.25, os.kill, (server.pid, signal.SIGKILL)).start()
        return run(fn, *args, **options)

    monkeypatch.setattr(gloo, "run", run_and_kill_the_server)
    with pytest.raises(ClusterError) as caught:
        check_training(gloo, layout)
    monkeypatch.undo()
    assert not isinstance(caught.value, ClusterTimeout)
    assert str(caught.value).splitlines()[0] == (
        f"the worker server (pid {processes[1]}, killed by SIGKILL) died during train_rank: ranks 0-7 lost with it"
    )
    assert not wait_gone(processes, 10)
    assert gloo.run(lambda ctx: ctx.rank).values == list(range(8))  # a fresh server and workers, the layout re-applied
    assert gloo.layout == layout and gloo.server_pid != processes[1]


def test_with_sequence_tensor_parallel_and_zero_1_on_threads(threads):
    layout = Layout(world_size=8, tensor_parallel=2, expert_parallel=2, expert_tensor_parallel=1, backend="gloo")
    check = check_training(threads, layout, training=Training(sequence_tensor_parallel=True, zero_stage=1))
    assert check.ok, check.summary()
    assert check.settings["sequence_tensor_parallel"]


def test_a_rank_that_sends_its_tokens_to_the_wrong_expert_rank_is_named(threads):
    layout = Layout(world_size=8, tensor_parallel=2, expert_parallel=4, backend="gloo")
    check = check_training(threads, layout, fault=TrainingFault(misrouted=3))
    assert not check.ok
    assert check.problems[0].startswith("rank 3 sent ")
    assert "MoE rows of layer(s) 0, 1, 2, 3" in check.problems[0]
    assert check.problems[0].endswith("which do not hold their experts: its dispatch goes to the wrong expert rank")
    assert not any(problem.startswith("rank ") and " sent " in problem for problem in check.problems[1:])
    assert any(problem.startswith("the loss differs") for problem in check.problems)


def test_what_the_moe_step_refuses(threads):
    layout = Layout(world_size=8, expert_parallel=4, backend="gloo")
    with pytest.raises(LayoutError, match="zero_stage=3 with experts"):
        check_training(threads, layout, training=Training(zero_stage=3))
    with pytest.raises(LayoutError, match="the layout has experts and the model none"):
        check_training(threads, layout, model=TinyGPT())
    with pytest.raises(LayoutError, match="expert_parallel=4 must divide num_experts=6"):
        check_training(threads, layout, model=TinyGPT(num_experts=6))
    with pytest.raises(LayoutError, match="top_k=3 must be at most num_experts=2"):
        TinyGPT(num_experts=2, top_k=3)


@settings(max_examples=25, deadline=None)
@given(experts=st.integers(1, 6), data=st.data(), tokens=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_the_reference_moe_is_the_gated_sum_of_the_top_k_experts(experts, data, tokens, seed):
    top_k = data.draw(st.integers(1, experts))
    torch.manual_seed(seed)
    moe = MoE(hidden=8, ffn=16, num_experts=experts, top_k=top_k, par=Parallel(), site="layers.0.moe")
    for param in moe.parameters():
        torch.nn.init.normal_(param)
    inputs = torch.randn(1, tokens, 8)
    out = moe(inputs, replicated=True)[0]
    probs = (inputs[0] @ moe.router.T).softmax(-1)
    for row in range(tokens):
        gates, chosen = probs[row].topk(top_k)
        expected = sum(g / gates.sum() * moe.experts[str(int(e))](inputs[0, row]) for g, e in zip(gates, chosen))
        torch.testing.assert_close(out[row], expected, rtol=1e-5, atol=1e-5)


def test_a_moe_step_on_256_threads_matches_one_process():
    """256 ranks in threads (about a minute on 2 cores): tensor 2, pipeline 2, expert parallel 4, 32 data ranks."""
    layout = Layout(world_size=256, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4,
                    backend="gloo")  # fmt: skip
    with SimulatedCluster(256, "threads", local_world_size=8, timeout=280, progress=False) as cluster:
        check = check_training(cluster, layout)
    assert check.ok, check.summary()
    assert check.layout.expert_sizes == {"expert_tensor": 2, "expert": 4, "expert_data": 16}


def test_a_swapped_member_in_an_expert_group_is_named_before_any_step(threads):
    layout = Layout(world_size=8, tensor_parallel=2, expert_parallel=4, backend="gloo")
    check = check_training(threads, layout, fault=TrainingFault(swapped=("expert", 2)))
    assert not check.ok and check.loss is None
    assert check.problems[0].startswith("rank 0 used the expert group [2, 0, 4, 6]; the layout's is [0, 2, 4, 6]")
    assert check.problems[-1] == "no training step ran: the ranks' groups are not the layout's"
