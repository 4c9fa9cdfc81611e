"""A call on the wire, both ends: the call's messages (``Call``, ``Reply``, ``Outcome``), how a rank runs a call
into an ``Outcome`` (``execute``), how the controller reads it back (``outcome_to_result``), the ``Channel`` every
message travels on, and the controller's end over one generation of workers (``Workers``).

One module every end imports; the messages that start and stop workers are in ``server_messages``. A call is a
function and its arguments: ``execute`` runs whatever it is told (``call_target``) and knows nothing of what it does.
A worker's reply becomes a ``RankResult`` in exactly one place, ``outcome_to_result``, used by the local cluster and
by the torchrun path alike. ``Channel.receive`` names the types it accepts and refuses anything else; requests to the
server carry a number and ``Channel.ask`` drops replies to other numbers (a reply left over from an interrupted
request cannot be taken for the next one). Every channel is one end of a socket pair made by the cluster's own
processes (nothing listens for it): the server's is handed to it at launch, each worker's travels from the server to
the controller beside the ``Spawned`` reply (``Channel.send_with`` / ``receive``: file descriptors passed over the
unix socket).

``Workers`` is how a call reaches the worker processes (``cluster.perform_call``'s transport): it sends a call to
every rank, hands back the replies that arrived, tells which ranks' processes are gone (and whether the worker server
died, taking every rank with it), forwards interrupts, collects Python stacks (faulthandler dumps triggered with
SIGUSR1) and exit statuses, and stops the generation, through the three callables the worker server that forked it
passes in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import signal
import socket
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

import cloudpickle

from ..errors import ClusterTimeout, ProtocolError
from ..validation import read_tail
from .capture import OutputCapture
from .procs import hold_interrupts, interrupts_held, kill_quietly, pid_alive, process_running
from .results import GROUPS_INTERRUPTED, STATUS_ERROR, STATUS_INTERRUPTED, STATUS_OK, RankError, RankResult
from .server_messages import Exit

FATAL_QUOTED = 20000
"""The most bytes of what faulthandler wrote for a dead worker its error quotes (the end of it)."""
HANDLES_PER_MESSAGE = 250
"""File descriptors passed in one ``sendmsg`` (the kernel takes at most 253)."""
STACK_WAIT = 1.5
"""Seconds to wait for the stack dumps of ranks that did not answer."""
EXIT_WAIT = 0.5
"""Seconds workers get to leave on their own when the cluster closes."""


# ----------------------------------------------------------------------------------------------- messages
class Outcome(NamedTuple):
    """A worker's answer to one call: status, pickled value or error, captured output and duration.

    (``Outcome``, ``Call`` and ``Reply`` travel on every call: tuples, which are quicker to build and pickle.)
    """

    status: str
    value: bytes | None
    error: dict[str, str] | None
    exception: bytes | None
    stdout: str
    stderr: str
    seconds: float


class Call(NamedTuple):
    """Request to every rank: run a function; ``payload`` is ``(fn, args)``, cloudpickled across processes
    (``call_target``)."""

    call_id: int
    payload: Any


class Reply(NamedTuple):
    """A worker's answer to the call ``call_id``."""

    call_id: int
    rank: int
    outcome: Outcome


def outcome_to_result(rank: int, outcome: Outcome) -> RankResult:
    """The ``RankResult`` of one rank's ``Outcome`` (the value and exception unpickled here)."""
    status = outcome.status
    error = None if outcome.error is None else RankError(**outcome.error)
    value = None
    if outcome.value is not None:
        try:
            value = cloudpickle.loads(outcome.value)
        except Exception as caught:
            error = RankError(type(caught).__name__, f"the value could not be unpickled here: {caught}")
            status = "error"
    if error is not None and outcome.exception is not None:
        try:
            error.exception = cloudpickle.loads(outcome.exception)
        except Exception:
            error.exception = None
    return RankResult(rank, status, value, error, outcome.stdout, outcome.stderr, outcome.seconds)


