"""``CostPanel``: what one training step costs on the layout (the step time, where it goes and the pipeline schedule,
memory per stage, bytes per group, inter-node traffic), two orderings side by side, and the step's collectives
replayed on a running cluster."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ipywidgets as widgets

from ..cost import CostReport, compare_reports, estimate, format_bytes, layout_name
from ..layout import Layout
from ..setup import DEFAULT_HARDWARE, HARDWARE_PRESETS, PRESETS, TRAINING_SETTINGS, Hardware, Training, Transformer
from ..viz import to_png
from ..viz.cost_pictures import plot_memory, plot_traffic, traffic_dim, traffic_title
from .layout_panel import LayoutPanel
from .panel_parts import TABLE_STYLE, ClusterFollower, Debouncer, frame_table, network_box, number_box, short_error
from .setting_controls import control_value, make_controls, set_control
from .step_view import StepView

_VIEWS = (("this layout", "single"), ("data-first vs pipeline-first", "compare"))


def other_order(layout: Layout) -> Layout:
    """``layout`` with the other ordering (data-first <-> pipeline-first), all other fields kept."""
    return Layout(**{**layout.fields(), "pipeline_first": not layout.pipeline_first})


def communication_html(report: CostReport, hardware: Any) -> str:
    """The communication rows and the communication time per dim on ``hardware``, as HTML (in units: the report's
    ``UnitFrame.formatted()``)."""
    if report.communication.empty:
        return "<i>no communication: every group has one rank</i>"
    time_frame = report.communication_time(hardware)
    return (
        TABLE_STYLE
        + "<b>Communication per step</b> (per rank of the busiest stage)"
        + frame_table(report.communication.formatted())
        + f"<b>Communication time per step on {html.escape(time_frame.attrs['hardware'].name)}</b> "
        + "(bytes over peak link rates; no compute, no overlap)"
        + frame_table(time_frame.formatted(), index=True)
    )


def comparison_html(reports: list[CostReport], hardware: Any) -> str:
    """``compare_reports`` of ``reports`` as an HTML table, one column per layout (in units)."""
    table = compare_reports(reports, hardware).formatted().T
    table.index.name = "per rank"
    return TABLE_STYLE + "<b>Side by side</b>" + frame_table(table, index=True)


def replay_html(frame: Any) -> str:
    """A replay's per-dim table (a ``UnitFrame``: seconds in ms / µs, bytes in binary units, GB/s) as HTML."""
    attrs = frame.attrs
    head = (
        f"<b>Replayed on the cluster</b> ({html.escape(str(attrs.get('backend')))}, messages x "
        f"{attrs.get('scale', 0):.3g}, median of {attrs.get('iterations')} timed calls; prediction on "
        f"{html.escape(attrs['hardware'].name)})"
    )
    return TABLE_STYLE + head + frame_table(frame.formatted(), index=True)


