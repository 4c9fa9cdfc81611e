"""The worker server of a ``LocalCluster``: one fresh interpreter that imports torch once and forks the workers,
under a guard that outlives it (ARCHITECTURE.md, "Runtime", process supervision).

Started by the controller as ``python -c BOOTSTRAP`` in a new session (never a fork of the notebook kernel), with
its channel handed over as one end of a socket pair. The process started is the **guard**, a child subreaper that
forks the **server** at once and then only reaps; the server serves requests: start a generation of workers, end
them, say how they ended. The server ends its subtree whenever the workers are stopped and when it exits (told to,
its channel closed, the guard gone); the guard ends everything left below it and removes the cluster's temporary
directory once the server is gone, and when the controller dies.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from .channel import Channel
from .procs import (
    become_subreaper,
    describe_status,
    die_by,
    die_with_parent,
    end_subtree,
    raise_file_limit,
    reap,
    status_to_code,
)
from .server_messages import (
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

__all__ = ["BOOTSTRAP", "guard_main", "serve", "server_main"]  # the two mains are called by BOOTSTRAP's text

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
    with contextlib.suppress(OSError):
        os.chdir(spec.cwd)
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
    """Answer the controller's requests until it says ``Exit``, the channel closes or the guard is gone.

    The controller asks one thing at a time, so a ``Spawn`` with a later one already waiting behind it was given up
    (an interrupt cut that call short and the next call asked again): only the last is served. Serving each in turn
    would fork and end a generation of workers per interrupt, and the call that finally waits would wait for all of
    them (a barrage of interrupts on a busy machine queued more than a minute of them, issue 30).
    """
    waiting: list[Any] = []
    while True:
        reap(statuses)
        if os.getppid() != parent:
            return
        try:
            if not waiting:
                if not channel.poll(0.05):
                    continue
                waiting.append(channel.receive(Spawn, KillWorkers, ExitStatuses, Exit))
            while channel.poll(0):  # what is already sent, so that a given-up Spawn is seen as such
                waiting.append(channel.receive(Spawn, KillWorkers, ExitStatuses, Exit))
        except (EOFError, OSError):
            return
        message = waiting.pop(0)
        if isinstance(message, Spawn):
            if not any(isinstance(later, Spawn) for later in waiting):
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


def server_main(config: dict[str, Any], guard: int) -> None:
    """The server's life, in the guard's child (torch already imported by ``BOOTSTRAP``): say it is ready, serve,
    end the subtree on the way out; never returns."""
    die_with_parent(signal.SIGKILL)
    statuses: dict[int, int] = {}
    code = 0
    try:
        if os.getppid() != guard:  # the guard died before prctl took effect
            return
        become_subreaper()
        signal.signal(signal.SIGTERM, _leave)
        channel = Channel(Connection(int(config["channel_fd"])), "controller")
        channel.holds_interrupts = False  # SIGINT is ignored here
        from . import rank_loop  # noqa: F401 - preloaded so that forked workers start with it imported
        for name in config.get("preload", ()):  # supervisor.preload_in_workers: once here, not in every worker
            with contextlib.suppress(Exception):
                importlib.import_module(name)

        stderr_fd = config.get("stderr_fd")
        if stderr_fd is not None:  # ready: from now on write where the controller writes
            sys.stderr.flush()
            os.dup2(stderr_fd, 2)
            os.close(stderr_fd)
        channel.send(ServerReady(os.getpid()))
        serve(channel, guard, statuses)
    except _Leave:
        code = -signal.SIGTERM
    except (EOFError, BrokenPipeError):
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_subtree(statuses)
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:  # told to leave (SIGTERM): its guard sees it ended so, and tells the controller
            die_by(-code)
        os._exit(code)  # skip interpreter teardown (torch's is slow); the subtree is already gone


# ----------------------------------------------------------------------------------------------- the guard
def _reap_until_gone(parent: int, server: int, statuses: dict[int, int]) -> None:
    """Reap whatever comes back to the guard until the server is gone or the controller (``parent``) is."""
    waits = hasattr(signal, "sigtimedwait")  # Linux: woken by each child's end; elsewhere: a look every tick
    if waits:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        reap(statuses)
        if server in statuses or os.getppid() != parent:
            return
        if waits:
            signal.sigtimedwait({signal.SIGCHLD}, GUARD_TICK)
        else:
            time.sleep(GUARD_TICK)


def guard_main(config: dict[str, Any], parent: int, server: int) -> None:
    """The guard's life, once it forked the ``server``: tell the controller the server's pid, then reap until the
    server or the controller (``parent``) is gone; end everything below and remove the cluster's directory.

    It exits with the server's status as a shell passes it on (``procs.status_to_code``: 137 when the server was
    killed by SIGKILL), so that the controller can say how the server died; told to leave (SIGTERM), it ends by
    SIGTERM itself."""
    statuses: dict[int, int] = {}
    code = 0
    try:
        become_subreaper()
        if config.get("die_with_parent"):
            die_with_parent(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _leave)
        if os.getppid() == parent:  # else the controller died before prctl took effect
            channel = Channel(Connection(int(config["channel_fd"])), "controller")
            channel.holds_interrupts = False
            with contextlib.suppress(OSError):
                channel.send(ServerStarted(server))
            channel.close()
            if config.get("stderr_fd") is not None:
                os.close(config["stderr_fd"])
            _reap_until_gone(parent, server, statuses)
            code = status_to_code(statuses.get(server))
    except _Leave:
        code = -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_subtree(statuses)
        shutil.rmtree(config["tmpdir"], ignore_errors=True)
        if code < 0:  # told to leave (SIGTERM): the controller sees the guard ended by it
            die_by(-code)
        os._exit(code)


BOOTSTRAP = """\
import json, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
config = json.loads(sys.stdin.readline())
sys.stdin.close()
controller, guard = os.getppid(), os.getpid()
server = os.fork()
if server == 0:
    import torch  # at once: the longest step of a cold start, beside the guard's own start
    from fastdist_lab.runtime.server import server_main
    server_main(config, guard)
from fastdist_lab.runtime.server import guard_main
guard_main(config, controller, server)
"""
"""What ``python -c`` runs in the process the controller launches: read the configuration, fork the server (which
imports torch first thing) and become its guard. Nothing of the package is imported before the fork."""
