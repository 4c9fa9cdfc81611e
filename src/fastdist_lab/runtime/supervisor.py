"""Process supervision, controller side: the worker server process and the generations of workers it forks.

``WorkerServer`` owns the cluster's private temporary directory (control socket, server log, stack dumps), the
listening control socket and its ``Acceptor``, and the server process. It starts the server, asks it for workers
(``spawn`` returns a running ``Workers``), to end them, and for their exit statuses, and stops everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait

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
    WorkerFailed,
    WorkerHello,
    WorkerReady,
    Workers,
    WorkersKilled,
    WorkerSpec,
)
from .errors import ClusterError, ClusterTimeout
from .handshake import Acceptor, control_address, listen
from .procs import files_needed, hold_interrupts, kill_quietly, process_running, wait_gone
from .results import RankError, ranks_text

Report = Callable[[int, str], None]
"""``report(done, message)``: start-up progress (``done`` out of world size + 2)."""


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


class WorkerServer:
    """The worker server of one cluster: started once, it forks a fresh generation of workers on each ``spawn``."""

    def __init__(self, world_size: int, local_world_size: int, backend: str, device_type: str, timeout: float):
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.backend = backend
        self.device_type = device_type
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.tmpdir: str | None = None
        self.generation = 0
        self._listener = None
        self._acceptor: Acceptor | None = None
        self._authkey = b""
        self._address = ""

    # ------------------------------------------------------------------ state
    @property
    def alive(self) -> bool:
        """Whether the server process runs and its channel is open."""
        return self.process is not None and self.process.poll() is None and self.channel is not None

    @property
    def pid(self) -> int | None:
        """The server's process id, or ``None``."""
        return self.process.pid if self.process is not None else None

    def check(self) -> None:
        """Raise ``ClusterError`` (quoting the server's log) unless the server process runs."""
        if self.process is not None and self.process.poll() is None:
            return
        code = None if self.process is None else self.process.returncode
        try:
            with open(self._log_path(), encoding="utf-8", errors="replace") as file:
                tail = file.read()[-4000:].strip()
        except OSError:
            tail = ""
        raise ClusterError(
            f"the worker server exited (code {code})" + (f":\n{tail}" if tail else "; see its output above")
        )

    def _log_path(self) -> str:
        return os.path.join(self.tmpdir or tempfile.gettempdir(), "server.log")

    # ------------------------------------------------------------------ start
    def start(self, report: Report = _quiet) -> None:
        """Start the server process and wait until it has imported torch (raises on failure or after the timeout)."""
        deadline = time.monotonic() + self.timeout
        steps = _Steps(report)
        steps(0, "starting the worker server")
        self.tmpdir = tempfile.mkdtemp(prefix="fastdist-lab-")
        self._authkey = os.urandom(32)
        self._address = control_address(self.tmpdir)
        self._listener = listen(self._address, max(128, 2 * self.world_size))
        self._acceptor = Acceptor(self._listener, self._authkey)
        self.process = self._launch()
        channel = None
        while channel is None:
            self.check()
            steps.tick()
            self._left(deadline, "the worker server did not connect")
            ready = wait(self._acceptor.waitables(), timeout=0.2)
            done = self._acceptor.advance(ready)
            channel = done[0] if done else None
            for extra in done[1:]:
                extra.close()
        channel.peer = "worker server"
        hello = self._receive(channel, ServerStarted, deadline, "the worker server did not say hello", steps)
        if hello.pid != self.process.pid:
            raise ClusterError(f"process {hello.pid} answered instead of the worker server {self.process.pid}")
        self.channel = channel
        steps(0, "importing torch in the worker server")
        self._receive(channel, ServerReady, deadline, "the worker server did not import torch", steps)
        steps(1, "torch imported")

    def _launch(self) -> subprocess.Popen:
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
                    [sys.executable, "-m", "fastdist_lab.runtime.server"],
                    stdin=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=() if stderr_fd is None else (stderr_fd,),
                )
        finally:
            if stderr_fd is not None:
                os.close(stderr_fd)
        config = {
            "address": self._address,
            "authkey": self._authkey.hex(),
            "tmpdir": self.tmpdir,
            "stderr_fd": stderr_fd,
            "file_limit": files_needed(self.world_size),
            "timeout": self.timeout,
            # prctl's parent-death signal follows the thread that started the child: only from the main thread.
            "die_with_parent": threading.current_thread() is threading.main_thread(),
        }
        assert process.stdin is not None
        process.stdin.write((json.dumps(config) + "\n").encode())
        process.stdin.close()
        return process

    def _left(self, deadline: float, what: str) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterTimeout(f"start-up timed out after {self.timeout:g} s: {what}")
        return left

    def _receive(self, channel: Channel, kind: type, deadline: float, what: str, steps: _Steps) -> object:
        while True:
            self.check()
            steps.tick()
            if channel.poll(min(self._left(deadline, what), 0.2)):
                try:
                    return channel.receive(kind)
                except (EOFError, OSError):
                    self.check()
                    raise ClusterError(f"{what}: the channel closed") from None

    # ------------------------------------------------------------------ workers
    def spawn(self, report: Report = _quiet) -> Workers:
        """Start one worker per rank (and their store); returns them once every rank is ready."""
        if self.channel is None or self._acceptor is None or self.process is None:
            raise ClusterError("the worker server is not running")
        deadline = time.monotonic() + self.timeout
        self.generation += 1
        stack_dir = os.path.join(self.tmpdir or tempfile.gettempdir(), f"gen{self.generation}")
        os.makedirs(stack_dir, exist_ok=True)
        spec = WorkerSpec(
            ranks=tuple(range(self.world_size)),
            world_size=self.world_size,
            local_world_size=self.local_world_size,
            backend=self.backend,
            device_type=self.device_type,
            timeout=self.timeout,
            address=self._address,
            stack_dir=stack_dir,
            threads=max(1, (os.cpu_count() or 1) // self.local_world_size),
            sys_path=tuple(sys.path),
            cwd=os.getcwd(),
            store_prefix=secrets.token_hex(16),
        )
        what = "the worker server did not start the workers"
        steps = _Steps(report)
        steps(1, f"starting {self.world_size} ranks")

        def check() -> None:
            self.check()
            steps.tick()

        reply = self.channel.ask(Spawn(0, spec), Spawned, deadline, what, check)
        if reply.error:
            raise ClusterError(reply.error)
        pids = {int(rank): int(pid) for rank, pid in reply.pids.items()}
        workers = Workers(pids, stack_dir, self.process.pid, self.kill_workers, self.exit_statuses)
        try:
            self._await_ready(workers, deadline, steps)
        except BaseException:
            with hold_interrupts():
                workers.stop()
            raise
        return workers

    def _await_ready(self, workers: Workers, deadline: float, steps: _Steps) -> None:
        assert self._acceptor is not None
        unnamed: list[Channel] = []
        ready: set[int] = set()
        while len(ready) < self.world_size:
            self.check()
            steps.tick()
            left = self._left(deadline, f"{ranks_text(set(workers.pids) - ready)} did not become ready")
            gone = [rank for rank, pid in workers.pids.items() if rank not in ready and not process_running(pid)]
            if gone:
                raise ClusterError(self._start_failure(workers, gone))
            waiting = [*unnamed, *(workers.channels[r] for r in workers.channels if r not in ready)]
            readable = wait([*self._acceptor.waitables(), *waiting], timeout=min(left, 0.2))
            unnamed += self._acceptor.advance(readable)
            for item in readable:
                if not isinstance(item, Channel):
                    continue
                try:
                    message = item.receive(WorkerHello, WorkerReady, WorkerFailed)
                except (EOFError, OSError):  # its process is gone: reported with its exit status next round
                    if item in unnamed:
                        unnamed.remove(item)
                        item.close()
                    continue
                if isinstance(message, WorkerHello):
                    unnamed.remove(item)
                    workers.adopt(message.rank, message.pid, item)
                elif isinstance(message, WorkerReady):
                    ready.add(message.rank)
                    steps(1 + len(ready), f"rank {message.rank} ready")
                else:
                    error = RankError(**message.error)
                    raise ClusterError(f"rank {message.rank} could not start: {error}\n{error.traceback}")
        for channel in unnamed:
            channel.close()

    def _start_failure(self, workers: Workers, gone: list[int]) -> str:
        statuses = self.exit_statuses([workers.pids[rank] for rank in gone])
        parts = [f"rank {r} (pid {workers.pids[r]}) {statuses.get(workers.pids[r], 'exited')}" for r in gone]
        return "during start-up " + "; ".join(parts) + "; see its output above"

    def kill_workers(self, pids: list[int]) -> None:
        """End every process below the server (workers, their children, the store); ``pids`` are killed directly
        too, in case the server cannot answer."""
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
        except (OSError, EOFError, ClusterError):
            return {}
        return {int(pid): text for pid, text in reply.statuses.items()}

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """End the server and everything below it, close the control socket and remove the temporary directory.

        Interrupts wait until it is done; safe to call again (and when nothing was started).
        """
        with hold_interrupts():
            process, channel = self.process, self.channel
            if channel is not None and process is not None and process.poll() is None:
                with contextlib.suppress(OSError):
                    channel.send(Exit())
            if process is not None:
                try:
                    # without a channel it has started nothing yet, and would only wait for the controller
                    process.wait(timeout=5 if channel is not None else 0)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(process.pid, signal.SIGKILL)  # not reaped yet: its group id is still its own
                    process.wait()
            if channel is not None:
                channel.close()
            if self._acceptor is not None:
                self._acceptor.close()
            if self._listener is not None:
                self._listener.close()
            if self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.process = self.channel = self._acceptor = self._listener = self.tmpdir = None
