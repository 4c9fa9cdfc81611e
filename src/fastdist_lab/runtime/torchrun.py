"""The ranks of a job started by a launcher (torchrun, any number of nodes), driven from rank 0 like a cluster.

``LaunchedCluster`` builds this rank's pool from ``env://`` (the launcher's rendezvous). On rank 0 it has the
calls of every cluster (``cluster.Cluster``: ``run``, ``apply``, ``layout``, ``world_size``, ``timeout``), so the
``checks`` package drives a launched job unchanged (``check_layout``: groups, then real generator streams against the
prediction); every other rank calls ``serve()``, which executes rank 0's calls until rank 0 closes. Calls and
results travel through the launcher's store, under ``CALL_PREFIX``; a rank that does not answer in time makes the
call raise ``ClusterTimeout`` naming it. When the store itself is gone (its host's launcher ended), every store
operation raises ``ClusterError`` at once: a serving rank stops instead of retrying. The command line around it is
``python -m fastdist_lab.worker``.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
from typing import Any

import cloudpickle

from ..config import DistributedConfig
from ..errors import ClusterError, ClusterTimeout
from ..formatting import first_line, ranks_text
from ..layout import Layout
from .capture import quiet_harmless_c10d
from .channel import Call, execute, outcome_to_result
from .cluster import CallState, Cluster
from .pool import ProcessGroupPool
from .rank_loop import RankContext
from .results import RankResults, rank_coordinates

CALL_PREFIX = "fastdist_lab/calls"
"""Store keys under which rank 0 posts calls and every rank leaves its results."""
STORE_TIMEOUT_LINES = (b"waitForInput",)
"""What torch's C++ store prints when a wait passes its deadline: filtered while rank 0 collects answers, whose
missing ranks the ``ClusterTimeout`` names."""
EXIT_MESSAGE = b"exit"
"""What rank 0 posts to release the serving ranks (a call is cloudpickled ``(fn, args)``, never these bytes)."""
IDLE_LIMIT = 3600.0
"""Seconds a serving rank waits for rank 0's next call before giving up (one wait: no timeout lines meanwhile)."""


def store_lost(error: BaseException, rank: int) -> ClusterError:
    """The error for a store operation that failed other than by a deadline: the launcher's store is gone."""
    return ClusterError(f"rank {rank}: the launcher's store is gone (did rank 0's node stop?): {first_line(error)}")


class LaunchedCluster(Cluster):
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
        self._lock = threading.RLock()
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

    def close(self) -> None:
        """On rank 0, release the serving ranks; on every rank, shut the pool down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.rank == 0 and self.pool.store is not None:
                self._calls += 1
                with contextlib.suppress(Exception):  # a store that is gone has no serving rank left to release
                    self.pool.store.set(f"{CALL_PREFIX}/{self._calls}", EXIT_MESSAGE)
        finally:
            self._ctx.distributed = None
            self.pool.shutdown()

    # ------------------------------------------------------------------ rank 0: calls
    def _state_of(self, fn: Any, args: tuple, limit: float, waited: float, label: str) -> CallState:
        """A new call of ``fn(ctx, *args)``, pickled for the store; ``ClusterError`` unless this is an open rank 0."""
        if self.rank != 0:
            raise ClusterError(f"rank {self.rank} serves rank 0's calls; only rank 0 makes them")
        if self._closed:
            raise ClusterError("this launched cluster is closed")
        return CallState(Call(self._calls + 1, cloudpickle.dumps((fn, args))), label, limit, [], waited=waited)

    def _call(self, state: CallState, layout: Layout | None = None) -> RankResults:
        """One call through the launcher's store: rank 0 posts it, runs its own part, then collects the others'."""
        limit, label = state.limit, state.label
        deadline = time.monotonic() + max(1e-3, limit - state.waited)  # for the whole call, rank 0's own part included
        message = payload = state.call.payload
        self._calls += 1
        number = self._calls
        store = self.pool.store
        if store is not None:
            try:
                store.set(f"{CALL_PREFIX}/{number}", message)
            except Exception as error:
                raise store_lost(error, self.rank) from None
        records = [outcome_to_result(0, execute(self._ctx, payload))]
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
            if message == EXIT_MESSAGE:
                self.close()
                return
            outcome = execute(self._ctx, message)
            try:
                store.set(f"{key}/{self.rank}", cloudpickle.dumps(outcome))
            except Exception as error:
                raise store_lost(error, self.rank) from None
