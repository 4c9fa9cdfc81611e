"""Attacks on a running cluster (issue 11, F1, F8, F12): each one is carried out for real and must leave the
controller alive and the cluster either working or failing cleanly. (F2, pre-written store keys, and F7, silent
clients on the control socket, have no target any more: the store is a file in the cluster's private directory and
the channels are socket pairs; ``test_isolation.py`` attacks both, with issue 23's attacks.)"""

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
import time

import psutil
import pytest

from fastdist_lab import LocalCluster

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


_CONTROLLER = textwrap.dedent(
    """
    import json, sys
    from fastdist_lab import Layout, LocalCluster
    cluster = LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60)
    assert cluster.apply(Layout(world_size=2, local_world_size=2, tensor_parallel=2)).ok  # gloo devices listen now
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
def test_a_connection_flood_on_the_clusters_ports_never_kills_the_controller(tmp_path):
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
        _read_json_line(controller, 120)
        ports = _listening_ports(_tree(controller.pid))  # the workers' gloo devices: there is no store port
        assert ports, "no listening port found"
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
