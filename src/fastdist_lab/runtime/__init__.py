"""Real process groups: the pool and ``Distributed`` (gloo / NCCL), a persistent ``LocalCluster``, results;
simulated worlds of thousands of ranks in one process (``SimulatedCluster``, on torch's threaded and fake groups).

Three parts make the cluster: process supervision (``supervisor``, ``workers``, ``server``, ``procs``), the typed
control channel (``channel``) and calls (``calls``); ``cluster.LocalCluster`` composes them. Everything here
imports torch; ``import fastdist_lab`` does not import this package until one of its names is used.
"""

from __future__ import annotations

from .capacity import CapacityError, check_capacity
from .cluster import LocalCluster
from .errors import BackendUnavailable, ClusterError, ClusterTimeout
from .inprocess import InProcessUnavailable
from .modes import CLUSTER_MODES, MODE_PROVES, open_cluster, suggested_mode
from .pool import Distributed, ProcessGroupPool
from .results import RankError, RankResult, RankResults
from .simulated import SimulatedCluster
from .verification import Verification, load_report
from .worker import RankContext

__all__ = [
    "CLUSTER_MODES",
    "MODE_PROVES",
    "BackendUnavailable",
    "CapacityError",
    "ClusterError",
    "ClusterTimeout",
    "Distributed",
    "InProcessUnavailable",
    "LocalCluster",
    "ProcessGroupPool",
    "RankContext",
    "RankError",
    "RankResult",
    "RankResults",
    "SimulatedCluster",
    "Verification",
    "check_capacity",
    "load_report",
    "open_cluster",
    "suggested_mode",
]
