"""Process supervision, controller side: the worker server process and the generations of workers it forks.

``WorkerServer`` owns the cluster's private temporary directory (server log, and per generation the stack dumps and
the rendezvous store file), the channel to the server (one end of a socket pair; the server got the other at
launch, so nothing ever listens for it) and the server's guard process. It launches the server, asks it for
workers (``spawn`` returns a running ``Workers``, whose channels arrive as descriptors beside the reply), to end
them, and for their exit statuses, and stops everything.

``prewarm()`` launches a server ahead of need, without waiting for it: torch imports there while the user does
something else, and the next ``LocalCluster`` adopts it (``take_spare``) instead of starting its own. A spare that
is never adopted ends at interpreter exit, or with this process, like any cluster process.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import ClusterError, ClusterTimeout
from ..formatting import ranks_text
from ..validation import read_tail
from .channel import Channel, Workers
from .procs import describe_code, files_needed, hold_interrupts, kill_quietly, preload, process_running, wait_gone
from .results import RankError
from .server import BOOTSTRAP
from .server_messages import (
    Exit,
    ExitStatuses,
    KillWorkers,
    ServerReady,
    ServerStarted,
    Spawn,
    Spawned,
    Statuses,
    WorkerFailed,
    WorkerReady,
    WorkersKilled,
    WorkerSpec,
)

Report = Callable[[int, str], None]
"""``report(done, message)``: start-up progress (``done`` out of world size + 2)."""
STOP_WAIT = 5.0
"""Seconds a server gets to end its workers and exit when the cluster closes, before its session is killed."""
SERVER_LOG_QUOTED = 4000
"""The most bytes of the worker server's log its error quotes (the end of it)."""
GUARD_WAIT = 5.0
"""Seconds to wait, once the server died, for its guard to end what was below it and exit with the server's status
(a fraction of a second on an idle machine; more on a loaded one)."""
CONTROLLER_MODULES = ("torch", "cloudpickle", "pandas", "tqdm.auto")
"""What the controller of a ``LocalCluster`` imports (the cluster's own modules need torch; results and progress need
pandas and tqdm): ``prewarm`` imports them in the background."""

_worker_modules: list[str] = []
"""Modules every worker server launched from now on imports before it forks workers (``preload_in_workers``)."""


def preload_in_workers(*modules: str) -> None:
    """Have every worker server launched from now on import ``modules`` before it forks its workers, so that each
    worker starts with them imported instead of importing them itself on first use (eight workers importing
    ``torch.distributed.pipelining`` cost eight times its 2.5 s of CPU; the server imports it once). A module that
    cannot be imported there is left to the worker's own import, which reports the error."""
    for name in modules:
        if name not in _worker_modules:
            _worker_modules.append(name)


def _quiet(done: int, message: str) -> None:
    return None


class _Steps:
    """Start-up progress: ``steps(done, message)`` reports a step; ``tick()`` repeats the last one while waiting, so
    a bar that appears only after a while (see ``progress``) shows up during a long wait too."""

    def __init__(self, report: Report):
        self.report = report
        self.done, self.message = 0, ""

    def __call__(self, done: int, message: str) -> None:
        self.done, self.message = done, message
        self.report(done, message)

    def tick(self) -> None:
        self.report(self.done, self.message)


def _descriptors_error(error: OSError, what: str) -> ClusterError:
    """``error`` in words, saying so plainly when this process ran out of file descriptors."""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        return ClusterError(
            f"{what}: this process has no file descriptor left ({error.strerror}); close files or raise its "
            "open-file limit ('ulimit -n'), then call again"
        )
    return ClusterError(f"{what}: {error}")


