"""The worker server of a ``LocalCluster``: one fresh interpreter that imports torch once and forks the workers,
under a guard that outlives it.

Started by the controller as ``python -m fastdist_lab.runtime.server`` in a new session (never a fork of the
notebook kernel), with its channel handed over as one end of a socket pair: nothing listens, so no other process
can reach it. The process started is the **guard**, a small child subreaper that forks the **server** and then only
reaps. The server preloads torch and the worker code and serves requests: start a generation of workers (each with
its own end of a fresh socket pair, whose other end travels to the controller beside the reply, and a rendezvous
store file in the generation's private directory), end them, say how they ended.

Both are child subreapers: what user code forks, even into a new session, comes back to the server when its parent
dies, and to the guard when the server itself is gone, even SIGKILLed (the workers then die by their parent-death
signal, and whatever they started is the guard's to end). The server ends its subtree whenever the workers are
stopped and when it exits (told to, its channel closed, the guard gone); the guard ends everything left below it and
removes the cluster's temporary directory once the server is gone, and when the controller dies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from .channel import (
    Channel,
    Exit,
    ExitStatuses,
    KillWorkers,
    ServerReady,
    ServerStarted,
    Spawn,
    Spawned,
    Statuses,
    WorkersKilled,
    WorkerSpec,
)
from .procs import become_subreaper, describe_status, die_with_parent, end_subtree, raise_file_limit, reap

GUARD_TICK = 0.25
"""Seconds between two looks of the guard at its parent (the controller) while nothing else happens."""


class _Leave(BaseException):
    """Raised by SIGTERM (the controller died, or someone asked): leave the loop and clean up."""


def _leave(signum: int, frame: Any) -> None:
    raise _Leave


# ----------------------------------------------------------------------------------------------- the server
def _fork_workers(spec: WorkerSpec, channel: Channel) -> tuple[dict[int, int], list[socket.socket]]:
    """Fork one worker per rank, each with its end of a fresh socket pair; returns the pids and the other ends."""
    from .rank_loop import worker_main

    sys.path[:] = list(spec.sys_path)
    try:
        os.chdir(spec.cwd)
    except OSError:
        pass
    me = os.getpid()
    pids: dict[int, int] = {}
    ends: list[socket.socket] = []
    try:
        for rank in spec.ranks:
            mine, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                try:
                    for other in (mine, *ends):
                        other.close()
                    channel.close()
                finally:
                    worker_main(spec, rank, me, theirs)
            theirs.close()
            ends.append(mine)
            pids[rank] = pid
    except BaseException:
        for end in ends:
            end.close()
        raise
    return pids, ends


def _spawn(request: int, spec: WorkerSpec, channel: Channel, statuses: dict[int, int]) -> None:
    """Answer ``Spawn``: the earlier generation ended, the new one forked, its channels sent to the controller."""
    end_subtree(statuses)  # nothing of an earlier generation may linger
    raise_file_limit(spec.file_limit)
    try:
        pids, ends = _fork_workers(spec, channel)
    except OSError as error:
        end_subtree(statuses)
        channel.send(Spawned(request, {}, f"the worker server could not start the workers: {error}"))
        return
    try:
        channel.send_with(Spawned(request, pids, "", len(ends)), [end.fileno() for end in ends])
    finally:
        for end in ends:
            end.close()


def serve(channel: Channel, parent: int, statuses: dict[int, int]) -> None:
    """Answer the controller's requests until it says ``Exit``, the channel closes or the guard is gone."""
    while True:
        reap(statuses)
        if os.getppid() != parent:
            return
        try:
            if not channel.poll(0.05):
                continue
            message = channel.receive(Spawn, KillWorkers, ExitStatuses, Exit)
        except (EOFError, OSError):
            return
        if isinstance(message, Spawn):
            _spawn(message.request, message.spec, channel, statuses)
        elif isinstance(message, KillWorkers):
            end_subtree(statuses)
            channel.send(WorkersKilled(message.request))
        elif isinstance(message, ExitStatuses):
            reap(statuses)
            words = {pid: describe_status(statuses.get(pid)) for pid in message.pids}
            channel.send(Statuses(message.request, words))
        else:
            return


def _server(config: dict[str, Any], guard: int) -> int:
    """The server's life (in the guard's child): preload torch, say so, serve; end the subtree on the way out."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != guard:  # the guard died before prctl took effect
        return 1
    become_subreaper()
    channel = Channel(Connection(int(config["channel_fd"])), "controller")
    channel.holds_interrupts = False  # SIGINT is ignored here
    statuses: dict[int, int] = {}
    try:
        channel.send(ServerStarted(os.getpid()))
        import torch  # noqa: F401 - preloaded so that forked workers start with torch imported

        from . import rank_loop  # noqa: F401

        stderr_fd = config.get("stderr_fd")
        if stderr_fd is not None:  # ready: from now on write where the controller writes
            sys.stderr.flush()
            os.dup2(stderr_fd, 2)
            os.close(stderr_fd)
        channel.send(ServerReady(os.getpid()))
        serve(channel, guard, statuses)
    except (_Leave, EOFError, BrokenPipeError):
        pass
    except BaseException:
        traceback.print_exc()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_subtree(statuses)
    return 0


# ----------------------------------------------------------------------------------------------- the guard
def _guard(parent: int, server: int, statuses: dict[int, int]) -> None:
    """Reap whatever comes back to the guard until the server is gone or the controller (``parent``) is."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        reap(statuses)
        if server in statuses or os.getppid() != parent:
            return
        signal.sigtimedwait({signal.SIGCHLD}, GUARD_TICK)


def main() -> int:
    """The guard: fork the server, then reap until it is gone; end everything below and clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(sys.stdin.readline())
    sys.stdin.close()
    parent = os.getppid()
    become_subreaper()
    if config.get("die_with_parent"):
        die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _leave)
    statuses: dict[int, int] = {}
    try:
        if os.getppid() != parent:  # the controller died before prctl took effect
            return 0
        guard = os.getpid()
        server = os.fork()
        if server == 0:
            code = 1
            try:
                code = _server(config, guard)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        for fd in (config["channel_fd"], config.get("stderr_fd")):
            if fd is not None:
                os.close(fd)
        _guard(parent, server, statuses)
    except _Leave:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_subtree(statuses)
        shutil.rmtree(config["tmpdir"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown; the subtree is already gone