# ----------------------------------------------------------------------------------------------- a call on a rank
def error_of(exception: BaseException, skip: int = 0) -> RankError:
    """A ``RankError`` for ``exception`` with its formatted traceback, leaving out the first ``skip`` frames."""
    tb = exception.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exception), exception, tb))
    return RankError(type(exception).__name__, str(exception), text)


def _pickled_exception(exception: BaseException) -> bytes | None:
    try:
        data = cloudpickle.dumps(exception)
        cloudpickle.loads(data)
        return data
    except Exception:
        return None


class UserCodeInterrupts:
    """In a worker process, SIGINT raises ``KeyboardInterrupt`` only while user code runs (``execute``); elsewhere
    (messaging) it is dropped. ``rank_loop`` installs ``handler``."""

    active = False

    @classmethod
    def handler(cls, signum: int, frame: Any) -> None:
        """The SIGINT handler of a worker process."""
        if cls.active:
            cls.active = False
            raise KeyboardInterrupt


def interrupted(caught: BaseException, ctx: Any, changes: int) -> RankError:
    """The error of a call interrupted on ``ctx``'s rank: ``GROUPS_INTERRUPTED`` when its pool created or released a
    group during the call (its pool had made ``changes`` changes before it began), else the ``KeyboardInterrupt``."""
    error = error_of(caught, skip=1)
    pool = ctx.pool
    if pool is not None and pool.changes != changes:
        error.type = GROUPS_INTERRUPTED
        error.message = "interrupted while its pool was creating or releasing process groups"
    return error


def call_target(payload: Any) -> tuple[Callable[..., Any], tuple]:
    """The function a call runs on a rank and its arguments after ``ctx``: ``payload`` is ``(fn, args)``, or their
    cloudpickled bytes (unpickled here)."""
    return payload if isinstance(payload, tuple) else cloudpickle.loads(payload)


