"""``LocalCluster``: persistent worker processes on this machine, driven from a notebook cell or a script.

Its calls are every cluster's (``cluster.Cluster``: ``run``, ``apply``, deadlines, failures, interrupts); what is its
own is the processes' life. A worker server (``supervisor.WorkerServer``, under a guard process) forks one generation
of workers after another (``channel.Workers``), each with its own rendezvous store file; nothing is ever forked from
this process, nothing of it listens but the workers' gloo transports on 127.0.0.1 (ARCHITECTURE.md, "Runtime").
``LocalCluster.prewarm()`` starts a server ahead of need, which the next cluster adopts. A rank that hangs or dies
makes the call raise ``ClusterTimeout`` / ``ClusterError`` naming it; the next call starts fresh workers.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError
from ..layout import Layout
from ..lazy import successor, warn_deprecated
from ..validation import check_number
from .backends import resolve_backend
from .capacity import check_capacity, cluster_sizes
from .channel import Workers
from .cluster import CALL_MODULES, Cluster
from .procs import FILES_PER_PROCESS, hold_interrupts, preload, raise_file_limit
from .progress import ProgressCallback, check_progress, finish, resolve_progress
from .supervisor import WorkerServer, prewarm, take_spare

if TYPE_CHECKING:
    import pandas as pd

_LIVE: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


def _close_all() -> None:
    for cluster in list(_LIVE):
        cluster.close()


atexit.register(_close_all)


class LocalCluster(Cluster):
    """``world_size`` persistent worker processes on this machine, one per rank (gloo on CPU or NCCL on GPUs).

    ``backend``: ``"auto"`` (NCCL when every local rank gets a GPU, else gloo), ``"gloo"`` or ``"nccl"``.
    ``local_world_size``: ranks per (emulated) node, default ``world_size``. ``timeout``: seconds for start-up
    and the default deadline of each call. ``progress``: ``None`` (a bar for anything slower than a second when
    someone watches: a notebook or a terminal), ``True`` (always a bar), ``False`` (silent) or
    ``progress(done, total, message)``. Starts at once unless ``start=False``.

    Use as a context manager, or call ``close()``; the workers also go away at interpreter exit and when this
    process dies.
    """

    def __init__(
        self,
        world_size: int,
        backend: str = "auto",
        local_world_size: int | None = None,
        timeout: float = 60,
        progress: ProgressCallback | bool | None = None,
        *,
        start: bool = True,
    ):
        world_size, local = cluster_sizes(world_size, local_world_size)
        check_progress(progress)
        self._world_size = world_size
        self._local_world_size = local
        self._timeout = check_number("timeout", timeout, unit="seconds")
        self._backend = resolve_backend(backend, local)
        self._progress_option = progress
        self._server = WorkerServer()
        self._ranks: Workers | None = None
        self._lock = threading.RLock()
        self._closed = True
        self._layout: Layout | None = None
        self._call_id = 0
        self._in_flight: int | None = None
        self.startup_seconds: float | None = None
        """Seconds the last start (or restart) took until every rank was ready."""
        if start:
            self.start()

    # ------------------------------------------------------------------ properties
    @property
    def pids(self) -> list[int]:
        """Worker process ids, indexed by rank (empty when the workers are stopped)."""
        workers = self._ranks
        if workers is None or workers.stopped:
            return []
        return [workers.pids[rank] for rank in workers.ranks]

    @property
    def server_pid(self) -> int | None:
        """Process id of the worker server (the workers' parent), or ``None``."""
        return self._server.pid

    prewarm = staticmethod(prewarm)

    # ------------------------------------------------------------------ lifecycle
    def _reporter(self, progress: ProgressCallback | None) -> Callable[[int, str], None]:
        total = self._world_size + 2

        def report(done: int, message: str) -> None:
            if progress is not None:
                progress(done, total, message)

        return report

    def start(self) -> LocalCluster:
        """Start the worker server and the workers (no-op when running); returns ``self``."""
        with self._lock:
            if self.running:
                return self
            check_capacity(self._world_size)  # before anything starts: one line naming the numbers
            raise_file_limit(FILES_PER_PROCESS + self._world_size)  # this process holds one channel per worker
            progress = resolve_progress(self._progress_option, "LocalCluster")
            report = self._reporter(progress)
            begin = time.monotonic()
            _LIVE.add(self)
            preload(*CALL_MODULES)
            try:
                self._stop_ranks()
                if not self._server.alive:
                    self._server.stop()
                    self._adopt_or_start(report)
                self._ranks = self._spawn(report)
            except BaseException:
                with hold_interrupts():
                    finish(progress)
                    self._ranks = None
                    self._server.stop()
                    self._closed = True
                    _LIVE.discard(self)
                raise
            self._closed = False
            self._in_flight = None
            self.startup_seconds = time.monotonic() - begin
            total = self._world_size + 2
            report(total, f"{self._world_size} ranks ready ({self._backend}) in {self.startup_seconds:.1f} s")
            return self

    def _adopt_or_start(self, report: Callable[[int, str], None]) -> None:
        """Take the spare server ``prewarm`` launched, once ready; else start a new one (it is ``_server`` from the
        moment it exists, so a failure or an interrupt on the way stops it)."""
        spare = take_spare()
        if spare is not None:
            self._server = spare
            try:
                spare.wait_ready(self._timeout, report)
                return
            except ClusterError:  # it failed where a fresh one may not: start one
                spare.stop()
        self._server = WorkerServer()
        self._server.start(self._timeout, report)

    def _spawn(self, report: Callable[[int, str], None]) -> Workers:
        world, local = self._world_size, self._local_world_size
        return self._server.spawn(world, local, self._backend, self.device_type, self._timeout, report)

    def restart(self) -> LocalCluster:
        """Replace every worker by a fresh one (keeping the worker server when alive) and re-apply the layout."""
        with self._lock:
            layout = self._layout_to_restore()
            if self._closed or not self._server.alive:
                self._stop_ranks()
                self.start()
            else:
                self._stop_ranks()
                progress = resolve_progress(self._progress_option, "LocalCluster")
                begin = time.monotonic()
                try:
                    self._ranks = self._spawn(self._reporter(progress))
                finally:
                    finish(progress)
                self._in_flight = None
                self.startup_seconds = time.monotonic() - begin
            self._restore(layout)
            return self

    def close(self) -> None:
        """Stop every worker and the worker server; nothing of this cluster is left running (idempotent).

        Once it has begun, an interrupt waits until everything is stopped; ``closed`` is marked last, so a
        ``close()`` cut short before it began is completed by the next one.
        """
        with self._lock, hold_interrupts():
            if self._closed and self._ranks is None and self._server.process is None:
                return
            try:
                if self._ranks is not None:
                    self._ranks.exit()
            finally:
                self._ranks = None
                self._server.stop()
                self._layout = self._pending = self._in_flight = None
                self._closed = True
                _LIVE.discard(self)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        layout = "no layout" if self._layout is None else repr(self._layout)
        return (
            f"LocalCluster(world_size={self._world_size}, backend={self._backend!r}, "
            f"local_world_size={self._local_world_size}, {self._state()}; {layout})"
        )

    # ------------------------------------------------------------------ moved to checks (deprecated)
    def replay(self, *args: Any, **options: Any) -> pd.DataFrame:
        """Deprecated: ``fastdist_lab.checks.replay(cluster, layout, model, training, scale, ...)``."""
        warn_deprecated("LocalCluster.replay", "fastdist_lab.checks.replay(cluster, ...)")
        return successor("fastdist_lab.checks.replay")(self, *args, **options)

    def bandwidth(self, *args: Any, **options: Any) -> pd.DataFrame:
        """Deprecated: ``fastdist_lab.checks.bandwidth(cluster, dim, sizes, ...)``."""
        warn_deprecated("LocalCluster.bandwidth", "fastdist_lab.checks.bandwidth(cluster, ...)")
        return successor("fastdist_lab.checks.bandwidth")(self, *args, **options)
