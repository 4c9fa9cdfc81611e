"""One training step as a report shows it (``CostReport.step``): the step-time model's answer for one set-up
(``formulas.step``), with the error band of the validated runs nearest to it (``evidence.trust``) attached here, where
the result is shown: the formulas never read the evidence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..formatting import wrap_lines
from ..setup import Hardware
from .evidence.trust import ErrorBand, mfu_ceiling, mfu_flagged
from .formulas.schedules import schedule
from .formulas.step import BREAKDOWN, BREAKDOWN_COLUMNS
from .formulas.timeline import Timeline

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StepTime:
    """One training step of one set-up on one hardware (``CostReport.step``).

    ``seconds``; ``tokens_per_second``; ``tflops_per_gpu`` (model FLOPs, see ``cost.step``) and ``mfu``;
    ``breakdown``: a DataFrame indexed by ``BREAKDOWN`` with ``seconds`` and ``share`` of the step;
    ``memory``: the report's memory per stage with ``fits`` on this hardware, ``fits`` whether every stage
    does; ``timeline`` and ``schedule``: the pipeline table and when each action ran (``viz.plot_schedule``).
    """

    seconds: float
    tokens_per_second: float
    tflops_per_gpu: float
    mfu: float
    hardware: Hardware
    global_batch_size: int
    critical_rank: int
    parts: dict[str, float]
    memory: pd.DataFrame
    timeline: Timeline
    schedule_kind: str
    sizes: tuple[int, int, int]
    band: ErrorBand | None = None

    @property
    def mfu_flag(self) -> bool:
        """Whether ``mfu`` is above every MFU measured on the hardware's family (``trust.mfu_ceiling``): a set-up
        the validation runs never reached, to doubt before trusting it first."""
        return bool(mfu_flagged(self.hardware.family, self.mfu))

    def trust_text(self) -> str:
        """The error band of ``seconds`` and the MFU flag in words (empty without a band)."""
        if self.band is None:
            return ""
        low, high = self.band.range(self.seconds)
        text = f"{self.seconds:.3f} s ({self.band.text()}), so {low:.3f} to {high:.3f} s"
        if self.mfu_flag:
            text += (f"; MFU {self.mfu:.1%} is above every run measured on {self.hardware.family} "
                     f"({mfu_ceiling(self.hardware.family):.1%})")  # fmt: skip
        return text

    @property
    def breakdown(self) -> pd.DataFrame:
        """Seconds and share of the step per ``BREAKDOWN`` row (the slowest pipeline rank's view)."""
        import pandas as pd

        seconds = [self.parts[name] for name in BREAKDOWN_COLUMNS]
        return pd.DataFrame({"seconds": seconds, "share": np.array(seconds) / self.seconds},
                            index=pd.Index(BREAKDOWN, name="component"))  # fmt: skip

    @property
    def fits(self) -> bool:
        """Whether every pipeline stage fits the hardware's memory."""
        return bool(self.memory["fits"].all())

    @property
    def schedule(self) -> Any:
        """The ``PipelineSchedule`` the step ran."""
        return schedule(self.schedule_kind, *self.sizes)

    def to_text(self) -> str:
        """The headline figures and the breakdown as text."""
        parts = self.breakdown
        lines = [
            f"step time on {self.hardware.name}: {self.seconds:.3f} s, {self.tokens_per_second:,.0f} tokens/s, "
            f"{self.tflops_per_gpu:.1f} TFLOP/s per GPU (model FLOPs), MFU {self.mfu:.1%}"
            f"{'' if self.fits else '; does NOT fit in memory'}",
        ]
        if self.band is not None:
            lines += wrap_lines(f"  trust: {self.trust_text()}", indent="    ")
        for name, row in parts.iterrows():
            if row["seconds"] > 0:
                lines.append(f"  {name:<30} {row['seconds'] * 1e3:12.2f} ms  {row['share']:6.1%}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"StepTime({self.seconds:.4g} s on {self.hardware.name}, {self.tflops_per_gpu:.1f} TFLOP/s per GPU, "
            f"MFU {self.mfu:.1%}{'' if self.fits else ', does not fit'})"
        )
