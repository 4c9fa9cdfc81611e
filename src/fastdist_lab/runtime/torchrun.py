"""The ranks of a job started by a launcher (torchrun, any number of nodes), driven from rank 0 like a cluster.

``LaunchedCluster`` builds this rank's pool from ``env://`` (the launcher's rendezvous). On rank 0 it has the
calls of a ``LocalCluster`` (``run``, ``apply``, ``layout``, ``world_size``, ``timeout``), so the ``checks``
package drives a launched job unchanged (``check_layout``: groups, then real generator streams against the
prediction); every other rank calls ``serve()``, which executes rank 0's calls until rank 0 closes. Calls and
results travel through the launcher's store, under ``CALL_PREFIX``; a rank that does not answer in time makes the
call raise ``ClusterTimeout`` naming it. When the store itself is gone (its host's launcher ended), every store
operation raises ``ClusterError`` at once: a serving rank stops instead of retrying. The command line around it is
``python -m fastdist_lab.worker``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..config import DistributedConfig
from ..errors import ClusterError, ClusterTimeout, LayoutError
from ..formatting import first_line, ranks_text
from ..layout import Layout
from .arguments import ClusterFacts, call_limit
from .capture import quiet_harmless_c10d
from .channel import outcome_to_result
from .pool import ProcessGroupPool
from .results import RankResults
from .verification import Verification
from .verify import apply_in_two_steps, layout_for_cluster, rank_coordinates
from .worker import RankContext, builder, checker, execute

CALL_PREFIX = "fastdist_lab/calls"
"""Store keys under which rank 0 posts calls and every rank leaves its results."""
STORE_TIMEOUT_LINES = (b"waitForInput",)
"""What torch's C++ store prints when a wait passes its deadline: filtered while rank 0 collects answers, whose
missing ranks the ``ClusterTimeout`` names."""
IDLE_LIMIT = 3600.0
"""Seconds a serving rank waits for rank 0's next call before giving up (one wait: no timeout lines meanwhile)."""


def store_lost(error: BaseException, rank: int) -> ClusterError:
    """The error for a store operation that failed other than by a deadline: the launcher's store is gone."""
    return ClusterError(f"rank {rank}: the launcher's store is gone (did rank 0's node stop?): {first_line(error)}")


