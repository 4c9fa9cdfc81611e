"""NCCL's own cost model of its collectives: per algorithm (ring, tree) and protocol (LL, LL128, Simple) a latency
and a bandwidth; NCCL runs each call with the pair its model predicts fastest.

Every number here is NCCL's, from ``src/graph/tuning.cc`` at commit b6475625 of github.com/NVIDIA/nccl
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``, NCCL 2.19-2.21):

- latency (microseconds) = ``baseLat[algorithm][protocol]`` plus, for a ring, ``(nsteps - nInterSteps)`` NVLink
  steps and ``nInterSteps`` network steps (all-reduce: ``nsteps = 2 (n - 1)``, ``nInterSteps = 2 k`` on ``k > 1``
  nodes; all-gather and reduce-scatter: ``n - 1`` and ``k - 1``), each NVLink step at least the network post
  overhead (1 us, 3 us for Simple) when the ring leaves the node; for a tree (all-reduce only)
  ``2 ((n/k - 1) NVLink steps + floor(log2 k) network steps)``; a ring all-reduce over several nodes with Simple
  takes 1.4 times its latency (the "plateau effect of ring", Ampere and later);
- bandwidth = the ring's bus bandwidth (its slowest link) times the protocol's share (LL a quarter, or a third for
  all-gather / reduce-scatter inside a node; LL128 0.92, or 0.7 with one rank per node; Simple all of it); a tree
  gets 0.92 of it (LL128 then 7/9 inside a node and 120/128 across nodes, LL 1/3.8) and moves the whole buffer
  twice (algorithm bandwidth = bus bandwidth / 2), with NCCL's correction for medium sizes
  (``treeCorrectionFactor``); a ring moves ``nsteps / n`` of the buffer.

Left out: NVLink SHARP (NVLS, NVLSTree) and CollNet (InfiniBand SHARP), which need switch support; the per-channel
bandwidth caps (``perChMaxTreeBw`` and the LL caps), which need the channel count NCCL's topology search finds;
and NCCL 2.23's PAT algorithm for all-gather / reduce-scatter at one rank per node.
"""

from __future__ import annotations

PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
"""NCCL's protocols, in the order of its tables."""

ALGORITHMS: tuple[str, ...] = ("ring", "tree")
"""The algorithms modelled (NCCL's ``NCCL_ALGO_RING`` and ``NCCL_ALGO_TREE``; the tree for all-reduce only)."""

BASE_LATENCY_US: dict[str, tuple[float, float, float]] = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
"""``baseLat``: fixed microseconds of one call, per algorithm and protocol (LL, LL128, Simple)."""

NVLINK_STEP_US: dict[str, tuple[float, float, float]] = {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4)}
"""``hwLat[NCCL_HW_NVLINK]``: microseconds per step between two GPUs of a node."""

NETWORK_STEP_US: dict[str, tuple[float, float, float]] = {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0)}
"""``hwLat[NCCL_HW_NET]``: microseconds per step between two nodes."""

NETWORK_POST_OVERHEAD_US = 1.0
"""``getNetOverhead`` on x86 hosts: the least an NVLink step of a ring that leaves the node costs (3 times this for
Simple)."""

RING_PLATEAU = 1.4
"""Factor on the latency of a Simple ring all-reduce over several nodes once each channel's share of each rank is
at least 64 bytes (Ampere and later; 1.9 before)."""

RING_SHARE: dict[str, float] = {"LL": 1 / 4, "LL128": 0.92, "Simple": 1.0}
"""Share of the ring's bus bandwidth each protocol reaches (LL: 1/3 for all-gather and reduce-scatter inside a
node; LL128: 0.7 with one rank per node)."""

TREE_SHARE: dict[str, float] = {"LL": 0.92 / 3.8, "LL128": 0.92 * 120 / 128, "Simple": 0.92}
"""Share of the ring's bus bandwidth a tree reaches per protocol across nodes (LL128 inside one node: 0.92 x 7/9)."""

TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}  # fmt: skip
"""``treeCorrectionFactor``: the tree's bandwidth factor by ``floor(log2(bytes / 64))``, 64 B to 256 MB (1 above)."""
