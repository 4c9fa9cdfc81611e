"""Ranks that live in this process: one thread per rank (threaded groups) or one thread for all (fake groups).

Both are a ``cluster.CallTransport``, so a simulated world's calls go through ``cluster.perform_call`` like a
``LocalCluster``'s: the same deadline, results, ``ClusterTimeout`` with the stacks of the ranks that did not answer,
and "the workers were stopped; the next call starts fresh ones". A rank thread runs each call as a worker process
does (``channel.call_target``), without pickling anything. What a rank function prints is captured per rank
(``routed_output``: the process's ``sys.stdout`` / ``sys.stderr`` send each thread's writes to its own capture).

A thread cannot be killed. Stopping a generation of rank threads wakes those stuck in a threaded collective
(``inprocess.release_collectives``), tells the others to end after their current call, and abandons any still busy
(they are daemon threads and never answer again).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import io
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from . import turns
from .capture import OutputCapture
from .channel import Call, Reply, call_target, error_of, interrupted
from .rank_loop import RankContext
from .results import STATUS_ERROR, STATUS_INTERRUPTED, STATUS_OK, RankError, RankResult

THREAD_STACK_BYTES = 512 * 1024
"""Stack reserved for each rank thread (4,096 ranks reserve 2 GiB of address space, touched only as used)."""
STOP_GRACE = 2.0
"""Seconds stopped rank threads get to leave before they are abandoned."""
POLL = 0.2
"""Seconds between two looks at the replies of a call still running."""

_STOP = object()
_local = threading.local()
_routing_lock = threading.Lock()
_routing_depth = 0
_saved_streams: tuple[Any, Any] | None = None


class _Router(io.TextIOBase):
    """A stream sending the writes of a thread with a capture to that capture, every other write to ``target``."""

    def __init__(self, target: Any, which: int):
        super().__init__()
        self._target = target
        self._which = which

    def writable(self) -> bool:
        """Always: this is an output stream."""
        return True

    def write(self, text: str) -> int:
        """Write to the calling thread's capture, or to the stream this router replaced."""
        captures = getattr(_local, "captures", None)
        if captures is not None:
            return captures[self._which].write(text)
        return self._target.write(text)

    def flush(self) -> None:
        """Flush the replaced stream."""
        with contextlib.suppress(Exception):
            self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


@contextlib.contextmanager
def routed_output() -> Iterator[None]:
    """While the block runs, ``sys.stdout`` / ``sys.stderr`` route each rank thread's writes to its capture
    (re-entrant; the streams are put back when the outermost block ends)."""
    global _routing_depth, _saved_streams
    with _routing_lock:
        if _routing_depth == 0:
            _saved_streams = (sys.stdout, sys.stderr)
            sys.stdout, sys.stderr = _Router(sys.stdout, 0), _Router(sys.stderr, 1)
        _routing_depth += 1
    try:
        yield
    finally:
        with _routing_lock:
            _routing_depth -= 1
            if _routing_depth == 0 and _saved_streams is not None:
                sys.stdout, sys.stderr = _saved_streams
                _saved_streams = None


def execute_here(ctx: RankContext, call: Call) -> RankResult:
    """Run ``call`` on ``ctx``'s rank in this thread (``call_target``), capturing what it prints, its time and its
    value or error."""
    captures = (OutputCapture(), OutputCapture())
    _local.captures = captures
    begin = time.perf_counter()
    status, value, error = STATUS_OK, None, None
    changes = 0 if ctx.pool is None else ctx.pool.changes
    try:
        fn, args = call_target(call.payload)
        value = fn(ctx, *args)
    except KeyboardInterrupt as caught:
        status, error = STATUS_INTERRUPTED, interrupted(caught, ctx, changes)
        error.exception = caught
    except SystemExit as caught:  # torch's threaded collectives leave this way when released
        status, error = STATUS_ERROR, error_of(caught, skip=1)
        error.message = f"{caught} (a collective released after a timeout)"
    except BaseException as caught:
        status, error = STATUS_ERROR, error_of(caught, skip=1)
        error.exception = caught
    finally:
        _local.captures = None
    seconds = time.perf_counter() - begin
    return RankResult(ctx.rank, status, value, error, captures[0].getvalue(), captures[1].getvalue(), seconds)


