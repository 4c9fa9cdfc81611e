"""``SimulatedCluster``: a world of thousands of ranks in this process, through the same code path as processes.

Each simulated rank has its own ``ProcessGroupPool`` (``ThreadedGroupPool`` or ``FakeGroupPool``: the seed's pool,
another kind of group) and builds its own ``Distributed`` exactly as a worker process does; calls are every
cluster's (``cluster.Cluster``: the same deadlines, results and errors as a ``LocalCluster``), carried to the rank
threads by ``rank_threads``. Two modes:

- ``"threads"``: one thread per rank, torch's threaded process groups. Real tensors, real reductions: ``apply``
  builds every group of every dim (``checks.verify_groups`` then checks each with collectives), ``run(fn)`` gets the
  same ``ctx``, ``checks.draw_streams`` draws real numbers. No network transport, no NCCL kernel: what it proves is
  the membership, order and arithmetic of every group, not the wires.
- ``"fake"``: one thread running the ranks one after another, torch's fake process groups. ``apply`` checks the
  membership and group rank of every group of every rank; no collective runs (fake collectives return wrong
  values by design). Generators are real, so ``checks.draw_streams`` works too.

Why a sibling class rather than a mode of ``LocalCluster``: nothing of a ``LocalCluster``'s machinery (worker
server, sockets, file limits, process supervision) applies here, while the calls, results and errors are their
shared base; the two classes have the same methods, and ``mode`` / ``backend`` say which world answered.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..config import CLUSTER_MODES
from ..errors import LayoutError
from ..layout import Layout
from ..validation import check_number
from .capacity import check_capacity, cluster_sizes
from .cluster import CALL_MODULES, CallState, Cluster
from .inprocess import FakeGroupPool, ThreadedGroupPool, fake_store, release_collectives, require_inprocess
from .members import layout_groups
from .procs import preload
from .progress import ProgressCallback, check_progress
from .rank_loop import RankContext
from .rank_threads import OneThread, ThreadPerRank, routed_output
from .results import RankResults

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


class SimulatedCluster(Cluster):
    """``world_size`` simulated ranks in this process (``mode``: ``"threads"`` or ``"fake"``, see the module).

    Same constructor arguments, methods, results and errors as ``LocalCluster`` (no ``backend``: the groups are
    torch's threaded or fake ones, on CPU tensors; ``run`` hands ``fn`` and ``args`` to the ranks as they are, not
    copies). ``timeout`` defaults to ``default_timeout(world_size)``.
    Refuses (``CapacityError``) a world whose threads or memory this machine cannot hold, and
    (``InProcessUnavailable``) a torch without the in-process groups.
    """

    _in_process = True
    _ranks_word = "ranks"

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
        self._timeout = check_number(
            "timeout", default_timeout(world_size) if timeout is None else timeout, unit="seconds"
        )
        self._progress_option = progress
        self._lock = threading.RLock()
        self._ranks: ThreadPerRank | OneThread | None = None
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

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SimulatedCluster:
        """Create every rank's context and pool, and the rank threads (no-op when running); returns ``self``."""
        with self._lock:
            if self.running:
                return self
            check_capacity(self._world_size, self._mode)
            preload(*CALL_MODULES)
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
                self._ranks = ThreadPerRank(contexts, label, lambda wait: release_collectives(label + "/", wait))
            else:
                self._ranks = OneThread(contexts, label)
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
            layout = self._layout_to_restore()
            self._stop_ranks()
            self.start()
            self._restore(layout)
            return self

    def close(self) -> None:
        """End every rank (threads stuck in user code are abandoned) and forget the layout (idempotent)."""
        with self._lock:
            self._stop_ranks()
            self._layout = self._pending = self._in_flight = None
            self._closed = True
            if self._autograd_threads is not None:  # creating threaded groups turned autograd's threads off
                import torch

                torch.autograd.set_multithreading_enabled(self._autograd_threads)

    # ------------------------------------------------------------------ calls
    @contextlib.contextmanager
    def _applying(self, applied: Layout) -> Iterator[None]:
        """Garbage collection paused throughout; every rank's pool shares one tuple per group of ``applied``."""
        with gc_paused():
            self._ensure_running()
            groups = layout_groups(applied)
            self._shared.clear()
            self._shared.update((members, members) for rows, _, _ in groups.values() for members in rows)
            yield

    def _call(self, state: CallState, layout: Layout | None = None) -> RankResults:
        with routed_output(), gc_paused():
            return super()._call(state, layout)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        layout = "no layout" if self._layout is None else repr(self._layout)
        return (
            f"SimulatedCluster(world_size={self._world_size}, mode={self._mode!r}, "
            f"local_world_size={self._local_world_size}, {self._state()}; {layout})"
        )
