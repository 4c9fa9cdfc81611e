"""``StepView``: the cost panel's step time: the headline figures, where the time goes (``StepTime.breakdown``) and the
pipeline schedule as it runs (``viz.plot_schedule``)."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ..cost import CostReport
from ..errors import CostError
from ..viz import plot_schedule, to_png
from .panel_parts import TABLE_STYLE, html_table


def step_html(step: Any) -> str:
    """The step time (a ``StepTime``), its TFLOP/s per GPU and MFU, whether it fits the memory; then its error band
    and MFU flag (``StepTime.trust_text``)."""
    fits = "" if step.fits else " &mdash; <b>does not fit in memory</b>"
    trust = "" if step.band is None else f"<span class='fdl-step-band'>{html.escape(step.trust_text())}</span><br>"
    return (
        f"<b>Step time on {html.escape(step.hardware.name)}</b>: {step.seconds:.3f} s, "
        f"{step.tflops_per_gpu:.0f} TFLOP/s per GPU, MFU {step.mfu:.1%}{fits}<br>{trust}"
    )


def breakdown_html(step: Any) -> str:
    """``step.breakdown`` as an HTML table: each part of the step in ms and its share, the parts that take time."""
    frame = step.breakdown
    rows = [(name, f"{row.seconds * 1e3:,.1f} ms", f"{row.share:.1%}") for name, row in frame.iterrows()
            if row.seconds > 0]  # fmt: skip
    rows.append(("step", f"{step.seconds * 1e3:,.1f} ms", "100%"))
    return TABLE_STYLE + html_table(("where the time goes", "time", "share"), rows)


class StepView:
    """The step time of a ``CostReport`` on a hardware: ``headline`` (HTML), ``breakdown`` (an HTML table) and
    ``picture`` (the schedule, PNG) side by side; ``widget`` holds them. ``show(report, hardware)`` draws them (the
    schedule picture only when the step's timing changed)."""

    def __init__(self) -> None:
        self.headline = widgets.HTML().add_class("fdl-step-headline")
        self.breakdown = widgets.HTML(layout=widgets.Layout(flex="0 0 auto", margin="0 12px 0 0"))
        self.breakdown.add_class("fdl-step-breakdown")
        self.picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.picture.add_class("fdl-step-schedule")
        self.widget = widgets.VBox(
            [self.headline, widgets.HBox([self.breakdown, self.picture], layout=widgets.Layout(flex_flow="row wrap"))]
        )
        self.step: Any = None
        self._drawn: Any = None

    def show(self, report: CostReport, hardware: Any) -> None:
        """Draw the step of ``report`` on ``hardware``: its figures, breakdown and schedule (nothing but the reason
        when the hardware gives no step time)."""
        try:
            step = report.step(hardware)
        except CostError as error:
            self.step = None
            self.headline.value = f"<i>no step time: {html.escape(str(error))}</i><br>"
            self.breakdown.value = ""
            self.picture.layout.display = "none"
            return
        self.step = step
        self.headline.value = step_html(step)
        self.breakdown.value = breakdown_html(step)
        key = (step.schedule_kind, step.sizes, step.seconds, step.critical_rank, step.hardware.name)
        if key != self._drawn:
            figure = plot_schedule(step)
            self.picture.value = to_png(figure)
            figure.clear()
            self._drawn = key
        self.picture.layout.display = None