class LaunchedCluster(ClusterFacts):
    """This rank of a launched job (rank, world and rendezvous from the environment) for ``layout``'s sizes.

    ``layout.backend`` must already be resolved (``resolve_backend``). Rank 0 makes the calls; the other ranks
    ``serve()``. Use as a context manager or call ``close()`` (on rank 0 it releases the serving ranks).
    """

    def __init__(self, layout: Layout, timeout: float = 60.0):
        self.rank = DistributedConfig.default_rank()
        self._world_size, self._local_world_size = layout.world_size, layout.local_world_size
        self._timeout = float(timeout)
        self._backend = layout.backend.value
        use_cpu = self._backend == "gloo"
        with quiet_harmless_c10d():
            self.pool = ProcessGroupPool(
                self.rank, layout.world_size, layout.local_world_size, timeout, use_cpu, backend=layout.backend
            )
        self._ctx = RankContext(self.rank, layout.world_size, self.pool)
        self._use_cpu = use_cpu
        self._calls = 0
        self._layout: Layout | None = None
        self._closed = False

    # ------------------------------------------------------------------ what the checks read
    @property
    def running(self) -> bool:
        """Whether calls can still be made."""
        return not self._closed

    def start(self) -> LaunchedCluster:
        """Nothing to start: the launcher started the ranks (``self``)."""
        return self

    # ------------------------------------------------------------------ rank 0: calls
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> RankResults:
        """Run ``fn(ctx, *args)`` on every rank (rank 0 only); a rank that raises is reported in the results."""
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        payload = cloudpickle.dumps((fn, args))  # before the call is numbered: a failure here desyncs no rank
        return self._call("run", payload, getattr(fn, "__name__", "run"), timeout)

    def apply(self, layout: Layout | DistributedConfig, timeout: float | None = None) -> Verification:
        """Build ``Distributed`` for ``layout`` on every rank and check every group (rank 0 only; see
        ``LocalCluster.apply``). The layout's backend is replaced by the job's."""
        layout, applied = layout_for_cluster(layout, self.world_size, self.local_world_size, self._backend)
        self._layout = None
        limit = self._limit(timeout)
        begin = time.monotonic()

        def call(kind: str, payload: Any) -> RankResults:
            return self._call(kind, payload, "apply", max(1e-3, limit - (time.monotonic() - begin)), applied)

        verification = apply_in_two_steps(call, applied, applied.fields())
        if verification.results.ok:
            self._layout = layout
        return verification

    def close(self) -> None:
        """On rank 0, release the serving ranks; on every rank, shut the pool down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.rank == 0 and self.pool.store is not None:
                self._calls += 1
                try:
                    self.pool.store.set(f"{CALL_PREFIX}/{self._calls}", cloudpickle.dumps(("exit", None)))
                except Exception:  # a store that is gone has no serving rank left to release
                    pass
        finally:
            self._ctx.distributed = None
            self.pool.shutdown()

    def _limit(self, timeout: float | None) -> float:
        return call_limit(timeout, self._timeout)

    def _call(self, kind: str, payload: Any, label: str, timeout: float | None, layout: Layout | None = None):
        if self.rank != 0:
            raise ClusterError(f"rank {self.rank} serves rank 0's calls; only rank 0 makes them")
        if self._closed:
            raise ClusterError("this launched cluster is closed")
        limit = self._limit(timeout)
        deadline = time.monotonic() + limit  # for the whole call, rank 0's own part included
        message = cloudpickle.dumps((kind, payload))
        self._calls += 1
        number = self._calls
        store = self.pool.store
        if store is not None:
            try:
                store.set(f"{CALL_PREFIX}/{number}", message)
            except Exception as error:
                raise store_lost(error, self.rank) from None
        records = [outcome_to_result(0, self._execute(kind, payload))]
        if store is not None:
            records += self._collect(store, number, label, limit, deadline)
        layout = layout or self._layout
        coordinates = None if layout is None else rank_coordinates(layout)
        return RankResults(records, coordinates, label, world_size=self.world_size)

    def _collect(self, store: Any, number: int, label: str, limit: float, deadline: float) -> list[Any]:
        keys = [f"{CALL_PREFIX}/{number}/{rank}" for rank in range(1, self.world_size)]
        left = max(1e-3, deadline - time.monotonic())
        try:
            try:
                with quiet_harmless_c10d(*STORE_TIMEOUT_LINES):
                    store.wait(keys, datetime.timedelta(seconds=left))
            except Exception:  # torch raises its own timeout error type: read which answers are missing
                missing = [rank for rank, key in enumerate(keys, start=1) if not store.check([key])]
                if missing:
                    raise ClusterTimeout(
                        f"{label} timed out after {limit:g} s: {ranks_text(missing)} did not answer (launched job; "
                        "their stacks are in their own logs)",
                        ranks=missing,
                    ) from None
            answers = [store.get(key) for key in keys]
        except ClusterError:
            raise
        except Exception as error:
            raise store_lost(error, self.rank) from None
        return [outcome_to_result(rank, cloudpickle.loads(answer)) for rank, answer in enumerate(answers, start=1)]

    def _execute(self, kind: str, payload: Any) -> Any:
        if kind == "run":  # unpickled by ``execute``: a function this rank cannot load is this rank's error
            return execute(self._ctx, payload=payload)
        if kind == "apply":
            return execute(self._ctx, builder(payload, self._use_cpu), ())
        if kind == "check":
            return execute(self._ctx, checker(*payload), ())
        raise LayoutError(f"unknown call kind {kind!r}")

    # ------------------------------------------------------------------ the other ranks
    def serve(self) -> None:
        """Execute rank 0's calls until it closes (ranks other than 0). Raises ``ClusterTimeout`` after
        ``IDLE_LIMIT`` seconds without a call, ``ClusterError`` at once when the launcher's store is gone."""
        store = self.pool.store
        if self.rank == 0 or store is None:
            return
        number = 0
        while True:
            number += 1
            key = f"{CALL_PREFIX}/{number}"
            waited = time.monotonic()
            try:
                store.wait([key], datetime.timedelta(seconds=IDLE_LIMIT))
                message = store.get(key)
            except Exception as error:
                if time.monotonic() - waited >= IDLE_LIMIT - 1.0:
                    raise ClusterTimeout(f"rank {self.rank}: no call from rank 0 for {IDLE_LIMIT:g} s") from None
                raise store_lost(error, self.rank) from None
            kind, payload = cloudpickle.loads(message)
            if kind == "exit":
                self.close()
                return
            outcome = self._execute(kind, payload)
            try:
                store.set(f"{key}/{self.rank}", cloudpickle.dumps(outcome))
            except Exception as error:
                raise store_lost(error, self.rank) from None
