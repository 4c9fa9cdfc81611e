"""The worker server of a ``LocalCluster``: one fresh interpreter that imports torch once and forks the workers.

Started by the controller as ``python -m fastdist_lab.runtime.server`` in a new session (never a fork of the
notebook kernel). It reads its configuration from stdin, connects back over the authenticated channel, preloads
torch and the worker code, and then serves requests: start a generation of workers (with a fresh rendezvous store
in a process of its own, so the controller never runs a store), end them, say how they ended.

It is the child subreaper of everything below it: processes that user code forks, even into a new session, come
back to it when their parent dies, and it ends them all whenever the workers are stopped. It exits, ending its
subtree and removing the cluster's temporary directory, when told to, when the channel closes or when the
controller dies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import sys
import traceback
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
from .handshake import connect
from .procs import become_subreaper, describe_status, die_with_parent, end_subtree, raise_file_limit, reap

STORE_MEMORY_CAP = 256 << 20
"""Bytes the rendezvous store may allocate beyond what it holds at start (``RLIMIT_DATA`` of its process). A
client whose value would pass the cap is disconnected; the store itself, and the controller, carry on. Each value
is also capped at 8 MiB by torch's libuv store."""


class _Leave(BaseException):
    """Raised by SIGTERM (the controller died, or someone asked): leave the loop and clean up."""


def _leave(signum: int, frame: Any) -> None:
    raise _Leave


def _data_size() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as file:
            for line in file:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cap_memory(extra: int) -> None:
    """Limit this process's heap to what it holds now plus ``extra`` bytes (where the platform allows)."""
    size = _data_size()
    if size is None:
        return
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def _start_store(spec: WorkerSpec, channel: Channel) -> tuple[int, int]:
    """Fork the process that serves this generation's rendezvous store; returns ``(pid, port)``."""
    from .pool import loopback_listener, master_store

    listener = loopback_listener(max(128, 2 * spec.world_size))
    port = listener.getsockname()[1]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the store process
        code = 0
        try:
            os.close(read_end)
            channel.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            die_with_parent(signal.SIGKILL)
            _cap_memory(STORE_MEMORY_CAP)
            store = master_store(listener, spec.world_size, spec.timeout)
            os.write(write_end, b"ok")
            os.close(write_end)
            while store is not None:
                signal.pause()
        except BaseException as error:
            os.write(write_end, f"{type(error).__name__}: {error}".encode()[:4000])
            code = 1
        finally:
            os._exit(code)
    listener.close()
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], spec.timeout)
        answer = os.read(read_end, 4096) if ready else b"no answer"
    finally:
        os.close(read_end)
    if answer != b"ok":
        raise RuntimeError(f"the rendezvous store could not start: {answer.decode(errors='replace')}")
    return pid, port


def _fork_workers(spec: WorkerSpec, channel: Channel, authkey: bytes) -> dict[int, int]:
    from .rank_loop import worker_main

    sys.path[:] = list(spec.sys_path)
    try:
        os.chdir(spec.cwd)
    except OSError:
        pass
    me = os.getpid()
    pids = {}
    for rank in spec.ranks:
        pid = os.fork()
        if pid == 0:
            try:
                channel.close()
            finally:
                worker_main(spec, rank, me, authkey)
        pids[rank] = pid
    return pids


def _spawn(spec: WorkerSpec, channel: Channel, authkey: bytes, statuses: dict[int, int]) -> tuple[dict, int, str]:
    end_subtree(statuses)  # nothing of an earlier generation may linger
    try:
        store_pid, port = _start_store(spec, channel)
    except Exception as error:
        return {}, -1, str(error)
    return _fork_workers(dataclasses.replace(spec, store_port=port), channel, authkey), store_pid, ""


def serve(channel: Channel, authkey: bytes, parent: int, statuses: dict[int, int]) -> None:
    """Answer the controller's requests until it says ``Exit``, its channel closes or it dies."""
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
            pids, store_pid, error = _spawn(message.spec, channel, authkey, statuses)
            channel.send(Spawned(message.request, pids, store_pid, error))
        elif isinstance(message, KillWorkers):
            end_subtree(statuses)
            channel.send(WorkersKilled(message.request))
        elif isinstance(message, ExitStatuses):
            reap(statuses)
            words = {pid: describe_status(statuses.get(pid)) for pid in message.pids}
            channel.send(Statuses(message.request, words))
        else:
            return


def main() -> int:
    """Run the worker server until told to exit or until the controller goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(sys.stdin.readline())
    sys.stdin.close()
    parent = os.getppid()
    become_subreaper()
    signal.signal(signal.SIGTERM, _leave)
    if config.get("die_with_parent"):
        die_with_parent(signal.SIGTERM)
    raise_file_limit(int(config["file_limit"]))
    authkey = bytes.fromhex(config["authkey"])
    statuses: dict[int, int] = {}
    try:
        channel = connect(config["address"], authkey, timeout=float(config["timeout"]))
        channel.send(ServerStarted(os.getpid()))
        import torch  # noqa: F401 - preloaded so that forked workers start with torch imported

        from . import rank_loop  # noqa: F401

        stderr_fd = config.get("stderr_fd")
        if stderr_fd is not None:  # ready: from now on write where the controller writes
            sys.stderr.flush()
            os.dup2(stderr_fd, 2)
            os.close(stderr_fd)
        channel.send(ServerReady(os.getpid()))
        serve(channel, authkey, parent, statuses)
    except _Leave:
        pass
    except BaseException:
        traceback.print_exc()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_subtree(statuses)
        shutil.rmtree(config["tmpdir"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (torch's is slow); the subtree is already gone
