"""The worker server serves the last of the ``Spawn`` requests waiting for it (issue 30).

Under a barrage of interrupts each cut-short call asks for fresh workers again; the server, busy forking and ending
generations, found dozens of those requests queued and served every one, so the call that finally waited timed out
after 60 s on a busy machine (``test_hardening.py``'s barrage, 3 runs of 4). These tests hand a real server loop
(``server.serve`` in a forked process, real forked workers) requests queued before it starts reading, and read
every reply it sends.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fastdist_lab.runtime.channel import Channel
from fastdist_lab.runtime.procs import end_subtree, files_needed
from fastdist_lab.runtime.server import serve
from fastdist_lab.runtime.server_messages import (
    Exit,
    ExitStatuses,
    KillWorkers,
    Spawn,
    Spawned,
    Statuses,
    WorkersKilled,
    WorkerSpec,
)

pytestmark = pytest.mark.slow


def _serve_then_end(connection: Any, parent: int) -> None:
    """The server's loop on ``connection``, then every process below it ended (what ``server_main`` does)."""
    statuses: dict[int, int] = {}
    try:
        serve(Channel(connection, "controller"), parent, statuses)
    finally:
        end_subtree(statuses)
        os._exit(0)


def _replies(requests: list[Any], tmp_path: Path) -> list[Any]:
    """Every reply the server sends to ``requests`` (queued before it reads any), up to the ``Statuses`` that the
    last request, an ``ExitStatuses``, asks for."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    channel = Channel(ours, "worker server")
    for request in requests:
        channel.send(request)
    server = context.Process(target=_serve_then_end, args=(theirs, os.getpid()), daemon=True)
    server.start()
    theirs.close()
    replies: list[Any] = []
    deadline = time.monotonic() + 120
    try:
        while not replies or not isinstance(replies[-1], Statuses):
            assert time.monotonic() < deadline, f"the server answered only {replies} in 120 s"
            if channel.poll(0.2):
                reply = channel.receive()
                for fd in getattr(reply, "fds", ()):
                    os.close(fd)
                replies.append(reply)
        channel.send(Exit())
    finally:
        server.join(30)
        if server.is_alive():
            server.kill()
            server.join(10)
        channel.close()
    assert server.exitcode == 0
    return replies


def _spec(tmp_path: Path) -> WorkerSpec:
    """One rank's workers (they never join anything here: the server ends them)."""
    return WorkerSpec(
        ranks=(0,), world_size=1, local_world_size=1, backend="gloo", device_type="cpu", timeout=10.0,
        stack_dir=str(tmp_path), store_path=str(tmp_path / "store"), threads=1, sys_path=tuple(sys.path),
        cwd=os.getcwd(), file_limit=files_needed(1),
    )  # fmt: skip


def test_only_the_last_of_the_queued_spawns_is_served(tmp_path):
    spec = _spec(tmp_path)
    replies = _replies([Spawn(n, spec) for n in range(1, 9)] + [ExitStatuses(9, ())], tmp_path)
    assert [(type(r).__name__, r.request) for r in replies] == [("Spawned", 8), ("Statuses", 9)]
    assert replies[0].error == "" and list(replies[0].pids) == [0]


def test_other_requests_between_spawns_are_answered_in_order(tmp_path):
    spec = _spec(tmp_path)
    requests = [Spawn(1, spec), KillWorkers(2), Spawn(3, spec), Spawn(4, spec), KillWorkers(5), ExitStatuses(6, ())]
    replies = _replies(requests, tmp_path)
    assert [type(r) for r in replies] == [WorkersKilled, Spawned, WorkersKilled, Statuses]
    assert [r.request for r in replies] == [2, 4, 5, 6]


def test_a_spawn_with_none_behind_it_is_served(tmp_path):
    # the control of the two above: a lone request is never dropped
    replies = _replies([Spawn(1, _spec(tmp_path)), ExitStatuses(2, ())], tmp_path)
    assert [(type(r).__name__, r.request) for r in replies] == [("Spawned", 1), ("Statuses", 2)]
