"""``StreamsPanel``: which ranks share which generator stream, predicted on paper and drawn for real."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ..config import PhaseType
from ..formatting import members_text, plural
from ..layout import Layout
from ..seeds import GENERATORS
from ..viz import plot_sharing, plot_streams, stream_marks, stream_picture, to_png
from .grid_view import GridView
from .layout_panel import LayoutPanel
from .panel_parts import TABLE_STYLE, ClusterFollower, Debouncer, frame_table, html_table, number_box, short_error

_VIEWS = (
    ("grid coloured by stream", "grid"),
    ("ranks sharing a stream", "sharing"),
    ("stream of every rank and generator", "streams"),
)
_CARD_HINT = (
    "<div style='color:#555;font-size:12px;line-height:1.4'>Click a cell to outline the ranks sharing its stream "
    "and see the rank's seeds and streams.</div>"
)


def checks_html(frame: Any) -> str:
    """The check table (check, ok, detail) as HTML, ``ok`` as ``True``/``False``."""
    frame = frame.copy()
    frame["ok"] = frame["ok"].map(lambda v: "True" if bool(v) else "False")
    return TABLE_STYLE + frame_table(frame)


def stream_card_html(report: Any, rank: int, differs: str = "") -> str:
    """A rank's generators: seed, stream number (numbered by first appearance) and how many ranks share it."""
    rows = []
    for column, generator in enumerate(report.generators):
        stream = int(report.stream_ids[rank, column])
        shared = int((report.stream_ids[:, column] == stream).sum())
        rows.append([generator, str(report.seeds[rank, column]), stream, shared])
    head = (
        f"<div style='font-size:13px;line-height:1.4'><b>rank {rank}</b> ({html.escape(report.source)} streams)</div>"
    )
    note = f"<div style='color:#b00020'>real draws differ: {html.escape(differs)}</div>" if differs else ""
    table = html_table(["generator", "seed", "stream", "ranks sharing it"], rows)
    return TABLE_STYLE + head + note + table


def sharing_html(report: Any, generator: str, limit: int = 64) -> str:
    """The groups of ranks sharing one ``generator`` stream, one line each (the first ``limit``)."""
    groups = report.sharing(generator)
    lines = [members_text(group) for group in groups[:limit]]
    more = f"<br>... {len(groups) - limit} more" if len(groups) > limit else ""
    shared = sum(1 for g in groups if len(g) > 1)
    head = (
        f"<b>{html.escape(generator)}</b>: {plural(len(groups), 'distinct stream')}, {shared} shared by several ranks"
    )
    body = "<br>".join(html.escape(line) for line in lines)
    return f"{head}<div style='font-family:monospace;font-size:12px'>{body}{more}</div>"


