"""Calls on every rank: deadline, collection of the replies, interrupts, and the text of a failure.

``perform_call`` drives any ``CallTransport`` (the worker processes of a ``LocalCluster``, or another kind of
world with the same five verbs), so every cluster shares one behaviour: a rank that raises is reported in the
results; a rank whose process dies ends the call within about a second (``ClusterError``); ranks that do not
answer by the deadline end it with their Python stacks, identical stacks shown once (``ClusterTimeout``); a
KeyboardInterrupt is forwarded to the ranks, which get a grace period to answer. Whenever not every rank
answered, the workers are stopped before the call returns, even if another interrupt arrives meanwhile.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ClusterError, ClusterTimeout
from ..formatting import ranks_text
from .channel import Call, Reply, outcome_to_result
from .procs import hold_interrupts
from .progress import ProgressCallback, finish
from .results import STATUS_DIED, STATUS_TIMEOUT, RankError, RankResult, RankResults

DEATH_GRACE = 1.0
"""Seconds the other ranks still get to answer once one rank died during a call."""
INTERRUPT_GRACE = 2.0
"""Seconds ranks get to answer after a KeyboardInterrupt was forwarded to them."""
LIVENESS_EVERY = 0.25
"""Seconds between two checks that the processes of the ranks still awaited are alive."""
TICK = 0.5
"""Seconds between two progress reports while nothing arrives."""
STACKS_SHOWN = 8
"""Distinct stacks written out in a timeout message (all of them stay in ``ClusterTimeout.stacks``)."""


class CallTransport(Protocol):
    """What ``perform_call`` needs from a world of ranks."""

    @property
    def ranks(self) -> list[int]:
        """Every rank."""
        ...

    def send(self, call: Call) -> set[int]:
        """Send ``call`` to every rank; returns those it could not reach."""
        ...

    def receive(self, pending: set[int], timeout: float) -> list[tuple[int, Reply | None]]:
        """Replies of ``pending`` ranks arriving within ``timeout`` (``None``: the rank is gone)."""
        ...

    def gone(self, ranks: set[int]) -> set[int]:
        """Those of ``ranks`` that can no longer answer."""
        ...

    def interrupt(self, ranks: set[int]) -> None:
        """Deliver a KeyboardInterrupt to ``ranks``."""
        ...

    def stacks(self, ranks: set[int]) -> dict[int, str]:
        """The Python stacks of ``ranks``."""
        ...

    def death_errors(self, ranks: set[int]) -> dict[int, RankError]:
        """Why each of ``ranks`` is gone."""
        ...

    def pid(self, rank: int) -> int | None:
        """A process id to show for ``rank`` (``None`` where there is none)."""
        ...

    def stop(self) -> None:
        """Stop every rank (the next call starts fresh ones)."""
        ...


@dataclass
class CallState:
    """Where a call stands: replies recorded, ranks still awaited, ranks gone. ``limit`` is the call's deadline in
    seconds, of which ``waited`` were spent before it was sent (waiting for an earlier call). ``settled`` turns
    true once every rank answered or the ranks were stopped: only then may the next call use them as they are."""

    call: Call
    label: str
    limit: float
    ranks: list[int]
    waited: float = 0.0
    records: dict[int, RankResult] = field(default_factory=dict)
    pending: set[int] = field(default_factory=set)
    dead: set[int] = field(default_factory=set)
    settled: bool = False


def _collect(transport: CallTransport, state: CallState, deadline: float, progress: ProgressCallback | None) -> None:
    """Take replies until every awaited rank answered, or one is gone (the others get ``DEATH_GRACE`` more), or
    ``deadline`` (monotonic) passes. Replies to other calls are dropped."""
    total = len(state.ranks)
    death_cutoff: float | None = None
    next_tick = time.monotonic()
    next_check = next_tick + LIVENESS_EVERY  # a death closes the channel at once; the check is for the rest
    with hold_interrupts() as held:  # an interrupt is taken between two rounds, never in the middle of one
        while state.pending:
            held.deliver()
            now = time.monotonic()
            if state.dead and death_cutoff is None:
                death_cutoff = now + DEATH_GRACE
            cutoff = deadline if death_cutoff is None else min(deadline, death_cutoff)
            if now >= cutoff:
                return
            _take(state, transport.receive(state.pending, min(cutoff - now, LIVENESS_EVERY)))
            now = time.monotonic()
            if now >= next_check:
                gone = transport.gone(state.pending)
                state.pending -= gone
                state.dead |= gone
                next_check = now + LIVENESS_EVERY
            if progress is not None and (now >= next_tick or not state.pending):
                done = len(state.records)
                progress(done, total, f"{state.label}: {done} of {total} ranks answered")
                next_tick = now + TICK


def _take(state: CallState, arrived: list[tuple[int, Reply | None]]) -> None:
    """Record replies to this call (others are late answers to earlier calls, dropped) and closed channels."""
    for rank, reply in arrived:
        if reply is None:
            state.pending.discard(rank)
            state.dead.add(rank)
        elif reply.call_id == state.call.call_id:
            outcome = reply.outcome  # a worker's pickled outcome, or the result of a rank in this process
            state.records[rank] = outcome if isinstance(outcome, RankResult) else outcome_to_result(rank, outcome)
            state.pending.discard(rank)


def perform_call(
    transport: CallTransport,
    state: CallState,
    coordinates: list[dict[str, int]] | None = None,
    progress: ProgressCallback | None = None,
) -> RankResults:
    """Send ``state.call`` to every rank and return every rank's result (see the module docstring for failures).

    ``state`` is the caller's: after any exit, ``state.settled`` says whether the ranks are ready for another call.
    """
    stop = True
    try:
        with hold_interrupts():
            unreachable = transport.send(state.call)
        state.dead |= unreachable
        state.pending = set(state.ranks) - unreachable
        try:
            _collect(transport, state, time.monotonic() + state.limit - state.waited, progress)
        except KeyboardInterrupt:
            transport.interrupt(state.pending)
            with contextlib.suppress(KeyboardInterrupt):  # a second interrupt only ends the grace early
                _collect(transport, state, time.monotonic() + INTERRUPT_GRACE, None)
            stop = bool(state.pending or state.dead)
            state.settled = not stop
            raise
        if not state.pending and not state.dead:
            stop = False
            state.settled = True
            return RankResults(state.records.values(), coordinates, state.label, world_size=len(state.ranks))
        failure = _failure(transport, state, coordinates)
    finally:
        finish(progress)
        if stop:
            with hold_interrupts():
                transport.stop()
                state.settled = True
    raise failure


def group_stacks(stacks: dict[int, str]) -> list[tuple[list[int], str]]:
    """Identical stacks (thread addresses aside) once each, with the ranks that share them, by lowest rank."""
    groups: dict[str, tuple[list[int], str]] = {}
    for rank in sorted(stacks):
        key = re.sub(r"0x[0-9a-fA-F]+", "0x?", stacks[rank]).strip()
        groups.setdefault(key, ([], stacks[rank]))[0].append(rank)
    return list(groups.values())


def stacks_text(stacks: dict[int, str], pid_of: Callable[[int], int | None]) -> list[str]:
    """Lines showing each distinct stack once under the ranks that share it (at most ``STACKS_SHOWN``)."""
    groups = group_stacks(stacks)
    lines = []
    for ranks, text in groups[:STACKS_SHOWN]:
        if len(ranks) == 1:
            pid = pid_of(ranks[0])
            lines.append(f"--- stack of rank {ranks[0]}{'' if pid is None else f' (pid {pid})'} ---")
        else:
            lines.append(f"--- {ranks_text(ranks)} share this stack ---")
        lines.append(text.rstrip())
    if len(groups) > STACKS_SHOWN:
        rest = [rank for ranks, _ in groups[STACKS_SHOWN:] for rank in ranks]
        lines.append(f"--- {len(groups) - STACKS_SHOWN} more distinct stacks, of {ranks_text(rest)}: see .stacks ---")
    return lines


def _failure(transport: CallTransport, state: CallState, coordinates: list[dict[str, int]] | None) -> ClusterError:
    """The error of a call that not every rank answered (collects stacks and exit statuses first)."""
    label, limit, pending, dead = state.label, state.limit, set(state.pending), set(state.dead)
    stacks = transport.stacks(pending) if pending else {}
    deaths = transport.death_errors(dead) if dead else {}
    records = dict(state.records)
    for rank in dead:
        records[rank] = RankResult(rank, STATUS_DIED, error=deaths.get(rank, RankError("WorkerDied", "gone")))
    for rank in pending:
        error = RankError("Timeout", f"no answer within {limit:g} s", stacks.get(rank, ""))
        records[rank] = RankResult(rank, STATUS_TIMEOUT, error=error)
    results = RankResults(records.values(), coordinates, label, world_size=len(state.ranks))
    answered = sorted(rank for rank in state.records)
    if dead:
        parts = [f"{ranks_text(dead)} died during {label}"]
        by_reason: dict[str, list[int]] = {}
        for rank in sorted(dead):
            reason = re.sub(r"worker process \d+", "worker process", str(records[rank].error))
            by_reason.setdefault(reason, []).append(rank)
        if len(dead) == 1:
            parts.append(f"  rank {min(dead)}: {records[min(dead)].error}")
        else:
            parts += [f"  {ranks_text(ranks)}: {reason}" for reason, ranks in by_reason.items()]
        if pending:
            parts.append(f"{ranks_text(pending)} did not answer afterwards")
        parts.append("the workers were stopped; the next call starts fresh ones")
        return ClusterError("\n".join(parts), results=results, ranks=sorted(dead | pending))
    lines = [
        f"{label} timed out after {limit:g} s: {ranks_text(pending)} did not answer"
        + (f" ({ranks_text(answered)} did)" if answered else ""),
        "the workers were stopped; the next call starts fresh ones",
        *stacks_text(stacks, transport.pid),
    ]
    return ClusterTimeout("\n".join(lines), results=results, ranks=sorted(pending), stacks=stacks)
