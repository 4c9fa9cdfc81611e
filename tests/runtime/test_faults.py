"""Hangs, killed workers, a killed worker server and interrupts: every call ends within its deadline, names what
died, and the cluster recovers."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from fastdist_lab import ClusterError
from fastdist_lab.errors import ClusterTimeout
from fastdist_lab.runtime.procs import wait_gone

WORLD = 8
"""Ranks of the shared cluster (see conftest)."""


def _skip_the_collective_on_rank_5(ctx):
    import torch

    value = torch.ones(1)
    if ctx.rank != 5:
        ctx.distributed.world_group.allreduce([value]).wait()
    return int(value.item())


def test_a_hung_rank_raises_cluster_timeout_with_stacks_and_the_cluster_recovers(cluster):
    pids = cluster.pids
    begin = time.monotonic()
    with pytest.raises(ClusterTimeout) as caught:
        cluster.run(_skip_the_collective_on_rank_5, timeout=5)
    elapsed = time.monotonic() - begin
    error = caught.value
    assert isinstance(error, ClusterError) and isinstance(error, TimeoutError)
    assert elapsed < 5 + 10  # the deadline plus a few seconds, never the gloo timeout (60 s)
    assert error.ranks == [r for r in range(WORLD) if r != 5]
    assert "did not answer" in str(error) and "(rank 5 did)" in str(error)
    assert set(error.stacks) == set(error.ranks)
    assert all("_skip_the_collective_on_rank_5" in stack for stack in error.stacks.values())
    assert error.results.values[5] == 1 and error.results[0].status == "timeout"
    # the next call works, on fresh workers with the layout re-applied
    results = cluster.run(lambda ctx: ctx.distributed.tensor_group.size())
    assert results.values == [2] * WORLD
    assert set(cluster.pids).isdisjoint(pids)


def test_a_worker_killed_between_calls_shows_as_not_running_and_is_replaced(cluster):
    assert cluster.running
    victim = cluster.pids[4]
    os.kill(victim, signal.SIGKILL)
    assert not wait_gone([victim], 2)
    assert not cluster.running
    with pytest.warns(RuntimeWarning, match="rank 4 died since the last call"):
        results = cluster.run(lambda ctx: ctx.rank)
    assert results.values == list(range(WORLD))
    assert cluster.running and victim not in cluster.pids


def test_a_killed_worker_server_shows_as_not_running_and_is_replaced(cluster):
    server = cluster.server_pid
    os.kill(server, signal.SIGKILL)  # its workers go with it (their parent-death signal)
    deadline = time.monotonic() + 5
    while cluster.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not cluster.running
    named = rf"the worker server \(pid {server}, killed by SIGKILL\) died since the last call; starting fresh workers"
    with pytest.warns(RuntimeWarning, match=named):
        results = cluster.run(lambda ctx: ctx.distributed.tensor_group.size())
    assert results.values == [2] * WORLD  # a new server, new workers, the layout applied again
    assert cluster.running and cluster.server_pid not in (None, server)


def _sleep(ctx, seconds):
    import time

    time.sleep(seconds)
    return ctx.rank


@pytest.mark.parametrize("victim", ["server", "guard"])
def test_a_worker_server_killed_during_a_call_is_named_and_the_next_call_starts_afresh(cluster, victim):
    assert cluster.run(_sleep, 0).values == list(range(WORLD))  # loaded on every rank before the timed call
    server = psutil.Process(cluster.server_pid)
    guard = server.parent()  # the process the cluster launched, above the server (README, "What a local cluster runs")
    processes = [guard.pid, server.pid, *cluster.pids]
    timer = threading.Timer(0.5, os.kill, (server.pid if victim == "server" else guard.pid, signal.SIGKILL))
    timer.start()
    begin = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        cluster.run(_sleep, 60, timeout=60)
    elapsed = time.monotonic() - begin
    timer.join()
    error = caught.value
    how = "killed by SIGKILL" if victim == "server" else f"its guard, pid {guard.pid}, was killed by SIGKILL"
    separator = ", " if victim == "server" else "; "
    assert str(error).splitlines() == [
        f"the worker server (pid {server.pid}{separator}{how}) died during _sleep: ranks 0-7 lost with it",
        "the workers were stopped; the next call starts a fresh worker server and workers",
    ]
    assert not isinstance(error, ClusterTimeout) and elapsed < 0.5 + 10  # never the call's deadline (60 s)
    assert error.ranks == list(range(WORLD))
    assert {(r.status, r.error.type) for r in error.results} == {("died", "ServerDied")}
    assert not wait_gone(processes, 10)  # nothing of the dead server is left running
    results = cluster.run(lambda ctx: ctx.distributed.tensor_group.size())
    assert results.values == [2] * WORLD  # a new server, new workers, the layout applied again
    assert cluster.server_pid not in (None, server.pid) and set(cluster.pids).isdisjoint(processes)


def test_a_worker_killed_while_every_rank_waits_is_named_not_the_server(cluster):
    assert cluster.run(_sleep, 0).values == list(range(WORLD))
    server = cluster.server_pid
    victim = cluster.pids[3]
    timer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
    timer.start()
    with pytest.raises(ClusterError) as caught:
        cluster.run(_sleep, 60, timeout=60)
    timer.join()
    text = str(caught.value)
    assert text.startswith(f"rank 3 died during _sleep\n  rank 3: WorkerDied: worker process {victim} died (killed by "
                           "SIGKILL)\nranks 0-2, 4-7 did not answer afterwards"), text  # fmt: skip
    assert "worker server" not in text and caught.value.ranks == list(range(WORLD))
    assert caught.value.results[3].status == "died" and caught.value.results[0].status == "timeout"
    assert cluster.run(lambda ctx: ctx.rank).values == list(range(WORLD))
    assert cluster.server_pid == server  # the server lived on: only its workers were replaced


def _sleep_on_rank_2(ctx, seconds):
    import time

    time.sleep(seconds if ctx.rank == 2 else 0.01)
    return ctx.rank


def test_a_sigkilled_worker_is_detected_quickly_and_the_cluster_recovers(cluster):
    # warm up: the first call of a function loads it on every rank, which on a busy machine can outlast the
    # grace the other ranks get once one died
    assert cluster.run(_sleep_on_rank_2, 0).values == list(range(WORLD))
    victim = cluster.pids[2]
    timer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
    timer.start()
    begin = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        cluster.run(_sleep_on_rank_2, 60, timeout=60)
    elapsed = time.monotonic() - begin
    timer.join()
    assert not isinstance(caught.value, ClusterTimeout)
    assert elapsed < 0.5 + 2 + 1  # detected within 2 s of the kill (plus scheduling slack)
    assert caught.value.ranks == [2], str(caught.value)
    assert "rank 2 died" in str(caught.value) and "SIGKILL" in str(caught.value)
    assert caught.value.results[2].status == "died" and caught.value.results[3].value == 3
    assert not cluster.running
    assert cluster.run(lambda ctx: ctx.rank).values == list(range(WORLD))


def test_keyboard_interrupt_reaches_the_workers_and_leaves_the_cluster_usable(cluster, interrupts):
    # running before the interrupt, with the function loaded on every rank: on a busy machine loading it inside the
    # timed call could outlast the grace an interrupted rank gets to answer
    assert cluster.run(_sleep_on_rank_2, 0).values == list(range(WORLD))
    pids = cluster.pids
    timer = interrupts.after(0.5)
    begin = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cluster.run(_sleep_on_rank_2, 60, timeout=60)
    timer.join()
    assert time.monotonic() - begin < 10
    assert cluster.running and cluster.pids == pids  # the interrupted rank answered: same workers
    # messages stayed whole: the next call gets its own answers
    assert cluster.run(lambda ctx: ctx.rank).values == list(range(WORLD))


def test_an_interrupt_during_a_hang_restarts_the_workers(cluster, interrupts):
    assert cluster.run(lambda ctx: ctx.rank).values == list(range(WORLD))  # (re)started before the interrupt
    timer = interrupts.after(0.5)
    with pytest.raises(KeyboardInterrupt):
        cluster.run(_skip_the_collective_on_rank_5, timeout=60)
    timer.join()
    with pytest.warns(RuntimeWarning, match="the interrupted call stopped the workers"):
        assert cluster.run(lambda ctx: ctx.distributed.world_group.size()).values == [WORLD] * WORLD
