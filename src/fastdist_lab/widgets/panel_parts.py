"""Shared helpers of the panels: a debouncer, factor dropdowns and HTML tables."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ipywidgets as widgets
import traitlets
from traitlets import TraitError, validate

from ..layout import Layout
from ..validation import check_int


class Panel(traitlets.HasTraits):
    """A panel: Python state (traits other panels can observe) plus ``widget``, the ipywidgets box shown.

    Displaying a panel displays its widget; ``repr`` stays short and deterministic.
    """

    _busy = False  # while True, the panel's observers leave alone what its own code changes (``_quiet``)

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.widget = widgets.VBox()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle

    def follow(self, **sources: Any) -> None:
        """Set traits from ``sources`` (``layout=``, ``cluster=``): a value is taken as it is; a panel is followed, its
        trait of that name observed, so that this panel's changes with it (the lab links its panels this way)."""
        for name, source in sources.items():
            if isinstance(source, Panel):
                source.observe(lambda change, name=name: setattr(self, name, change["new"]), names=name)
                source = getattr(source, name)
            setattr(self, name, source)

    def add_class(self, name: str) -> Panel:
        """Add a CSS class to the panel's widget."""
        self.widget.add_class(name)
        return self

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        self._busy = True
        try:
            yield
        finally:
            self._busy = False


class ClusterFollower(Panel):
    """A panel that follows a layout and a cluster (``follow``) and runs something on that cluster: the traits, the
    status line (``status``; ``error`` holds the last problem), the debounced redraw (``_redraw``) and the button
    (``_cluster_button``) enabled while a cluster runs. The cost and streams panels are ones."""

    layout = traitlets.Instance(Layout, allow_none=True)
    cluster = traitlets.Any(None, allow_none=True)
    error = traitlets.Unicode("")
    status: widgets.HTML
    _redraw: Debouncer
    _cluster_button: widgets.Button

    def flush(self) -> None:
        """Draw a pending redraw now."""
        self._redraw.flush()

    def _say(self, text: str, error: bool = False) -> None:
        self.error = text if error else ""
        self.status.value = error_html(text) if error else html.escape(text)

    def _refresh_button(self) -> None:
        # Enabled while a cluster runs: the run itself says when the cluster runs another layout (an Apply in the
        # cluster panel changes that without telling this panel).
        self._cluster_button.disabled = self.cluster is None or not getattr(self.cluster, "running", False)

    def _cluster_runs_layout(self) -> bool:
        """Whether the followed cluster runs, with this panel's layout applied; else the status line says why not."""
        cluster, layout = self.cluster, self.layout
        if cluster is None or not getattr(cluster, "running", False):
            self._say("no running cluster: start one in the cluster panel first", error=True)
            return False
        if layout is None or cluster.layout != layout:
            self._say("the cluster runs another layout: Apply this layout in the cluster panel first", error=True)
            return False
        return True


def number_box(value: float, description: str, width: str, css: str = "", kind: type = widgets.BoundedIntText,
               **options: Any) -> Any:  # fmt: skip
    """A number box (``kind``, ``options`` such as ``min`` and ``max`` to it) whose value changes on Enter or when it
    loses focus, its description in full, ``width`` wide, with the CSS class ``css`` when one is given."""
    box = kind(value=value, description=description, continuous_update=False, style={"description_width": "initial"},
               layout=widgets.Layout(width=width), **options)  # fmt: skip
    return box.add_class(css) if css else box


def network_box(css: str = "") -> Any:
    """The network bandwidth per GPU between nodes (GB/s at line rate) a panel prices on, 0 for the hardware
    preset's own (``Hardware.with_network``; the CLI's ``--inter-node-GBps``)."""
    box = number_box(0.0, "network GB/s per GPU (0: preset's)", "340px", css, widgets.BoundedFloatText, min=0.0,
                     max=1e4, step=0.5)  # fmt: skip
    box.tooltip = "Hardware.with_network: a cluster's own network, e.g. what NCCL measured on it"
    return box


