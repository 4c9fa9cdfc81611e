"""Link speeds a step's communication runs at: one bus bandwidth inside a node, one between nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CostError
from ..validation import check_number

HARDWARE_PRESETS: dict[str, tuple[float, float, str]] = {
    "dgx-h100": (
        450.0,
        50.0,
        "8 H100 per node on NVLink 4 (900 GB/s both directions per GPU, NVIDIA H100 datasheet), "
        "one 400 Gb/s ConnectX-7 per GPU between nodes (NVIDIA DGX H100 datasheet)",
    ),
    "dgx-a100": (
        300.0,
        25.0,
        "8 A100 per node on NVLink 3 (600 GB/s both directions per GPU, NVIDIA A100 datasheet), "
        "one 200 Gb/s HDR ConnectX-6 per GPU between nodes (NVIDIA DGX A100 datasheet)",
    ),
    "pcie-100gbe": (
        32.0,
        12.5,
        "GPUs on PCIe 4.0 x16 (about 32 GB/s each way) in a node, 100 Gb/s Ethernet between nodes",
    ),
}
"""Preset name -> (intra-node GB/s, inter-node GB/s, where the figures come from); peak link rates, one
direction, per GPU (nccl-tests' measured bus bandwidth usually reaches 70-90% of them)."""

DEFAULT_HARDWARE = "dgx-h100"
"""The preset used when none is named."""


@dataclass(frozen=True)
class Hardware:
    """Bus bandwidth per GPU in GB/s (1e9 bytes per second): inside a node and between nodes.

    A collective's time is its bus bytes over the bandwidth of the slowest link its group uses
    (nccl-tests, doc/PERFORMANCE.md: bus bandwidth is the per-link rate a ring reaches).
    ``Hardware.preset("dgx-h100")``: 8 GPUs on NVLink with 400 Gb/s per GPU between nodes.
    """

    intra_node_GBps: float
    inter_node_GBps: float
    name: str = "custom"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "intra_node_GBps", check_number("intra_node_GBps", self.intra_node_GBps, error=CostError)
        )
        object.__setattr__(
            self, "inter_node_GBps", check_number("inter_node_GBps", self.inter_node_GBps, error=CostError)
        )

    @classmethod
    def preset(cls, name: str) -> Hardware:
        """The preset ``name`` (one of ``HARDWARE_PRESETS``)."""
        if name not in HARDWARE_PRESETS:
            raise CostError(f"hardware={name!r} is not a preset; use one of {', '.join(HARDWARE_PRESETS)}")
        intra, inter, _ = HARDWARE_PRESETS[name]
        return cls(intra, inter, name)

    @classmethod
    def coerce(cls, hardware: Hardware | str | None) -> Hardware:
        """``hardware`` itself, the preset it names, or the default preset for ``None``."""
        if hardware is None:
            return cls.preset(DEFAULT_HARDWARE)
        if isinstance(hardware, str):
            return cls.preset(hardware)
        if not isinstance(hardware, Hardware):
            raise CostError(f"hardware={hardware!r} must be a Hardware or a preset name")
        return hardware

    def link_GBps(self, inter_node: Any) -> Any:
        """The bus bandwidth (GB/s) a collective gets: ``inter_node_GBps`` where its groups span nodes, else
        ``intra_node_GBps`` (``inter_node`` a bool or a numpy array of them)."""
        return np.where(inter_node, self.inter_node_GBps, self.intra_node_GBps)

    def seconds(self, bus_bytes: Any, inter_node: Any) -> Any:
        """Seconds to move ``bus_bytes`` (nccl-tests' bus bytes) at ``link_GBps(inter_node)``: the one time model
        of ``CostReport.time`` and of the replay's prediction (bandwidth only, no latency, no overlap)."""
        return np.asarray(bus_bytes, dtype=np.float64) / (self.link_GBps(inter_node) * 1e9)