class CostPanel(ClusterFollower):
    """Model and training controls (the engine that runs the step and whether it is compiled among them; and, for a
    mixture of experts, the expert load: busiest expert rank over the mean), the step time (where it goes and the
    pipeline schedule as it runs: ``step_view``), memory bars per stage, the communication table and inter-node
    traffic on the rank grid; a toggle shows the layout beside its other ordering (data-first vs pipeline-first);
    Replay runs the step's collectives on the linked running cluster. ``load(model=..., training=...,
    hardware=...)`` takes a whole set-up at once (the lab's Advisor loads a searched row this way, its engine
    included).

    ``layout`` is a ``Layout`` or a ``LayoutPanel`` to follow, ``cluster`` a ``LocalCluster`` or a
    ``ClusterPanel`` to follow (or assign ``panel.layout`` / ``panel.cluster``). ``report`` (and ``other`` in the
    side-by-side view) are the last ``CostReport``s, ``replayed`` the last replay's DataFrame, ``error`` the last
    problem (empty when none).
    The traffic grid shows the groups of the dim that moves the most bytes across nodes (``viz.cost_pictures``).
    """

    def __init__(
        self,
        layout: Layout | LayoutPanel | None = None,
        cluster: Any = None,
        model: str = "llama2-7b",
        debounce: float = 0.05,
    ):
        super().__init__()
        self.widget.add_class("fdl-cost-panel")
        style = {"description_width": "initial"}
        preset = Transformer.preset(model)
        self.model = widgets.Dropdown(options=list(PRESETS), value=model, description="model", style=style)
        self.seq_length = number_box(preset.seq_length, "sequence length", "190px", min=1, max=1 << 22)
        self.hardware = widgets.Dropdown(options=list(HARDWARE_PRESETS), value=DEFAULT_HARDWARE,
                                         description="hardware", style=style)  # fmt: skip
        self.inter_node_GBps = network_box()
        self.controls = make_controls("cost")
        """The training set-up's controls by field name (``setting_controls``: one per field declared with a
        control), each also an attribute of the panel (``panel.micro_batch_size``)."""
        for name, control in self.controls.items():
            setattr(self, name, control)
        self.controls["expert_load_imbalance"].disabled = not preset.is_moe  # a dense model routes nothing
        self.view = widgets.ToggleButtons(options=list(_VIEWS), value="single")
        self.replay_button = self._cluster_button = widgets.Button(description="Replay on cluster", icon="play")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="200px"))
        for control, css in (
            (self.model, "fdl-cost-model"), (self.seq_length, "fdl-cost-seq-length"),
            (self.hardware, "fdl-cost-hardware"), (self.inter_node_GBps, "fdl-cost-network"),
            (self.view, "fdl-cost-view"), (self.replay_button, "fdl-cost-replay"), (self.progress, "fdl-cost-progress"),
        ):  # fmt: skip
            control.add_class(css)
        self.status = widgets.HTML().add_class("fdl-cost-status")
        self.step_view = StepView()
        self.memory_picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.memory_picture.add_class("fdl-cost-memory")
        self.traffic_box = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap")).add_class("fdl-cost-traffic")
        self.tables = widgets.HTML().add_class("fdl-cost-tables")
        self.replay_table = widgets.HTML().add_class("fdl-cost-replay-table")
        row = widgets.Layout(flex_flow="row wrap", align_items="center")
        self.widget.children = [
            widgets.HBox([self.model, self.seq_length, self.hardware, self.inter_node_GBps], layout=row),
            widgets.HBox(list(self.controls.values()), layout=row),
            widgets.HBox([self.view, self.replay_button, self.progress], layout=row),
            self.status,
            self.step_view.widget,
            self.memory_picture,
            self.traffic_box,
            self.tables,
            self.replay_table,
        ]
        self.report: CostReport | None = None
        self.other: CostReport | None = None
        self.replayed: Any = None
        self.other_training: dict[str, Any] = {}
        """``Training`` fields without a control (attention kernel, overlaps, ...), set by ``load``."""
        self.renders = 0
        self.render_seconds = 0.0
        self._traffic: dict[tuple[Any, ...], widgets.Image] = {}
        self._held = 0
        self._stale = False
        self._redraw = Debouncer(self._render, debounce)
        self.model.observe(self._on_model, names="value")
        for control in (self.seq_length, self.hardware, self.inter_node_GBps, self.view, *self.controls.values()):
            control.observe(lambda _: self._estimate(), names="value")
        self.replay_button.on_click(lambda _: self.replay())
        self.observe(lambda _: self._estimate(), names="layout")
        self.observe(lambda _: self._refresh_button(), names="cluster")
        self.follow(cluster=cluster, layout=layout)  # replay on a followed panel's cluster
        if self.layout is None:
            self._estimate()
        self._refresh_button()

    def __repr__(self) -> str:
        return f"CostPanel(layout={self.layout!r}, model={self.model.value!r}, view={self.view.value!r})"

    # ----------------------------------------------------------------- public
    @property
    def png(self) -> bytes:
        """The PNG bytes of the memory picture shown."""
        return bytes(self.memory_picture.value)

    def training(self) -> Training:
        """The ``Training`` the controls hold, with ``other_training`` (``CostError`` when they contradict each
        other)."""
        return Training(
            **self.other_training, **{name: control_value(name, control) for name, control in self.controls.items()}
        )

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Changes inside (controls, ``layout``) estimate once, at the end."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._stale:
                self._estimate()

    def load(self, model: str | None = None, training: Training | None = None, hardware: str | None = None,
             inter_node_GBps: float | None = None) -> None:  # fmt: skip
        """Set the controls to a model preset (its sequence length), a ``Training``, a hardware preset and its
        network (``inter_node_GBps``; 0: the preset's) at once: one estimate, one redraw. ``training``'s fields
        without a control go to ``other_training``."""
        with self.hold():
            if model is not None:
                self.model.value = model
                self.seq_length.value = Transformer.preset(model).seq_length
            if training is not None:
                default = Training()
                self.other_training = {
                    name: getattr(training, name) for name in TRAINING_SETTINGS
                    if name not in self.controls and name != "distributed_optimizer"
                    and getattr(training, name) != getattr(default, name)
                }  # fmt: skip (distributed_optimizer: the ZeRO stage's control says it)
                for name, control in self.controls.items():
                    set_control(name, control, getattr(training, name))
            if hardware is not None:
                self.hardware.value = hardware
            if inter_node_GBps is not None:
                self.inter_node_GBps.value = inter_node_GBps
            self._stale = True

    def machine(self) -> Hardware:
        """The chosen hardware preset, on the network the panel names (``Hardware.with_network``; 0: the
        preset's)."""
        return Hardware.preset(self.hardware.value).with_network(self.inter_node_GBps.value or None)

    def transformer(self) -> Transformer:
        """The model preset with the chosen sequence length."""
        return Transformer.preset(self.model.value, seq_length=self.seq_length.value)

    # ----------------------------------------------------------------- reactions
    def _on_model(self, change: dict) -> None:
        preset = Transformer.preset(change["new"])
        self.controls["expert_load_imbalance"].disabled = not preset.is_moe  # a dense model routes nothing
        seq = preset.seq_length
        if self.seq_length.value != seq:
            self.seq_length.value = seq  # estimates once, through the seq_length observer
        else:
            self._estimate()

    def _estimate(self) -> None:
        """Estimate the layout (and its other ordering in the side-by-side view), then ask for a redraw."""
        if self._held:
            self._stale = True
            return
        self._stale = False
        self.replayed = None
        self.replay_table.value = ""
        layout = self.layout
        if layout is None:
            self.report = self.other = None
            self._say("no valid layout: fix the layout first", error=True)
            return
        try:
            model, training = self.transformer(), self.training()
            self.report = estimate(layout, model, training)
            compare = self.view.value == "compare"
            self.other = estimate(other_order(layout), model, training) if compare else None
        except Exception as error:  # shown in the panel, never as a traceback
            self.report = self.other = None
            self._say(short_error(error), error=True)
            return
        report = self.report
        self._say(
            f"{layout_name(layout)}: peak {format_bytes(report.peak_bytes)} per rank (stage "
            f"{report.most_loaded_stage}); {traffic_title(report)}"
        )
        self._redraw.schedule()

    def _traffic_image(self, report: CostReport) -> widgets.Image:
        """The traffic grid of ``report`` (kept per layout and dim: settings rarely change it)."""
        key = (report.layout, traffic_dim(report)[0], traffic_title(report, detail=False))
        image = self._traffic.get(key)
        if image is None:
            figure = plot_traffic(report, detail=False)
            image = widgets.Image(value=to_png(figure), format="png", layout=widgets.Layout(max_width="49%"))
            figure.clear()
            if len(self._traffic) >= 8:  # the oldest picture goes (and its widget with it)
                self._traffic.pop(next(iter(self._traffic))).close()
            self._traffic[key] = image
        return image

    def _render(self) -> None:
        report = self.report
        if report is None:
            return
        start = time.perf_counter()
        reports = [report] if self.other is None else [report, self.other]
        figure = plot_memory(reports)
        self.memory_picture.value = to_png(figure)
        figure.clear()
        self.traffic_box.children = [self._traffic_image(r) for r in reports]
        hw = self.machine()
        self.step_view.show(report, hw)
        side = comparison_html(reports, hw) if len(reports) > 1 else ""
        self.tables.value = side + communication_html(report, hw)
        self.renders += 1
        self.render_seconds = time.perf_counter() - start

    def _progress(self, done: int, total: int, message: str) -> None:
        self.progress.max = max(1, total)
        self.progress.value = done
        self.progress.description = message[:20]

    def replay(self, **options: Any) -> bool:
        """Replay the step's collectives on the linked running cluster; whether it worked (errors shown)."""
        if not self._cluster_runs_layout():
            return False
        cluster, layout = self.cluster, self.layout
        try:
            from ..checks import replay  # imports torch: only when a replay is asked for

            frame = replay(
                cluster, layout, self.transformer(), self.training(), hardware=self.machine(),
                progress=self._progress, **options,
            )  # fmt: skip
        except Exception as error:  # shown in the panel, never as a traceback
            self._say(short_error(error), error=True)
            return False
        self.replayed = frame
        self.replay_table.value = replay_html(frame)
        self._say(f"replayed {len(frame)} dim(s) on {cluster.world_size} rank(s)")
        return True
