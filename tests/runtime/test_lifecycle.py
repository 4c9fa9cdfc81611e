"""Start and close leave nothing behind: no process, no listening socket, no thread, no temporary directory."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil

from fastdist_lab import LocalCluster
from fastdist_lab.runtime.procs import wait_gone


def _listening(process: psutil.Process) -> set:
    return {c.laddr for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def _children() -> set[int]:
    """Pids of this process's descendants (the shared cluster of other tests may be among them)."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


def _threads(process: psutil.Process) -> set[int]:
    """Ids of the process's threads."""
    return {thread.id for thread in process.threads()}


def _temporary_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "fastdist-lab-*")))


def test_only_the_workers_gloo_devices_listen_and_only_on_loopback(cluster):
    server = psutil.Process(cluster.server_pid)
    processes = [psutil.Process(), server.parent(), server, *server.children(recursive=True)]  # this cluster's own
    assert len(processes) == cluster.world_size + 3  # controller, guard, server, workers
    workers = set(cluster.pids)
    sockets = [c for p in processes for c in _listening(p)]
    assert len(sockets) == cluster.world_size  # one gloo device per rank; the store is a file, the channels pairs
    assert {address.ip for address in sockets} == {"127.0.0.1"}
    others = [p for p in processes if p.pid not in workers]
    assert not [c for p in others for c in _listening(p)]
    assert not [c for p in others for c in p.net_connections(kind="unix") if c.status == psutil.CONN_LISTEN]


def test_start_close_cycles_leave_nothing_behind():
    me = psutil.Process()
    import torch  # noqa: F401 - its own helper threads are there before the first cluster

    threads, dirs, children, listening = _threads(me), _temporary_dirs(), _children(), _listening(me)
    seen: list[int] = []
    for cycle in range(8):
        with LocalCluster(2, backend="gloo", progress=False, timeout=60) as cluster:
            seen += [*cluster.pids, cluster.server_pid]
            if cycle % 3 == 0:
                assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        assert not cluster.running
    assert not wait_gone(seen, 5)
    # nothing new is left: what an earlier test of this process started may end meanwhile, taking its processes,
    # threads, sockets and temporary folder with it (under pytest-xdist a worker runs files in another order than
    # one process does), which is no leftover of these cycles
    assert _children() <= children
    assert _listening(me) <= listening
    assert _threads(me) <= threads
    assert _temporary_dirs() <= dirs


def test_close_is_idempotent_and_start_reopens():
    children = _children()
    cluster = LocalCluster(2, backend="gloo", progress=False, start=False)
    assert not cluster.running
    cluster.start()
    assert cluster.run(lambda ctx: ctx.world_size).values == [2, 2]
    cluster.close()
    cluster.close()
    cluster.start()
    assert cluster.running
    cluster.close()
    assert _children() <= children  # nothing new left (what an earlier test started may end meanwhile)


def test_progress_callback_sees_every_rank_come_up():
    calls: list[tuple[int, int, str]] = []
    with LocalCluster(2, backend="gloo", progress=lambda d, t, m: calls.append((d, t, m))):
        pass
    assert calls[-1][0] == calls[-1][1] == 4
    assert [d for d, _, _ in calls] == sorted(d for d, _, _ in calls)
    assert any("rank 1 ready" in m for _, _, m in calls)


_SCRIPT = textwrap.dedent(
    """
    import sys
    from fastdist_lab import LocalCluster
    cluster = LocalCluster(2, backend="gloo", progress=False)
    print(" ".join(map(str, [*cluster.pids, cluster.server_pid])), flush=True)
    if sys.argv[1] == "wait":
        import time
        time.sleep(600)
    """
)


def _start_script(mode: str) -> tuple[subprocess.Popen, list[int]]:
    process = subprocess.Popen([sys.executable, "-c", _SCRIPT, mode], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    pids = [int(p) for p in process.stdout.readline().split()]
    assert len(pids) == 3
    return process, pids


def test_interpreter_exit_without_close_leaves_no_process():
    process, pids = _start_script("exit")
    assert process.wait(timeout=60) == 0
    assert not wait_gone(pids, 10)


def test_a_killed_controller_takes_its_workers_with_it():
    process, pids = _start_script("wait")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    begin = time.monotonic()
    assert not wait_gone(pids, 10)
    assert time.monotonic() - begin < 10


_PREWARMED = textwrap.dedent(
    """
    import sys, time
    from fastdist_lab import LocalCluster
    from fastdist_lab.runtime import supervisor
    LocalCluster.prewarm()
    spare = supervisor._spare
    spare.wait_ready(60)
    print(spare.process.pid, spare.server_pid, flush=True)
    if sys.argv[1] == "adopt":
        cluster = LocalCluster(2, backend="gloo", progress=False)
        assert cluster.server_pid == spare.server_pid and cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        print(*cluster.pids, flush=True)
    else:
        time.sleep(600 if sys.argv[1] == "wait" else 0)
    """
)


def test_a_prewarmed_server_is_adopted_and_ends_with_its_interpreter_or_its_killed_process():
    runs = {mode: subprocess.Popen([sys.executable, "-c", _PREWARMED, mode], stdout=subprocess.PIPE, text=True)
            for mode in ("adopt", "exit", "wait")}  # fmt: skip
    pids = {mode: [int(p) for p in run.stdout.readline().split()] for mode, run in runs.items()}  # type: ignore
    pids["adopt"] += [int(p) for p in runs["adopt"].stdout.readline().split()]  # type: ignore[union-attr]
    assert [len(found) for found in pids.values()] == [4, 2, 2], pids  # guard, server (and 2 workers)
    runs["wait"].kill()
    for run in runs.values():
        run.wait(timeout=60)
    assert runs["adopt"].returncode == 0 and runs["exit"].returncode == 0
    assert not wait_gone([pid for found in pids.values() for pid in found], 10)


def _slow(ctx):
    import time

    time.sleep(1.6)
    return ctx.rank


def test_a_call_slower_than_a_second_shows_a_bar_and_a_quick_one_does_not(capsys):
    with LocalCluster(2, backend="gloo", local_world_size=2, progress=True) as cluster:
        capsys.readouterr()
        assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        assert "ranks answered" not in capsys.readouterr().err
        assert cluster.run(_slow).values == [0, 1]
        err = capsys.readouterr().err
        assert "_slow" in err and "ranks answered" in err


def test_the_controller_hosts_no_store_and_listens_on_no_port():
    import torch  # noqa: F401 - imported before the count, as a notebook would have it

    me = psutil.Process()
    before = _listening(me)
    with LocalCluster(2, backend="gloo", local_world_size=2, progress=False) as cluster:
        assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        assert _listening(me) <= before  # the store lives below the worker server, never in this process


_QUIET = textwrap.dedent(
    """
    from fastdist_lab import Layout, LocalCluster
    with LocalCluster(4, backend="gloo", local_world_size=4, progress=False) as cluster:
        layout = Layout(world_size=4, local_world_size=4, tensor_parallel=2, pipeline_parallel=2)
        assert cluster.apply(layout).ok
        cluster.restart()
        print(cluster.run(lambda ctx: ctx.rank).values)
    """
)


def test_a_healthy_cluster_writes_nothing_to_stderr(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _QUIET], capture_output=True, text=True, timeout=240,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 2, 3]"
    assert done.stderr == ""