def _stack_of(thread: threading.Thread | None) -> str:
    frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident else None  # noqa: SLF001
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no Python stack: the thread ended)"


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Have ``thread`` raise ``exception`` at its next Python instruction (not while it waits in C). The thread may
    have left the call meanwhile: its loop drops an interrupt that arrives outside a call."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))


class _Runner:
    """What both kinds of in-process ranks share: rank contexts, and the replies of the current call.

    The caller is not woken by each reply (a thread woken thousands of times would take the interpreter lock from
    the ranks every time): it looks every ``POLL`` seconds, or at once when the last rank of a call replied.
    """

    def __init__(self, contexts: list[RankContext], label: str):
        self.contexts = contexts
        self.label = label
        self.stopped = False
        self._replies: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._call_id: int | None = None
        self._answered = 0
        self._complete = threading.Event()
        self._calls: queue.SimpleQueue = queue.SimpleQueue()  # read by the dispatcher, or by the one runner thread

    @property
    def ranks(self) -> list[int]:
        """Every rank."""
        return [ctx.rank for ctx in self.contexts]

    def send(self, call: Call) -> set[int]:
        """Hand ``call`` to the rank threads (through the dispatcher, or to the one thread running every rank in rank
        order); returns the ranks whose thread ended."""
        with self._lock:
            self._call_id, self._answered = call.call_id, 0
            self._complete.clear()
        self._calls.put(call)
        return self.gone(set(self.ranks))

    def receive(self, pending: set[int], timeout: float) -> list[tuple[int, Reply | None]]:
        """The replies that arrived, waiting at most ``timeout`` (and ``POLL``) seconds unless the call is complete."""
        self._complete.wait(min(max(timeout, 0.0), POLL))
        out = []
        while self._replies:
            out.append(self._replies.popleft())
        return out

    def loss(self) -> str | None:
        """Nothing holds every rank but this process: ``None``."""
        return None

    def death_errors(self, ranks: set[int]) -> dict[int, RankError]:
        """Why each of ``ranks`` is gone."""
        return {rank: RankError("RankThreadEnded", f"the thread running rank {rank} ended") for rank in ranks}

    def pid(self, rank: int) -> int | None:
        """No process of its own: ``None``."""
        return None

    def _reply(self, call: Call, rank: int, result: RankResult) -> None:
        if self.stopped:
            return
        self._replies.append((rank, Reply(call.call_id, rank, result)))
        with self._lock:
            if call.call_id == self._call_id:
                self._answered += 1
                if self._answered == len(self.contexts):
                    self._complete.set()


