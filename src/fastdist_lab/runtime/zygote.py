"""The fork server of a ``LocalCluster``: one fresh interpreter that imports torch once and forks the workers.

Started by the controller as ``python -m fastdist_lab.runtime.zygote`` in a new session (never a fork of the
notebook kernel); it reads its channel address and authkey from stdin, connects back, preloads torch and the
worker code, and then forks one worker per rank on request. It kills its workers and exits when told to, when
the controller's channel closes, or when its parent dies.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def _reap(children: set[int], statuses: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        statuses[pid] = status


def _kill_all(children: set[int], statuses: dict[int, int]) -> None:
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in list(children):
        try:
            _, status = os.waitpid(pid, 0)
            statuses[pid] = status
        except ChildProcessError:
            pass
        children.discard(pid)


def describe_status(status: int | None) -> str:
    """Words for a ``waitpid`` status (``None``: unknown)."""
    if status is None:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    if os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}"
    return f"status {status}"


def _spawn(spec: dict[str, Any], connection: Any, children: set[int]) -> list[int]:
    from .worker import worker_main

    sys.path[:] = spec["sys_path"]
    try:
        os.chdir(spec["cwd"])
    except OSError:
        pass
    me = os.getpid()
    pids = []
    for rank in spec["ranks"]:
        pid = os.fork()
        if pid == 0:
            try:
                connection.close()
            finally:
                worker_main(spec, rank, me)
        children.add(pid)
        pids.append(pid)
    return pids


def main() -> int:
    """Run the fork server until told to exit or until the controller goes away."""
    from multiprocessing.connection import Client

    from .procs import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(sys.stdin.readline())
    sys.stdin.close()
    parent = os.getppid()
    if config.get("die_with_parent"):
        die_with_parent(signal.SIGKILL)
    authkey = bytes.fromhex(config["authkey"])
    connection = Client(config["address"], family=config["family"], authkey=authkey)
    connection.send(("zygote", os.getpid()))
    import torch  # noqa: F401 - preloaded so that forked workers start with torch imported

    from . import worker  # noqa: F401

    stderr_fd = config.get("stderr_fd")
    if stderr_fd is not None:  # ready: from now on write where the controller writes
        sys.stderr.flush()
        os.dup2(stderr_fd, 2)
        os.close(stderr_fd)
    connection.send(("zygote-ready", os.getpid()))
    children: set[int] = set()
    statuses: dict[int, int] = {}
    try:
        while True:
            _reap(children, statuses)
            if os.getppid() != parent:
                break
            try:
                if not connection.poll(0.05):
                    continue
                message = connection.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "spawn":
                spec = dict(message[1], authkey=authkey)
                connection.send(("spawned", _spawn(spec, connection, children)))
            elif kind == "kill":
                _kill_all(children, statuses)
                connection.send(("killed",))
            elif kind == "status":
                _reap(children, statuses)
                connection.send(("status", {pid: describe_status(statuses.get(pid)) for pid in message[1]}))
            elif kind == "exit":
                break
    finally:
        _kill_all(children, statuses)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (torch's is slow); the children are already gone
