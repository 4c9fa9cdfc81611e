"""The cluster panel's *Train step*: one real training step on the running cluster against one process
(``checks.check_training``), shown as the per-parameter table and the rank grid coloured by each rank's worst
error (green within the tolerance, red outside: ``viz.training_marks``); clicking a rank lists its tensors.

The step runs a ``setup.Training``: the one the controls hold (the fields declared with a control for the ``"train"``
panel: ZeRO stage, recompute, schedule, virtual stages), with the rest (micro-batches, micro-batch size, sequence
tensor parallel) as last ``load``-ed, e.g. an Advisor row's."""

from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets as widgets

from ..layout import Layout
from ..setup import Training
from ..viz import grid_picture, training_marks
from .grid_view import GridView
from .panel_parts import TABLE_STYLE, frame_table
from .rank_card import hover_text
from .setting_controls import make_controls, set_control

TRAIN_HINT = "<i>click a rank to list its tensors and their errors</i>"
"""What the side card says before a rank is chosen."""


def _number(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.1e}"


def parameter_html(check: Any) -> str:
    """The per-parameter table of a ``TrainingCheck`` (or its dropout judgments), with the verdict above."""
    verdict = "everything agrees" if check.ok else "FAILED: " + check.problems[0]
    head = f"<b>{html.escape(verdict)}</b>"
    if check.reference_loss is not None and check.loss is not None:
        head += f"<br>loss {check.loss:.7f} (layout) vs {check.reference_loss:.7f} (one process)"
    if check.table is None:
        return TABLE_STYLE + head + frame_table(check.dropout[["check", "scope", "compared", "failed", "ok"]])
    frame = check.table[["name", "shape", "split", "ranks", "grad_rel", "weight_rel", "worst_rank", "ok", "note"]]
    frame = frame.assign(grad_rel=frame["grad_rel"].map(_number), weight_rel=frame["weight_rel"].map(_number))
    scroll = "<div style='max-height:320px;overflow:auto'>" + frame_table(frame) + "</div>"
    return TABLE_STYLE + head + f"<br>tolerance {check.tolerance:g} relative" + scroll


def rank_tensors_html(check: Any, rank: int) -> str:
    """The tensors ``rank`` holds after the step, with their errors."""
    frame = check.rank_tensors(rank)
    if frame.empty:
        return TABLE_STYLE + f"<b>rank {rank}</b>: no tensor compared (dropout judged on masks)"
    frame = frame[["name", "tensor_shard", "grad_rel", "weight_rel", "initial_abs"]]
    frame = frame.assign(**{column: frame[column].map(_number) for column in ("grad_rel", "weight_rel", "initial_abs")})
    return TABLE_STYLE + f"<b>rank {rank}</b>: {len(frame)} tensors" + frame_table(frame)


