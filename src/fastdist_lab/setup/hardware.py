"""The GPU a step runs on: peak FLOP/s, HBM size and bandwidth, NVLink inside a node, the network between nodes.

Every preset number comes from the vendor's datasheet (peak dense bf16/fp16 tensor FLOP/s without sparsity,
HBM capacity and bandwidth, NVLink bandwidth per GPU in one direction, NICs per GPU of the reference node) except
``matmul_efficiency``, the best a cuBLAS GEMM reaches (Bekman, "Machine Learning Engineering",
``compute/accelerator/README.md``, "Maximum Achievable Matmul FLOPS comparison table": measured MAMF over the
datasheet peak) and ``attention_efficiency``, what a fused attention kernel reaches forward and backward
(Dao 2023, FlashAttention-2, Section 4.1, on A100; Shah et al. 2024, FlashAttention-3, Section 4.1, on H100).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CostError
from ..formatting import quoted
from ..validation import check_int, check_number

GiB = 2**30
"""Bytes in a GiB. Datasheets say "80GB" for what ``nvidia-smi`` shows as about 80 GiB (81,920 MiB on an A100
80GB), so presets store memory in GiB."""

SUSTAINED: dict[str, float] = {"ampere": 0.848, "hopper": 0.620}
"""*Calibrated* (``docs/validation.md``): the share of its best GEMM and fused attention a GPU family sustains in
a training run, all GPUs of a node busy (sustained clocks under the power limit, the GEMM shapes and layouts of a
transformer layer). Fitted on the calibration runs of each family; Blackwell, without published runs here, takes
Hopper's."""

_A100_SXM = dict(
    peak_tflops=312.0, memory_GiB=80.0, memory_GBps=2039.0, gpus_per_node=8,
    matmul_efficiency=0.869, attention_efficiency=(0.70, 0.55), family="ampere",
)  # fmt: skip
_H100_SXM = dict(
    peak_tflops=989.0, memory_GiB=80.0, memory_GBps=3350.0, gpus_per_node=8,
    matmul_efficiency=0.803, attention_efficiency=(0.60, 0.45), family="hopper",
)  # fmt: skip

HARDWARE_PRESETS: dict[str, dict[str, Any]] = {
    # NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOPS bf16 dense, 80GB HBM2e at 2,039 GB/s, NVLink 3 600 GB/s
    # (both directions); DGX A100 datasheet: 8 GPUs on NVSwitch, 8 single-port 200 Gb/s HDR InfiniBand NICs.
    "a100-sxm-80gb": dict(intra_node_GBps=300.0, inter_node_GBps=25.0, **_A100_SXM),
    # NVIDIA H100 datasheet (SXM5): 989 TFLOPS bf16 dense, 80GB HBM3 at 3.35 TB/s, NVLink 4 900 GB/s; DGX H100
    # datasheet: 8 GPUs, 8 400 Gb/s ConnectX-7 NICs.
    "h100-sxm-80gb": dict(intra_node_GBps=450.0, inter_node_GBps=50.0, **_H100_SXM),
    # NVIDIA H200 datasheet (SXM): 989 TFLOPS bf16 dense, 141GB HBM3e at 4.8 TB/s, NVLink 900 GB/s; DGX H200: 8
    # GPUs, 8 400 Gb/s ConnectX-7. Same chip as H100: Bekman measures the same MAMF.
    "h200-sxm-141gb": dict(
        intra_node_GBps=450.0, inter_node_GBps=50.0, **{**_H100_SXM, "memory_GiB": 141.0, "memory_GBps": 4800.0}
    ),
    # NVIDIA HGX B200 datasheet: 2.25 PFLOPS bf16 dense (4.5 with sparsity) per GPU, 180GB HBM3e at 8 TB/s,
    # NVLink 5 1.8 TB/s; DGX B200: 8 GPUs, 8 400 Gb/s ConnectX-7. MAMF 77.6% (Bekman); attention as H100.
    "b200": dict(
        intra_node_GBps=900.0, inter_node_GBps=50.0, peak_tflops=2250.0, memory_GiB=180.0, memory_GBps=8000.0,
        gpus_per_node=8, matmul_efficiency=0.776, attention_efficiency=(0.60, 0.45), family="blackwell",
    ),
    # The presets of earlier releases, kept: DGX H100 and DGX A100 nodes (the GPUs above), and A100 PCIe 80GB
    # cards (datasheet: 312 TFLOPS, 1,935 GB/s; MAMF 81.1%) on PCIe 4.0 x16 with 100 Gb/s Ethernet.
    "dgx-h100": dict(intra_node_GBps=450.0, inter_node_GBps=50.0, **_H100_SXM),
    "dgx-a100": dict(intra_node_GBps=300.0, inter_node_GBps=25.0, **_A100_SXM),
    "pcie-100gbe": dict(
        intra_node_GBps=32.0, inter_node_GBps=12.5, **{**_A100_SXM, "memory_GBps": 1935.0, "matmul_efficiency": 0.811}
    ),
}  # fmt: skip
"""Preset name -> ``Hardware`` fields (sources in the comments of this module)."""

