"""What runs a world's ranks: real processes (``LocalCluster``) or one process simulating them
(``SimulatedCluster`` with torch's threaded or fake groups), chosen by one name everywhere (CLI, panels).

``open_cluster(mode, world_size, ...)`` builds either; ``suggested_mode(world_size)`` is the mode a world of that
size fits in on this machine (``"processes"`` when it fits as processes, else ``"threads"``, else ``"fake"``).
"""

from __future__ import annotations

from typing import Any

from ..config import CLUSTER_MODES
from .capacity import fits
from .local_cluster import LocalCluster
from .simulated import SimulatedCluster

__all__ = ["CLUSTER_MODES", "MODE_PROVES", "check_mode", "open_cluster", "suggested_mode"]

MODE_PROVES = {
    "processes": "real process groups (gloo over loopback, or NCCL): membership, order and arithmetic of every "
    "group through a real transport",
    "threads": "torch's threaded process groups, one thread per rank: membership, order and arithmetic of every "
    "group with real collectives on real tensors; no network transport and no NCCL kernel ran",
    "fake": "torch's fake process groups: every rank's groups (members, group ranks) as its pool built them; no "
    "collective ran, so nothing about reductions or transport is proven",
}
"""What a verification in each mode proves, and what it does not, in one sentence each."""


def check_mode(mode: Any) -> str:
    """``mode`` checked (``ValueError`` naming it unless one of ``CLUSTER_MODES``)."""
    if mode not in CLUSTER_MODES:
        raise ValueError(f"mode={mode!r} is not a cluster mode; use one of {', '.join(CLUSTER_MODES)}")
    return str(mode)


def open_cluster(
    mode: str,
    world_size: int,
    local_world_size: int | None = None,
    backend: str = "auto",
    timeout: float | None = None,
    progress: Any = None,
) -> LocalCluster | SimulatedCluster:
    """A started cluster of ``world_size`` ranks in ``mode`` (see ``CLUSTER_MODES``). ``backend`` applies to
    processes only (simulated ranks use torch's in-process groups on CPU tensors); ``timeout`` defaults to 60 s
    for processes and to ``simulated.default_timeout(world_size)`` for simulated worlds. Raises ``CapacityError``
    (one line, naming the numbers and a mode that fits) before anything starts when the world does not fit."""
    mode = check_mode(mode)
    deadline = {} if timeout is None else {"timeout": timeout}  # else each class's own default
    if mode == "processes":
        return LocalCluster(world_size, backend=backend, local_world_size=local_world_size, progress=progress,
                            **deadline)  # fmt: skip
    return SimulatedCluster(world_size, mode=mode, local_world_size=local_world_size, progress=progress, **deadline)


def suggested_mode(world_size: int) -> str:
    """The first of ``CLUSTER_MODES`` whose world of ``world_size`` ranks fits on this machine now."""
    return next((mode for mode in CLUSTER_MODES if fits(world_size, mode)), "fake")
