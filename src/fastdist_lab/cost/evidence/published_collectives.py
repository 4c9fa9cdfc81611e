"""Published bus bandwidths of NCCL collectives on A100 and H100 systems, 8 to 1,984 GPUs, next to what
``links.collective_seconds`` predicts for them (``collective_table``; docs/step_time.md shows the table).

Each measurement is nccl-tests' ``busbw`` (GB/s) of the largest size a report gives, as the report's author or an NVIDIA
engineer wrote it in a public GitHub thread (the thread is the source; ``size`` is the buffer in bytes, nccl-tests'
"size"). Where a report does not state the size, the prediction takes 8 GiB (nccl-tests' ``-e 8G``, the largest size
those threads run) and the row says so (the rows: ``runs/nccl-tests-threads.toml``). None of these numbers was used to
set a constant of the model, except the first row, whose figure (232.5 GB/s, the same as Bekman's 235 GB/s) is what
``Efficiency.nvlink_efficiency`` was taken from: it is marked ``calibration``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...setup import DEFAULT_EFFICIENCY, Efficiency, Hardware
from ..formulas.links import collective_seconds, nccl_choice
from .published_run import read_source

if TYPE_CHECKING:
    import pandas as pd

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


COLLECTIVE_MEASUREMENTS: tuple[CollectiveMeasurement, ...] = tuple(
    CollectiveMeasurement(**row) for row in read_source("nccl-tests-threads")["measurements"]
)
"""The measurements of ``collective_table`` (``runs/nccl-tests-threads.toml``; sources in each row)."""

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
