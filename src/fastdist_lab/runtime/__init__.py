"""Real process groups: the pool and ``Distributed`` (gloo / NCCL), a persistent ``LocalCluster``, results.

Three parts make the cluster: process supervision (``supervisor``, ``workers``, ``server``, ``procs``), the typed
control channel (``channel``) and calls (``calls``); ``cluster.LocalCluster`` composes them. Everything here
imports torch; ``import fastdist_lab`` does not import this package until one of its names is used.
"""

from __future__ import annotations

from .cluster import LocalCluster
from .errors import BackendUnavailable, ClusterError, ClusterTimeout
from .pool import Distributed, ProcessGroupPool
from .results import RankError, RankResult, RankResults
from .verification import Verification, load_report
from .worker import RankContext

__all__ = [
    "BackendUnavailable",
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