DEFAULT_HARDWARE = "dgx-h100"
"""The preset used when none is named."""

MEMORY_RESERVE_GiB = 2.0
"""HBM no tensor of the model can use: CUDA context, NCCL buffers, cuBLAS workspaces (about 1-2 GiB)."""

MAX_FIGURE = 1e6
"""The largest bandwidth (GB/s), peak (TFLOP/s) or memory (GiB) a ``Hardware`` takes: a thousand times today's GPUs,
and far enough from a float's range that no time or byte count derived from it overflows."""

MEMORY_FRAGMENTATION = 0.05
"""The share of HBM PyTorch's caching allocator loses to fragmentation in long runs (a few percent; PyTorch's
``expandable_segments`` documentation), kept free by ``Hardware.usable_bytes``."""


@dataclass(frozen=True)
class Hardware:
    """One GPU model and its node: links, and (for step times and memory fits) compute and memory.

    - ``intra_node_GBps``: NVLink bandwidth per GPU in one direction (GB/s, 1e9 bytes per second);
      ``inter_node_GBps``: network bandwidth per GPU between nodes. A collective's time is its bus bytes over
      the slowest link its group uses (nccl-tests, doc/PERFORMANCE.md).
    - ``peak_tflops``: dense bf16/fp16 tensor-core TFLOP/s; ``memory_GiB`` and ``memory_GBps``: HBM size and
      bandwidth; ``gpus_per_node``: GPUs per NVLink domain.
    - ``matmul_efficiency``: the share of ``peak_tflops`` the best GEMM reaches; ``attention_efficiency``:
      (forward, backward) share a fused attention kernel reaches; ``family`` (``"ampere"``, ``"hopper"``,
      ``"blackwell"``) picks how much of both a training run sustains (``SUSTAINED``; ``sustained`` overrides).

    ``Hardware.preset(name)`` (see ``presets()``) or ``Hardware(intra_node_GBps=..., inter_node_GBps=...,
    peak_tflops=..., memory_GiB=..., memory_GBps=...)`` for anything else.
    """

    intra_node_GBps: float
    inter_node_GBps: float
    name: str = "custom"
    peak_tflops: float | None = None
    memory_GiB: float | None = None
    memory_GBps: float | None = None
    gpus_per_node: int = 8
    matmul_efficiency: float = 0.8
    attention_efficiency: tuple[float, float] = (0.6, 0.45)
    family: str = "hopper"
    sustained: float | None = None

    def __post_init__(self) -> None:
        for field in ("intra_node_GBps", "inter_node_GBps", "peak_tflops", "memory_GiB", "memory_GBps"):
            value = getattr(self, field)
            if value is None and field not in ("intra_node_GBps", "inter_node_GBps"):  # optional
                continue
            if check_number(field, value, error=CostError) > MAX_FIGURE:
                raise CostError(f"{field}={value!r} must be at most {MAX_FIGURE:g}")
            object.__setattr__(self, field, float(value))
        gpus = check_int("gpus_per_node", self.gpus_per_node, minimum=1, maximum=2**24, error=CostError)
        object.__setattr__(self, "gpus_per_node", gpus)
        attention = self.attention_efficiency
        if not isinstance(attention, (tuple, list)) or len(attention) != 2:
            raise CostError(f"attention_efficiency={attention!r} must be (forward, backward) fractions")
        for field, value in (("matmul_efficiency", self.matmul_efficiency), ("attention_efficiency", attention[0]),
                             ("attention_efficiency", attention[1])):  # fmt: skip
            if check_number(field, value, error=CostError) > 1:
                raise CostError(f"{field}={value!r} must be a fraction in (0, 1]")
        object.__setattr__(self, "attention_efficiency", (float(attention[0]), float(attention[1])))
        if not isinstance(self.family, str) or self.family not in SUSTAINED and self.family != "blackwell":
            raise CostError(f"family={self.family!r} must be one of 'ampere', 'hopper', 'blackwell'")
        if not isinstance(self.name, str) or not self.name.isprintable() or len(self.name) > 200:
            raise CostError(f"name={quoted(self.name)} must be a line of text (at most 200 characters)")
        if self.sustained is not None and check_number("sustained", self.sustained, error=CostError) > 1:
            raise CostError(f"sustained={self.sustained!r} must be a fraction in (0, 1]")

    @property
    def tensor_core_sustained(self) -> float:
        """``sustained``, or the calibrated ``SUSTAINED`` share of the family (Blackwell: Hopper's)."""
        if self.sustained is not None:
            return float(self.sustained)
        return SUSTAINED["hopper" if self.family == "blackwell" else self.family]

    @classmethod
    def preset(cls, name: str) -> Hardware:
        """The preset ``name`` (one of ``HARDWARE_PRESETS``)."""
        if name not in HARDWARE_PRESETS:
            raise CostError(f"hardware={name!r} is not a preset; use one of {', '.join(HARDWARE_PRESETS)}")
        return cls(name=name, **HARDWARE_PRESETS[name])

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

    def replace(self, **changes: Any) -> Hardware:
        """A copy with ``changes`` (e.g. a slower network: ``hw.replace(inter_node_GBps=25)``)."""
        return dataclasses.replace(self, **changes)

    def with_network(self, inter_node_GBps: float | None) -> Hardware:
        """This hardware on another network: ``inter_node_GBps`` per GPU between nodes at line rate (``None``:
        itself), named so, for a cluster unlike the preset's reference node (e.g. what NCCL measured on it).
        ``CostError`` names a bad value.

        >>> Hardware.preset("a100-sxm-80gb").with_network(2.82).name
        'a100-sxm-80gb, network 2.82 GB/s per GPU'
        """
        if inter_node_GBps is None:
            return self
        bandwidth = self.replace(inter_node_GBps=inter_node_GBps).inter_node_GBps  # checked: finite, > 0
        return self.replace(inter_node_GBps=bandwidth, name=f"{self.name}, network {bandwidth:g} GB/s per GPU")

    def require(self, *fields: str) -> None:
        """``CostError`` naming the first of ``fields`` this hardware does not give (a step time needs them)."""
        for field in fields:
            if getattr(self, field) is None:
                raise CostError(
                    f"hardware {self.name!r} has no {field}; use a preset ({', '.join(HARDWARE_PRESETS)}) "
                    f"or give Hardware(..., {field}=...)"
                )

    @property
    def usable_bytes(self) -> int | None:
        """The bytes a model's tensors can use: HBM less ``MEMORY_RESERVE_GiB`` and ``MEMORY_FRAGMENTATION``."""
        if self.memory_GiB is None:
            return None
        return int((self.memory_GiB * (1 - MEMORY_FRAGMENTATION) - MEMORY_RESERVE_GiB) * GiB)

    def fits(self, total_bytes: Any) -> Any:
        """Whether ``total_bytes`` per GPU (a number or a numpy array) fit ``usable_bytes``."""
        self.require("memory_GiB")
        return np.asarray(total_bytes) <= self.usable_bytes

    def link_GBps(self, inter_node: Any) -> Any:
        """The bus bandwidth (GB/s) a collective gets: ``inter_node_GBps`` where its groups span nodes, else
        ``intra_node_GBps`` (``inter_node`` a bool or a numpy array of them)."""
        return np.where(inter_node, self.inter_node_GBps, self.intra_node_GBps)

    def seconds(self, bus_bytes: Any, inter_node: Any) -> Any:
        """Seconds to move ``bus_bytes`` (nccl-tests' bus bytes) at ``link_GBps(inter_node)``: the communication
        time of ``CostReport.communication_time`` and of the replay's prediction (peak link rate, no latency,
        no overlap; the step time's collectives use ``cost.links`` instead)."""
        return np.asarray(bus_bytes, dtype=np.float64) / (self.link_GBps(inter_node) * 1e9)
