"""What every cluster shares, and one call on every rank of any of them.

``Cluster`` is the base of ``LocalCluster`` (worker processes, ``runtime.local_cluster``), ``SimulatedCluster``
(ranks in this process, ``runtime.simulated``) and ``LaunchedCluster`` (the ranks of a launcher,
``runtime.torchrun``): their facts (``cluster_facts``) and the two calls, ``run`` and ``apply`` (a ``run`` of
``pool.build_layout``), written once. A subclass starts and stops its ranks; ``_ranks`` is how a call reaches
them (a ``CallTransport``), and ``perform_call`` drives any transport the same way: a rank that raises is
reported in the results; a rank that is gone ends the call within about a second (``ClusterError``), and so does a
rank that fails to build its groups during an apply (one error naming the group: its partners would wait for it in
the rendezvous); ranks that do not answer by the deadline end it with their Python stacks, identical stacks shown
once (``ClusterTimeout``); a KeyboardInterrupt is forwarded to the ranks (those of a ``run`` get a grace period to
answer). Whenever not every rank answered, the ranks are stopped before the call returns, even if another interrupt
arrives meanwhile, and the next call starts fresh ones. Every call has a deadline, waiting for an earlier call
included.

**An interrupted generation is discarded** (ARCHITECTURE.md, "Interrupts"): after an interrupted ``apply``, or
``run(..., discard_on_interrupt=True)`` (``checks.verify_groups``' collectives), the next call starts fresh ranks,
with no layout. Any other interrupted ``run`` keeps the ranks, and their ``ctx.state``, only when every rank answered
within the grace and none was creating or releasing groups (``results.GROUPS_INTERRUPTED``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import cloudpickle

from ..config import DistributedConfig
from ..errors import ClusterError, ClusterTimeout, LayoutError
from ..formatting import ranks_text
from ..layout import Layout
from ..validation import check_number
from .channel import Call, Reply, outcome_to_result
from .cluster_facts import ClusterFacts
from .procs import hold_interrupts
from .progress import ProgressCallback, finish, resolve_progress
from .results import GROUPS_INTERRUPTED, STATUS_OK, RankError, RankResult, RankResults, call_failure, rank_coordinates
from .verification import Verification, expected_groups

DEATH_GRACE = 1.0
"""Seconds the other ranks still get to answer once one rank died during a call."""
INTERRUPT_GRACE = 2.0
"""Seconds the ranks of an interrupted ``run`` get to answer after the KeyboardInterrupt was forwarded to them."""
LIVENESS_EVERY = 0.25
"""Seconds between two checks that the ranks still awaited are alive."""
TICK = 0.5
"""Seconds between two progress reports while nothing arrives."""
CALL_MODULES = ("pandas", "tqdm.auto", "fastdist_lab.runtime.pool")
"""What a call's results and progress import lazily (their tables, the bar) and what ``apply`` sends (its function,
which imports torch): a cluster imports them in the background when it starts (``procs.preload``), so that no
interrupt can cut those imports in half in a call."""


def layout_for_cluster(
    layout: Layout | DistributedConfig, world_size: int, local_world_size: int, backend: str
) -> tuple[Layout, Layout]:
    """Check that ``layout`` fits a cluster of these sizes; returns it (as a ``Layout``) and the layout the ranks
    run: the same with the cluster's backend. ``LayoutError`` when the sizes do not fit."""
    if isinstance(layout, DistributedConfig):
        layout = Layout.from_config(layout)
    if not isinstance(layout, Layout):
        raise TypeError(f"apply() needs a Layout, got {type(layout).__name__}")
    if layout.world_size != world_size:
        raise LayoutError(f"layout world_size={layout.world_size} does not match the cluster's {world_size} ranks")
    if layout.local_world_size > local_world_size:
        raise LayoutError(
            f"layout local_world_size={layout.local_world_size} is larger than the cluster's "
            f"local_world_size={local_world_size}"
        )
    return layout, Layout(**dict(layout.fields(), backend=backend))


def call_limit(timeout: Any, default: float) -> float:
    """One call's deadline: ``timeout`` or the cluster's ``default`` (``ValueError`` unless a number > 0)."""
    return check_number("timeout", default if timeout is None else timeout, unit="seconds", error=ValueError)


