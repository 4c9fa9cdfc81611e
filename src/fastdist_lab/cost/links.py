"""Seconds of one collective on groups placed over nodes: NVLink inside a node, the network between nodes.

A group of ``n = g k`` ranks, ``g`` on each of ``k`` nodes, runs a collective hierarchically, as NCCL does across
nodes (Bekman, "Machine Learning Engineering", ``network/README.md``, "Inter-node speed depends on intra-node
speed", model 3): inside each node over NVLink on the whole payload ``P``, between nodes only on each GPU's
``P / g`` share, every GPU on its own NIC. With nccl-tests' bus factors (doc/PERFORMANCE.md):

- all-reduce: ``2 (g-1)/g P / B_nvlink + 2 (k-1)/k (P/g) / B_net``;
- all-gather, reduce-scatter: ``(g-1)/g P / B_nvlink + (k-1)/k (P/g) / B_net`` (``P`` the gathered size);
- point-to-point: ``P / B`` over the link it crosses;

each plus ``Efficiency.collective_latency_s``, with ``B`` the peak bandwidth times ``Efficiency.nvlink_efficiency``
or ``network_efficiency``. One member per node (``g = 1``) is a ring over the NICs; one node (``k = 1``) a ring
over NVLink.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .efficiency import Efficiency
from .hardware import Hardware

FACTORS: dict[str, float] = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}
"""Bus factor numerators (times ``(n - 1) / n``) of the collectives."""


def collective_seconds(
    collective: str, payload: Any, per_node: Any, nodes: Any, hardware: Hardware, efficiency: Efficiency
) -> np.ndarray:
    """Seconds of ``collective`` on ``payload`` bytes for groups of ``per_node`` members on each of ``nodes``
    nodes (arrays broadcast); 0 where the group has one member or the payload is 0."""
    factor = FACTORS[collective]
    payload = np.asarray(payload, dtype=np.float64)
    g = np.asarray(per_node, dtype=np.float64)
    k = np.asarray(nodes, dtype=np.float64)
    intra = factor * (g - 1) / g * payload / (hardware.intra_node_GBps * 1e9 * efficiency.nvlink_efficiency)
    inter = factor * (k - 1) / k * payload / g / (hardware.inter_node_GBps * 1e9 * efficiency.network_efficiency)
    busy = (g * k > 1) & (payload > 0)
    return np.where(busy, intra + inter + efficiency.collective_latency_s, 0.0)


def message_seconds(payload: Any, inter_node: Any, hardware: Hardware, efficiency: Efficiency) -> np.ndarray:
    """Seconds of one point-to-point message of ``payload`` bytes over NVLink, or the network where
    ``inter_node``."""
    rate = np.where(
        inter_node,
        hardware.inter_node_GBps * efficiency.network_efficiency,
        hardware.intra_node_GBps * efficiency.nvlink_efficiency,
    )
    return np.asarray(payload, dtype=np.float64) / (rate * 1e9) + efficiency.collective_latency_s
