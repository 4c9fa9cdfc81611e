"""One running generation of worker processes, as the calls see it (the process side of ``CallTransport``).

``Workers`` holds each rank's channel and pid. It sends a call to every rank, hands back the replies that
arrived, tells which ranks' processes are gone, forwards interrupts, collects Python stacks (faulthandler dumps
triggered with SIGUSR1) and exit statuses, and stops the generation through the server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from multiprocessing.connection import wait
from typing import Protocol

from ..errors import ProtocolError
from .channel import Call, Channel, Exit, Reply
from .procs import hold_interrupts, kill_quietly, pid_alive, process_running
from .results import RankError


class WorkerServer(Protocol):
    """What a generation of workers asks of the server that forked them (``supervisor.WorkerServer``); declared
    here so that the supervisor, which makes the generation, and the generation do not import each other."""

    def exit_statuses(self, pids: list[int]) -> dict[int, str]:
        """How each of ``pids`` ended, in words, keyed by pid."""

    def kill_workers(self, pids: list[int]) -> None:
        """End the workers ``pids`` (and their descendants) and wait until they are gone."""


STACK_WAIT = 1.5
"""Seconds to wait for the stack dumps of ranks that did not answer."""
EXIT_WAIT = 0.5
"""Seconds workers get to leave on their own when the cluster closes."""


class Workers:
    """The workers of one generation: ``pids`` and ``channels`` by rank, stack dumps under ``stack_dir``."""

    def __init__(self, server: WorkerServer, pids: dict[int, int], stack_dir: str):
        self.server = server
        self.pids = dict(pids)
        self.channels: dict[int, Channel] = {}
        self.stack_dir = stack_dir
        self.stopped = False

    @property
    def ranks(self) -> list[int]:
        """Every rank of this generation."""
        return sorted(self.pids)

    def adopt(self, rank: int, pid: int, channel: Channel) -> None:
        """Take the channel of a worker that said hello (it must be one of this generation's, not yet seen)."""
        if self.pids.get(rank) != pid or rank in self.channels:
            channel.close()
            raise ProtocolError(f"a worker said it is rank {rank} with pid {pid}, which this generation did not start")
        channel.peer = f"rank {rank}"
        self.channels[rank] = channel

    def pid(self, rank: int) -> int | None:
        """The process id of ``rank``."""
        return self.pids.get(rank)

    @property
    def alive(self) -> bool:
        """Whether every worker process still exists (and the generation was not stopped).

        A worker that died a moment ago may still count until the server reaps it; a call to it then reports it.
        """
        return not self.stopped and all(pid_alive(pid) for pid in self.pids.values())

    # ------------------------------------------------------------------ the call transport
    def send(self, call: Call) -> set[int]:
        """Send ``call`` to every rank; returns the ranks it could not reach."""
        unreachable = set()
        for rank in self.ranks:
            try:
                self.channels[rank].send(call)
            except (OSError, KeyError):
                unreachable.add(rank)
        return unreachable

    def receive(self, pending: set[int], timeout: float) -> list[tuple[int, Reply | None]]:
        """Replies of ``pending`` ranks that arrive within ``timeout`` (``None``: that rank's channel closed)."""
        by_channel = {self.channels[rank]: rank for rank in pending if rank in self.channels}
        arrived: list[tuple[int, Reply | None]] = []
        for channel in wait(list(by_channel), timeout=timeout):
            rank = by_channel[channel]  # type: ignore[index]
            try:
                arrived.append((rank, channel.receive(Reply)))  # type: ignore[union-attr]
            except (EOFError, OSError):
                arrived.append((rank, None))
        return arrived

    def gone(self, ranks: set[int]) -> set[int]:
        """Those of ``ranks`` whose process has exited."""
        return {rank for rank in ranks if not process_running(self.pids[rank])}

    def interrupt(self, ranks: set[int]) -> None:
        """Forward a KeyboardInterrupt (SIGINT) to ``ranks``."""
        for rank in ranks:
            kill_quietly(self.pids[rank], signal.SIGINT)

    def stacks(self, ranks: set[int]) -> dict[int, str]:
        """Python stacks of ``ranks``: SIGUSR1 makes each dump its threads to its stack file."""
        targets: dict[int, tuple[str, int]] = {}
        for rank in ranks:
            path = os.path.join(self.stack_dir, f"stack-{rank}.txt")
            if not process_running(self.pids[rank]):
                continue
            try:
                targets[rank] = (path, os.path.getsize(path))
            except OSError:
                continue
            kill_quietly(self.pids[rank], signal.SIGUSR1)
        stacks: dict[int, str] = {}
        sizes: dict[int, int] = {}
        deadline = time.monotonic() + STACK_WAIT
        while targets and time.monotonic() < deadline:
            time.sleep(0.05)
            for rank, (path, offset) in list(targets.items()):
                size = os.path.getsize(path)
                if size > offset and sizes.get(rank) == size:  # grew and then stopped growing
                    with open(path, encoding="utf-8", errors="replace") as file:
                        file.seek(offset)
                        stacks[rank] = file.read()
                    del targets[rank]
                sizes[rank] = size
        for rank in targets:
            stacks[rank] = "(no stack: the process did not answer SIGUSR1)"
        return stacks

    def death_errors(self, ranks: set[int]) -> dict[int, RankError]:
        """A ``WorkerDied`` error for each of ``ranks``: how its process ended, and what faulthandler wrote."""
        statuses = self.server.exit_statuses([self.pids[rank] for rank in ranks])
        errors = {}
        for rank in ranks:
            pid = self.pids[rank]
            how = statuses.get(pid, "connection lost")
            errors[rank] = RankError("WorkerDied", f"worker process {pid} died ({how})", self._fatal_text(rank))
        return errors

    def _fatal_text(self, rank: int) -> str:
        try:
            with open(os.path.join(self.stack_dir, f"stack-{rank}.txt"), encoding="utf-8", errors="replace") as file:
                return file.read()[-20000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL every worker (and whatever they started) and wait until they are gone; idempotent."""
        with hold_interrupts():
            if not self.stopped:
                self.server.kill_workers(list(self.pids.values()))
                self.stopped = True
            for channel in self.channels.values():
                channel.close()

    def exit(self) -> None:
        """Ask every worker to leave, give them ``EXIT_WAIT`` seconds, then stop whatever is left."""
        with hold_interrupts():
            if not self.stopped:
                for channel in self.channels.values():
                    with contextlib.suppress(OSError):
                        channel.send(Exit())
                deadline = time.monotonic() + EXIT_WAIT
                open_channels = list(self.channels.values())
                while open_channels and time.monotonic() < deadline:
                    for channel in wait(open_channels, timeout=max(0.0, deadline - time.monotonic())):
                        try:
                            channel.receive()  # type: ignore[union-attr]
                        except (EOFError, OSError):
                            open_channels.remove(channel)  # type: ignore[arg-type]
            self.stop()

    def leftover(self) -> list[int]:
        """Worker pids that still exist (normally none after ``stop``)."""
        return [pid for pid in self.pids.values() if pid_alive(pid)]
