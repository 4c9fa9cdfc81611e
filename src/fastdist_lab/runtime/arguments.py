"""What every cluster's constructor and calls accept (sizes, deadlines, progress), validated in one place."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..config import LayoutError
from .errors import ClusterTimeout


def cluster_sizes(world_size: Any, local_world_size: Any) -> tuple[int, int]:
    """``(world_size, local_world_size)`` checked (``LayoutError`` naming the value); local defaults to world."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise LayoutError(f"world_size={world_size!r} must be an integer > 0")
    local = world_size if local_world_size is None else local_world_size
    if isinstance(local, bool) or not isinstance(local, int) or local < 1 or world_size % local:
        raise LayoutError(f"local_world_size={local_world_size!r} must be an integer > 0 dividing {world_size}")
    return world_size, local


def cluster_timeout(timeout: Any) -> float:
    """A cluster's default deadline in seconds (``LayoutError`` unless a number > 0)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise LayoutError(f"timeout={timeout!r} must be a number of seconds > 0")
    return float(timeout)


def check_progress(progress: Any) -> None:
    """``TypeError`` unless ``progress`` is ``None``, a bool or a callable(done, total, message)."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"progress={progress!r} must be None, True, False or a callable(done, total, message)")


def call_limit(timeout: Any, default: float) -> float:
    """One call's deadline: ``timeout`` or the cluster's ``default`` (``ValueError`` unless a number > 0)."""
    limit = default if timeout is None else timeout
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
        raise ValueError(f"timeout={timeout!r} must be a number of seconds > 0")
    return float(limit)


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