class TrainStepView:
    """The *Train step* button with its settings (``controls``: ``zero_stage``, ``recompute``, ``schedule``,
    ``virtual_pipeline_stages``; and ``dropout``; ``training()`` is the ``setup.Training`` they make with the last
    ``load``-ed set-up), a line saying
    that set-up (``setup``), a status line, the rank grid of the last step (``view``) and the per-parameter table
    (``table``); ``check`` is the last ``TrainingCheck``."""

    def __init__(self) -> None:
        self.button = widgets.Button(description="Train step", icon="graduation-cap", disabled=True)
        self.button.add_class("fdl-train-step")
        self.controls = make_controls("train")
        """The training set-up's controls by field name (``setting_controls``), each also an attribute."""
        for name, control in self.controls.items():
            setattr(self, name, control)
        self.dropout = widgets.BoundedFloatText(
            value=0.0, min=0.0, max=0.9, step=0.05, description="dropout", layout=widgets.Layout(width="160px")
        ).add_class("fdl-train-dropout")
        self.setup = widgets.HTML().add_class("fdl-train-setup")
        self.status = widgets.HTML().add_class("fdl-train-status")
        self.view = GridView(self.select, self._zoom_to, self._hover_text)
        self.view.widget.layout.display = "none"
        self.table = widgets.HTML().add_class("fdl-train-table")
        controls = [self.button, *self.controls.values(), self.dropout]
        self.widget = widgets.VBox(
            [widgets.HBox(controls, layout=widgets.Layout(flex_flow="row wrap")), self.setup, self.status,
             self.view.widget, self.table]
        )  # fmt: skip
        self.check: Any = None
        self.loaded = Training()
        """The set-up last ``load``-ed: the fields without a control come from it."""
        self._highlight: int | None = None
        self._zoom: tuple[int, int] | None = None
        for control in self.controls.values():
            control.observe(lambda _: self._show_setup(), names="value")
        self._show_setup()

    def enable(self, running: bool) -> None:
        """Offer the button while a cluster runs."""
        self.button.disabled = not running

    def load(self, training: Training) -> None:
        """Set the controls to ``training`` (an Advisor row's, say) and keep its other fields for the next step."""
        self.loaded = training
        for name, control in self.controls.items():
            set_control(name, control, getattr(training, name))
        self._show_setup()

    def training(self) -> Training:
        """The ``cost.Training`` the next step runs: the controls over the last ``load``-ed set-up."""
        return self.loaded.replace(**{name: control.value for name, control in self.controls.items()})

    @property
    def virtual_stages(self) -> Any:
        """The virtual stages' control (``controls["virtual_pipeline_stages"]``), by its earlier name."""
        return self.controls["virtual_pipeline_stages"]

    def _show_setup(self) -> None:
        try:
            training = self.training()
        except ValueError as error:  # CostError: the controls contradict each other (e.g. interleaved with 1)
            self.setup.value = f"<small>{html.escape(str(error))}</small>"
            return
        micro = "the pipeline size" if training.num_microbatches is None else training.num_microbatches
        self.setup.value = html.escape(
            f"micro-batches: {micro} of {training.micro_batch_size} sequence(s); sequence tensor parallel: "
            f"{'on' if training.sequence_tensor_parallel else 'as the layout'}"
        ).join(("<small>", "</small>"))

    def run(self, cluster: Any, layout: Layout, **options: Any) -> Any:
        """One training step of ``layout`` on ``cluster`` with ``training()`` and the chosen dropout (``options`` go
        to ``check_training`` and win over them, ``training=`` too); shows and returns the ``TrainingCheck``."""
        from ..checks import check_training

        chosen = {"training": self.training(), "dropout": float(self.dropout.value)}
        self.status.value = html.escape(f"one training step on {cluster.world_size} rank(s) and in one process...")
        check = check_training(cluster, layout, **{**chosen, **options})
        self.check, self._highlight, self._zoom = check, None, None
        seconds = sum(check.seconds.values())
        verdict = "everything agrees" if check.ok else f"{len(check.problems)} problem(s)"
        self.status.value = html.escape(f"train step ({check.schedule}, {check.mode}): {verdict} in {seconds:.1f} s")
        self.table.value = parameter_html(check)
        self.draw()
        return check

    def draw(self) -> None:
        """The grid of the last step: each rank's worst error as its verdict (selected rank outlined)."""
        check = self.check
        if check is None:
            self.view.widget.layout.display = "none"
            return
        layout = check.layout
        picture = grid_picture(layout, "tensor", self._highlight, ranks=self._zoom, marks=training_marks(check))
        self.view.show(picture)
        self.view.set_world(layout, self._zoom)
        self.view.card.value = TRAIN_HINT if self._highlight is None else rank_tensors_html(check, self._highlight)
        self.view.widget.layout.display = "flex"

    def select(self, rank: int | None) -> None:
        """Outline ``rank`` and list its tensors beside the grid (None: nothing selected); a click on the grid."""
        self._highlight = rank
        self.draw()

    def _zoom_to(self, ranks: tuple[int, int] | None) -> None:
        self._zoom = ranks
        self.draw()

    def _hover_text(self, ranks: range) -> str:
        return hover_text(self.check.layout, ranks, "tensor") if self.check is not None else ""