def execute(ctx: Any, payload: Any) -> Outcome:
    """Run the call ``payload`` (``call_target``) on the rank of ``ctx`` (its ``rank_loop.RankContext``), capturing
    output, time and the value or error.

    The function is looked up (and unpickled) inside, interruptible and reported like the call itself.
    """
    out, err = OutputCapture(), OutputCapture()
    begin = time.perf_counter()
    status, value, error, exception = STATUS_OK, None, None, None
    changes = 0 if ctx.pool is None else ctx.pool.changes
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            UserCodeInterrupts.active = True
            try:
                fn, args = call_target(payload)
                value = fn(ctx, *args)
            finally:
                UserCodeInterrupts.active = False
    except KeyboardInterrupt as caught:
        status, error, exception = STATUS_INTERRUPTED, interrupted(caught, ctx, changes), caught
    except BaseException as caught:  # SystemExit included: a rank function must not end the worker
        status, error, exception = STATUS_ERROR, error_of(caught, skip=1), caught
    seconds = time.perf_counter() - begin
    value_bytes = None
    if status == STATUS_OK:
        try:
            value_bytes = cloudpickle.dumps(value)
        except Exception as caught:
            status = STATUS_ERROR
            error = RankError(
                type(caught).__name__, f"the value of type {type(value).__name__} cannot be pickled: {caught}"
            )
    return Outcome(
        status=status, value=value_bytes, error=None if error is None else error.to_dict(),
        exception=None if exception is None else _pickled_exception(exception), stdout=out.getvalue(),
        stderr=err.getvalue(), seconds=seconds,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------- channel
def _close_all(fds: Any) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Channel:
    """One connection carrying typed messages; ``peer`` names the other end in errors.

    A message with ``handles`` (a count) and ``fds`` fields travels with that many file descriptors
    (``send_with``); ``receive`` returns it with ``fds`` holding them, now open in this process.
    """

    def __init__(self, connection: Connection, peer: str):
        self.connection = connection
        self.peer = peer
        self.holds_interrupts = True
        """Whether sending and receiving hold SIGINT back (not needed where SIGINT never raises meanwhile)."""
        self._requests = 0

    def fileno(self) -> int:
        """The socket's descriptor (for ``multiprocessing.connection.wait``)."""
        return self.connection.fileno()

    def _held(self) -> contextlib.AbstractContextManager[Any]:
        if not self.holds_interrupts or interrupts_held():
            return contextlib.nullcontext()
        return hold_interrupts()

    def send(self, message: object) -> None:
        """Send one message whole (an interrupt waits until it is out)."""
        with self._held():
            self.connection.send(message)

    def send_with(self, message: Any, fds: list[int]) -> None:
        """Send ``message`` (its ``handles`` equal to ``len(fds)``) and then the descriptors ``fds``."""
        with self._held():
            self.connection.send(message)
            with socket.fromfd(self.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                for start in range(0, len(fds), HANDLES_PER_MESSAGE):
                    batch = fds[start : start + HANDLES_PER_MESSAGE]
                    socket.send_fds(sock, [bytes([len(batch)])], batch)

    def _receive_fds(self, count: int) -> tuple[int, ...]:
        fds: list[int] = []
        try:
            with socket.fromfd(self.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                while len(fds) < count:
                    data, got, flags, _ = socket.recv_fds(sock, 1, min(HANDLES_PER_MESSAGE, count - len(fds)))
                    fds += got
                    if not data:
                        raise EOFError(f"the {self.peer} closed the channel while passing descriptors")
                    if flags & getattr(socket, "MSG_CTRUNC", 0):  # the kernel could not install them all here
                        raise OSError(errno.EMFILE, f"{data[0]} descriptors passed, {len(got)} taken")
                    if len(got) != data[0]:
                        raise ProtocolError(f"the {self.peer} passed {len(got)} descriptors where {data[0]} were sent")
            for fd in fds:
                os.set_inheritable(fd, False)
        except BaseException:
            _close_all(fds)
            raise
        return tuple(fds)

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the end of the stream) is waiting."""
        return self.connection.poll(timeout)

    def receive(self, *expected: type) -> Any:
        """Take one message whole (with its descriptors); ``ProtocolError`` unless it is of one of the ``expected``
        types (its descriptors are closed then).

        Raises ``EOFError`` / ``OSError`` when the peer is gone.
        """
        with self._held():
            message = self.connection.recv()
            count = getattr(message, "handles", 0)
            if count:
                try:
                    message = dataclasses.replace(message, fds=self._receive_fds(count))
                except BaseException:
                    self.close()  # the descriptors are still on the wire: nothing after them can be read
                    raise
        if expected and not isinstance(message, expected):
            _close_all(getattr(message, "fds", ()))
            names = " or ".join(kind.__name__ for kind in expected)
            raise ProtocolError(f"{self.peer} sent {type(message).__name__} where {names} was expected")
        return message

    def ask(self, request: Any, reply_type: type, deadline: float, what: str, check: Callable[[], None]) -> Any:
        """Send ``request`` under a fresh number and wait for the ``reply_type`` with that number.

        Replies to other (earlier, interrupted) requests are dropped, with any descriptors they carried. ``check()``
        runs while waiting (it raises when the peer died); ``ClusterTimeout`` naming ``what`` once ``deadline``
        (monotonic) passes.
        """
        self._requests += 1
        number = self._requests
        asked = time.monotonic()
        self.send(dataclasses.replace(request, request=number))
        while True:
            check()
            left = deadline - time.monotonic()
            if left <= 0:  # say how long it waited and what it allowed: enough to tell a slow machine from a hang
                raise ClusterTimeout(
                    f"{what}: no answer from the {self.peer} in {time.monotonic() - asked:.1f} s "
                    f"(allowed {deadline - asked:.1f} s)"
                )
            if not self.poll(min(left, 0.2)):
                continue
            reply = self.receive()
            if getattr(reply, "request", number) != number:
                _close_all(getattr(reply, "fds", ()))
                continue  # the answer to an earlier request that an interrupt cut short
            if not isinstance(reply, reply_type):
                _close_all(getattr(reply, "fds", ()))
                raise ProtocolError(f"{self.peer} sent {type(reply).__name__} where {reply_type.__name__} was expected")
            return reply

    @property
    def closed(self) -> bool:
        """Whether this end was closed (also after a message could not be taken whole: the stream is out of step)."""
        return self.connection.closed

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.connection.close()


# ------------------------------------------------------------------------------------- a generation of workers
class Workers:
    """The workers of one generation, as a call sees them: ``pids`` and ``channels`` by rank, stack dumps under
    ``stack_dir``. The worker server (process ``server_pid``) that forked them passes ``kill(pids)`` (end them and
    their descendants, and wait until they are gone), ``statuses(pids)`` (how each ended, in words, by pid) and
    ``death()`` (its own death in words, ``None`` while it runs: ``supervisor.WorkerServer.death``)."""

    def __init__(
        self,
        pids: dict[int, int],
        stack_dir: str,
        server_pid: int,
        kill: Callable[[list[int]], None],
        statuses: Callable[[list[int]], dict[int, str]],
        death: Callable[[], str | None],
    ):
        self.pids = dict(pids)
        self.channels: dict[int, Channel] = {}
        self.stack_dir = stack_dir
        self.server_pid = server_pid
        self.kill = kill
        self.statuses = statuses
        self.death = death
        self.stopped = False

    @property
    def ranks(self) -> list[int]:
        """Every rank of this generation."""
        return sorted(self.pids)

    def adopt(self, fds: tuple[int, ...]) -> None:
        """Take the controller's ends of the workers' channels, one descriptor per rank in rank order."""
        for rank, fd in zip(self.ranks, fds):
            self.channels[rank] = Channel(Connection(fd), f"rank {rank}")

    def pid(self, rank: int) -> int | None:
        """The process id of ``rank``."""
        return self.pids.get(rank)

    @property
    def alive(self) -> bool:
        """Whether the server and every worker process still run (and the generation was not stopped).

        A worker that died a moment ago may still count until the server reaps it; a call to it then reports it.
        """
        if self.stopped or not process_running(self.server_pid):
            return False
        return all(pid_alive(pid) for pid in self.pids.values())

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
                    stacks[rank] = read_tail(path, start=offset)
                    del targets[rank]
                sizes[rank] = size
        for rank in targets:
            stacks[rank] = "(no stack: the process did not answer SIGUSR1)"
        return stacks

    def loss(self) -> str | None:
        """The worker server's death, once it died (every worker dies with it), in words to go before "died"
        (``"the worker server (pid 12, killed by SIGKILL)"``); ``None`` while it runs."""
        return self.death()

    def death_errors(self, ranks: set[int]) -> dict[int, RankError]:
        """A ``WorkerDied`` error for each of ``ranks``: how its process ended, and what faulthandler wrote."""
        statuses = self.statuses([self.pids[rank] for rank in ranks])
        errors = {}
        for rank in ranks:
            pid = self.pids[rank]
            how = statuses.get(pid, "connection lost")
            errors[rank] = RankError("WorkerDied", f"worker process {pid} died ({how})", self._fatal_text(rank))
        return errors

    def _fatal_text(self, rank: int) -> str:
        return read_tail(os.path.join(self.stack_dir, f"stack-{rank}.txt"), FATAL_QUOTED)

    def stop(self) -> None:
        """SIGKILL every worker (and whatever they started), wait until they are gone and remove the generation's
        directory (stacks, rendezvous store); idempotent."""
        with hold_interrupts():
            if not self.stopped:
                self.kill(list(self.pids.values()))
                self.stopped = True
            for channel in self.channels.values():
                channel.close()
            shutil.rmtree(self.stack_dir, ignore_errors=True)

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
