"""Layouts side by side: the headline figures of one training step on each, one row per layout."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CostError
from ..formatting import quoted
from ..setup import Hardware, Training, Transformer
from .cost_report import CostReport, estimate

if TYPE_CHECKING:
    import pandas as pd

COMPARE_COLUMNS: tuple[str, ...] = (
    "world_size", "num_nodes", "tensor_parallel", "pipeline_parallel", "data_parallel", "sequence_data_parallel",
    "order", "peak_bytes", "most_loaded_stage", "bytes_per_step", "inter_node_bytes_per_step", "inter_node_dims",
    "communication_seconds", "dominant", "step_seconds", "fits",
)  # fmt: skip
"""Columns of ``compare`` (bytes per rank per step; ``communication_seconds``: the bytes over peak link rates,
``dominant`` the dim that takes longest there; ``step_seconds``: the step time on the hardware, ``fits``: whether
every stage fits its memory)."""


def layout_name(layout: Any) -> str:
    """A short name of a layout's sizes and order, e.g. ``'tp2 pp4 dp8 data-first'`` (``sdp`` when > 1; a layout
    with experts adds its expert and expert-tensor sizes, ``'tp2 pp1 dp4 ep4 etp1 data-first'``).

        >>> from fastdist_lab import Layout
        >>> layout_name(Layout(world_size=8, tensor_parallel=2, expert_parallel=4, expert_tensor_parallel=1))
        'tp2 pp1 dp4 ep4 etp1 data-first'
    """
    s = layout.summary()
    name = f"tp{s['tensor_parallel']} pp{s['pipeline_parallel']} dp{s['data_parallel']}"
    if s["sequence_data_parallel"] > 1:
        name += f" (sdp{s['sequence_data_parallel']})"
    if "expert_parallel" in s:  # only a layout with experts has them (Layout.summary)
        name += f" ep{s['expert_parallel']} etp{s['expert_tensor_parallel']}"
    return f"{name} {s['order']}"


def heaviest_inter_node_dim(report: CostReport) -> tuple[str | None, int]:
    """The dim whose groups move the most bytes per rank per step across nodes, and those bytes (None, 0: none)."""
    columns = report.communication
    crossing = columns[columns["inter_node"]]
    if crossing.empty:
        return None, 0
    per_dim = crossing.groupby("dim", sort=False)["bytes_per_step"].sum()
    return str(per_dim.idxmax()), int(per_dim.max())


def summary_row(report: CostReport, hardware: Hardware | str | None = None) -> dict[str, Any]:
    """The ``COMPARE_COLUMNS`` of one report."""
    s = report.layout.summary()
    comm = report.communication
    hw = Hardware.coerce(hardware)
    time = report.communication_time(hw)
    fits = report.fits(hw)["fits"].all() if hw.memory_GiB is not None else None
    crossing = comm[comm["inter_node"]]
    dominant = time.index[time["dominant"]].tolist()
    return {
        **{name: s[name] for name in COMPARE_COLUMNS[:7]},  # the layout's sizes and order, as its summary gives them
        "peak_bytes": report.peak_bytes,
        "most_loaded_stage": report.most_loaded_stage,
        "bytes_per_step": int(comm["bytes_per_step"].sum()),
        "inter_node_bytes_per_step": int(crossing["bytes_per_step"].sum()),
        "inter_node_dims": ", ".join(dict.fromkeys(crossing["dim"])) or "none",
        "communication_seconds": float(np.sum(time["seconds"].to_numpy())),
        "dominant": dominant[0] if dominant else "none",
        "step_seconds": float("nan") if hw.peak_tflops is None or hw.memory_GBps is None else report.step(hw).seconds,
        "fits": None if fits is None else bool(fits),
    }


def checked_names(names: Any, count: int) -> list[str] | None:
    """``names`` as a list of ``count`` strings (``None`` stays ``None``); ``CostError`` naming ``names`` otherwise."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise CostError(f"names={quoted(names)} must be a list that names each of the {count} layouts")
    listed = list(names)
    if len(listed) != count or not all(isinstance(name, str) for name in listed):
        raise CostError(f"names={quoted(listed)} must name each of the {count} layouts with a string")
    return listed


def compare_reports(
    reports: Sequence[CostReport], hardware: Hardware | str | None = None, names: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per report (index: ``names``, default ``layout_name``), columns ``COMPARE_COLUMNS``."""
    import pandas as pd

    hw = Hardware.coerce(hardware)
    names = checked_names(names, len(reports)) or [layout_name(report.layout) for report in reports]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):  # equal names (the same sizes twice) get a suffix: the index stays unique
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[i] = f"{name} ({seen[name]})"
    from ..unit_frame import UnitFrame

    frame = UnitFrame([summary_row(r, hw) for r in reports], columns=list(COMPARE_COLUMNS))
    frame.index = pd.Index(names, name="layout", dtype=object)
    frame.attrs["hardware"] = hw
    return frame


def compare(
    *layouts: Any,
    model: Transformer | str = "llama2-7b",
    training: Training | None = None,
    hardware: Hardware | str | None = None,
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Two or more layouts side by side for one model and training set-up: peak memory per rank, bytes per
    step, inter-node bytes and which dims cross nodes, communication seconds, step seconds and whether it fits
    on ``hardware``.

    Example (data-first against pipeline-first):
        >>> from fastdist_lab import Layout
        >>> a = Layout(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=4)
        >>> b = Layout(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, pipeline_first=True)
        >>> compare(a, b, model="llama2-7b")["inter_node_dims"].tolist()
        ['pipeline, data', 'data']
    """
    if len(layouts) < 2:
        raise CostError(f"compare() needs two or more layouts, got {len(layouts)}")
    checked_names(names, len(layouts))  # before any estimate
    return compare_reports([estimate(layout, model, training) for layout in layouts], hardware, names)
