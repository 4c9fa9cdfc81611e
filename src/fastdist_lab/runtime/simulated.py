"""``SimulatedCluster``: a world of thousands of ranks in this process, through the same code path as processes.

Each simulated rank has its own ``ProcessGroupPool`` (``ThreadedGroupPool`` or ``FakeGroupPool``: the seed's pool,
another kind of group) and builds its own ``Distributed`` exactly as a worker process does; calls go through
``calls.perform_call`` with the same deadlines, results and errors as a ``LocalCluster``. Two modes:

- ``"threads"``: one thread per rank, torch's threaded process groups. Real tensors, real reductions: ``apply``
  checks every group of every dim with collectives, ``run(fn)`` gets the same ``ctx``, ``streams.draw`` draws real
  numbers. No network transport, no NCCL kernel: what it proves is the membership, order and arithmetic of every
  group, not the wires.
- ``"fake"``: one thread running the ranks one after another, torch's fake process groups. ``apply`` checks the
  membership and group rank of every group of every rank; no collective runs (fake collectives return wrong
  values by design). Generators are real, so ``streams.draw`` works too.

Why a sibling class rather than a mode of ``LocalCluster``: nothing of a ``LocalCluster``'s machinery (worker
server, sockets, file limits, process supervision) applies here, while the calls, results and errors are shared
modules; the two classes have the same methods, and ``mode`` / ``backend`` say which world answered.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ..config import CLUSTER_MODES, DistributedConfig
from ..errors import ClusterError, LayoutError
from ..layout import Layout
from .arguments import ClusterFacts, call_limit, check_progress, cluster_sizes, cluster_timeout, held
from .capacity import check_capacity
from .inprocess import fake_store, release_collectives, require_inprocess
from .progress import ProgressCallback
from .rank_threads import OneThread, ThreadPerRank, routed_output
from .results import RankResults
from .simulated_pool import FakeGroupPool, ThreadedGroupPool
from .verification import THREADS_GATHER_LIMIT, Verification
from .verify import apply_in_two_steps, layout_for_cluster, layout_groups
from .worker import RankContext, builder, checker

SIMULATED_MODES = CLUSTER_MODES[1:]
"""The modes of a ``SimulatedCluster``."""
BACKEND_OF_MODE = {"threads": "threaded", "fake": "fake"}
"""torch's name of the process groups each mode uses."""
_worlds = itertools.count()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs (then as it was): thousands of ranks allocate
    millions of objects, and each full collection would walk them all again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def default_timeout(world_size: int) -> float:
    """A simulated world's default deadline: 60 s plus 20 ms per rank (4,096 ranks: 142 s)."""
    return 60.0 + 0.02 * world_size


