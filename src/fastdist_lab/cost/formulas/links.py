"""Seconds of one collective on groups placed over nodes: NVLink inside a node, the network between nodes, and the
algorithm NCCL would run.

A group of ``n = g k`` ranks, ``g`` on each of ``k`` nodes:

- **bus bandwidth** ``B``: NCCL's ring (and tree) is a pipeline, so it runs at its slowest link (NCCL's topology
  search sets each channel's speed to what every link of it sustains; ``ncclTopoCompute``): NVLink,
  ``intra_node_GBps x nvlink_efficiency`` where ``g > 1``, and the network where ``k > 1``: the group's ``g``
  members each send through their own adapter, ``g x inter_node_GBps``, but no more than the node's adapters
  (``gpus_per_node x inter_node_GBps``) shared by the ``concurrent`` groups that use them at once (by default
  every GPU of the node is in one of them, ``gpus_per_node / g`` groups), times ``network_efficiency``;
- **time** of each algorithm and protocol: NCCL's own model (``nccl_tuning``: a latency that grows with the
  ring's steps, ``2 (n - 1)`` for an all-reduce, or the tree's ``log2 k``, plus the bytes each rank moves at
  that protocol's share of ``B``), and NCCL's choice, the fastest of them: rings for all-gather and
  reduce-scatter, ring or tree for all-reduce. A ring all-reduce over 1,536 ranks (192 nodes) has 3,070 steps,
  6.7 ms of latency at best (LL128); the tree's is 0.15 ms, so the tree carries any buffer under several
  gigabytes.

``bytes / B`` times nccl-tests' bus factor (all-reduce ``2 (n-1)/n``, all-gather / reduce-scatter ``(n-1)/n``;
doc/PERFORMANCE.md) is what a ring moves; a point-to-point message takes ``bytes / B`` of the link it crosses plus
one Simple step. ``Efficiency(collective_latency_s=...)`` (deprecated) replaces NCCL's latencies by that fixed
figure, as before issue 27.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...setup import Efficiency, Hardware
from .nccl_tuning import (
    BASE_LATENCY_US,
    NETWORK_POST_OVERHEAD_US,
    NETWORK_STEP_US,
    NVLINK_STEP_US,
    PROTOCOLS,
    RING_PLATEAU,
    RING_SHARE,
    TREE_CORRECTION,
    TREE_SHARE,
)

FACTORS: dict[str, float] = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}
"""Bus factor numerators (times ``(n - 1) / n``) of the collectives."""

_OVERHEAD_US = tuple(NETWORK_POST_OVERHEAD_US * (3 if p == "Simple" else 1) for p in PROTOCOLS)


def bus_GBps(per_node: Any, nodes: Any, hardware: Hardware, efficiency: Efficiency, concurrent: Any = None) -> Any:
    """The bus bandwidth (GB/s) of groups of ``per_node`` members on each of ``nodes`` nodes: the slower of NVLink
    and the network share of the node's adapters (``concurrent`` groups using them at once; by default every GPU of
    the node is in one such group). Infinite for one rank."""
    g = np.asarray(per_node, dtype=np.float64)
    k = np.asarray(nodes, dtype=np.float64)
    nvlink = np.where(g > 1, hardware.intra_node_GBps * efficiency.nvlink_efficiency, np.inf)
    sharing = hardware.gpus_per_node / g if concurrent is None else np.asarray(concurrent, dtype=np.float64)
    adapters = np.minimum(g, hardware.gpus_per_node / np.maximum(sharing, 1e-9)) * hardware.inter_node_GBps
    network = np.where(k > 1, adapters * efficiency.network_efficiency, np.inf)
    return np.minimum(nvlink, network)


@functools.cache
def candidates(collective: str) -> dict[str, Any]:
    """The (algorithm, protocol) pairs NCCL weighs for ``collective`` and their constants as columns (one entry per
    pair, shaped to broadcast against the groups' arrays along a new first axis)."""
    pairs = [("ring", p) for p in PROTOCOLS] + ([("tree", p) for p in PROTOCOLS] if collective == "all_reduce" else [])
    reduce = collective == "all_reduce"

    def share(algorithm: str, protocol: str, multi: bool, one_per_node: bool) -> float:
        if algorithm == "tree":
            return TREE_SHARE[protocol] if multi or protocol != "LL128" else 0.92 * 7 / 9
        if protocol == "LL":
            return 0.25 if multi or reduce else 1 / 3
        if protocol == "LL128" and one_per_node:
            return 0.7
        return RING_SHARE[protocol]

    columns = {
        "pairs": tuple(pairs),
        "tree": [a == "tree" for a, _ in pairs],
        "base": [BASE_LATENCY_US[a][PROTOCOLS.index(p)] for a, p in pairs],
        "nvlink": [NVLINK_STEP_US[a][PROTOCOLS.index(p)] for a, p in pairs],
        "network": [NETWORK_STEP_US[a][PROTOCOLS.index(p)] for a, p in pairs],
        "leaving": [max(NVLINK_STEP_US[a][PROTOCOLS.index(p)], _OVERHEAD_US[PROTOCOLS.index(p)]) for a, p in pairs],
        "plateau": [reduce and a == "ring" and p == "Simple" for a, p in pairs],
        "share_single": [share(a, p, False, False) for a, p in pairs],
        "share_multi": [share(a, p, True, False) for a, p in pairs],
        "share_one": [share(a, p, True, True) for a, p in pairs],
    }
    arrays = {name: np.array(values) for name, values in columns.items() if name != "pairs"}
    arrays["correction"] = np.array(
        [TREE_CORRECTION[p] + (1.0,) if a == "tree" else (1.0,) * (len(TREE_CORRECTION[p]) + 1) for a, p in pairs]
    )
    return {"pairs": columns["pairs"], **arrays}


def algorithm_seconds(
    collective: str, payload: Any, per_node: Any, nodes: Any, hardware: Hardware, efficiency: Efficiency,
    concurrent: Any = None,
) -> tuple[tuple[tuple[str, str], ...], np.ndarray]:  # fmt: skip
    """Seconds of ``collective`` on ``payload`` bytes under each (algorithm, protocol) NCCL weighs
    (``nccl_tuning``), for groups of ``per_node`` members on each of ``nodes`` nodes (arrays broadcast): the pairs,
    and the seconds with one entry per pair along a new first axis."""
    payload = np.asarray(payload, dtype=np.float64)
    g = np.asarray(per_node, dtype=np.float64)
    k = np.asarray(nodes, dtype=np.float64)
    ndim = max(payload.ndim, g.ndim, k.ndim)
    g, k = (x.reshape((1,) * (ndim - x.ndim) + x.shape) for x in (g, k))
    shared = None if concurrent is None else np.asarray(concurrent, dtype=np.float64)
    terms = group_terms(
        collective, g.tobytes(), g.shape, k.tobytes(), k.shape, hardware, efficiency,
        None if shared is None else (shared.tobytes(), shared.shape),
    )  # fmt: skip
    table = candidates(collective)
    latency = terms["latency"]
    if collective == "all_reduce":  # NCCL's plateau of the Simple ring over several nodes
        latency = np.where(terms["plateau"] & (payload >= terms["threshold"]), latency * RING_PLATEAU, latency)
    size_class = np.minimum(np.log2(np.maximum(payload, 64.0) / 64), 23).astype(np.int64)
    correction = table["correction"][:, size_class]  # the tree's correction for medium sizes (1 for rings)
    seconds = latency * 1e-6 if efficiency.collective_latency_s is None else efficiency.collective_latency_s
    return table["pairs"], seconds + payload * terms["per_byte"] / correction


@functools.lru_cache(maxsize=256)
def group_terms(
    collective: str, g_bytes: bytes, g_shape: tuple[int, ...], k_bytes: bytes, k_shape: tuple[int, ...],
    hardware: Hardware, efficiency: Efficiency, concurrent: tuple[bytes, tuple[int, ...]] | None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """What ``algorithm_seconds`` needs of the groups alone (cached: a step asks for the same groups many times):
    each pair's latency (microseconds, before the plateau), seconds per byte of the buffer, whether the plateau
    applies and the size from which it does."""
    g = np.frombuffer(g_bytes).reshape(g_shape)
    k = np.frombuffer(k_bytes).reshape(k_shape)
    shared = None if concurrent is None else np.frombuffer(concurrent[0]).reshape(concurrent[1])
    table = candidates(collective)
    shape = (len(table["pairs"]),) + (1,) * g.ndim

    def column(name: str) -> np.ndarray:
        return table[name].reshape(shape)

    n, multi = g * k, k > 1
    bus = bus_GBps(g, k, hardware, efficiency, shared) * 1e9
    if collective == "all_reduce":
        steps, inter = 2 * (n - 1), np.where(multi, 2 * k, 0.0)
    else:
        steps, inter = n - 1, k - 1
    intra = np.maximum(steps - inter, 0.0)
    ring = column("base") + intra * np.where(multi, column("leaving"), column("nvlink")) + inter * column("network")
    depth = np.floor(np.log2(np.maximum(k, 1.0)))
    tree = column("base") + 2 * ((g - 1) * column("nvlink") + depth * column("network"))
    share = np.where(multi, np.where(g < 2, column("share_one"), column("share_multi")), column("share_single"))
    # a ring moves steps / n of the buffer per rank; a tree the whole buffer up and down (bandwidth / 2)
    moved = np.where(column("tree"), 2.0, steps / np.maximum(n, 1.0))
    return {
        "latency": np.where(column("tree"), tree, ring),
        "per_byte": moved / (bus * share),
        "plateau": column("plateau") & multi,
        "threshold": 64 * hardware.gpus_per_node * n,
    }


def nccl_choice(
    collective: str, payload: float, per_node: int, nodes: int, hardware: Hardware, efficiency: Efficiency,
    concurrent: float | None = None,
) -> tuple[str, str]:  # fmt: skip
    """The (algorithm, protocol) NCCL's model picks for one collective: the fastest of ``algorithm_seconds``."""
    pairs, times = algorithm_seconds(collective, payload, per_node, nodes, hardware, efficiency, concurrent)
    return pairs[int(np.argmin(times.reshape(len(pairs), -1)[:, 0]))]


def collective_seconds(
    collective: str, payload: Any, per_node: Any, nodes: Any, hardware: Hardware, efficiency: Efficiency,
    concurrent: Any = None,
) -> np.ndarray:  # fmt: skip
    """Seconds of ``collective`` on ``payload`` bytes for groups of ``per_node`` members on each of ``nodes``
    nodes (arrays broadcast), under the algorithm and protocol NCCL would choose; 0 where the group has one member
    or the payload is 0. ``concurrent``: how many such groups share a node's network adapters at once (default:
    every GPU of the node is in one)."""
    best = algorithm_seconds(collective, payload, per_node, nodes, hardware, efficiency, concurrent)[1].min(axis=0)
    busy = (np.asarray(per_node) * np.asarray(nodes) > 1) & (np.asarray(payload) > 0)
    return np.where(busy, best, 0.0)


def message_seconds(payload: Any, inter_node: Any, hardware: Hardware, efficiency: Efficiency) -> np.ndarray:
    """Seconds of one point-to-point message of ``payload`` bytes over NVLink, or the network where
    ``inter_node``: the bytes at that link's rate plus one Simple step of it (NCCL's ring base and step
    latencies)."""
    rate = np.where(
        inter_node,
        hardware.inter_node_GBps * efficiency.network_efficiency,
        hardware.intra_node_GBps * efficiency.nvlink_efficiency,
    )
    step = np.where(inter_node, NETWORK_STEP_US["ring"][2], NVLINK_STEP_US["ring"][2])
    latency = (BASE_LATENCY_US["ring"][2] + step) * 1e-6
    if efficiency.collective_latency_s is not None:
        latency = efficiency.collective_latency_s
    return np.asarray(payload, dtype=np.float64) / (rate * 1e9) + latency
