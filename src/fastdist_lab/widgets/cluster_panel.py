"""``ClusterPanel``: start / stop a real ``LocalCluster`` (or a simulated world: ``SimulatedCluster`` with threads
or fake groups), apply the layout, show each rank's verdict on the grid (the verification table one click away),
and run one real training step against one process (*Train step*, ``train_view.TrainStepView``)."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import traitlets

from ..checks import rank_summary, verify_groups
from ..config import CLUSTER_MODES
from ..formatting import plural
from ..layout import Layout
from ..viz import grid_picture, verdict_marks
from .grid_view import GridView
from .layout_panel import LayoutPanel
from .panel_parts import TABLE_STYLE, Panel, error_html, frame_table, short_error
from .rank_card import card_html, hover_text
from .train_view import TrainStepView

if TYPE_CHECKING:
    from ..runtime import RankResults, Verification

MODE_LABELS = {"processes": "processes (one per rank)", "threads": "threads (simulated)", "fake": "fake (membership)"}
"""How the mode menu names each of ``CLUSTER_MODES``."""
CAPACITY_FROM = 128
"""World sizes from which the panel asks whether the world fits on this machine as processes."""


def verification_html(verification: Verification) -> str:
    """One row per (dim, group): dim, group, members, ok (``True``/``False``), seconds, detail."""
    frame = verification.to_frame()
    columns = [c for c in ("dim", "group", "members", "ok", "seconds", "detail") if c in frame.columns]
    frame = frame[columns].copy()
    if "seconds" in frame:
        frame["seconds"] = frame["seconds"].map(lambda s: f"{float(s):.3f}")
    if "ok" in frame:
        frame["ok"] = frame["ok"].map(lambda v: "True" if bool(v) else "False")
    verdict = "every group ok" if verification.ok else "some checks FAILED"
    mode = getattr(verification, "mode", "processes")
    how = "" if mode == "processes" else f" ({html.escape(verification.summary().rpartition(' (')[2].rstrip(')'))})"
    return TABLE_STYLE + f"<b>{html.escape(verdict)}</b>{how}" + frame_table(frame)


def results_html(results: RankResults) -> str:
    """One row per rank: status, value, printed output, seconds (never a traceback, just the error line)."""
    frame = results.to_frame().reset_index()
    columns = [c for c in ("rank", "status", "value", "error", "stdout", "seconds") if c in frame.columns]
    frame = frame[columns].copy()
    if "seconds" in frame:
        frame["seconds"] = frame["seconds"].map(lambda s: f"{float(s):.3f}")
    if "stdout" in frame:
        frame["stdout"] = frame["stdout"].map(lambda s: str(s).strip())
    return TABLE_STYLE + frame_table(frame)


class ClusterPanel(Panel):
    """Buttons to start, apply and stop a cluster for the current layout, and what came back.

    ``layout`` is a ``Layout`` or a ``LayoutPanel`` to follow; assigning ``panel.layout`` changes the layout to
    apply. The ``mode`` menu says what runs the ranks (``CLUSTER_MODES``: ``"processes"``, a ``LocalCluster``;
    ``"threads"`` / ``"fake"``, a ``SimulatedCluster``); when a world is too big for this machine as processes,
    the panel proposes (selects) ``threads`` and says why. Start launches ``layout.world_size`` ranks (``backend``:
    gloo on CPU, for processes; ``timeout`` defaults to each mode's default) and applies the layout;
    Apply re-applies it to the running workers (when the world size changed, the panel says a restart is
    needed). *Train step* (``train_step()``) runs one training step of a small GPT on the running ranks and in this
    process and shows what differs (``train``: the table and a grid of each rank's worst error). Every error and
    timeout is shown as text in ``status``, never as a traceback.

    After Apply every rank's verdict is drawn on the rank grid (``✓ ok`` or ``✗`` and the dims that failed,
    failing groups outlined in red): on the followed ``LayoutPanel``'s grid, or on the panel's own grid
    (``view``) when it follows none. The tables (``verification``, ``rank_output``) sit folded in ``tables``.
    ``last_verification`` is a trait others can observe; ``verified_layout`` the layout it checked.
    """

    cluster = traitlets.Any(None, allow_none=True)
    layout = traitlets.Instance(Layout, allow_none=True)
    last_verification = traitlets.Any(None, allow_none=True)

    def __init__(
        self,
        layout: Layout | LayoutPanel | None = None,
        backend: str = "auto",
        timeout: float | None = None,
        apply_on_start: bool = True,
        mode: str = "processes",
    ):
        super().__init__()
        if mode not in CLUSTER_MODES:
            raise ValueError(f"mode={mode!r} is not a cluster mode; use one of {', '.join(CLUSTER_MODES)}")
        self.widget.add_class("fdl-cluster-panel")
        self.backend = backend
        self.timeout = timeout
        self.apply_on_start = apply_on_start
        self.mode = widgets.Dropdown(
            options=[(MODE_LABELS[m], m) for m in CLUSTER_MODES],
            value=mode,
            description="ranks as",
            layout=widgets.Layout(width="260px"),
        ).add_class("fdl-cluster-mode")
        self.mode_note = ""
        """Why the panel proposed another mode (empty when it did not)."""
        self._fits: dict[int, str] = {}
        self._note_world: int | None = None
        self.start_button = widgets.Button(description="Start cluster", icon="play", button_style="success")
        self.apply_button = widgets.Button(description="Apply layout", icon="check").add_class("fdl-cluster-apply")
        self.stop_button = widgets.Button(description="Stop", icon="stop", button_style="danger")
        self.start_button.add_class("fdl-cluster-start")
        self.stop_button.add_class("fdl-cluster-stop")
        self.status = widgets.HTML().add_class("fdl-cluster-status")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="260px"))
        self.progress.add_class("fdl-cluster-progress")
        self.verification = widgets.HTML().add_class("fdl-verification")
        self.rank_output = widgets.HTML().add_class("fdl-rank-output")
        self.tables = widgets.Accordion(
            children=[self.verification, self.rank_output], titles=("groups checked (table)", "per-rank output")
        ).add_class("fdl-cluster-tables")
        self.tables.selected_index = None
        self.view = GridView(self._select, self._zoom_to, self._hover_text)
        self.view.box.add_class("fdl-cluster-grid")
        self.view.widget.layout.display = "none"
        self.start_button.on_click(lambda _: self.start())
        self.apply_button.on_click(lambda _: self.apply())
        self.stop_button.on_click(lambda _: self.stop())
        self.train = TrainStepView()
        self.train.button.on_click(lambda _: self.train_step())
        self.widget.children = [
            widgets.HBox([self.mode, self.start_button, self.apply_button, self.stop_button, self.progress]),
            self.status,
            self.view.widget,
            self.tables,
            self.train.widget,
        ]
        self.last_results: RankResults | None = None
        self.verified_layout: Layout | None = None
        self.show_grid = True
        self.grid_dim = "tensor"
        self._highlight: int | None = None
        self._zoom: tuple[int, int] | None = None
        self._marks: Any = None
        if isinstance(layout, LayoutPanel):  # verdicts go on the followed panel's grid
            panel = layout
            self.observe(lambda change: panel.show_verification(change["new"], self.verified_layout),
                         names="last_verification")  # fmt: skip
            self.show_grid = False
        self.follow(layout=layout)
        self.observe(self._on_verification, names="last_verification")
        self.observe(lambda _: self._refresh(), names=["layout", "cluster"])
        self.mode.observe(lambda change: None if self._busy else self._refresh(), names="value")
        self._refresh()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ClusterPanel({state}, layout={self.layout!r})"

    # ----------------------------------------------------------------- state
    @property
    def running(self) -> bool:
        """Whether a cluster is up (its workers may be restarting after a failure)."""
        return self.cluster is not None

    def _say(self, text: str, error: bool = False) -> None:
        if not error:
            self.status.value = html.escape(text)
            return
        head, _, rest = text.partition("\n")
        pre = f"<pre style='font-size:11px;max-height:300px;overflow:auto'>{html.escape(rest)}</pre>"
        more = f"<details><summary>details</summary>{pre}</details>" if rest.strip() else ""
        self.status.value = error_html(head) + more

    @property
    def message(self) -> str:
        """The status line as plain text."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.status.value))

    def _refresh(self) -> None:
        layout, running = self.layout, self.running
        self._refresh_buttons()
        if layout is None:
            self._say("no valid layout to run: fix the layout first", error=True)
        elif not running:
            self._propose_mode(layout.world_size)
            what = {"processes": "local worker process(es)", "threads": "rank threads (simulated)",
                    "fake": "fake ranks (membership only)"}[self.mode.value]  # fmt: skip
            self._say(f"stopped; Start launches {layout.world_size} {what}" + self.mode_note)
        elif self.cluster.world_size != layout.world_size:
            self._say(
                f"the layout has world size {layout.world_size} but the running cluster has "
                f"{self.cluster.world_size} ranks: restart needed (Stop, then Start)",
                error=True,
            )
        elif not getattr(self.cluster, "running", False):
            self._say(
                f"the {self.cluster.world_size} worker(s) stopped after a failure; "
                "the next Apply or run restarts them (or Stop)"
            )
        elif self.cluster.layout != layout:
            self._say(f"running {self.cluster.world_size} rank(s); the layout changed: Apply to check it")
        else:
            self._say(f"running {self.cluster.world_size} rank(s); this layout is applied")

    def _propose_mode(self, world_size: int) -> None:
        """Select ``threads`` (saying why in ``mode_note``) when ``world_size`` ranks do not fit here as processes."""
        if self._note_world != world_size:
            self.mode_note = ""
        if self.mode.value != "processes" or world_size < CAPACITY_FROM:
            return
        if world_size not in self._fits:
            from ..runtime import suggested_mode  # torch is imported only for worlds this big

            self._fits[world_size] = suggested_mode(world_size)
        proposed = self._fits[world_size]
        if proposed != "processes":
            self.mode_note = (
                f" ({world_size:,} ranks do not fit on this machine as processes: {proposed} proposed; "
                "'processes' is still yours to choose)"
            )
            self._note_world = world_size
            with self._quiet():
                self.mode.value = proposed

    # ----------------------------------------------------------------- actions
    def _progress(self, done: int, total: int, message: str) -> None:
        self.progress.max = max(1, total)
        self.progress.value = min(done, self.progress.max)
        self._say(f"starting: {message}")

    def _guard(self, action: Callable[[], Any]) -> Any:
        """``action()``'s value, or None (and the error in the status line) when it raises; then the buttons."""
        for button in (self.start_button, self.apply_button, self.stop_button, self.train.button):
            button.disabled = True
        try:
            return action()
        except Exception as error:  # shown in the panel, never as a traceback
            self._refresh()
            self._say(short_error(error), error=True)
            return None
        finally:
            self._refresh_buttons()

    def start(self) -> bool:
        """Start a cluster of the layout's world size (and apply the layout); returns whether it worked."""
        layout = self.layout
        if layout is None:
            self._say("no valid layout to run: fix the layout first", error=True)
            return False
        if self.running:
            self._refresh()
            return True

        def action() -> bool:
            from ..runtime import open_cluster

            mode = self.mode.value
            self.progress.value = 0
            self._say(f"starting {layout.world_size} rank(s) as {mode}...")
            begin = time.perf_counter()
            cluster = open_cluster(
                mode,
                layout.world_size,
                local_world_size=layout.local_world_size,
                backend=self.backend,
                timeout=self.timeout,
                progress=self._progress,
            )
            self.cluster = cluster
            self.progress.value = self.progress.max
            self._say(
                f"running: {cluster.world_size} rank(s) as {mode}, backend {cluster.backend}, "
                f"started in {time.perf_counter() - begin:.1f} s"
            )
            return True

        ok = self._guard(action) is not None
        return self.apply() if ok and self.apply_on_start else ok

    def apply(self) -> bool:
        """Apply the current layout to the running cluster and show the verification; returns whether all is ok."""
        layout, cluster = self.layout, self.cluster
        if layout is None:
            self._say("no valid layout to apply: fix the layout first", error=True)
            return False
        if not self.running:
            self._say("the cluster is not running: click Start first", error=True)
            return False
        if cluster.world_size != layout.world_size:
            self._refresh()
            return False

        def action() -> bool:
            self._say(f"applying the layout to {cluster.world_size} rank(s)...")
            verification = verify_groups(cluster, layout)
            self.verification.value = verification_html(verification)
            self.tables.set_title(0, f"groups checked (table): {plural(len(verification.rows), 'group')}")
            results = cluster.run(rank_summary)
            self.last_results = results
            self.rank_output.value = results_html(results)
            self.verified_layout = layout
            self.last_verification = verification
            verdict = "every group ok" if verification.ok else "some checks FAILED"
            self._say(
                f"running: {cluster.world_size} rank(s), backend {cluster.backend}; layout applied: {verdict} "
                "(each rank's verdict is on the grid; the table is under 'groups checked')"
            )
            return bool(verification.ok)

        return bool(self._guard(action))

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> RankResults | None:
        """Run ``fn(ctx, *args)`` on every rank and show the per-rank output; None (and a message) on failure."""
        if not self.running:
            self._say("the cluster is not running: click Start first", error=True)
            return None

        def action() -> RankResults:
            results = self.cluster.run(fn, *args, timeout=timeout)
            self.last_results = results
            self.rank_output.value = results_html(results)
            self._say(
                f"ran {getattr(fn, '__name__', 'function')} on {self.cluster.world_size} rank(s): "
                f"{'ok' if results.ok else 'some ranks failed'}"
            )
            return results

        return self._guard(action)

    def train_step(self, **options: Any) -> Any:
        """One training step of the layout on the running cluster against one process (``check_training``;
        ``options`` go to it), shown under *Train step*; returns the ``TrainingCheck`` (None, and a message, on
        failure)."""
        layout, cluster = self.layout, self.cluster
        if layout is None or not self.running:
            self._say("start a cluster with a valid layout first", error=True)
            return None
        if cluster.world_size != layout.world_size:
            self._refresh()
            return None

        def action() -> Any:
            check = self.train.run(cluster, layout, **options)
            verdict = "everything agrees with one process" if check.ok else "something differs (see Train step)"
            self._say(f"running: {cluster.world_size} rank(s); train step: {verdict}")
            return check

        return self._guard(action)

    def train_row(self, training: Any) -> Any:
        """One training step of the panel's layout with ``training`` (an Advisor row's ``cost.Training``, loaded into
        *Train step*) on a ``TinyGPT`` sized to split over it (``checks.model_for``): the cluster is started, or
        restarted at the layout's world size, first. Returns the ``TrainingCheck`` (None, and a message, on failure)."""
        from ..checks.train_step import model_for

        self.train.load(training)
        if self.running and self.cluster.world_size != getattr(self.layout, "world_size", None):
            self.stop()
        if self.layout is None or not self.start():
            return None
        return self.train_step(model=model_for(self.layout, training))

    def stop(self) -> None:
        """Close the cluster (no process left behind)."""
        cluster = self.cluster

        def action() -> None:
            if cluster is not None:
                cluster.close()
            self.cluster = None
            self._say("stopped")

        self._guard(action)
        self.cluster = None

    # ----------------------------------------------------------------- the panel's own verdict grid
    def _on_verification(self, change: dict) -> None:
        verification = change["new"]
        self._marks = verdict_marks(verification) if verification is not None else None
        self._highlight = self._zoom = None
        self.draw_verdicts()

    def draw_verdicts(self) -> None:
        """Draw the panel's own grid with every rank's verdict (only when it follows no ``LayoutPanel``)."""
        layout, verification = self.verified_layout, self.last_verification
        if not self.show_grid or layout is None or verification is None:
            self.view.widget.layout.display = "none"
            return
        picture = grid_picture(layout, self.grid_dim, self._highlight, ranks=self._zoom, marks=self._marks)
        self.view.show(picture)
        self.view.set_world(layout, self._zoom)
        self.view.card.value = card_html(layout, self._highlight, self.grid_dim, verification)
        self.view.widget.layout.display = "flex"

    def _select(self, rank: int | None) -> None:
        self._highlight = rank
        self.draw_verdicts()

    def _zoom_to(self, ranks: tuple[int, int] | None) -> None:
        self._zoom = ranks
        self.draw_verdicts()

    def _hover_text(self, ranks: range) -> str:
        layout = self.verified_layout
        return hover_text(layout, ranks, self.grid_dim) if layout is not None else ""

    def _refresh_buttons(self) -> None:
        running, layout = self.running, self.layout
        self.train.enable(running and layout is not None)
        self.start_button.disabled = running or layout is None
        self.stop_button.disabled = not running
        self.apply_button.disabled = not running or layout is None or self.cluster.world_size != layout.world_size

    def close(self) -> None:
        """Stop the cluster and close the widgets."""
        self.stop()
        self.widget.close()

