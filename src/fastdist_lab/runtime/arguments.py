"""What every cluster's constructor and calls accept (sizes, deadlines, progress), validated in one place, and what
every cluster shares (``ClusterFacts``: its facts, its life as a context manager, one call on every rank)."""

from __future__ import annotations

import contextlib
import html
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from ..errors import ClusterTimeout, LayoutError
from ..layout import Layout
from ..validation import check_int, check_number
from .calls import CallState, CallTransport, perform_call
from .channel import Call
from .progress import resolve_progress
from .results import RankResults
from .verify import rank_coordinates


def cluster_sizes(world_size: Any, local_world_size: Any) -> tuple[int, int]:
    """``(world_size, local_world_size)`` checked (``LayoutError`` naming the value); local defaults to world."""
    world_size = check_int("world_size", world_size, minimum=1)
    local = check_int("local_world_size", world_size if local_world_size is None else local_world_size, minimum=1)
    if world_size % local:
        raise LayoutError(f"local_world_size={local} must divide world_size={world_size}")
    return world_size, local


def cluster_timeout(timeout: Any) -> float:
    """A cluster's default deadline in seconds (``LayoutError`` unless a number > 0)."""
    return check_number("timeout", timeout, unit="seconds")


def check_progress(progress: Any) -> None:
    """``TypeError`` unless ``progress`` is ``None``, a bool or a callable(done, total, message)."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"progress={progress!r} must be None, True, False or a callable(done, total, message)")


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
            f"{label} timed out after {limit:g} s waiting for another call on this cluster (still running)",
            ranks=[],
        )
    try:
        yield time.monotonic() - begin
    finally:
        lock.release()


_Cluster = TypeVar("_Cluster", bound="ClusterFacts")


class ClusterFacts:
    """What every kind of cluster answers the same way: its sizes, default deadline and applied layout (set by
    the subclass as ``_world_size``, ``_local_world_size``, ``_timeout``, ``_layout``), and its life as a context
    manager (``start()`` on entry when closed, ``close()`` on exit and when collected)."""

    _world_size: int
    _local_world_size: int
    _timeout: float
    _layout: Layout | None
    _closed: bool
    _backend: str
    _call_id: int
    _in_flight: int | None
    _progress_option: Any

    def start(self: _Cluster) -> _Cluster:
        """Start the ranks (the subclass's)."""
        raise NotImplementedError

    def close(self) -> None:
        """End the ranks (the subclass's)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether the ranks are ready for the next call (the subclass's)."""
        raise NotImplementedError

    def _perform(
        self,
        transport: CallTransport,
        kind: str,
        payload: Any,
        label: str,
        limit: float,
        waited: float,
        layout: Layout | None = None,
    ) -> RankResults:
        """One call on every rank of ``transport`` (the caller holds the cluster, whose ranks run); ``waited``
        seconds of ``limit`` are already gone. The call stays in flight until it is settled."""
        self._call_id += 1
        state = CallState(Call(self._call_id, kind, payload), label, limit, transport.ranks, waited=waited)
        layout = layout or self._layout
        coordinates = None if layout is None else rank_coordinates(layout)
        self._in_flight = state.call.call_id
        try:
            progress = resolve_progress(self._progress_option, label, leave=False)
            return perform_call(transport, state, coordinates, progress)
        finally:
            if state.settled:
                self._in_flight = None

    def _state(self) -> str:
        if self._closed:
            return "closed"
        if not self.running:
            return "stopped (restarts on the next call)"
        return "running"

    def _repr_html_(self) -> str:
        name = type(self).__name__
        text = html.escape(repr(self)[len(name) :])
        return f"<div class='fastdist-cluster'><b>{name}</b> {text}</div>"

    def __enter__(self: _Cluster) -> _Cluster:
        if self._closed:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - interpreter teardown
            pass

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world_size

    @property
    def local_world_size(self) -> int:
        """Ranks per (emulated) node."""
        return self._local_world_size

    @property
    def timeout(self) -> float:
        """Default deadline of a call, in seconds."""
        return self._timeout

    @property
    def backend(self) -> str:
        """The groups' backend: ``"gloo"`` or ``"nccl"`` (processes, launched jobs), ``"threaded"`` or ``"fake"``
        (simulated worlds)."""
        return self._backend

    @property
    def device_type(self) -> str:
        """Where the ranks' tensors live: ``"cuda"`` for NCCL, else ``"cpu"``."""
        return "cuda" if self._backend == "nccl" else "cpu"

    @property
    def layout(self) -> Layout | None:
        """The layout applied last, as it was given (the ranks run it with the cluster's backend), or ``None``."""
        return self._layout
