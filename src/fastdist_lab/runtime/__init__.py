"""Real process groups: the pool and ``Distributed`` (gloo / NCCL), a persistent ``LocalCluster``, results;
simulated worlds of thousands of ranks in one process (``SimulatedCluster``, on torch's threaded and fake groups).

A call on every rank of any cluster passes through three modules (ARCHITECTURE.md, "Runtime"): ``cluster`` (the base
``Cluster`` and the call on every rank), ``channel`` (the call on the wire, both ends) and ``pool`` (the groups, and
``build_layout``, what ``apply`` runs); its verdict is ``verification``'s. Everything here imports torch, except
``verification``, ``results`` and ``supervisor`` (whose ``prewarm`` starts a worker server ahead of need); names are
imported from their modules on first use. The exceptions are in ``fastdist_lab.errors``.
"""

from __future__ import annotations

from ..lazy import lazy_attributes

_LAZY: dict[str, str] = {
    "CLUSTER_MODES": ".modes",
    "Distributed": ".pool",
    "LocalCluster": ".local_cluster",
    "MODE_PROVES": ".modes",
    "ProcessGroupPool": ".pool",
    "RankContext": ".rank_loop",
    "RankError": ".results",
    "RankResult": ".results",
    "RankResults": ".results",
    "SimulatedCluster": ".simulated",
    "Verification": ".verification",
    "check_capacity": ".capacity",
    "load_report": ".verification",
    "open_cluster": ".modes",
    "prewarm": ".supervisor",
    "suggested_mode": ".modes",
}
"""Each public name and the module that holds it (imported on first use: ``runtime.verification`` and
``runtime.results`` need no torch, so the ``checks`` and ``widgets`` layers stay light until a cluster runs)."""


__all__ = [*_LAZY]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
