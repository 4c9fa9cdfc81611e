"""Turns: how many rank threads of a simulated world run Python code at once.

Thousands of threads that all want the interpreter lock at the same moment do not share it: each waiter wakes every
switch interval to ask for it, and with a thousand of them the machine spends its time in the kernel handing the lock
around (a whole 1,024-rank apply can stall for minutes). So a rank thread runs only while it holds a *turn* (one of
``Turns.count``), and gives its turn back whenever it waits: in a threaded collective (``waiting()``, used by the
threaded groups) or between calls. A thread that cannot get a turn within ``TURN_WAIT`` seconds goes on without one
(a rank function that blocks on something else than a collective while holding its turn cannot stall the world).

Threads outside a simulated world hold no ``Turns``: every function here is then a no-op.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

TURNS = 4
"""Rank threads running Python code at once."""
TURN_WAIT = 1.0
"""Seconds a rank thread waits for a turn before it goes on without one."""

_local = threading.local()


class Turns:
    """The turns of one world of rank threads."""

    def __init__(self, count: int = TURNS):
        self.count = count
        self._semaphore = threading.Semaphore(count)

    def take(self, timeout: float = TURN_WAIT) -> bool:
        """Wait (at most ``timeout`` seconds) for a turn; returns whether one was taken."""
        return self._semaphore.acquire(timeout=timeout)

    def give(self) -> None:
        """Give a turn back."""
        self._semaphore.release()

    def open(self, waiters: int) -> None:
        """Let ``waiters`` threads through at once, turn or not: the world is ending, and a thread waiting for a turn
        (up to ``TURN_WAIT`` seconds) must see that now, not after its wait."""
        self._semaphore.release(waiters)


def enter(turns: Turns | None, holding: bool) -> None:
    """Make this thread a rank thread of ``turns`` (``holding``: it already holds one of them)."""
    _local.turns, _local.holding = turns, holding


def take() -> None:
    """Take a turn for this thread, unless it holds one or belongs to no world."""
    turns = getattr(_local, "turns", None)
    if turns is not None and not _local.holding:
        _local.holding = turns.take()


def give() -> None:
    """Give this thread's turn back (if it holds one)."""
    turns = getattr(_local, "turns", None)
    if turns is not None and _local.holding:
        _local.holding = False
        turns.give()


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Around a wait for other ranks (a collective): the turn is given back during the wait, taken after."""
    give()
    try:
        yield
    finally:
        take()