class SimulatedCluster(ClusterFacts):
    """``world_size`` simulated ranks in this process (``mode``: ``"threads"`` or ``"fake"``, see the module).

    Same constructor arguments, methods, results and errors as ``LocalCluster`` (no ``backend``: the groups are
    torch's threaded or fake ones, on CPU tensors). ``timeout`` defaults to ``default_timeout(world_size)``.
    Refuses (``CapacityError``) a world whose threads or memory this machine cannot hold, and
    (``InProcessUnavailable``) a torch without the in-process groups.
    """

    def __init__(
        self,
        world_size: int,
        mode: str = "threads",
        local_world_size: int | None = None,
        timeout: float | None = None,
        progress: ProgressCallback | bool | None = None,
        *,
        start: bool = True,
    ):
        world_size, local = cluster_sizes(world_size, local_world_size)
        if mode not in SIMULATED_MODES:
            raise LayoutError(f"mode={mode!r} is not a simulated mode; use one of {', '.join(SIMULATED_MODES)}")
        check_progress(progress)
        self._world_size = world_size
        self._local_world_size = local
        self._mode = mode
        self._backend = BACKEND_OF_MODE[mode]
        self._timeout = cluster_timeout(default_timeout(world_size) if timeout is None else timeout)
        self._progress_option = progress
        self._lock = threading.RLock()
        self._runner: ThreadPerRank | OneThread | None = None
        self._closed = True
        self._layout: Layout | None = None
        self._shared: dict[Any, Any] = {}
        self._call_id = 0
        self._in_flight: int | None = None
        self._world = next(_worlds)
        self._generation = itertools.count()
        self._autograd_threads: bool | None = None
        self.startup_seconds: float | None = None
        """Seconds the last start (or restart) took until every rank was ready."""
        require_inprocess()
        if start:
            self.start()

    # ------------------------------------------------------------------ properties
    @property
    def mode(self) -> str:
        """``"threads"`` or ``"fake"``."""
        return self._mode

    @property
    def running(self) -> bool:
        """Whether the ranks are ready for the next call (``False`` after a failure, an interrupt or ``close()``)."""
        runner = self._runner
        if self._closed or runner is None or not runner.alive:
            return False
        if self._in_flight is not None and self._lock.acquire(blocking=False):
            self._lock.release()
            return False
        return True

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SimulatedCluster:
        """Create every rank's context and pool, and the rank threads (no-op when running); returns ``self``."""
        with self._lock:
            if self.running:
                return self
            check_capacity(self._world_size, self._mode)
            begin = time.monotonic()
            self._stop_ranks()
            if self._autograd_threads is None:
                import torch

                self._autograd_threads = bool(torch.autograd.is_multithreading_enabled())
            generation = next(self._generation)
            label = f"fastdist-sim{self._world}.{generation}"
            self._shared = {}
            store = self._new_store()
            contexts = [RankContext(rank, self._world_size, self._pool(rank, label, store)) for rank in
                        range(self._world_size)]  # fmt: skip
            if self._mode == "threads":
                self._runner = ThreadPerRank(contexts, label, lambda wait: release_collectives(label + "/", wait))
            else:
                self._runner = OneThread(contexts, label)
            self._closed = False
            self._in_flight = None
            self.startup_seconds = time.monotonic() - begin
            return self

    def _pool(self, rank: int, label: str, store: Any) -> Any:
        common = dict(store=store, shared=self._shared)
        if self._mode == "threads":
            return ThreadedGroupPool(rank, self._world_size, self._local_world_size, self._timeout, **common,
                                     namespace=label)  # fmt: skip
        return FakeGroupPool(rank, self._world_size, self._local_world_size, self._timeout, **common)

    def _new_store(self) -> Any:
        """The store every rank's pool shares: torch's ``FakeStore`` (fake), an in-memory ``HashStore`` (threads)."""
        if self._mode == "fake":
            return fake_store()
        import torch.distributed

        return torch.distributed.HashStore()

    def restart(self) -> SimulatedCluster:
        """Replace every rank by a fresh one (per-rank state is lost) and re-apply the layout."""
        with self._lock:
            layout, self._layout = self._layout, None
            self._stop_ranks()
            self.start()
            if layout is not None:
                verification = self.apply(layout)
                if not verification.ok:
                    raise ClusterError(f"re-applying the layout after a restart failed:\n{verification}")
            return self

    def close(self) -> None:
        """End every rank (threads stuck in user code are abandoned) and forget the layout (idempotent)."""
        with self._lock:
            self._stop_ranks()
            self._layout = None
            self._in_flight = None
            self._closed = True
            if self._autograd_threads is not None:  # creating threaded groups turned autograd's threads off
                import torch

                torch.autograd.set_multithreading_enabled(self._autograd_threads)

    def _stop_ranks(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop()

    # ------------------------------------------------------------------ public calls
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> RankResults:
        """Run ``fn(ctx, *args)`` on every rank and return every rank's value or error (values as they are, not
        copies). ``ClusterTimeout`` (with the stacks of the ranks that did not answer) past the deadline."""
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        label = getattr(fn, "__name__", "run")
        limit = call_limit(timeout, self._timeout)
        with held(self._lock, limit, label) as waited:
            return self._call((fn, args), limit, waited, label)

    def apply(self, layout: Layout | DistributedConfig, timeout: float | None = None) -> Verification:
        """Build ``Distributed(layout.config(rank))`` on every rank from its own pool and check every group: as the
        pool holds it, then (threads) with real collectives; fake mode stops before any collective. The layout
        runs on CPU tensors (backend gloo) whatever its backend. Returns the ``Verification``."""
        layout, applied = layout_for_cluster(layout, self._world_size, self._local_world_size, "gloo")
        limit = call_limit(timeout, self._timeout)
        with held(self._lock, limit, "apply") as waited, gc_paused():
            self._layout = None
            begin = time.monotonic()
            self._ensure_running()
            groups = layout_groups(applied)  # one tuple per group, shared by every rank's pool
            self._shared.clear()
            self._shared.update((members, members) for rows, _, _ in groups.values() for members in rows)

            def call(kind: str, payload: Any) -> RankResults:
                work = builder(applied, True) if kind == "apply" else checker(*payload)
                return self._call((work, ()), limit, waited + time.monotonic() - begin, "apply", applied)

            verification = apply_in_two_steps(
                call, applied, None, self._mode, THREADS_GATHER_LIMIT, backend=self.backend
            )
            if verification.results.ok:
                self._layout = layout
            else:
                self._stop_ranks()
            return verification

    # ------------------------------------------------------------------ calls
    def _ensure_running(self) -> None:
        if self._closed:
            raise ClusterError("the cluster is closed; call start() or use a new SimulatedCluster")
        if self.running:
            return
        if self._runner is not None and not self._runner.stopped:
            warnings.warn("an interrupted call left the ranks in an unknown state; starting fresh ranks "
                          "(per-rank state is lost)", RuntimeWarning, stacklevel=4)  # fmt: skip
        self.restart()

    def _call(self, work: Any, limit: float, waited: float, label: str, layout: Layout | None = None) -> RankResults:
        self._ensure_running()
        assert self._runner is not None
        with routed_output(), gc_paused():
            return self._perform(self._runner, "run", work, label, limit, waited, layout)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        layout = "no layout" if self._layout is None else repr(self._layout)
        return (
            f"SimulatedCluster(world_size={self._world_size}, mode={self._mode!r}, "
            f"local_world_size={self._local_world_size}, {self._state()}; {layout})"
        )
