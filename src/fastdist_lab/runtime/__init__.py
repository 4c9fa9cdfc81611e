"""Real process groups: the pool and ``Distributed`` (gloo / NCCL), a persistent ``LocalCluster``, results.

Everything here imports torch; ``import fastdist_lab`` does not import this package until one of its names
is used.
"""

from __future__ import annotations

from .cluster import LocalCluster
from .errors import ClusterError, ClusterTimeout
from .pool import Distributed, ProcessGroupPool
from .results import RankError, RankResult, RankResults, Verification, load_report
from .worker import RankContext

__all__ = [
    "ClusterError",
    "ClusterTimeout",
    "Distributed",
    "LocalCluster",
    "ProcessGroupPool",
    "RankContext",
    "RankError",
    "RankResult",
    "RankResults",
    "Verification",
    "load_report",
]
