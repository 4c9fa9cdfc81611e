"""Two nodes through the real launcher: two torchrun agents on loopback (c10d rendezvous) running
``python -m fastdist_lab.worker``, and what ``LaunchedCluster`` does when rank 0 fails or the store goes away.

Every agent is started in its own session; on failure or timeout the test ends the agents it started and the
workers they forked (by pid), so nothing outlives it.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
import torch.distributed

from fastdist_lab import Layout
from fastdist_lab.errors import ClusterTimeout
from fastdist_lab.runtime import load_report
from fastdist_lab.runtime.torchrun import CALL_PREFIX, LaunchedCluster

DEADLINE = 300.0
"""Seconds a launched job may take here (a quiet machine needs about 15)."""
TWO_NODES = ["--world-size", "4", "--tp", "2", "--pp", "1", "--sdp", "1", "--backend", "gloo"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


def _descendants(pids: list[int]) -> list[int]:
    """Every living descendant of ``pids`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _started_here(tmp_path: Path) -> list[int]:
    """The living processes whose environment holds this test's private ``TMPDIR`` (what it started, and their
    children, wherever they were re-parented)."""
    marker = f"TMPDIR={tmp_path}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if marker in environ.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _end(agents: list[subprocess.Popen]) -> None:
    """End the agents still running and the workers they started: SIGTERM (torchrun then stops its workers),
    SIGKILL for whatever is left a few seconds later."""
    running = [agent for agent in agents if agent.poll() is None]
    if not running:
        return
    workers = _descendants([agent.pid for agent in running])
    for agent in running:
        agent.send_signal(signal.SIGTERM)
    time.sleep(5.0)
    for pid in workers + [agent.pid for agent in running]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for agent in running:
        agent.wait()


def _launch(tmp_path: Path, per_node: int, scripts: list[list[str]], name: str) -> list[tuple[int, str]]:
    """Run one torchrun agent of ``per_node`` ranks per entry of ``scripts`` (its node's script and arguments;
    c10d rendezvous on loopback) until they exit; returns each agent's exit code and output (stdout and stderr)."""
    endpoint = f"127.0.0.1:{_free_port()}"
    paths = [tmp_path / f"{name}-agent{node}.txt" for node in range(len(scripts))]
    agents: list[subprocess.Popen] = []
    try:
        for path, script in zip(paths, scripts):
            command = [
                sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(scripts)),
                "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                "--rdzv-id", f"{name}-{os.getpid()}", "--max-restarts", "0", *script,
            ]  # fmt: skip
            with path.open("w") as output:
                agents.append(
                    subprocess.Popen(
                        command, stdout=output, stderr=subprocess.STDOUT, env=_env(tmp_path), start_new_session=True
                    )
                )
        end = time.monotonic() + DEADLINE
        for agent in agents:
            agent.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        _end(agents)
    return [(agent.returncode, path.read_text()) for agent, path in zip(agents, paths)]


def test_two_nodes_of_two_ranks_verify_groups_and_streams(tmp_path):
    # The same flags on both nodes but each its own report path: only the node that got rank 0 writes one.
    reports = [tmp_path / f"report{node}.json" for node in range(2)]
    scripts = [["-m", "fastdist_lab.worker", *TWO_NODES, "--report", str(report)] for report in reports]
    results = _launch(tmp_path, 2, scripts, "two")
    outputs = [text for _, text in results]
    assert [code for code, _ in results] == [0, 0], "\n".join(outputs)
    written = [report for report in reports if report.exists()]
    assert len(written) == 1, "\n".join(outputs)
    text = outputs[reports.index(written[0])]
    assert "Verification OK" in text and "streams match exactly" in text and "result: OK" in text, text
    assert "hostname of the client socket" not in "".join(outputs)

    verification = load_report(written[0])
    assert verification.ok and verification.seeds_ok and verification.results.ok
    assert len(verification.results) == 4
    assert verification.layout_fields["local_world_size"] == 2  # two nodes of two ranks
    layout = Layout(world_size=4, local_world_size=2, tensor_parallel=2)
    assert layout.num_nodes == 2
    frame = verification.to_frame()
    for dim in layout.dim_names:
        assert frame[frame.dim == dim].members.tolist() == layout.groups(dim).tolist(), dim
    assert not _started_here(tmp_path)


def test_a_local_world_size_the_launcher_contradicts_exits_2_on_every_rank(tmp_path):
    # One node of the two is enough: each rank compares its flag with the launcher's LOCAL_WORLD_SIZE.
    logs = tmp_path / "logs"
    # The agent ends a failed rank's siblings at its next look; every rank must reach its check first, so it looks
    # every 5 s (not torch's 0.1 s): under load a sibling still importing was ended with an empty stderr.log.
    script = ["--log-dir", str(logs), "--redirects", "3", "--monitor-interval", "5"]
    script += ["-m", "fastdist_lab.worker", "--tp", "2", "--pp", "1"]
    script += ["--sdp", "1", "--backend", "gloo", "--local-world-size", "4"]
    [(code, text)] = _launch(tmp_path, 2, [script], "mismatch")
    assert code == 1 and "exitcode  : 2" in text, text
    errors = sorted(logs.rglob("stderr.log"))
    assert len(errors) == 2, errors
    for path in errors:
        lines = path.read_text().splitlines()
        expected = ["python -m fastdist_lab.worker: error: --local-world-size=4 but LOCAL_WORLD_SIZE=2"]
        assert lines == expected, f"{path}: {lines}; the agent said:\n{text}"
    assert not _started_here(tmp_path)


def test_a_local_world_size_mismatch_outside_the_launcher_is_one_line():
    env = {**os.environ, "WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "fastdist_lab.worker", *TWO_NODES, "--local-world-size", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "python -m fastdist_lab.worker: error: --local-world-size=4 but LOCAL_WORLD_SIZE=2"
    ]


def test_a_launcher_environment_without_its_address_is_one_line():
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    env.pop("MASTER_ADDR", None)
    command = [sys.executable, "-m", "fastdist_lab.worker", "--tp", "1", "--pp", "1", "--sdp", "1", "--backend", "gloo"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("python -m fastdist_lab.worker: error: ") and "MASTER_ADDR" in line, line


_FAILING_RANK_0 = """
import sys
from fastdist_lab import Layout
from fastdist_lab.runtime.torchrun import LaunchedCluster

with LaunchedCluster(Layout(world_size=2, local_world_size=2, backend="gloo"), 60.0) as cluster:
    if cluster.rank != 0:
        cluster.serve()
        print(f"rank {cluster.rank} released", flush=True)
        sys.exit(0)
    assert cluster.run(lambda ctx: ctx.rank).ok
    raise RuntimeError("rank 0 fails on purpose")
"""


def test_when_rank_0_raises_the_serving_ranks_are_released_and_the_job_fails(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(_FAILING_RANK_0)
    # Each rank's output goes to its own files: with one shared stream, rank 1's line landed inside rank 0's
    # traceback (an unbuffered stderr writes "RuntimeError", ": " and the message separately). The agent looks
    # every 5 s, so a released rank 1 prints before the agent ends it for rank 0's failure.
    logs = tmp_path / "logs"
    launcher = ["--log-dir", str(logs), "--redirects", "3", "--monitor-interval", "5", str(script)]
    [(code, text)] = _launch(tmp_path, 2, [launcher], "failing")
    assert code == 1, text
    assert "exitcode  : 1" in text, text
    [rank0] = [path for path in logs.rglob("stderr.log") if path.parent.name == "0"]
    [rank1] = [path for path in logs.rglob("stdout.log") if path.parent.name == "1"]
    assert "RuntimeError: rank 0 fails on purpose" in rank0.read_text(), f"{rank0.read_text()}\n{text}"
    assert "rank 1 released" in rank1.read_text(), f"{rank1.read_text()}\n{text}"
    assert not _started_here(tmp_path)


def test_a_serving_rank_whose_store_is_gone_stops_at_once_with_one_line(tmp_path):
    # The launcher's store is hosted here; one worker (rank 1 of 2) joins it, serves one call, then the store
    # goes away (as when rank 0's node stops): the worker must end at once, not retry for IDLE_LIMIT seconds.
    store = torch.distributed.TCPStore(
        "127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False
    )
    env = {
        **_env(tmp_path),
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
    }  # fmt: skip
    command = [sys.executable, "-m", "fastdist_lab.worker", "--tp", "1", "--pp", "1", "--sdp", "1"]
    command += ["--backend", "gloo"]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        store.set(f"{CALL_PREFIX}/1", cloudpickle.dumps((lambda ctx: ctx.rank * 10, ())))
        store.wait([f"{CALL_PREFIX}/1/1"], datetime.timedelta(seconds=120))  # it serves
        answer = cloudpickle.loads(store.get(f"{CALL_PREFIX}/1/1"))
        del store  # the store's server stops
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert answer.status == "ok" and cloudpickle.loads(answer.value) == 10
    assert worker.returncode == 1, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("python -m fastdist_lab.worker")]
    assert len(lines) == 1 and "worker: rank 1: the launcher's store is gone" in lines[0], stderr
    assert "Traceback" not in stderr


def _slow(ctx, seconds: list[float]) -> int:
    time.sleep(seconds[ctx.rank])
    return ctx.rank


def test_rank_0_names_a_late_rank_then_goes_on_and_close_releases_it(tmp_path, monkeypatch, capfd):
    # Also: a function rank 1 cannot load is rank 1's error, and one rank 0 cannot send numbers no call.
    only_here = tmp_path / "only_here"
    only_here.mkdir()
    (only_here / "rank0_only.py").write_text("def rank(ctx):\n    return ctx.rank\n")
    monkeypatch.syspath_prepend(str(only_here))
    from rank0_only import rank  # cloudpickle sends it by reference: rank 1 has no such module

    # Rank 0 is this test's process (it hosts the store, as env:// makes rank 0 do); rank 1 is a worker serving it.
    port = _free_port()
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in {**env, "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    command = [sys.executable, "-m", "fastdist_lab.worker", "--tp", "1", "--pp", "1", "--sdp", "1", "--backend", "gloo"]
    worker = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(tmp_path), "RANK": "1", "LOCAL_RANK": "1"},
    )
    try:
        with LaunchedCluster(Layout(world_size=2, local_world_size=2, backend="gloo"), 60.0) as cluster:
            # The deadline is the whole call's: rank 0's own 2 s count, so rank 1's answer at 3 s is late.
            with pytest.raises(ClusterTimeout, match=r"timed out after 2.5 s: rank 1 did not answer") as caught:
                cluster.run(_slow, [2.0, 3.0], timeout=2.5)
            assert caught.value.ranks == [1]
            results = cluster.run(_slow, [0.0, 0.0], timeout=60.0)  # rank 1 catches up, then answers
            assert results.ok and results.values == [0, 1]
            lock = threading.Lock()
            with pytest.raises(TypeError, match="lock"):
                cluster.run(lambda ctx: lock)
            unloadable = cluster.run(rank)
            assert unloadable.failed_ranks == [1] and unloadable.errors[1].type == "ModuleNotFoundError"
            assert cluster.run(_slow, [0.0, 0.0]).values == [0, 1]
        assert not cluster.running
        _, stderr = worker.communicate(timeout=60)  # released by close: it ends on its own
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, stderr
    assert "waitForInput" not in capfd.readouterr().err  # the store's own timeout lines are filtered
