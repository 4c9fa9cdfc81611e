"""Published bus bandwidths of NCCL collectives on A100 and H100 systems, 8 to 1,984 GPUs, next to what
``links.collective_seconds`` predicts for them (``collective_table``; docs/step_time.md shows the table).

Each measurement is nccl-tests' ``busbw`` (GB/s) of the largest size a report gives, as the report's author or an
NVIDIA engineer wrote it in a public GitHub thread (the thread is the source; ``size`` is the buffer in bytes,
nccl-tests' "size"). Where a report does not state the size, the prediction takes 8 GiB (nccl-tests' ``-e 8G``,
the largest size those threads run) and the row says so. None of these numbers was used to set a constant of the
model, except the first row, whose figure (232.5 GB/s, the same as Bekman's 235 GB/s) is what
``Efficiency.nvlink_efficiency`` was taken from: it is marked ``calibration``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .efficiency import DEFAULT_EFFICIENCY, Efficiency
from .hardware import Hardware
from .links import collective_seconds, nccl_choice

if TYPE_CHECKING:
    import pandas as pd

GiB = 2**30
"""Bytes in a GiB (nccl-tests' sizes are powers of two)."""


@dataclass(frozen=True)
class CollectiveMeasurement:
    """One published nccl-tests result: ``collective`` on ``gpus`` GPUs, ``per_node`` on each node, of ``size``
    bytes, on ``hardware`` (a preset name, with ``inter_node_GBps`` per GPU where the nodes had fewer adapters),
    measured at ``busbw_GBps``; ``source`` says where, ``note`` what the model leaves out."""

    name: str
    source: str
    hardware: str
    collective: str
    gpus: int
    size: int
    busbw_GBps: float
    per_node: int = 8
    inter_node_GBps: float | None = None
    note: str = ""
    calibration: bool = False


_H100_RS = "github.com/NVIDIA/nccl/issues/1229 (H100, 8 x 400 Gb/s per node; size not stated: 8 GiB)"

COLLECTIVE_MEASUREMENTS: tuple[CollectiveMeasurement, ...] = (
    CollectiveMeasurement(
        "all-reduce, 8 A100 (one DGX A100)", "github.com/NVIDIA/nccl-tests/issues/175 (all_reduce_perf -e 4G)",
        "a100-sxm-80gb", "all_reduce", 8, 4 * GiB, 232.54, calibration=True,
    ),
    CollectiveMeasurement(
        "ring all-reduce, 16 A100 (2 DGX A100, 8 x 200 Gb/s)",
        "github.com/NVIDIA/nccl/issues/812, NVIDIA's answer (192 GB/s; size not stated: 8 GiB)",
        "a100-sxm-80gb", "all_reduce", 16, 8 * GiB, 192.0,
    ),
    CollectiveMeasurement(
        "all-reduce, 16 A100, 4 x 200 Gb/s per node", "github.com/NVIDIA/nccl-tests/issues/175 (-e 4G, two nodes)",
        "a100-sxm-80gb", "all_reduce", 16, 4 * GiB, 86.0, inter_node_GBps=12.5,
    ),
    CollectiveMeasurement(
        "all-reduce, 16 H100 (2 nodes, 8 x 400 Gb/s RoCE, NVLS off)",
        "github.com/NVIDIA/nccl/issues/1221 (-b 4G -e 8G, NCCL 2.19.3)",
        "h100-sxm-80gb", "all_reduce", 16, 8 * GiB, 330.0,
    ),
    CollectiveMeasurement(
        "all-reduce, 32 H100 (4 nodes, 8 x 400 Gb/s RoCE)", "github.com/NVIDIA/nccl/issues/1221 (-b 4G -e 8G)",
        "h100-sxm-80gb", "all_reduce", 32, 8 * GiB, 320.0,
    ),
    *(
        CollectiveMeasurement(
            f"reduce-scatter, {gpus} H100 ({gpus // 8} nodes)", _H100_RS, "h100-sxm-80gb", "reduce_scatter", gpus,
            8 * GiB, busbw,
        )
        for gpus, busbw in ((32, 360.0), (64, 345.0), (128, 320.0), (256, 300.0), (512, 280.0), (1024, 260.0))
    ),
    CollectiveMeasurement(
        "ring (non-all-reduce) collective, 8 H100 (one node)",
        "github.com/NVIDIA/nccl-tests/issues/212, NVIDIA's answer (effective NVLink bus bandwidth 370 GB/s)",
        "h100-sxm-80gb", "all_gather", 8, 8 * GiB, 370.0,
    ),
    CollectiveMeasurement(
        "all-reduce, 1,984 H200 (248 nodes, 8 x 400 Gb/s), 512 MiB",
        "github.com/NVIDIA/nccl-tests/issues/283 (typically about 350 GB/s, NCCL's default algorithm)",
        "h200-sxm-141gb", "all_reduce", 1984, 512 * 2**20, 350.0,
        note="NCCL's NVLink SHARP tree (NVLSTree), not modelled",
    ),
)  # fmt: skip
"""The measurements of ``collective_table`` (sources in each row)."""

COLLECTIVE_COLUMNS: tuple[str, ...] = (
    "measurement", "source", "gpus", "nodes", "size_bytes", "measured_busbw_GBps", "predicted_busbw_GBps",
    "algorithm", "error", "calibration",
)  # fmt: skip
"""Columns of ``collective_table``."""


def measured_hardware(measurement: CollectiveMeasurement) -> Hardware:
    """The hardware ``measurement`` ran on: its preset, with fewer network adapters where it says so."""
    hardware = Hardware.preset(measurement.hardware)
    if measurement.inter_node_GBps is not None:
        hardware = hardware.replace(inter_node_GBps=measurement.inter_node_GBps)
    return hardware


def predicted_busbw(measurement: CollectiveMeasurement, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> float:
    """nccl-tests' bus bandwidth (GB/s) the model predicts for ``measurement``: its bus bytes over the predicted
    seconds."""
    hardware = measured_hardware(measurement)
    g, n = measurement.per_node, measurement.gpus
    seconds = float(collective_seconds(measurement.collective, measurement.size, g, n // g, hardware, efficiency))
    factor = (2.0 if measurement.collective == "all_reduce" else 1.0) * (n - 1) / n
    return factor * measurement.size / seconds / 1e9


def collective_table(
    measurements: tuple[CollectiveMeasurement, ...] = COLLECTIVE_MEASUREMENTS,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> pd.DataFrame:
    """Each measurement with the predicted bus bandwidth, the algorithm and protocol NCCL's model picks, and the
    relative error (predicted / measured - 1)."""
    rows = []
    for m in measurements:
        hardware = measured_hardware(m)
        predicted = predicted_busbw(m, efficiency)
        algorithm, protocol = nccl_choice(m.collective, m.size, m.per_node, m.gpus // m.per_node, hardware, efficiency)
        name = m.name + (f" ({m.note})" if m.note else "")
        rows.append(
            (name, m.source, m.gpus, m.gpus // m.per_node, m.size, m.busbw_GBps, predicted,
             f"{algorithm} {protocol}", predicted / m.busbw_GBps - 1, m.calibration)
        )  # fmt: skip
    import pandas as pd  # only when the table is asked for: estimate() stays free of pandas

    return pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))
