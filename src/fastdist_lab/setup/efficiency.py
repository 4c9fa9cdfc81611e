"""The constants of the step-time model: how close kernels and collectives come to the hardware's peaks.

Hardware-specific figures (peak FLOP/s, HBM and link bandwidths, the best GEMM, a fused attention kernel) live in
``Hardware`` and come from datasheets and published measurements (with one calibrated share per GPU family,
``hardware.SUSTAINED``). The constants here are the rest, each with where it comes from; two of them (marked
*calibrated*) were fitted on the calibration runs of
``docs/validation.md`` (``python benchmarks/bench_validation.py --calibrate`` repeats the fit) and are held at
the fitted values, never per run.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..formatting import quoted
from ..validation import check_number


@dataclass(frozen=True)
class Efficiency:
    """How close kernels and collectives come to their peaks (see each field; ``DEFAULT_EFFICIENCY``).

    - ``memory_efficiency`` (*calibrated*): the share of HBM bandwidth memory-bound kernels (norms, dropout,
      residual adds, activations, softmax, the optimizer) reach; stream-like copies reach 85-90%
      (Bekman, ``compute/accelerator/README.md``), framework kernels less.
    - ``kernel_overhead_s`` (*calibrated*): fixed seconds per kernel on top of its roofline time: the launch,
      the last partial wave of thread blocks, the pipeline fill; a transformer layer runs about twenty kernels
      per pass, so small layers lose a larger share to it.
    - ``nvlink_efficiency``: bus bandwidth over NVLink peak for large NCCL collectives: 235 of 300 GB/s for an
      all-reduce on 8 A100 (Bekman, ``network/README.md``, "case study"), 78%.
    - ``network_efficiency``: bus bandwidth over the NIC line rate between nodes: 96.9% for one adapter
      (``ib_write_bw``, Bekman ``network/README.md``) less NCCL's protocol overhead, 90%.
    - ``collective_latency_s`` (deprecated, ``None``): a fixed latency per collective or message, what the model
      used before issue 27 (15 us); the latency now follows NCCL's own tuning model, per algorithm, protocol and
      step over NVLink and the network (``cost.nccl_tuning``, ``cost.links``). Given, it replaces those
      latencies and warns.
    - ``optimizer_bytes_per_parameter``: HBM traffic of one fused Adam step per parameter held: fp32 master
      weight, gradient, two moments read (16), master weight and moments written (12), the bf16 copy written
      (2), the gradient read again for the norm (4): 34 bytes (Megatron-LM's distributed optimizer).
    """

    memory_efficiency: float = 0.615
    kernel_overhead_s: float = 11.4e-6
    nvlink_efficiency: float = 0.78
    network_efficiency: float = 0.90
    collective_latency_s: float | None = None
    optimizer_bytes_per_parameter: float = 34.0

    def __post_init__(self) -> None:
        if self.collective_latency_s is not None:
            warnings.warn(
                "Efficiency.collective_latency_s is deprecated: collective latencies follow NCCL's tuning model "
                "(fastdist_lab.cost.nccl_tuning); a fixed latency given here replaces it",
                DeprecationWarning,
                stacklevel=3,
            )
        for field in dataclasses.fields(self):
            if getattr(self, field.name) is None:
                continue
            value = check_number(field.name, getattr(self, field.name), error=CostError)
            if field.name.endswith("_efficiency") and value > 1:
                raise CostError(f"{field.name}={value!r} must be a fraction in (0, 1]")
            object.__setattr__(self, field.name, value)

    def replace(self, **changes: Any) -> Efficiency:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def coerce(cls, efficiency: Efficiency | None) -> Efficiency:
        """``efficiency`` itself, or ``DEFAULT_EFFICIENCY`` for ``None``; ``CostError`` naming anything else."""
        if efficiency is None:
            return DEFAULT_EFFICIENCY
        if not isinstance(efficiency, Efficiency):
            raise CostError(f"efficiency={quoted(efficiency)} must be an Efficiency (or None: the default)")
        return efficiency


DEFAULT_EFFICIENCY = Efficiency()
"""The constants every step time uses unless told otherwise."""
