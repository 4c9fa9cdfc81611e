"""``estimate(layout, model, training)``: what one training step costs on a layout, as a ``CostReport``."""

from __future__ import annotations

import dataclasses
import html
import warnings
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CostError
from ..formatting import TEXT_WIDTH, format_bytes, format_seconds, wrap_lines
from ..painters import paint
from ..setup import DEFAULT_ENGINE, Efficiency, Hardware, Training, Transformer, setup_kind
from .evidence.trust import band_for
from .formulas.communication import COMMUNICATION_COLUMNS, CollectiveRow, row_columns, step_rows
from .formulas.memory import MEMORY_COLUMNS, stage_memory
from .formulas.setup_columns import Setups
from .formulas.sizes import Sizes
from .formulas.step import step_columns
from .step_time import StepTime

if TYPE_CHECKING:
    import pandas as pd

    from ..unit_frame import UnitFrame

TIME_COLUMNS: tuple[str, ...] = ("bytes_per_step", "bus_bytes_per_step", "inter_node", "seconds", "dominant")
"""Columns of ``CostReport.communication_time(hardware)`` (one row per dim)."""


class CostReport:
    """Memory per stage and communication per (dim, collective) of one training step on one layout.

    Build it with ``estimate``. ``.memory`` and ``.communication`` are pandas DataFrames (``UnitFrame``s: raw
    numbers, displayed in units) made on first use from numpy columns; ``.peak_bytes`` and
    ``.groups(dim, collective)`` need no pandas. ``.step(hardware)`` is the step time (``StepTime``),
    ``.fits(hardware)`` the memory table with whether each stage fits, and ``.communication_time(hardware)`` the
    bytes of ``.communication`` over peak link rates (no compute, no overlap: not a step time).
    """

    def __init__(self, layout: Any, model: Transformer, training: Training, sizes: Sizes, stages: dict[str, np.ndarray],
                 rows: list[CollectiveRow] | None = None, setups: Setups | None = None):  # fmt: skip
        self.layout, self.model, self.training, self.sizes = layout, model, training, sizes
        self._stages = stages
        if rows is not None:
            self._rows = rows
        if setups is not None:
            self.setups = setups

    @cached_property
    def setups(self) -> Setups:
        """The set-up as the step-time formulas read it (one-entry ``Setups``), made when first read."""
        return Setups.single(self.layout, self.model, self.training, self.sizes.sequence_parallel)

    @cached_property
    def _rows(self) -> list[CollectiveRow]:
        return step_rows(self.layout, self.model, self.training, self.sizes, self._stages)

    # ------------------------------------------------------------------ memory
    @cached_property
    def memory(self) -> UnitFrame:
        """One row per pipeline stage (index ``stage``): parameters per rank and bytes per rank.

        ``parameters`` counts the stage's model-parallel shard (what a rank computes with); the bytes
        columns apply the ZeRO sharding over the data-parallel ranks. The numbers are raw counts and bytes; the
        table displays them as ``4.31 B`` and ``6.28 GiB`` (a ``UnitFrame``).
        """
        from ..unit_frame import UnitFrame

        frame = UnitFrame({name: self._stages[name] for name in MEMORY_COLUMNS})
        frame.index.name = "stage"
        return frame

    @property
    def most_loaded_stage(self) -> int:
        """The stage whose ranks hold the most bytes (the first such stage on a tie)."""
        return int(np.argmax(self._stages["total_bytes"]))

    @property
    def most_loaded(self) -> pd.Series:
        """The ``memory`` row of ``most_loaded_stage`` (its name is the stage)."""
        return self.memory.iloc[self.most_loaded_stage]

    @property
    def peak_bytes(self) -> int:
        """``total_bytes`` of the most loaded stage: the memory one rank needs."""
        return int(self._stages["total_bytes"].max())

    # ------------------------------------------------------------------ communication
    @cached_property
    def _columns(self) -> dict[str, np.ndarray]:
        return row_columns(self._rows, self.sizes.local_world_size)

    @cached_property
    def communication(self) -> UnitFrame:
        """One row per (dim, collective) that moves bytes in a step; columns ``COMMUNICATION_COLUMNS`` (raw bytes,
        displayed in binary units: a ``UnitFrame``)."""
        from ..unit_frame import UnitFrame

        return UnitFrame({name: self._columns[name] for name in COMMUNICATION_COLUMNS})

    @property
    def rows(self) -> tuple[CollectiveRow, ...]:
        """The communication rows as objects: ``dim``, ``collective``, ``calls_per_step``, ``bytes_per_call``
        and ``groups`` (every group of the dim, one per line), in ``communication``'s order."""
        return tuple(self._rows)

    def groups(self, dim: str, collective: str) -> np.ndarray:
        """The groups the row (``dim``, ``collective``) runs on, one per line (all of them at once in training)."""
        for row in self._rows:
            if row.dim == dim and row.collective == collective:
                return row.groups
        have = ", ".join(f"{r.dim}/{r.collective}" for r in self._rows) or "none"
        raise CostError(f"no communication row dim={dim!r}, collective={collective!r}; rows: {have}")

    def fits(self, hardware: Hardware | str | None = None) -> UnitFrame:
        """``memory`` with, for ``hardware``'s HBM, ``usable_bytes`` (HBM less what CUDA, NCCL and fragmentation
        take: ``Hardware.usable_bytes``) and ``fits`` per stage."""
        hw = Hardware.coerce(hardware)
        frame = self.memory.copy()
        frame["usable_bytes"] = hw.usable_bytes if hw.memory_GiB is not None else np.nan
        frame["fits"] = hw.fits(frame["total_bytes"].to_numpy()) if hw.memory_GiB is not None else True
        frame.attrs["hardware"] = hw
        return frame

    def step(self, hardware: Hardware | str | None = None, efficiency: Efficiency | None = None) -> StepTime:
        """The time of one training step on ``hardware`` (a ``Hardware`` or preset name): compute, the pipeline
        schedule's bubble from its own table, exposed communication and the optimizer (see ``cost.step``).

        Example:
            >>> from fastdist_lab import Layout
            >>> layout = Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2)
            >>> training = Training(num_microbatches=16, recompute="full", sequence_tensor_parallel=True)
            >>> step = estimate(layout, "llama2-70b", training).step("h100-sxm-80gb")
            >>> 0.2 < step.mfu < 0.4, step.fits  # full recompute: a quarter of the peak or so, and it fits
            (True, True)
        """
        hw = Hardware.coerce(hardware)
        columns, timeline = step_columns(self.setups, hw, Efficiency.coerce(efficiency))
        first = {name: float(values[0]) for name, values in columns.items()}
        return StepTime(
            **{name: first[name] for name in ("seconds", "tokens_per_second", "tflops_per_gpu", "mfu")},
            hardware=hw,
            global_batch_size=int(first["global_batch_size"]),
            critical_rank=int(first["critical_rank"]),
            parts=first,
            memory=self.fits(hw),
            timeline=timeline,
            schedule_kind=self.training.schedule,
            sizes=(self.sizes.pipeline_parallel, self.sizes.microbatches, self.training.virtual_pipeline_stages),
            band=band_for(self.training.engine, hw.family, self.kind, int(self.layout.world_size),
                          seq_length=int(self.model.seq_length)),
        )

    @property
    def kind(self) -> str:
        """The set-up's kind of parallelism (``setup_kind``: ``"tp+pp+dp"``), as its error band reads it."""
        layout = self.layout
        data = layout.data_parallel // layout.sequence_data_parallel
        expert = getattr(layout, "expert_parallel", 1)
        return setup_kind(layout.tensor_parallel, layout.pipeline_parallel, data, layout.sequence_data_parallel,
                          expert, self.training.zero_stage)  # fmt: skip

    def time(self, hardware: Hardware | str | None = None) -> pd.DataFrame:
        """Deprecated name of ``communication_time`` (it never was a step time; see ``step``)."""
        warnings.warn(
            "CostReport.time() is communication time only and is renamed communication_time(); "
            "step(hardware) gives the step time",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.communication_time(hardware)

    def communication_time(self, hardware: Hardware | str | None = None) -> UnitFrame:
        """Communication seconds per step per dim on ``hardware`` (a ``Hardware`` or preset name).

        Each row's bus bytes over the intra- or inter-node bus bandwidth (inter when its groups span
        nodes), summed per dim without overlap and without compute: what the links alone would need, not a
        step time (``step`` is); ``dominant`` marks the dim that takes longest. Raw bytes and seconds, displayed
        in binary units and ms / µs (a ``UnitFrame``).
        """
        import pandas as pd

        from ..unit_frame import UnitFrame

        hw = Hardware.coerce(hardware)
        columns = self._columns
        seconds = hw.seconds(columns["bus_bytes_per_step"], columns["inter_node"])
        dims = list(dict.fromkeys(columns["dim"].tolist()))
        rows = [columns["dim"] == dim for dim in dims]
        per_dim = UnitFrame(
            {
                "bytes_per_step": [int(columns["bytes_per_step"][r].sum()) for r in rows],
                "bus_bytes_per_step": [float(columns["bus_bytes_per_step"][r].sum()) for r in rows],
                "inter_node": [bool(columns["inter_node"][r].any()) for r in rows],
                "seconds": [float(seconds[r].sum()) for r in rows],
                "dominant": False,
            },
            index=pd.Index(dims, name="dim", dtype=object),
            columns=list(TIME_COLUMNS),
        )
        if dims:
            per_dim.iloc[int(np.argmax(per_dim["seconds"].to_numpy())), -1] = True
        per_dim.attrs["hardware"] = hw
        return per_dim

    # ------------------------------------------------------------------ output
    def summary(self) -> dict[str, Any]:
        """Layout sizes, model, training and the headline figures, as a flat JSON-able dict."""
        return {
            **self.layout.summary(),
            "model": dataclasses.asdict(self.model),
            "parameters": self.model.parameters(self.sizes.tensor_parallel),
            "active_parameters": self.model.active_parameters(self.sizes.tensor_parallel),
            "training": dataclasses.asdict(self.training),
            "sequence_tensor_parallel": self.sizes.sequence_parallel,
            "microbatches": self.sizes.microbatches,
            "most_loaded_stage": self.most_loaded_stage,
            "peak_bytes": self.peak_bytes,
        }

    def to_dict(self, hardware: Hardware | str | None = None) -> dict[str, Any]:
        """Everything as plain Python (for JSON): summary, memory (with ``fits`` on ``hardware``), communication,
        communication time and step time on ``hardware``."""
        hw = Hardware.coerce(hardware)
        return {
            "summary": self.summary(),
            "memory": _records(self.fits(hw).reset_index()),
            "communication": _records(self.communication),
            "communication_time": {
                "hardware": dataclasses.asdict(hw),
                "per_dim": _records(self.communication_time(hw).reset_index()),
            },
            "step": _step_document(self, hw),
        }

    def to_text(self, hardware: Hardware | str | None = None, width: int = TEXT_WIDTH) -> str:
        """Memory per stage (and whether it fits ``hardware``), communication rows, communication time per dim and
        the step time as aligned text tables of at most ``width`` characters a line (wider tables are split into
        blocks of columns)."""
        hw = Hardware.coerce(hardware)
        time = self.communication_time(hw)
        m = self.model
        head = [
            *wrap_lines(repr(self.layout), width),
            f"model: h={m.hidden_size} L={m.num_layers} heads={m.num_attention_heads}/{m.num_query_groups} "
            f"ffn={m.ffn_hidden_size} vocab={m.vocab_size} seq={m.seq_length}",
            f"training: micro-batch {self.training.micro_batch_size} x {self.sizes.microbatches}, "
            f"ZeRO {self.training.zero_stage}, sequence tensor parallel "
            f"{'on' if self.sizes.sequence_parallel else 'off'}, recompute {self.training.recompute}"
            + ("" if self.training.engine == DEFAULT_ENGINE else f", engine {self.training.engine}")
            + (", torch.compile" if self.training.torch_compile else ""),
        ]
        dominant = time.index[time["dominant"]].tolist()
        return "\n".join(
            [
                *head,
                "",
                "memory per rank, by pipeline stage:",
                self.fits(hw).to_text(width),
                f"most loaded: stage {self.most_loaded_stage}, {format_bytes(self.peak_bytes)} per rank",
                "",
                "communication per step (per rank of the busiest stage):",
                self.communication.to_text(width, index=False) if len(self.communication) else "(none: one rank)",
                "",
                *wrap_lines(
                    f"communication time per step on {hw.name} (bytes over {hw.intra_node_GBps:g} GB/s in a node, "
                    f"{hw.inter_node_GBps:g} GB/s between nodes; no compute, no overlap):",
                    width,
                ),
                time.to_text(width) if len(time) else "(no communication)",
                f"dominant: {dominant[0]} ({format_seconds(time['seconds'].max())} per step)"
                if dominant
                else "dominant: none",
                "",
                _step_text(self, hw),
            ]
        )

    def plot(self) -> Any:
        """Memory bars per stage and the rank grid coloured by the groups of the dim that moves the most bytes across
        nodes (``fastdist_lab.viz.plot_cost``): a matplotlib ``Figure``."""
        return paint("cost", self)

    def __repr__(self) -> str:
        return (
            f"CostReport({self.layout!r}, {self.sizes.pipeline_parallel} stages, peak "
            f"{format_bytes(self.peak_bytes)} per rank (stage {self.most_loaded_stage}), "
            f"{len(self._rows)} communication rows)"
        )

    def _repr_html_(self) -> str:
        return (
            f"<div><b>{html.escape(repr(self))}</b>"
            f"<div><b>Memory per rank, by stage</b>{self.memory.formatted().to_html()}</div>"
            f"<div><b>Communication per step</b>{self.communication.formatted().to_html(index=False)}</div></div>"
        )


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``frame`` as dicts of plain Python values (numpy scalars by their ``item()``)."""
    return [{k: v.item() if hasattr(v, "item") else v for k, v in row.items()} for row in frame.to_dict("records")]


def _step_document(report: CostReport, hw: Hardware) -> dict[str, Any] | None:
    """The step time as plain Python, or ``None`` on hardware without compute figures."""
    if hw.peak_tflops is None or hw.memory_GBps is None:
        return None
    step = report.step(hw)
    return {
        "seconds": step.seconds,
        "tokens_per_second": step.tokens_per_second,
        "tflops_per_gpu": step.tflops_per_gpu,
        "mfu": step.mfu,
        "fits": step.fits,
        "band": None if step.band is None else dataclasses.asdict(step.band),
        "mfu_flag": step.mfu_flag,
        "breakdown": {name: float(row["seconds"]) for name, row in step.breakdown.iterrows()},
    }


def _step_text(report: CostReport, hw: Hardware) -> str:
    """The step time and its breakdown, or why there is none."""
    if hw.peak_tflops is None or hw.memory_GBps is None:
        return f"no step time: hardware {hw.name!r} gives no peak_tflops / memory_GBps"
    fits = report.fits(hw)
    lines = [report.step(hw).to_text()]
    if not fits["fits"].all():
        stages = ", ".join(str(i) for i in fits.index[~fits["fits"]])
        lines.append(f"stages {stages} need more than the {format_bytes(hw.usable_bytes)} usable of {hw.name}'s "
                     f"{hw.memory_GiB:g} GiB")  # fmt: skip
    return "\n".join(lines)


def estimate(layout: Any, model: Transformer | str, training: Training | None = None) -> CostReport:
    """What one training step of ``model`` costs on ``layout``: memory per stage and bytes per group.

    Args:
        layout: a ``fastdist_lab.Layout`` (its real groups give group sizes and node spans).
        model: a ``Transformer`` or a preset name (one of ``fastdist_lab.cost.PRESETS``).
        training: a ``Training`` (default ``Training()``: micro-batch 1, ZeRO 0, no recompute).

    Returns:
        A ``CostReport``; ``CostError`` when the model does not split over the layout.

    Example:
        >>> from fastdist_lab import Layout
        >>> report = estimate(Layout(world_size=8, local_world_size=8, tensor_parallel=2), "llama2-7b")
        >>> report.communication["dim"].tolist()
        ['tensor', 'data']
    """
    if isinstance(model, str):
        model = Transformer.preset(model)
    if not isinstance(model, Transformer):
        raise CostError(f"model={model!r} must be a Transformer or a preset name")
    training = Training() if training is None else training
    if not isinstance(training, Training):
        raise CostError(f"training={training!r} must be a Training")
    sizes = Sizes.of(layout, model, training)
    # one row, computed on plain numbers (issue 26: 1.5x faster than on one-entry arrays); the communication rows
    # and the step's one-entry Setups are made when first read
    stages = stage_memory(Setups.single(layout, model, training, sizes.sequence_parallel, numbers=True))
    return CostReport(layout, model, training, sizes, stages)