@contextlib.contextmanager
def held(lock: threading.RLock, limit: float, label: str) -> Iterator[float]:
    """Hold a cluster for one call, waiting at most ``limit`` seconds for an earlier call to end; yields the
    seconds waited (they count against the call's deadline)."""
    begin = time.monotonic()
    if not lock.acquire(timeout=limit):
        raise ClusterTimeout(
            f"{label} timed out after {limit:g} s waiting for another call on this cluster (still running)", ranks=[]
        )
    try:
        yield time.monotonic() - begin
    finally:
        lock.release()


# ----------------------------------------------------------------------------------------------- one call
class CallTransport(Protocol):
    """How a call reaches a world of ranks (worker processes: ``channel.Workers``; threads: ``rank_threads``)."""

    stopped: bool
    """Whether the ranks were stopped (they never answer again)."""

    @property
    def ranks(self) -> list[int]:
        """Every rank."""
        ...

    @property
    def alive(self) -> bool:
        """Whether every rank can still answer."""
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

    def loss(self) -> str | None:
        """The process that took every rank with it when it died (a worker server), in words to go before "died";
        ``None`` when there is none, or it runs."""
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
    abort_on_error: bool = False
    """Whether a rank that answers with an error fails the whole call, and leaves the others ``DEATH_GRACE`` to
    answer, as a death does (a rank that failed to build its groups leaves its partners waiting for it)."""
    keep_on_interrupt: bool = True
    """Whether an interrupted call may keep its ranks (when all answer within ``INTERRUPT_GRACE``); ``False``: they
    are stopped at once (an apply, or a run of collectives that would leave groups out of step)."""
    failed: set[int] = field(default_factory=set)


def _collect(transport: CallTransport, state: CallState, deadline: float, progress: ProgressCallback | None) -> None:
    """Take replies until every awaited rank answered, or one is gone (the others get ``DEATH_GRACE`` more), or
    ``deadline`` (monotonic) passes. Replies to other calls (late answers to earlier ones) are dropped."""
    total = len(state.ranks)
    death_cutoff: float | None = None
    next_tick = time.monotonic()
    next_check = next_tick + LIVENESS_EVERY  # a death closes the channel at once; the check is for the rest
    with hold_interrupts() as holding:  # an interrupt is taken between two rounds, never in the middle of one
        while state.pending:
            holding.deliver()
            now = time.monotonic()
            if (state.dead or state.failed) and death_cutoff is None:
                death_cutoff = now + DEATH_GRACE
            cutoff = deadline if death_cutoff is None else min(deadline, death_cutoff)
            if now >= cutoff:
                return
            for rank, reply in transport.receive(state.pending, min(cutoff - now, LIVENESS_EVERY)):
                if reply is None:
                    state.pending.discard(rank)
                    state.dead.add(rank)
                elif reply.call_id == state.call.call_id:
                    outcome = reply.outcome  # a worker's pickled outcome, or the result of a rank in this process
                    result = outcome if isinstance(outcome, RankResult) else outcome_to_result(rank, outcome)
                    state.records[rank] = result
                    state.pending.discard(rank)
                    if state.abort_on_error and result.status != STATUS_OK:
                        state.failed.add(rank)
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


def _groups_interrupted(state: CallState) -> bool:
    """Whether a rank reported that the interrupt caught its pool creating or releasing groups."""
    return any(r.error is not None and r.error.type == GROUPS_INTERRUPTED for r in state.records.values())