class StreamsPanel(ClusterFollower):
    """Step, phase and generator controls; the predicted streams' sharing picture and invariant checks;
    a button that draws the same streams on a running cluster and compares real against predicted.

    ``layout`` is a ``Layout`` or a ``LayoutPanel`` to follow, ``cluster`` a running ``LocalCluster`` or a
    ``ClusterPanel`` to follow; assigning ``panel.layout`` / ``panel.cluster`` changes them. ``predicted`` and
    ``real`` are the last ``StreamReport``s, ``error`` the last problem (empty when none).

    The default picture is the rank grid coloured by the chosen generator's stream; after a real draw, the
    cells whose real draws differ from the prediction are marked ``≠`` (in red). Click a cell (or
    ``select_rank(rank)``, ``click(x, y)``) to outline the ranks sharing its stream and see its streams.
    """

    def __init__(
        self,
        layout: Layout | LayoutPanel | None = None,
        cluster: Any = None,
        draws: int = 4,
        debounce: float = 0.05,
    ):
        super().__init__()
        self.widget.add_class("fdl-streams-panel")
        self.draws = draws
        self.step = number_box(0, "step", "160px", "fdl-streams-step", min=0, max=10**12)
        self.phase = widgets.Dropdown(options=[p.name for p in PhaseType], value="training", description="phase")
        self.phase.add_class("fdl-streams-phase")
        self.generator = widgets.Dropdown(options=list(GENERATORS), value="tp", description="generator")
        self.generator.add_class("fdl-streams-generator")
        self.view = widgets.Dropdown(options=list(_VIEWS), value="grid", description="picture",
                                     style={"description_width": "initial"})  # fmt: skip
        self.draw_button = self._cluster_button = widgets.Button(description="Draw on cluster", icon="random")
        self.draw_button.add_class("fdl-streams-draw")
        self.status = widgets.HTML().add_class("fdl-streams-status")
        self.grid_view = GridView(self.select_rank, self._zoom_to, self._hover_text)
        self.grid_view.card.value = _CARD_HINT
        self.picture = self.grid_view.picture
        self.picture_box = self.grid_view.box
        self.picture_box.add_class("fdl-streams-picture")
        self.sharing = widgets.HTML().add_class("fdl-streams-sharing")
        self.checks = widgets.HTML().add_class("fdl-streams-checks")
        self.comparison = widgets.HTML().add_class("fdl-streams-comparison")
        self.draw_button.on_click(lambda _: self.draw_real())
        self.widget.children = [
            widgets.HBox([self.step, self.phase, self.generator, self.view, self.draw_button]),
            self.status,
            self.comparison,
            self.grid_view.widget,
            widgets.HBox([self.sharing, self.checks], layout=widgets.Layout(flex_flow="row wrap")),
        ]
        self.predicted: Any = None
        self.real: Any = None
        self.marks: Any = None
        self.highlight: int | None = None
        self._zoom: tuple[int, int] | None = None
        self._drawn: tuple[Any, ...] | None = None
        self._redraw = Debouncer(self._render, debounce)
        for control in (self.step, self.phase):
            control.observe(lambda _: self._predict(), names="value")
        for control in (self.generator, self.view):
            control.observe(lambda _: self._redraw.schedule(), names="value")
        self.observe(lambda _: self._predict(), names="layout")
        self.observe(lambda _: self._refresh_button(), names="cluster")
        self.follow(cluster=cluster, layout=layout)  # draw on a followed panel's cluster
        if self.layout is None:
            self._predict()
        self._refresh_button()

    def __repr__(self) -> str:
        return f"StreamsPanel(layout={self.layout!r}, step={self.step.value}, phase={self.phase.value})"

    @property
    def png(self) -> bytes:
        """The PNG bytes of the picture shown."""
        return bytes(self.picture.value)

    # ------------------------------------------------------------------ pointing
    def select_rank(self, rank: int | None) -> None:
        """Outline ``rank`` and the ranks sharing its stream on the grid, show its streams (None: clear)."""
        world = self.layout.world_size if self.layout is not None else 0
        if rank is not None and not 0 <= int(rank) < world:
            raise ValueError(f"rank={rank!r} must be a global rank in [0, {world}) or None")
        self.highlight = None if rank is None else int(rank)
        self._redraw.schedule()
        self.flush()

    def click(self, x: float, y: float) -> int | None:
        """A click at pixel (x, y) of the grid picture shown; returns the rank selected."""
        return self.grid_view.click(x, y)

    def _zoom_to(self, ranks: tuple[int, int] | None) -> None:
        self._zoom = ranks
        self._redraw.schedule()
        self.flush()

    def _hover_text(self, ranks: range) -> str:
        report = self.real if self.real is not None else self.predicted
        if report is None:
            return ""
        column = report.generator_index(self.generator.value)
        ids = report.stream_ids[ranks.start : ranks.stop, column]
        if len(ranks) == 1:
            shared = int((report.stream_ids[:, column] == ids[0]).sum())
            return f"rank {ranks.start}: {self.generator.value} stream shared by {shared} rank(s)"
        return f"ranks {ranks.start}-{ranks.stop - 1}: {len(set(ids.tolist()))} {self.generator.value} stream(s)"

    def _predict(self) -> None:
        from ..streams import predict

        self.real = None
        self.marks = None
        self.comparison.value = ""
        layout = self.layout
        if self.highlight is not None and (layout is None or self.highlight >= layout.world_size):
            self.highlight = None
        if self._zoom is not None and (layout is None or self._zoom[1] > layout.world_size):
            self._zoom = None
        if layout is None:
            self.predicted = None
            self._say("no valid layout: fix the layout first", error=True)
            return
        try:
            self.predicted = predict(layout, step=self.step.value, phase=self.phase.value, draws=self.draws)
        except Exception as error:  # shown in the panel, never as a traceback
            self.predicted = None
            self._say(short_error(error), error=True)
            return
        verdict = "every check passes" if self.predicted.ok else "some checks FAIL"
        self._say(f"predicted streams of {layout.world_size} rank(s) at step {self.step.value}, "
                  f"phase {self.phase.value}: {verdict}")  # fmt: skip
        self._redraw.schedule()

    def _render(self) -> None:
        report = self.real if self.real is not None else self.predicted
        if report is None:
            return
        # The report itself is kept (not its id(): ids are reused once an object is freed).
        key = (report, self.generator.value, self.view.value, self.highlight, self._zoom, self.marks)
        drawn = self._drawn
        if drawn is not None and drawn[0] is report and drawn[1:] == key[1:]:
            return
        if self.view.value == "grid":
            picture = stream_picture(report, self.generator.value, self.highlight, ranks=self._zoom, marks=self.marks)
            self.grid_view.show(picture)
            self.grid_view.set_world(report.layout, self._zoom)
        else:
            sharing = self.view.value == "sharing"
            figure = plot_sharing(report, self.generator.value) if sharing else plot_streams(report)
            self.grid_view.show(None, png=to_png(figure))
            self.grid_view.set_world(None, None)
            figure.clear()
        marks, rank = self.marks, self.highlight
        differs = marks.notes[rank] if rank is not None and marks is not None and marks.bad[rank] else ""
        self.grid_view.card.value = _CARD_HINT if rank is None else stream_card_html(report, rank, differs)
        self.sharing.value = sharing_html(report, self.generator.value)
        self.checks.value = checks_html(report.check())
        self._drawn = key

    def draw_real(self) -> bool:
        """Draw the streams on the linked running cluster and compare with the prediction; whether they match."""
        if not self._cluster_runs_layout():
            return False
        cluster, layout = self.cluster, self.layout
        try:
            from ..checks import draw_streams
            from ..streams import predict

            real = draw_streams(cluster, step=self.step.value, phase=self.phase.value, draws=self.draws)
            device = getattr(cluster, "device_type", "cpu")
            if self.predicted is None or device != "cpu":
                self.predicted = predict(layout, self.step.value, self.phase.value, self.draws, device=device)
            matches = bool(real.matches(self.predicted))
        except Exception as error:  # shown in the panel, never as a traceback
            self._say(short_error(error), error=True)
            return False
        self.real = real
        self.marks = stream_marks(self.predicted, real)
        if matches:
            self.comparison.value = (
                f"<b style='color:#1b7f3b'>real draws of {cluster.world_size} rank(s) match the prediction exactly</b>"
            )
        else:
            diff = real.diff(self.predicted).head(20)
            self.comparison.value = (
                "<b style='color:#b00020'>real draws differ from the prediction</b>" + TABLE_STYLE + frame_table(diff)
            )
        self._say(f"drew the streams on {cluster.world_size} rank(s) at step {self.step.value}, "
                  f"phase {self.phase.value}")  # fmt: skip
        self._redraw.schedule()
        return matches