class WorkerServer:
    """The worker server of one cluster: launched once, it forks a fresh generation of workers on each ``spawn``.

    ``process`` is the guard (the process launched; ``server_pid`` its child, the server proper).
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.tmpdir: str | None = None
        self.server_pid: int | None = None
        self.ready = False
        self.generation = 0

    # ------------------------------------------------------------------ state
    @property
    def launched(self) -> bool:
        """Whether a server was launched, its guard still runs and its channel is open (it may still be importing
        torch)."""
        channel = self.channel
        return self.process is not None and self.process.poll() is None and channel is not None and not channel.closed

    @property
    def alive(self) -> bool:
        """Whether the server is ready and runs, with its guard and its channel open."""
        return self.launched and self.ready and self.server_pid is not None and process_running(self.server_pid)

    @property
    def pid(self) -> int | None:
        """The server's process id (the workers' parent), or ``None`` before it said hello."""
        return self.server_pid if self.launched else None

    def check(self) -> None:
        """Raise ``ClusterError`` (quoting the server's log) unless the server (and its guard) runs."""
        if self.launched and (self.server_pid is None or process_running(self.server_pid)):
            return
        death = self.death()
        tail = read_tail(self._log_path(), SERVER_LOG_QUOTED).strip()
        what = "the worker server exited" if death is None else f"{death} died"
        raise ClusterError(what + (f":\n{tail}" if tail else "; see its output above"))

    def death(self) -> str | None:
        """The process that died, once the server or its guard is gone, in words to go before "died": ``"the worker
        server (pid 12, killed by SIGKILL)"``, or ``"the worker server (pid 12; its guard, pid 11, was killed by
        SIGKILL)"`` (the server dies with its guard); ``None`` while both run, and when nothing was launched.

        How the server ended comes from its guard's exit code (the guard exits with the server's status,
        ``server.guard_main``): once the server is gone, the guard gets ``GUARD_WAIT`` seconds to exit."""
        process, server = self.process, self.server_pid
        if process is None:
            return None
        code = process.poll()
        if code is None and (server is None or process_running(server)):
            return None
        if code is None:  # the server is gone; its guard ends what was below it, then exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(GUARD_WAIT)
        pid = "" if server is None else f"pid {server}"
        if code is not None and code < 0:  # the guard itself was killed (the server follows it: parent-death)
            guard = f"its guard, pid {process.pid}, was {describe_code(code)}"
            return f"the worker server ({'; '.join(part for part in (pid, guard) if part)})"
        details = ", ".join(part for part in (pid, "" if code is None else describe_code(code)) if part)
        return "the worker server" + (f" ({details})" if details else "")

    def _log_path(self) -> str:
        return os.path.join(self.tmpdir or tempfile.gettempdir(), "server.log")

    # ------------------------------------------------------------------ start
    def launch(self) -> None:
        """Start the server process (a fresh interpreter) and return at once; ``wait_ready`` waits for it."""
        with hold_interrupts():  # whole, or not at all: an interrupt must not leave a server nobody knows of
            self.tmpdir = tempfile.mkdtemp(prefix="fastdist-lab-")
            try:
                ours, theirs = socket.socketpair()
            except OSError as error:
                raise _descriptors_error(error, "the worker server could not be started") from error
            try:
                self.process = self._popen(theirs.fileno())
            except BaseException as error:
                ours.close()
                if isinstance(error, OSError):
                    raise _descriptors_error(error, "the worker server could not be started") from error
                raise
            finally:
                theirs.close()
            self.channel = Channel(Connection(ours.detach()), "worker server")

    def _popen(self, channel_fd: int) -> subprocess.Popen:
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
        # Until it is ready, the server's stderr goes to a log whose tail a start-up error quotes; then it
        # switches to this process's stderr (handed over as an extra descriptor), which its workers inherit.
        try:
            stderr_fd: int | None = os.dup(sys.__stderr__.fileno() if sys.__stderr__ is not None else 2)
        except (OSError, ValueError, AttributeError):
            stderr_fd = None
        try:
            with open(self._log_path(), "wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-c", BOOTSTRAP],
                    stdin=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(channel_fd,) if stderr_fd is None else (channel_fd, stderr_fd),
                )
        finally:
            if stderr_fd is not None:
                os.close(stderr_fd)
        config = {
            "channel_fd": channel_fd,
            "tmpdir": self.tmpdir,
            "stderr_fd": stderr_fd,
            # prctl's parent-death signal follows the thread that started the child: only from the main thread.
            "die_with_parent": threading.current_thread() is threading.main_thread(),
            "preload": list(_worker_modules),
        }
        assert process.stdin is not None
        process.stdin.write((json.dumps(config) + "\n").encode())
        process.stdin.close()
        return process

    def wait_ready(self, timeout: float, report: Report = _quiet) -> None:
        """Wait until the launched server has imported torch (raises on failure or after ``timeout`` seconds)."""
        if self.ready:
            return
        if self.channel is None:
            raise ClusterError("the worker server was not launched")
        deadline = time.monotonic() + timeout
        steps = _Steps(report)
        steps(0, "starting the worker server (it imports torch)")
        what = "the worker server did not import torch"
        seen: dict[type, Any] = {}
        while len(seen) < 2:  # from the guard, and from the server once torch is imported: in either order
            message = self._receive((ServerStarted, ServerReady), deadline, timeout, what, steps)
            seen[type(message)] = message
            if isinstance(message, ServerStarted):
                self.server_pid = message.pid
        if seen[ServerReady].pid != self.server_pid:
            raise ClusterError(f"process {seen[ServerReady].pid} answered instead of the server {self.server_pid}")
        self.ready = True
        steps(1, "torch imported")

    def start(self, timeout: float, report: Report = _quiet) -> None:
        """Launch the server and wait until it has imported torch."""
        self.launch()
        self.wait_ready(timeout, report)

    def _receive(self, kinds: tuple[type, ...], deadline: float, timeout: float, what: str, steps: _Steps) -> Any:
        assert self.channel is not None
        while True:
            self.check()
            steps.tick()
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterTimeout(f"start-up timed out after {timeout:g} s: {what}")
            if self.channel.poll(min(left, 0.2)):
                try:
                    return self.channel.receive(*kinds)
                except (EOFError, OSError):
                    self.check()
                    raise ClusterError(f"{what}: the channel closed") from None

    # ------------------------------------------------------------------ workers
    def spawn(
        self,
        world_size: int,
        local_world_size: int,
        backend: str,
        device_type: str,
        timeout: float,
        report: Report = _quiet,
    ) -> Workers:
        """Start one worker per rank (with their rendezvous store); returns them once every rank is ready."""
        if not self.alive or self.channel is None or self.process is None or self.server_pid is None:
            raise ClusterError("the worker server is not running")
        deadline = time.monotonic() + timeout
        self.generation += 1
        stack_dir = os.path.join(self.tmpdir or tempfile.gettempdir(), f"gen{self.generation}")
        os.makedirs(stack_dir, exist_ok=True)
        spec = WorkerSpec(
            ranks=tuple(range(world_size)),
            world_size=world_size,
            local_world_size=local_world_size,
            backend=backend,
            device_type=device_type,
            timeout=timeout,
            stack_dir=stack_dir,
            store_path=os.path.join(stack_dir, "store"),
            threads=max(1, (os.cpu_count() or 1) // local_world_size),
            sys_path=tuple(sys.path),
            cwd=os.getcwd(),
            file_limit=files_needed(world_size),
        )
        steps = _Steps(report)
        steps(1, f"starting {world_size} ranks")

        def check() -> None:
            self.check()
            steps.tick()

        try:
            reply = self.channel.ask(
                Spawn(0, spec), Spawned, deadline, "the worker server did not start the workers", check
            )
        except OSError as error:
            raise _descriptors_error(error, "the workers' channels could not be taken") from error
        workers = Workers(reply.pids, stack_dir, self.server_pid, self.kill_workers, self.exit_statuses, self.death)
        try:
            if reply.error:
                raise ClusterError(reply.error)
            if len(reply.fds) != world_size:
                raise ClusterError(f"the worker server passed {len(reply.fds)} channels for {world_size} ranks")
            workers.adopt(reply.fds)
            self._await_ready(workers, deadline, timeout, steps)
        except BaseException:
            with hold_interrupts():
                for fd in reply.fds[len(workers.channels) :]:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                workers.stop()
            raise
        return workers

    def _await_ready(self, workers: Workers, deadline: float, timeout: float, steps: _Steps) -> None:
        ready: set[int] = set()
        while len(ready) < len(workers.pids):
            self.check()
            steps.tick()
            waiting = set(workers.pids) - ready
            if time.monotonic() >= deadline:
                raise ClusterTimeout(
                    f"start-up timed out after {timeout:g} s: {ranks_text(waiting)} did not become ready"
                )
            gone = [rank for rank in sorted(waiting) if not process_running(workers.pids[rank])]
            if gone:
                raise ClusterError(self._start_failure(workers, gone))
            channels = [workers.channels[rank] for rank in waiting]
            for channel in wait(channels, timeout=min(max(0.0, deadline - time.monotonic()), 0.2)):
                try:
                    message = channel.receive(WorkerReady, WorkerFailed)  # type: ignore[union-attr]
                except (EOFError, OSError):  # its process is gone: reported with its exit status next round
                    continue
                if isinstance(message, WorkerReady):
                    ready.add(message.rank)
                    steps(1 + len(ready), f"rank {message.rank} ready")
                else:
                    error = RankError(**message.error)
                    raise ClusterError(f"rank {message.rank} could not start: {error}\n{error.traceback}")

    def _start_failure(self, workers: Workers, gone: list[int]) -> str:
        statuses = self.exit_statuses([workers.pids[rank] for rank in gone])
        parts = [f"rank {r} (pid {workers.pids[r]}) {statuses.get(workers.pids[r], 'exited')}" for r in gone]
        return "during start-up " + "; ".join(parts) + "; see its output above"

    def kill_workers(self, pids: list[int]) -> None:
        """End every process below the server (workers and their children); ``pids`` are killed directly too, in
        case the server cannot answer."""
        with hold_interrupts():
            if self.alive:
                assert self.channel is not None
                with contextlib.suppress(OSError, EOFError, ClusterError):
                    self.channel.ask(KillWorkers(0), WorkersKilled, time.monotonic() + 10, "ending workers", self.check)
            for pid in pids:
                kill_quietly(pid)
            wait_gone(pids, 5)

    def exit_statuses(self, pids: list[int]) -> dict[int, str]:
        """How each of ``pids`` ended, in words (empty when the server cannot tell)."""
        if not self.alive or not pids:
            return {}
        assert self.channel is not None
        wait_gone(pids, 0.5)
        try:
            reply = self.channel.ask(
                ExitStatuses(0, tuple(pids)), Statuses, time.monotonic() + 2, "statuses", self.check
            )
        except ClusterError:  # gone (``check``), or too slow to answer
            return {}
        except (OSError, EOFError):  # its channel closed: it is exiting (told to leave, it ends its workers first);
            deadline = time.monotonic() + GUARD_WAIT  # ``death`` can tell how once it is gone
            while self.server_pid is not None and process_running(self.server_pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            return {}
        return {int(pid): text for pid, text in reply.statuses.items()}

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """End the server, its guard and everything below them, and remove the temporary directory.

        A ready server is told to exit (it ends its workers); one still starting, or one that does not exit in
        ``STOP_WAIT`` seconds, is ended by its guard (SIGTERM), and the session they started in is killed last.
        Interrupts wait until it is done; safe to call again (and when nothing was launched).
        """
        with hold_interrupts():
            process, channel = self.process, self.channel
            if process is not None and process.poll() is None:
                if channel is not None and self.ready:
                    with contextlib.suppress(OSError):
                        channel.send(Exit())
                try:
                    process.wait(timeout=STOP_WAIT if self.ready else 0)
                except subprocess.TimeoutExpired:
                    kill_quietly(process.pid, signal.SIGTERM)  # the guard ends its subtree
                    try:
                        process.wait(timeout=STOP_WAIT)
                    except subprocess.TimeoutExpired:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(process.pid, signal.SIGKILL)  # not reaped yet: its group id is still its own
                        process.wait()
            if channel is not None:
                channel.close()
            if self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.process = self.channel = self.tmpdir = self.server_pid = None
            self.ready = False


# ----------------------------------------------------------------------------------------------- a spare server
_spare: WorkerServer | None = None
_spare_lock = threading.Lock()


def prewarm() -> None:
    """Start a worker server ahead of need and return at once: torch is imported there (and the controller's own
    modules here, in the background) while you do something else, and the next ``LocalCluster`` adopts the server,
    so that its start only forks the ranks. One spare at most; it ends at interpreter exit, or when this process
    dies, like every process of a cluster. (``lab()`` calls this when it opens.)"""
    global _spare
    preload(*CONTROLLER_MODULES)
    with _spare_lock:
        if _spare is not None and _spare.launched:
            return
        server = WorkerServer()
        server.launch()
        _spare = server


def take_spare() -> WorkerServer | None:
    """The server ``prewarm`` launched, if it still runs (it is no longer the spare); else ``None``."""
    global _spare
    with _spare_lock:
        server, _spare = _spare, None
    if server is not None and not server.launched:
        server.stop()
        return None
    return server


def _stop_spare() -> None:
    server = take_spare()
    if server is not None:
        server.stop()


atexit.register(_stop_spare)