def perform_call(
    transport: CallTransport, state: CallState, coordinates: Any = None, progress: ProgressCallback | None = None
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
            if state.keep_on_interrupt:  # the others (an apply's) are stopped at once
                with contextlib.suppress(KeyboardInterrupt):  # a second interrupt only ends the grace early
                    _collect(transport, state, time.monotonic() + INTERRUPT_GRACE, None)
            stop = bool(state.pending or state.dead) or not state.keep_on_interrupt or _groups_interrupted(state)
            state.settled = not stop
            raise
        if not state.pending and not state.dead and not state.failed:
            stop = False
            state.settled = True
            return RankResults(state.records.values(), coordinates, state.label, world_size=len(state.ranks))
        deaths = transport.death_errors(state.dead) if state.dead else {}
        loss = transport.loss() if state.dead else None  # after: a server told to leave ends its workers first
        stacks = transport.stacks(state.pending) if state.pending and loss is None else {}
        failure = call_failure(state, stacks, deaths, transport.pid, coordinates, loss)
    finally:
        finish(progress)
        if stop:
            with hold_interrupts():
                transport.stop()
                state.settled = True
    raise failure


_Cluster = TypeVar("_Cluster", bound="Cluster")


class Cluster(ClusterFacts):
    """What every kind of cluster answers the same way: its sizes, default deadline and applied layout (set by
    the subclass as ``_world_size``, ``_local_world_size``, ``_timeout``, ``_layout``), its life as a context
    manager (``start()`` on entry when closed, ``close()`` on exit and when collected), and its calls.

    The subclass sets ``_ranks`` (the ``CallTransport`` of the ranks now running, or ``None``) in ``start()``;
    ``_in_process`` says whether the ranks live in this process (payloads then travel as they are, not pickled,
    and the groups are torch's in-process ones, on CPU tensors).
    """

    _lock: threading.RLock
    _call_id: int
    _in_flight: int | None
    _progress_option: Any
    _ranks: Any = None
    _discarded = False
    _mode = "processes"
    _in_process = False
    _ranks_word = "workers"
    _pending: Layout | None = None  # a layout to re-apply: a restart cut short by an interrupt did not
    _restarting = False

    def restart(self: _Cluster) -> _Cluster:
        """Replace every rank by a fresh one and re-apply the layout (the subclass's)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether the ranks are ready for the next call.

        ``False`` after a failure or an interrupt that stopped (or may have disturbed) them, in which case the next
        call starts fresh ones, and after ``close()``.
        """
        ranks = self._ranks
        if self._closed or ranks is None or not ranks.alive:
            return False
        if self._in_flight is not None and self._lock.acquire(blocking=False):
            self._lock.release()  # no call is running, yet one did not settle: an interrupt cut it short
            return False
        return True

    # ------------------------------------------------------------------ the calls
    def run(self, fn: Any, *args: Any, timeout: float | None = None, discard_on_interrupt: bool = False) -> RankResults:
        """Run ``fn(ctx, *args)`` on every rank (``ctx``: its ``RankContext``) and return every rank's value or error.

        Across processes ``fn`` and ``args`` travel by value (cloudpickle), so notebook functions and closures work;
        ranks in this process get them as they are. Raises ``ClusterTimeout`` (with the stacks of the ranks that did
        not answer) when a rank does not answer within ``timeout`` (default: the cluster's; time spent waiting for
        another call on this cluster counts) and ``ClusterError`` when a rank dies; a rank that raises is reported in
        the results instead. ``discard_on_interrupt``: an interrupt stops the ranks at once, as for ``apply`` (for
        functions whose collectives an interrupt would leave out of step between the members).
        """
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        label = getattr(fn, "__name__", "run")
        limit = call_limit(timeout, self._timeout)
        with held(self._lock, limit, label) as waited:
            state = self._state_of(fn, args, limit, waited, label)
            state.keep_on_interrupt = not discard_on_interrupt
            return self._call(state)

    def apply(self, layout: Layout | DistributedConfig, timeout: float | None = None) -> Verification:
        """Build ``Distributed(layout.config(rank))`` on every rank from its pool: a ``run`` of
        ``pool.build_layout``, each rank checking its groups as its pool holds them, without communication.

        Returns the ``Verification`` of that membership (``collectives`` false: no collective ran;
        ``fastdist_lab.checks.verify_groups`` applies and then checks every group with real collectives). The layout
        is recorded only when every rank built it; otherwise the ranks are stopped (the next call starts fresh
        ones), at once after a rank's error or an interrupt. The layout runs with the cluster's backend (CPU tensors
        for ranks in this process). Raises ``ClusterTimeout`` / ``ClusterError`` when ranks hang, die or fail to build,
        ``LayoutError`` when the sizes do not fit.
        """
        from .pool import build_layout  # imports torch; preloaded when the cluster starts (CALL_MODULES)

        backend = "gloo" if self._in_process else self._backend
        layout, applied = layout_for_cluster(layout, self._world_size, self._local_world_size, backend)
        limit = call_limit(timeout, self._timeout)
        with held(self._lock, limit, "apply") as waited:
            self._layout = None
            begin = time.monotonic()
            with self._applying(applied):
                state = self._state_of(build_layout, (applied,), limit, waited, "apply")
                state.abort_on_error, state.keep_on_interrupt = True, False
                built = self._call(state, applied)
            if built.ok:
                self._layout = layout
            else:  # ranks disagree about their groups now: start over on the next call
                self._stop_ranks()
            fields = {key: getattr(value, "value", value) for key, value in applied.fields().items()}
            seconds = time.monotonic() - begin
            return Verification.from_rank_rows(expected_groups(applied), built, fields, self._backend, seconds,
                                               mode=self._mode)  # fmt: skip

    def _applying(self, applied: Layout) -> contextlib.AbstractContextManager[Any]:
        """Around an apply (ranks in this process prepare what they share)."""
        return contextlib.nullcontext()

    def _state_of(self, fn: Any, args: tuple, limit: float, waited: float, label: str) -> CallState:
        """A new call of ``fn(ctx, *args)`` (pickled unless the ranks live in this process); ``ClusterError`` when the
        cluster is closed, fresh ranks when the last ones are gone."""
        self._ensure_running()
        payload = (fn, args) if self._in_process else cloudpickle.dumps((fn, args))
        self._call_id += 1
        return CallState(Call(self._call_id, payload), label, limit, self._ranks.ranks, waited=waited)

    def _call(self, state: CallState, layout: Layout | None = None) -> RankResults:
        """One call on every rank (the caller holds the cluster). The call stays in flight until it is settled."""
        ranks = self._ranks
        layout = layout or self._layout
        coordinates = None if layout is None else rank_coordinates(layout)
        self._in_flight = state.call.call_id
        try:
            progress = resolve_progress(self._progress_option, state.label, leave=False)
            return perform_call(ranks, state, coordinates, progress)
        except KeyboardInterrupt:
            self._discarded = ranks.stopped
            raise
        finally:
            if state.settled:
                self._in_flight = None

    def _ensure_running(self) -> None:
        """Before a call: fresh ranks (with a warning) when an interrupted call left the last ones in an unknown
        state or some died since, and the layout of a restart cut short re-applied; ``ClusterError`` when the
        cluster is closed."""
        if self._closed:
            raise ClusterError(f"the cluster is closed; call start() or use a new {type(self).__name__}")
        word = self._ranks_word
        if self._in_flight is not None:
            self._in_flight = None
            if self._ranks is not None and not self._ranks.stopped:
                self._warn_fresh(f"an interrupted call left the {word} in an unknown state")
                self._stop_ranks()
        if self._discarded:
            self._discarded = False
            self._warn_fresh(f"the interrupted call stopped the {word} (they could no longer agree)")
        if not self.running or (self._pending is not None and not self._restarting):  # a restart was cut short
            ranks = self._ranks
            if ranks is not None and not ranks.stopped and not self.running:
                loss = ranks.loss()
                gone = ranks.gone(set(ranks.ranks)) if loss is None else set()
                what = loss or (ranks_text(gone) if gone else f"the {word}")
                self._warn_fresh(f"{what} died since the last call")
            self.restart()

    def _warn_fresh(self, why: str) -> None:
        """Warn from ``_ensure_running`` (at the caller of ``run`` / ``apply``) that fresh ranks replace the last."""
        message = f"{why}; starting fresh {self._ranks_word} (per-rank state is lost)"
        warnings.warn(message, RuntimeWarning, stacklevel=5)

    def _layout_to_restore(self) -> Layout | None:
        """At the start of a restart: the layout to re-apply, kept pending until it is, so that an interrupt during
        the restart cannot lose it (the next call re-applies it)."""
        layout = self._layout if self._layout is not None else self._pending
        self._layout, self._pending = None, layout
        return layout

    def _restore(self, layout: Layout | None) -> None:
        """At the end of a restart: re-apply ``layout`` (``ClusterError`` when its check fails)."""
        if layout is None:
            return
        self._restarting = True
        try:
            verification = self.apply(layout)
        finally:
            self._restarting = False
        self._pending = None
        if not verification.ok:
            raise ClusterError(f"re-applying the layout after a restart failed:\n{verification}")

    def _stop_ranks(self) -> None:
        ranks, self._ranks = self._ranks, None
        if ranks is not None:
            ranks.stop()
