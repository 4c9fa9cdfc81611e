"""Attacks on a running cluster (issue 11, F1-F3, F7-F8, F12): each one is carried out for real and must leave the
controller alive and the cluster either working or failing cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from fastdist_lab import Layout, LocalCluster

# ----------------------------------------------------------------------------------------------- helpers


def _tree(pid: int) -> list[psutil.Process]:
    process = psutil.Process(pid)
    return [process, *process.children(recursive=True)]


def _listening_ports(processes: list[psutil.Process]) -> set[int]:
    ports = set()
    for process in processes:
        with contextlib.suppress(psutil.Error):
            for connection in process.net_connections(kind="inet"):
                if connection.status == psutil.CONN_LISTEN:
                    ports.add(connection.laddr.port)
    return ports


def _store_ports(controller: int, workers: list[int]) -> set[int]:
    """Listening loopback ports of the cluster's processes that are not workers: where its rendezvous store is."""
    return _listening_ports([p for p in _tree(controller) if p.pid not in workers])


def _cluster_store_ports(cluster: LocalCluster) -> set[int]:
    """The same for a cluster of this process: this process's own listeners and its worker server's tree, never the
    whole tree of the test runner, which may hold other clusters (session fixtures) whose ports are no store of this
    one: a store client writing to such a port waits forever."""
    return _listening_ports([psutil.Process()]) | _store_ports(cluster.server_pid, cluster.pids)


def _old_group_prefix(members: tuple[int, ...]) -> str:
    """The store prefix an attacker can predict from the member list alone (the scheme before the fix)."""
    if len(members) > 2:
        step = members[1] - members[0]
        if step > 0 and all(b - a == step for a, b in zip(members, members[1:])):
            return f"range_{members[0]}_{members[-1] + step}_{step}"
    return "ranks_" + "_".join(str(rank) for rank in members)


_CONTROLLER = textwrap.dedent(
    """
    import json, sys
    from fastdist_lab import LocalCluster
    cluster = LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60)
    print(json.dumps({"workers": cluster.pids, "server": cluster.server_pid}), flush=True)
    for line in sys.stdin:
        try:
            print(json.dumps({"values": cluster.run(lambda ctx: ctx.rank).values}), flush=True)
        except Exception as error:
            print(json.dumps({"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}), flush=True)
    cluster.close()
    """
)


def _read_json_line(process: subprocess.Popen, timeout: float) -> dict:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the controller did not answer"
    line = process.stdout.readline()
    assert line, f"the controller ended (code {process.wait()})"
    return json.loads(line)


# ----------------------------------------------------------------------------------------------- F1


@pytest.mark.timeout(240)
def test_a_connection_flood_on_the_store_never_kills_the_controller(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    flood = 1500
    if soft < flood + 500:
        if hard != resource.RLIM_INFINITY and hard < flood + 500:
            pytest.skip(f"this test process may open only {hard} files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (flood + 500, hard))

    def low_limit() -> None:  # the controller runs under the common 1,024 limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    env = dict(os.environ, TMPDIR=str(tmp_path))
    controller = subprocess.Popen(
        [sys.executable, "-c", _CONTROLLER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        preexec_fn=low_limit,
    )  # fmt: skip
    sockets: list[socket.socket] = []
    try:
        started = _read_json_line(controller, 120)
        ports = _store_ports(controller.pid, started["workers"])
        assert ports, "no store found"
        for port in ports:
            for _ in range(flood):
                attacker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                attacker.setblocking(False)
                attacker.connect_ex(("127.0.0.1", port))
                sockets.append(attacker)
        time.sleep(2)
        assert controller.poll() is None, f"the controller died during the flood (code {controller.returncode})"
        assert controller.stdin is not None
        controller.stdin.write("run\n")
        controller.stdin.flush()
        during = _read_json_line(controller, 120)
        assert "values" in during or "Error" in during["error"]  # carries on, or fails cleanly
        for attacker in sockets:
            attacker.close()
        sockets.clear()
        controller.stdin.write("run\n")
        controller.stdin.flush()
        assert _read_json_line(controller, 120) == {"values": [0, 1]}
        controller.stdin.close()
        assert controller.wait(timeout=60) == 0
    finally:
        for attacker in sockets:
            attacker.close()
        if controller.poll() is None:
            controller.kill()
            controller.wait()


# ----------------------------------------------------------------------------------------------- F2


def test_store_keys_written_in_advance_do_not_disturb_an_apply():
    import torch.distributed as dist

    layout = Layout(world_size=4, local_world_size=4, tensor_parallel=2, pipeline_parallel=2)
    with LocalCluster(4, backend="gloo", local_world_size=4, progress=False, timeout=60) as cluster:
        written = 0
        for port in _cluster_store_ports(cluster):
            try:
                client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=3))
            except Exception:  # noqa: S112 - not a store
                continue
            for dim in layout.dim_names:
                for members in layout.groups(dim).tolist():
                    prefix = _old_group_prefix(tuple(members))
                    for rank in range(len(members)):
                        client.set(f"{prefix}//0/{rank}", b"\x00attacker")
                        written += 1
        assert written
        verification = cluster.apply(layout, timeout=20)
        assert verification.ok, verification


_BIG_VALUES = textwrap.dedent(
    """
    import sys
    from datetime import timedelta
    import torch.distributed as dist
    done = 0
    for port in map(int, sys.argv[1:]):
        try:
            client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
        except Exception:
            continue
        for size, count in ((96 << 20, 1), (4 << 20, 80)):  # one value over the 8 MiB cap, then many
            for index in range(count):
                try:
                    client.set(f"attack/{size}/{index}", b"x" * size)
                    done += 1
                except Exception:
                    break
    print(done)
    """
)


def test_huge_store_values_do_not_grow_the_controller():
    me = psutil.Process()
    with LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60) as cluster:
        ports = _cluster_store_ports(cluster)
        before = me.memory_info().rss
        subprocess.run(
            [sys.executable, "-c", _BIG_VALUES, *map(str, ports)], capture_output=True, text=True, timeout=240
        )
        grown = me.memory_info().rss - before
        assert grown < 64 << 20, f"the controller grew by {grown >> 20} MiB"
        assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        assert cluster.apply(Layout(world_size=2, local_world_size=2, tensor_parallel=2)).ok


