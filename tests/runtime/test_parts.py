"""The runtime's parts on their own: typed channel and the descriptors it passes, output capture, progress, results
indexed by rank, the pool's one place of group creation, and the torchrun entry point's refusals."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

import pytest

from fastdist_lab import Layout
from fastdist_lab.checks.group_check import group_problems
from fastdist_lab.errors import ProtocolError
from fastdist_lab.runtime import Distributed, ProcessGroupPool, RankError, RankResult, RankResults, Verification
from fastdist_lab.runtime.capture import OutputCapture, quiet_harmless_c10d
from fastdist_lab.runtime.channel import Channel, Outcome, outcome_to_result
from fastdist_lab.runtime.progress import BAR_DELAY, ProgressBar, bar_delay, resolve_progress
from fastdist_lab.runtime.server_messages import (
    ExitStatuses,
    ServerReady,
    ServerStarted,
    Spawn,
    Spawned,
    Statuses,
    WorkerReady,
    WorkersKilled,
)
from fastdist_lab.runtime.verification import expected_groups

# ----------------------------------------------------------------------------------------------- channel


def _pair() -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    return Channel(Connection(a.detach()), "a"), Channel(Connection(b.detach()), "b")


def test_a_message_of_the_wrong_kind_is_refused_by_name():
    left, right = _pair()
    left.send(ServerStarted(123))
    with pytest.raises(ProtocolError, match="sent ServerStarted where ServerReady was expected"):
        right.receive(ServerReady)
    left.send(WorkerReady(3))
    assert right.receive(WorkerReady, ServerReady) == WorkerReady(3)


def test_an_answer_to_an_earlier_request_is_dropped_whatever_its_kind():
    left, right = _pair()
    right._requests = 1  # a first request was sent, and an interrupt cut the wait for its answer short
    left.send(WorkersKilled(1))  # ... which arrives late, ahead of the answer to the next request
    left.send(Statuses(2, {7: "exited with code 0"}))
    reply = right.ask(ExitStatuses(0, (7,)), Statuses, time.monotonic() + 5, "statuses", lambda: None)
    assert reply == Statuses(2, {7: "exited with code 0"})
    assert left.receive(ExitStatuses) == ExitStatuses(2, (7,))


def test_descriptors_travel_beside_their_message_and_a_stale_reply_takes_its_own_along():
    left, right = _pair()
    pipes = [os.pipe() for _ in range(300)]  # more than one sendmsg carries
    try:
        right._requests = 1  # a first Spawn was sent, and an interrupt cut the wait for its answer short
        stale_read, stale_write = os.pipe()
        left.send_with(Spawned(1, {0: 1}, "", 1), [stale_read])  # ... which arrives late, with its descriptor
        os.close(stale_read)
        left.send_with(Spawned(2, {}, "", len(pipes)), [read for read, _ in pipes])
        reply = right.ask(Spawn(0, None), Spawned, time.monotonic() + 5, "spawn", lambda: None)
        assert reply.request == 2 and len(reply.fds) == len(pipes)
        for (_, write), fd in zip(pipes, reply.fds):
            os.write(write, b"x")
            assert os.read(fd, 1) == b"x"  # each descriptor is its pipe's read end, in order
            os.close(fd)
        os.close(stale_write)
        assert left.receive(Spawn).request == 2
    finally:
        for read, write in pipes:
            for fd in (read, write):
                with contextlib.suppress(OSError):
                    os.close(fd)


def test_a_message_of_the_wrong_kind_closes_the_descriptors_it_carried():
    left, right = _pair()
    read, write = os.pipe()
    left.send_with(Spawned(1, {}, "", 1), [read])
    os.close(read)
    with pytest.raises(ProtocolError, match="sent Spawned where WorkersKilled"):
        right.receive(WorkersKilled)
    with pytest.raises(BrokenPipeError):  # no read end is open any more anywhere
        os.write(write, b"x")
    os.close(write)


def test_an_outcome_becomes_a_rank_result_in_one_place():
    import cloudpickle

    ok = Outcome("ok", cloudpickle.dumps({"a": 1}), None, None, "out\n", "", 0.5)
    assert outcome_to_result(3, ok) == RankResult(3, "ok", {"a": 1}, None, "out\n", "", 0.5)
    broken = Outcome("ok", b"not a pickle", None, None, "", "", 0.1)
    result = outcome_to_result(1, broken)
    assert result.status == "error" and "could not be unpickled" in str(result.error)


# ----------------------------------------------------------------------------------------------- capture


def test_output_beyond_the_limit_keeps_whole_lines_at_both_ends_with_a_marker():
    capture = OutputCapture(head=1000, tail=1000)
    lines = [f"line {i:05d}\n" for i in range(2000)]  # 11 characters each
    for line in lines:
        capture.write(line)
    text = capture.getvalue()
    head, marker, tail = text.partition("[... ")
    assert head == "".join(lines[: 1000 // 11])
    assert tail.split("\n", 1)[1] == "".join(lines[-(1000 // 11) :])
    cut = 2000 - 2 * (1000 // 11)
    assert f"{cut} lines ({cut * 11} characters) cut ...]" in tail.split("\n", 1)[0]
    short = OutputCapture(head=1000, tail=1000)
    short.write("a\nb\n")
    assert short.getvalue() == "a\nb\n"


def test_harmless_c10d_lines_are_filtered_and_the_rest_passes(capfd):
    with quiet_harmless_c10d():
        os.write(2, b"[W] [c10d] The hostname of the client socket cannot be retrieved. err=-3\n")
        os.write(2, b"a real warning\n")
    err = capfd.readouterr().err
    assert "a real warning" in err and "hostname" not in err


# ----------------------------------------------------------------------------------------------- progress


def test_progress_options():
    calls: list[tuple[int, int, str]] = []

    def callback(done: int, total: int, message: str) -> None:
        calls.append((done, total, message))

    assert resolve_progress(False) is None
    assert resolve_progress(callback) is callback
    assert isinstance(resolve_progress(True), ProgressBar)
    assert resolve_progress(None) is None  # nobody watches a test run
    with pytest.raises(TypeError, match="progress=3"):
        resolve_progress(3)  # type: ignore[arg-type]


def test_a_bar_shows_only_for_slow_work(capsys):
    quick = ProgressBar("quick", delay=10)
    quick(1, 4, "one")
    quick(4, 4, "done")
    assert capsys.readouterr().err == ""
    slow = ProgressBar("slow", delay=0)
    slow(1, 4, "rank 0 ready")
    slow(4, 4, "all ready")
    err = capsys.readouterr().err
    assert "slow" in err and "4/4" in err and "all ready" in err


@pytest.mark.parametrize(
    ("value", "delay"), [(None, BAR_DELAY), ("0", 0.0), ("2.5", 2.5), ("-1", BAR_DELAY), ("soon", BAR_DELAY)]
)
def test_the_environment_sets_the_delay_before_a_bar_and_a_bad_value_keeps_the_default(monkeypatch, value, delay):
    if value is None:
        monkeypatch.delenv("FASTDIST_LAB_BAR_DELAY", raising=False)
    else:
        monkeypatch.setenv("FASTDIST_LAB_BAR_DELAY", value)
    assert bar_delay() == delay and ProgressBar("x").delay == delay and ProgressBar("x", delay=3).delay == 3


def test_a_rank_reports_a_call_it_cannot_unpickle_as_its_own_error():
    from fastdist_lab.runtime.channel import execute
    from fastdist_lab.runtime.rank_loop import RankContext

    outcome = execute(RankContext(0, 1, None), b"not a pickle")
    result = outcome_to_result(0, outcome)
    assert result.status == "error" and result.error.type == "UnpicklingError"


# ----------------------------------------------------------------------------------------------- results


def _rows(layout: Layout, rank: int) -> dict:
    config = layout.config(rank)
    dims = [
        {"dim": name, "members": list(dim.global_ranks), "gathered": list(dim.global_ranks),
         "sum": sum(dim.global_ranks), "seconds": 0.01}
        for name, dim in config.distributed_dims.items()
    ]  # fmt: skip
    return {"rank": rank, "dims": dims, "seeds_ok": True}


def test_results_are_indexed_by_rank_and_a_missing_rank_is_reported_as_missing():
    layout = Layout(world_size=4, local_world_size=4, tensor_parallel=2, pipeline_parallel=2)
    error = RankError("RuntimeError", "gloo connect failed")
    records = [RankResult(0, "ok", _rows(layout, 0)), RankResult(1, "ok", _rows(layout, 1))]
    records.append(RankResult(3, "error", error=error))  # rank 2 sent nothing
    results = RankResults(records, world_size=4)
    assert [r.rank for r in results] == [0, 1, 2, 3]
    assert results[3].status == "error" and results[2].status == "missing"
    assert results.values[3] is None and results.values[2] is None and results.values[1] is not None
    assert results.failed_ranks == [2, 3] and sorted(results.errors) == [2, 3]
    verification = Verification.from_rank_rows(expected_groups(layout), results, judge=group_problems)
    tensor = [row for row in verification.rows if row["dim"] == "tensor" and row["members"] == [2, 3]][0]
    assert "rank 2: missing" in tensor["detail"] and "rank 3: error" in tensor["detail"]
    assert all(row["ok"] for row in verification.rows if not {2, 3} & set(row["members"]))
    # without world_size, the highest rank seen bounds the world; positions still follow ranks
    sparse = RankResults([RankResult(0, "ok", 0), RankResult(2, "ok", 2)])
    assert sparse[2].value == 2 and sparse[1].status == "missing"
    with pytest.raises(IndexError, match="rank 5"):
        sparse[5]
    with pytest.raises(ValueError, match="two results for rank 0"):
        RankResults([RankResult(0, "ok"), RankResult(0, "ok")])


def test_a_rank_result_repr_is_short():
    record = RankResult(2, "ok", list(range(10_000)), stdout="x\n" * 100_000, seconds=1.0)
    text = repr(record)
    assert len(text) < 200 and "rank=2" in text and "100,000 lines" in text


# ----------------------------------------------------------------------------------------------- pool


class _Group:
    def __init__(self, members: tuple[int, ...], group_rank: int):
        self.members, self.group_rank = members, group_rank

    def size(self) -> int:
        return len(self.members)

    def rank(self) -> int:
        return self.group_rank


class _PoolOfPlainGroups(ProcessGroupPool):
    """A pool whose groups are plain objects: only ``create_group`` differs."""

    created: list[tuple[int, ...]]

    def create_group(self, members, group_rank, name):
        self.created.append(members)
        return _Group(members, group_rank)


def test_groups_come_into_being_in_one_overridable_method_and_reuse_is_public():
    pool = _PoolOfPlainGroups(0, 8, 8, use_cpu=True, backend="gloo", store=object())
    pool.created = []
    config = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, backend="gloo").config(0)
    first = Distributed(config, use_cpu=True, pool=pool)
    assert pool.created and all(members in pool.groups for members in pool.created)
    assert first.group_created["world"] and isinstance(first.world_group, _Group)
    again = Distributed(Layout.from_config(config).config(0), use_cpu=True, pool=pool)
    assert not any(again.group_created.values())  # every group came from the pool
    assert (0, 7) not in pool.groups


def test_dead_and_upward_names_are_gone():
    from fastdist_lab.runtime import local_cluster, pool
    from fastdist_lab.runtime.local_cluster import LocalCluster

    assert not hasattr(local_cluster, "STATUSES")
    assert not hasattr(pool, "default_pool")
    assert not hasattr(LocalCluster, "device_mesh")  # the DeviceMesh check drives a cluster from above it


def test_nccl_refusals_speak_to_both_audiences():
    import torch

    if torch.cuda.is_available():
        pytest.skip("NCCL may run here")
    from fastdist_lab.errors import BackendUnavailable, ClusterError

    with pytest.raises(BackendUnavailable, match="use the gloo backend") as caught:
        ProcessGroupPool(0, 1, 1, use_cpu=False, backend="nccl")
    assert isinstance(caught.value, ClusterError) and caught.value.alternative == "gloo"
    assert "backend='gloo'" not in str(caught.value)
    env = dict(os.environ, WORLD_SIZE="1", RANK="0", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0")
    done = subprocess.run(
        [sys.executable, "-m", "fastdist_lab.worker", "--backend", "nccl", "--tp", "1", "--pp", "1", "--sdp", "1"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "use the gloo backend (--backend gloo)" in done.stderr


def test_a_world_of_one_verifies_itself_under_a_launcher(tmp_path):
    report = tmp_path / "one.json"
    env = dict(os.environ, WORLD_SIZE="1", RANK="0", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0")
    command = [sys.executable, "-m", "fastdist_lab.worker", "--tp", "1", "--pp", "1", "--sdp", "1", "--backend",
               "gloo", "--report", str(report)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    from fastdist_lab.runtime import load_report

    loaded = load_report(report)
    assert loaded.ok and loaded.results.world_size == 1 and loaded.results[0].ok
