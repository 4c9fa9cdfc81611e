"""``AdvisorPanel``: which layout should I run? A model, GPUs, hardware and a global batch in; every layout and training
set-up that fits, ranked by predicted step time (``cost.search``), out: the ranked rows and a scatter of memory per
GPU against step time. Choosing a row (in the list, or its point on the scatter) loads it into the lab's layout and
cost panels and the cluster panel's *Train step*; *Train this row* runs one real training step of it (a small
``TinyGPT``, the row's layout and exactly its ``cost.Training``) on the lab's cluster, started if need be.

A search can take seconds. In a kernel it runs on a thread of its own, after the inputs settle (debounced), so the
other panels keep answering; one search at a time: a newer request abandons the running one at its next progress
report. A bar shows once a search has taken ``bar_delay()`` seconds. Outside a kernel (scripts, tests) it runs at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import threading
import time
from typing import Any, NamedTuple

import ipywidgets as widgets
import numpy as np
import traitlets
from ipyevents import Event

from ..cost import RANKED_LEGEND, RANKED_ROWS, ranked_legend, ranked_lines, search_summary
from ..cost import search as search_layouts
from ..cost.search.candidates import MAX_GLOBAL_BATCH
from ..errors import CostError
from ..layout import Layout
from ..runtime.progress import bar_delay
from ..setup import DEFAULT_ENGINE, DEFAULT_HARDWARE, HARDWARE_PRESETS, PRESETS, Hardware, Training
from ..validation import check_int
from ..viz import SearchPicture
from .panel_parts import Debouncer, Panel, error_html, network_box, number_box, short_error
from .setting_controls import make_controls, panel_settings

SEARCH_DELAY = 0.4
"""Seconds the inputs must rest, in a kernel, before they are searched."""

CLICK_RADIUS = 12.0
"""A click on the scatter chooses the best-ranked point within this many pixels."""

NO_BREAK = "\u00a0"
"""The rows' separator: a ``<select>`` collapses ordinary spaces, and the columns would lose their alignment."""

ROWS_STYLE = (
    "<style>.fdl-advisor-rows select,.fdl-advisor-header pre{font-family:monospace;font-size:12px;"
    "line-height:1.35;margin:0}.fdl-advisor-header pre{padding-left:4px}</style>"
)
"""CSS of the ranked rows and their header (one monospace font: the columns line up)."""

_INPUTS = ("model", "gpus", "gpus_per_node", "hardware", *panel_settings("advisor"), "global_batch_size", "top")
"""The search's inputs: each a control of the panel, named as ``cost.search``'s argument."""

_CONTROLS = (*_INPUTS, "inter_node_GBps")
"""The controls a search reads: ``_INPUTS`` and the network its hardware is priced on (``_search_arguments``)."""


class Choice(NamedTuple):
    """A row of the Advisor's search, chosen: its number, ``Layout``, model preset, ``Training``, hardware preset and
    the network it was priced on (``inter_node_GBps``; 0: the preset's)."""

    row: int
    layout: Layout
    model: str
    training: Training
    hardware: str
    inter_node_GBps: float = 0.0


def _search_arguments(controls: dict[str, Any]) -> dict[str, Any]:
    """The ``cost.search`` arguments of the Advisor's control values: ``_INPUTS``, the hardware preset on the
    network ``controls["inter_node_GBps"]`` names where it is not 0 (``Hardware.with_network``)."""
    arguments = {name: controls[name] for name in _INPUTS}
    if controls.get("inter_node_GBps"):
        arguments["hardware"] = Hardware.preset(arguments["hardware"]).with_network(controls["inter_node_GBps"])
    return arguments


class _Superseded(Exception):
    """A newer search was asked for: the running one stops at its next progress report."""