# ----------------------------------------------------------------------------------------------- F7


def _control_sockets(directory: Path) -> list[str]:
    paths = []
    for connection in psutil.Process().net_connections(kind="unix"):
        path = connection.laddr
        if isinstance(path, str) and path.startswith(str(directory)) and path not in paths:
            paths.append(path)
    return paths


def test_silent_clients_on_the_control_socket_do_not_block_a_restart(private_tmpdir):
    with LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60) as cluster:
        silent = []
        for path in _control_sockets(private_tmpdir):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            silent.append(client)
        assert silent, "no control socket found"
        released = threading.Event()

        def release() -> None:  # in case restart() waits for them: the test then fails instead of hanging
            released.set()
            for client in silent:
                client.close()

        timer = threading.Timer(90, release)
        timer.start()
        try:
            old = cluster.pids
            cluster.restart()
            assert not released.is_set(), "restart() waited for the silent clients"
            assert cluster.running and set(cluster.pids).isdisjoint(old)
            assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
        finally:
            timer.cancel()
            release()


# ----------------------------------------------------------------------------------------------- F8


def test_a_long_tmpdir_keeps_the_control_channel_working(tmp_path, monkeypatch):
    long = tmp_path / ("d" * 90)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    with LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60) as cluster:
        assert cluster.run(lambda ctx: ctx.rank).values == [0, 1]
    assert not list(long.glob("fastdist-lab-*"))


# ----------------------------------------------------------------------------------------------- F12

_LIMITED = textwrap.dedent(
    """
    import json, resource, sys
    import psutil
    from fastdist_lab import ClusterError, LocalCluster
    try:
        with LocalCluster(int(sys.argv[1]), backend="gloo", local_world_size=int(sys.argv[1]), progress=False) as c:
            limits = c.run(lambda ctx: __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0])
            print(json.dumps({"worker_soft_limits": limits.values}))
    except ClusterError as error:
        print(json.dumps({"error": str(error), "children": len(psutil.Process().children())}))
    """
)


def _run_limited(world: int, soft: int, hard: int) -> dict:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(world)], capture_output=True, text=True, timeout=240, preexec_fn=limit
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_too_low_a_file_limit_is_refused_before_anything_starts():
    result = _run_limited(16, 100, 100)
    assert "error" in result, result
    assert result["children"] == 0
    assert "100" in result["error"] and "open files" in result["error"]


def test_a_low_soft_file_limit_is_raised_for_the_workers():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit here is {hard}")
    result = _run_limited(16, 100, 4096)
    assert "worker_soft_limits" in result, result
    assert min(result["worker_soft_limits"]) > 100