class ThreadPerRank(_Runner):
    """One daemon thread per rank, each executing every call for its rank (threaded process groups).

    A dispatcher thread hands a call to the ranks one turn at a time (``runtime.turns``): never do a thousand
    threads wake at once. ``release(wait)`` (optional) frees the ranks stuck in collectives when the generation
    stops.
    """

    def __init__(self, contexts: list[RankContext], label: str, release: Callable[[Callable[[], None]], Any] | None):
        super().__init__(contexts, label)
        self._release = release
        self.turns = turns.Turns()
        self.inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in contexts]
        previous = threading.stack_size()
        threading.stack_size(THREAD_STACK_BYTES)
        try:
            self.threads = [
                threading.Thread(target=self._loop, args=(index,), name=f"{label}-rank-{ctx.rank}", daemon=True)
                for index, ctx in enumerate(contexts)
            ]
            for thread in self.threads:
                thread.start()
            self.dispatcher = threading.Thread(target=self._dispatcher, name=f"{label}-dispatch", daemon=True)
            self.dispatcher.start()
        finally:
            threading.stack_size(previous)

    def _dispatcher(self) -> None:
        while True:
            call = self._calls.get()
            if call is _STOP:
                return
            for inbox in self.inboxes:
                holding = self.turns.take()
                if self.stopped:
                    return
                inbox.put((call, holding))

    def _loop(self, index: int) -> None:
        ctx, inbox = self.contexts[index], self.inboxes[index]
        while True:
            try:
                item = inbox.get()
                if item is _STOP or self.stopped:
                    return
                call, holding = item
                turns.enter(self.turns, holding)
                try:
                    result = execute_here(ctx, call)
                finally:
                    turns.give()
                self._reply(call, ctx.rank, result)
            except KeyboardInterrupt:  # forwarded for a call this rank had left: dropped (see ``_raise_in``)
                if self.stopped:  # it may fire just after the thread took its stop message: end, never wait again
                    return

    def gone(self, ranks: set[int]) -> set[int]:
        """Those of ``ranks`` whose thread ended."""
        return {rank for rank in ranks if not self.threads[rank].is_alive()}

    def interrupt(self, ranks: set[int]) -> None:
        """Raise ``KeyboardInterrupt`` in the threads of ``ranks`` (when they next run Python code)."""
        for rank in ranks:
            _raise_in(self.threads[rank], KeyboardInterrupt)

    def stacks(self, ranks: set[int]) -> dict[int, str]:
        """The Python stack of each rank's thread."""
        return {rank: _stack_of(self.threads[rank]) for rank in ranks}

    @property
    def alive(self) -> bool:
        """Whether every rank thread runs."""
        return not self.stopped and all(thread.is_alive() for thread in self.threads)

    def stop(self) -> None:
        """End this generation: stuck collectives released, threads told to end, those still busy after
        ``STOP_GRACE`` seconds abandoned."""
        if self.stopped:
            return
        self.stopped = True
        self._calls.put(_STOP)
        for inbox in self.inboxes:
            inbox.put(_STOP)
        # the dispatcher (and any rank) may be waiting up to TURN_WAIT for a turn that a stopped rank never gives
        # back: wake them now, so that they see the stop and end within the grace, not a turn wait later
        self.turns.open(len(self.threads) + 1)
        deadline = time.monotonic() + STOP_GRACE

        def wait() -> None:
            for thread in [self.dispatcher, *self.threads]:  # the dispatcher first: a stuck rank may use up the grace
                thread.join(max(0.0, deadline - time.monotonic()))

        if self._release is not None:
            self._release(wait)
        wait()


class OneThread(_Runner):
    """One daemon thread executing every call for all ranks, one rank after another (fake process groups, whose
    collectives never wait for another rank)."""

    def __init__(self, contexts: list[RankContext], label: str):
        super().__init__(contexts, label)
        self.current: int | None = None
        self.thread = threading.Thread(target=self._loop, name=f"{label}-ranks", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            try:
                call = self._calls.get()
                if call is _STOP or self.stopped:
                    return
                for ctx in self.contexts:
                    if self.stopped:
                        return
                    self.current = ctx.rank
                    self._reply(call, ctx.rank, execute_here(ctx, call))
                self.current = None
            except KeyboardInterrupt:  # forwarded between two ranks' turns, or after the last: the rest never answer
                self.current = None
                if self.stopped:  # it may fire just after the thread took its stop message: end, never wait again
                    return

    def gone(self, ranks: set[int]) -> set[int]:
        """Every one of ``ranks`` when the runner thread ended, else none."""
        return set() if self.thread.is_alive() else set(ranks)

    def interrupt(self, ranks: set[int]) -> None:
        """Raise ``KeyboardInterrupt`` in the runner thread (in the rank it is running)."""
        _raise_in(self.thread, KeyboardInterrupt)

    def stacks(self, ranks: set[int]) -> dict[int, str]:
        """The runner's stack for the rank it is running; the others have not started."""
        current = self.current
        waiting = f"(not started: the ranks run one after another and rank {current} has not finished)\n"
        return {rank: _stack_of(self.thread) if rank == current else waiting for rank in ranks}

    @property
    def alive(self) -> bool:
        """Whether the runner thread runs."""
        return not self.stopped and self.thread.is_alive()

    def stop(self) -> None:
        """End this generation: the runner stops after its current rank (abandoned if it does not)."""
        if self.stopped:
            return
        self.stopped = True
        self._calls.put(_STOP)
        self.thread.join(STOP_GRACE)