class AdvisorPanel(Panel):
    """Inputs (``model``, ``gpus``, ``gpus_per_node``, ``hardware``, ``engine``: the training engine every row is
    priced for, ``torch_compile``: whether every row runs compiled, ``global_batch_size``, ``top``: rows kept), a
    *Search* button, the ranked ``rows`` (a list: one line per set-up, ``cost.ranked_lines``) and the ``picture``
    (memory per GPU against step time, ``viz.plot_search``).

    Changing an input searches again once the inputs rest (``search()`` searches now). ``result`` is the last
    ``LayoutSearch`` (None before the first or after an error), ``error`` the last problem as text (empty when
    none), ``searching`` whether a search runs. ``select(row)`` (a click on a row, or ``click(x, y)`` on the
    scatter's pixels) rings the row's point and sets ``choice``; ``drive(layout_panel, cost_panel)`` makes every
    choice load its layout into the layout panel and its model, training (its engine included) and hardware into
    the cost panel. ``searcher`` is the search it runs (``cost.search``; a test may wrap it, to hold a search).
    """

    result = traitlets.Any(None, allow_none=True)
    selected = traitlets.Int(-1)
    choice = traitlets.Any(None, allow_none=True)
    error = traitlets.Unicode("")
    searching = traitlets.Bool(False)
    to_train = traitlets.Any(None, allow_none=True)

    def __init__(self, model: str = "llama2-7b", gpus: int = 64, global_batch_size: int = 256,
                 gpus_per_node: int = 8, hardware: str = DEFAULT_HARDWARE, top: int = RANKED_ROWS,
                 debounce: float = SEARCH_DELAY, engine: str = DEFAULT_ENGINE):  # fmt: skip
        super().__init__()
        self.widget.add_class("fdl-advisor-panel")
        style = {"description_width": "initial"}
        self.model = widgets.Dropdown(options=list(PRESETS), value=model, description="model", style=style)
        self.model.add_class("fdl-advisor-model")
        self.gpus = number_box(gpus, "GPUs", "150px", "fdl-advisor-gpus", min=1, max=1 << 16)
        self.gpus_per_node = number_box(gpus_per_node, "per node", "130px", "fdl-advisor-gpus-per-node", min=1,
                                        max=1024)  # fmt: skip
        self.hardware = widgets.Dropdown(options=list(HARDWARE_PRESETS), value=hardware, description="hardware",
                                         style=style).add_class("fdl-advisor-hardware")  # fmt: skip
        self.controls = make_controls("advisor")
        """The ``Training`` fields every row of the search shares that the Advisor offers (``setting_controls``: the
        engine, ``torch_compile``), by name; each also an attribute (``panel.engine``)."""
        for name, control in self.controls.items():
            setattr(self, name, control)
        self.engine.value = engine
        self.inter_node_GBps = network_box("fdl-advisor-network")
        self.global_batch_size = number_box(global_batch_size, "global batch", "170px", "fdl-advisor-batch", min=1,
                                            max=MAX_GLOBAL_BATCH)  # fmt: skip
        self.top = number_box(top, "rows", "120px", "fdl-advisor-top", min=1, max=1000)
        self.search_button = widgets.Button(description="Search", icon="search", layout=widgets.Layout(width="auto"))
        self.search_button.add_class("fdl-advisor-search")
        self.train_button = widgets.Button(description="Train this row", icon="graduation-cap", disabled=True,
                                           layout=widgets.Layout(width="auto"))  # fmt: skip
        self.train_button.add_class("fdl-advisor-train")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="220px",
                                                                                          display="none"))  # fmt: skip
        self.progress.add_class("fdl-advisor-progress")
        self.status = widgets.HTML(
            "Pick a model, GPUs, hardware and a global batch: every layout and training set-up that fits is ranked "
            "by predicted step time. Choose a row (or its point) to load it into the layout and cost panels."
        ).add_class("fdl-advisor-status")
        self.header = widgets.HTML().add_class("fdl-advisor-header")
        self.rows = widgets.Select(options=[], value=None, rows=12, layout=widgets.Layout(width="auto"))
        self.rows.add_class("fdl-advisor-rows")
        self.legend = widgets.HTML(layout=widgets.Layout(max_width="860px"))
        self.picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.picture.add_class("fdl-advisor-picture")
        self.clicks = Event(source=self.picture, watched_events=["click"], prevent_default_action=True)
        self.clicks.on_dom_event(self._on_click_event)
        row = widgets.Layout(flex_flow="row wrap", align_items="center")
        table = widgets.VBox([self.header, self.rows, self.legend], layout=widgets.Layout(margin="0 12px 0 0"))
        self.widget.children = [
            widgets.HBox([self.model, self.gpus, self.gpus_per_node, self.hardware, *self.controls.values()],
                         layout=row),  # fmt: skip
            widgets.HBox([self.global_batch_size, self.inter_node_GBps, self.top, self.search_button,
                          self.train_button, self.progress], layout=row),  # fmt: skip
            self.status,
            widgets.HBox([table, self.picture], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")),
        ]
        self.searches = 0
        """Searches finished (results or errors shown); abandoned ones do not count."""
        self.search_seconds = 0.0
        """Seconds the last shown search took."""
        self.render_seconds = 0.0
        """Seconds the last picture took to draw."""
        self.bar_delay = bar_delay()
        """Seconds a search runs before its progress shows."""
        self.searcher: Any = search_layouts
        """The search run (``cost.search``'s signature): called on the search thread in a kernel."""
        self._searched: dict[str, Any] = {}
        self._pixels = np.zeros((0, 2))
        self._scatter: tuple[Any, SearchPicture] | None = None
        self._generation = 0
        self._wanted: tuple[int, dict[str, Any]] | None = None
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._request = Debouncer(self._start, debounce)
        for name in _CONTROLS:
            getattr(self, name).observe(lambda _: self._request.schedule(), names="value")
        self.search_button.on_click(lambda _: self.search())
        self.train_button.on_click(lambda _: self.train_row())
        self.observe(lambda change: setattr(self.train_button, "disabled", change["new"] is None), names="choice")
        self.rows.observe(self._on_row, names="value")

    def __repr__(self) -> str:
        found = "no search yet" if self.result is None else f"{len(self.result)} rows"
        return (
            f"AdvisorPanel(model={self.model.value!r}, gpus={self.gpus.value}, hardware={self.hardware.value!r}, "
            f"engine={self.engine.value!r}, global_batch_size={self.global_batch_size.value}; {found})"
        )

    # ----------------------------------------------------------------- public
    @property
    def png(self) -> bytes:
        """The PNG bytes of the scatter shown."""
        return bytes(self.picture.value)

    def inputs(self) -> dict[str, Any]:
        """The ``cost.search`` arguments the inputs hold (the model as its preset name, the hardware on the network
        the panel names: ``Hardware.with_network``)."""
        return _search_arguments(self._controls())

    def _controls(self) -> dict[str, Any]:
        return {name: getattr(self, name).value for name in _CONTROLS}

    def search(self) -> None:
        """Search the inputs now (a request waiting for the inputs to rest goes first): in a kernel on a thread, the
        result shown when it is done; elsewhere at once. A search still running is abandoned."""
        self._request.cancel()
        self._start()

    def flush(self) -> None:
        """Start a search waiting for the inputs to rest now."""
        self._request.flush()

    def select(self, row: int | None) -> Choice | None:
        """Choose row ``row`` of the result (None: no row): its point ringed, its line selected, ``choice`` set (the
        lab's layout and cost panels follow)."""
        result = self.result
        if row is None or result is None:
            self.selected = -1
            self._set_row(None)
            return None
        row = check_int("row", row, minimum=0, maximum=len(result) - 1, error=CostError)
        self.selected = row
        self._set_row(row)
        self._draw()
        inputs = self._searched
        self.choice = None  # the same row again still loads it
        self.choice = Choice(row, result.layout(row), inputs["model"], result.training(row), inputs["hardware"],
                             inputs["inter_node_GBps"])  # fmt: skip
        return self.choice

    def click(self, x: float, y: float) -> int | None:
        """A click at pixel (x, y) of the scatter (what the browser sends): choose the best-ranked point within
        ``CLICK_RADIUS`` pixels; returns its row (None: no point there, nothing changes)."""
        if not len(self._pixels):
            return None
        distance = np.hypot(self._pixels[:, 0] - x, self._pixels[:, 1] - y)
        near = np.flatnonzero(distance <= CLICK_RADIUS)
        if not len(near):
            return None
        self.select(int(near[0]))
        return int(near[0])

    def train_row(self) -> Choice | None:
        """Ask for one training step of the chosen row (*Train this row*): ``to_train`` is set to the ``Choice``
        (``drive``'s cluster panel runs it); None when no row is chosen."""
        choice = self.choice
        self.to_train = None  # the same row again still trains
        self.to_train = choice
        return choice

    def drive(self, layout_panel: Any, cost_panel: Any = None, cluster_panel: Any = None) -> None:
        """From now on a choice loads its layout into ``layout_panel`` (a ``LayoutPanel``: one update), its model,
        training and hardware into ``cost_panel`` (a ``CostPanel``: one estimate for both changes) and its training
        into ``cluster_panel``'s *Train step* (a ``ClusterPanel``), which *Train this row* then runs
        (``ClusterPanel.train_row``)."""
        if cluster_panel is not None:  # a choice is offered to Train step; a row to train is trained
            for trait, act in (("choice", cluster_panel.train.load), ("to_train", cluster_panel.train_row)):
                self.observe(lambda change, act=act: None if change["new"] is None else act(change["new"].training),
                             names=trait)  # fmt: skip

        def load(change: dict) -> None:
            choice: Choice | None = change["new"]
            if choice is None:
                return
            layout = choice.layout
            sizes = {name: getattr(layout, name) for name in ("world_size", "local_world_size", "tensor_parallel",
                     "pipeline_parallel", "sequence_data_parallel", "pipeline_first", "expert_parallel",
                     "expert_tensor_parallel")}  # fmt: skip (the expert sizes too: a dense row clears them)
            if cost_panel is None:
                layout_panel.set(**sizes)
                return
            with cost_panel.hold():
                layout_panel.set(**sizes)
                cost_panel.load(model=choice.model, training=choice.training, hardware=choice.hardware,
                                inter_node_GBps=choice.inter_node_GBps)  # fmt: skip

        self.observe(load, names="choice")

    # ----------------------------------------------------------------- searching
    def _start(self) -> None:
        self._generation += 1
        job = (self._generation, self._controls())
        self.searching = True
        self.status.value = "searching ..."
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            outcome = self._run(job)
            if outcome is not None:
                self._finish(job, *outcome)
            return
        self._loop = loop
        with self._lock:
            self._wanted = job
            worker = None
            if self._worker is None:
                worker = self._worker = threading.Thread(target=self._work, name="fdl-advisor-search", daemon=True)
        if worker is not None:
            worker.start()

    def _work(self) -> None:
        """The search thread: the newest request, one after the other, until none is left."""
        while True:
            with self._lock:
                job, self._wanted = self._wanted, None
                if job is None:
                    self._worker = None
                    return
            outcome = self._run(job)
            if outcome is not None:
                self._post(self._finish, job, *outcome)

    def _post(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the kernel's loop (widgets change on its thread), or here outside a kernel."""
        loop = self._loop
        if threading.current_thread() is threading.main_thread() or loop is None:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is watching any more
            loop.call_soon_threadsafe(fn, *args)

    def _run(self, job: tuple[int, dict[str, Any]]) -> tuple[Any, BaseException | None, float] | None:
        """Search ``job``: (result, None, seconds), (None, error, seconds), or None when a newer job superseded it."""
        generation, inputs = job
        started = time.monotonic()
        shown = [-1]

        def progress(done: int, total: int, message: str) -> None:
            if generation != self._generation:
                raise _Superseded
            percent = int(100 * done / max(total, 1))
            if percent != shown[0] and time.monotonic() - started >= self.bar_delay:
                shown[0] = percent
                self._post(self._show_progress, generation, done, total)

        try:
            result = self.searcher(**_search_arguments(inputs), progress=progress)
        except _Superseded:
            return None
        except Exception as error:  # shown in the panel, never as a traceback
            return None, error, time.monotonic() - started
        return result, None, time.monotonic() - started

    def _show_progress(self, generation: int, done: int, total: int) -> None:
        if generation != self._generation:
            return
        self.progress.max = max(1, total)
        self.progress.value = done
        self.progress.layout.display = None
        self.status.value = html.escape(f"searching: {done} of {total} schedule tables")

    def _finish(
        self, job: tuple[int, dict[str, Any]], result: Any, error: BaseException | None, seconds: float
    ) -> None:
        if job[0] != self._generation:
            return  # a newer search is on its way
        self.searching = False
        self.progress.layout.display = "none"
        self.searches += 1
        self.search_seconds = seconds
        self.selected = -1
        self._searched = job[1]
        if error is not None:
            self.result = None
            self.error = short_error(error)
            self.status.value = error_html(self.error)
            self._set_rows([])
            return
        self.error = ""
        self.result = result
        inputs = job[1]
        engine = "" if inputs["engine"] == DEFAULT_ENGINE else f", engine {inputs['engine']}"
        said = f"{inputs['model']}, global batch {inputs['global_batch_size']}{engine} on {search_summary(result)}"
        if not len(result):
            self.status.value = error_html(f"{said}: more GPUs, or GPUs with more memory?")
            self._set_rows([])
            return
        self.status.value = html.escape(
            f"{said}; searched in {seconds:.1f} s. Choose a row (or its point) to load it into the layout and cost "
            "panels."
        )
        self._set_rows(ranked_lines(result, separator=NO_BREAK), ranked_legend(result))
        self._draw()

    # ----------------------------------------------------------------- showing
    def _set_rows(self, lines: list[str], legend: str = RANKED_LEGEND) -> None:
        """Show ``lines`` (a header, then one line per row; none: no result, and no picture either) and the
        ``legend`` of their column titles."""
        with self._quiet():
            self.header.value = ROWS_STYLE + (f"<pre>{html.escape(lines[0])}</pre>" if lines else "")
            self.rows.options = [(line, index) for index, line in enumerate(lines[1:])]
            self.rows.value = None
            self.rows.rows = max(2, min(12, len(lines) - 1))
        self.legend.value = f"<small>{html.escape(legend)}</small>" if lines else ""
        if not lines:
            self.picture.value = b""
            self._pixels = np.zeros((0, 2))

    def _set_row(self, row: int | None) -> None:
        with self._quiet():
            self.rows.value = row

    def _on_row(self, change: dict) -> None:
        if not self._busy and change["new"] is not None:
            self.select(change["new"])

    def _draw(self) -> None:
        """The scatter of the result (drawn once per result), the chosen row ringed."""
        start = time.perf_counter()
        if self._scatter is None or self._scatter[0] is not self.result:
            self._scatter = (self.result, SearchPicture(self.result))
        picture = self._scatter[1]
        self.picture.value = picture.png(self.selected if self.selected >= 0 else None)
        self._pixels = picture.points
        self.render_seconds = time.perf_counter() - start

    def _on_click_event(self, event: dict[str, Any]) -> None:
        x, y = event.get("dataX"), event.get("dataY")
        if x is not None and y is not None:
            self.click(float(x), float(y))