class FactorDropdown(widgets.Dropdown):
    """A ``Dropdown`` of positive integers that offers the values that can be valid.

    Assigning a positive integer that is not offered (from Python) adds it to the options, so that the panel
    can report why the combination is impossible instead of raising a ``TraitError``. ``default_label``, when
    given, is the label of the value 0, offered for "the default" (the expert-tensor size's ``= tensor``).
    """

    def __init__(self, default_label: str = "", **kwargs: Any):
        self.default_label = default_label
        super().__init__(**kwargs)

    def label_of(self, value: int) -> str:
        """The option label of ``value``: the number, or ``default_label`` for 0 when there is one."""
        return self.default_label if value == 0 and self.default_label else str(value)

    def offer(self, values: Iterable[int]) -> None:
        """Replace the options by ``values`` (plus the current value), keeping the current value selected."""
        current = self.value
        options = sorted(set(values) | ({current} if current is not None else set()))
        if tuple(options) == tuple(self._options_values):
            return
        self._set_options_keep(options)
        if current is not None:
            self.value = current

    def _set_options_keep(self, options: Sequence[int]) -> None:
        previous = getattr(self, "_initializing_traits_", False)
        self._initializing_traits_ = True  # do not let ipywidgets reset the selection to the first option
        try:
            self.options = [(self.label_of(v), v) for v in options]
        finally:
            self._initializing_traits_ = previous
        if self.value is not None and self.value in self._options_values:
            index = self._options_values.index(self.value)
            if self.index != index:
                self.index = index
            self.label = self._options_labels[index]

    @validate("value")
    def _validate_value(self, proposal: Any) -> Any:
        value = proposal.value
        if value is not None and value not in self._options_values:
            check_int(self.description or "value", value, minimum=1, error=TraitError)
            self._set_options_keep(sorted({*self._options_values, value}))
        return super()._validate_value(proposal)


class Debouncer:
    """Call ``fn`` once after changes settle: ``delay`` seconds later inside a running asyncio loop (a kernel),
    at once otherwise (plain Python, tests). ``flush()`` runs a pending call now."""

    def __init__(self, fn: Callable[[], None], delay: float = 0.05):
        self._fn = fn
        self.delay = delay
        self._handle: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> bool:
        """Whether a call is scheduled and has not run yet."""
        return self._handle is not None

    def schedule(self) -> None:
        """Ask for a call: deferred (and coalesced) in a running loop, immediate otherwise."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self.cancel()
        if loop is None or self.delay <= 0:
            self._fn()
            return
        self._handle = loop.call_later(self.delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._fn()

    def cancel(self) -> None:
        """Drop the pending call, if any."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def flush(self) -> None:
        """Run the pending call now (no-op when nothing is pending)."""
        if self._handle is not None:
            self.cancel()
            self._fn()


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], css_class: str = "fdl-table") -> str:
    """A plain HTML ``<table>`` with a ``<thead>`` and one ``<tr>`` per row inside ``<tbody>`` (text escaped)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table class='{css_class}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def frame_table(frame: Any, css_class: str = "fdl-table", index: bool = False) -> str:
    """A pandas DataFrame as ``html_table`` (index as first column when ``index``)."""
    columns = ([frame.index.name or ""] if index else []) + list(frame.columns)
    return html_table(columns, frame.itertuples(index=index, name=None), css_class)


def error_html(message: str) -> str:
    """The HTML of an error line (red, text escaped); empty for an empty message."""
    if not message:
        return ""
    return f"<span style='color:#b00020;white-space:pre-wrap'>{html.escape(message)}</span>"


def short_error(error: BaseException, limit: int = 2000) -> str:
    """``Type: message`` of an exception on one readable block, never a traceback."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


TABLE_STYLE = (
    "<style>.fdl-table{border-collapse:collapse;font-size:12px;line-height:1.3}"
    ".fdl-table th,.fdl-table td{border:1px solid #ddd !important;padding:1px 8px !important;"
    "text-align:left !important;vertical-align:top}"
    ".fdl-table th{background:#f3f3f3}.fdl-table tbody tr:nth-child(odd){background:#fafafa}</style>"
)
"""CSS for the panels' tables, included once per HTML widget."""
