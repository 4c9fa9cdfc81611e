"""``GridView``: a rank-grid picture you can point at, with a side card, a hover line and zoom controls.

The picture is the PNG of a ``viz.GridPicture`` in an ipywidgets ``Image``; ipyevents reports clicks and mouse
moves on it in the image's own pixels (whatever size the browser shows it at), and the picture's
``GridGeometry`` turns them into ranks. Everything the browser does goes through ``click``, ``double_click`` and
``hover_at`` (pixel coordinates), so Python code and tests drive the same path without a browser.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from ipyevents import Event

from ..layout import Layout
from ..viz import DETAIL_LIMIT, GridGeometry, GridPicture
from ..viz.aggregate import unit_name, unit_size

HOVER_WAIT_MS = 80
"""Mouse moves reach the kernel at most once per this many milliseconds."""


def detail_window(layout: Layout, rank: int) -> tuple[int, int]:
    """The ranks a double-click on ``rank`` zooms to: whole nodes around it, at most ``DETAIL_LIMIT`` ranks."""
    local, world = layout.local_world_size, layout.world_size
    width = (DETAIL_LIMIT // local) * local if local <= DETAIL_LIMIT else DETAIL_LIMIT
    start = (rank // width) * width
    return start, min(world, start + width)


class GridView:
    """The picture (``picture``, inside ``box``), the card beside it (``card``), a hover line (``hover``) and
    the zoom bar (``zoom``, a range of cells of the whole-world picture, and ``whole``); ``widget`` holds them.

    ``on_select(rank or None)`` is called on a click (the first rank of an aggregated cell; None off the cells),
    ``on_zoom((start, stop) or None)`` when the zoom changes, ``describe(ranks)`` gives the hover text of a cell.
    """

    def __init__(
        self,
        on_select: Callable[[int | None], None],
        on_zoom: Callable[[tuple[int, int] | None], None],
        describe: Callable[[range], str],
    ):
        self.on_select, self.on_zoom, self.describe = on_select, on_zoom, describe
        self.picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.picture.add_class("fdl-grid-picture")
        self.box = widgets.Box([self.picture], layout=widgets.Layout(flex="0 1 auto", min_width="0"))
        self.card = widgets.HTML(layout=widgets.Layout(width="370px", flex="0 0 auto", margin="0 0 0 12px"))
        self.card.add_class("fdl-rank-card")
        self.hover = widgets.HTML("&nbsp;", layout=widgets.Layout(min_height="1.6em")).add_class("fdl-grid-hover")
        self.zoom = widgets.IntRangeSlider(
            value=(0, 0), min=0, max=0, description="nodes", continuous_update=False,
            layout=widgets.Layout(width="460px"), style={"description_width": "initial"},
        )  # fmt: skip
        self.zoom.add_class("fdl-grid-zoom")
        self.whole = widgets.Button(description="whole world", icon="search-minus", layout=widgets.Layout(width="auto"))
        self.whole.add_class("fdl-grid-whole")
        self.zoom_bar = widgets.HBox([self.zoom, self.whole], layout=widgets.Layout(display="none"))
        body = widgets.HBox(
            [self.box, self.card], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")
        )
        self.widget = widgets.VBox([self.zoom_bar, self.hover, body])
        self.clicks = Event(source=self.picture, watched_events=["click", "dblclick"], prevent_default_action=True)
        self.moves = Event(
            source=self.picture, watched_events=["mousemove", "mouseleave"], wait=HOVER_WAIT_MS,
            throttle_or_debounce="throttle",
        )  # fmt: skip
        self.clicks.on_dom_event(self._on_click_event)
        self.moves.on_dom_event(self._on_move_event)
        self.zoom.observe(self._on_zoom_slider, names="value")
        self.whole.on_click(lambda _: self.on_zoom(None))
        self.geometry: GridGeometry | None = None
        self.layout: Layout | None = None
        self._per_cell = 1
        self._busy = False

    # ------------------------------------------------------------------ showing
    def show(self, picture: GridPicture | None, png: bytes | None = None) -> None:
        """Show ``picture`` (its PNG unless ``png`` is given); None keeps the pixels but nothing is clickable."""
        self.geometry = picture.geometry if picture is not None else None
        data = png if png is not None else picture.png() if picture is not None else None
        if data is not None:
            self.picture.value = data

    def set_world(self, layout: Layout | None, shown: tuple[int, int] | None) -> None:
        """Offer zoom for ``layout`` when it is too big for one cell per rank; ``shown`` is the zoomed range."""
        self.layout = layout
        if layout is None or layout.world_size <= DETAIL_LIMIT:
            self.zoom_bar.layout.display = "none"
            return
        world = layout.world_size
        self._per_cell = per_cell = unit_size(layout, 0, world)
        what = unit_name(layout, per_cell)
        start, stop = shown if shown is not None else (0, world)
        self._busy = True
        try:
            self.zoom.max = world // per_cell - 1
            self.zoom.value = (start // per_cell, max(start // per_cell, -(-stop // per_cell) - 1))
            self.zoom.description = "nodes" if what == "node" else f"cells ({what})"
        finally:
            self._busy = False
        self.whole.disabled = shown is None
        self.zoom_bar.layout.display = "flex"

    # ------------------------------------------------------------------ pointing
    def ranks_at(self, x: float, y: float) -> range | None:
        """The ranks of the cell under pixel (x, y) of the picture shown (None off the cells)."""
        return None if self.geometry is None else self.geometry.ranks_at(x, y)

    def click(self, x: float, y: float) -> int | None:
        """A click at pixel (x, y): select the rank there (the first rank of an aggregated cell); returns it."""
        ranks = self.ranks_at(x, y)
        rank = None if ranks is None else ranks.start
        self.on_select(rank)
        return rank

    def double_click(self, x: float, y: float) -> tuple[int, int] | None:
        """A double-click at pixel (x, y): on a cell of several ranks, zoom to one rank per cell around it."""
        ranks = self.ranks_at(x, y)
        if ranks is None or self.layout is None or self.geometry is None or not self.geometry.aggregated:
            return None
        window = detail_window(self.layout, ranks.start)
        self.on_zoom(window)
        return window

    def hover_at(self, x: float | None, y: float | None) -> str:
        """The mouse is at pixel (x, y) (None: it left the picture): say what is under it; returns the text."""
        ranks = None if x is None or y is None else self.ranks_at(x, y)
        text = self.describe(ranks) if ranks is not None else ""
        self.hover.value = html.escape(text) if text else "&nbsp;"
        return text

    # ------------------------------------------------------------------ events
    def _on_click_event(self, event: dict[str, Any]) -> None:
        x, y = event.get("dataX"), event.get("dataY")
        if x is None or y is None:
            return
        if event.get("type") == "dblclick":
            self.double_click(float(x), float(y))
        else:
            self.click(float(x), float(y))

    def _on_move_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "mouseleave":
            self.hover_at(None, None)
            return
        x, y = event.get("dataX"), event.get("dataY")
        if x is not None and y is not None:
            self.hover_at(float(x), float(y))

    def _on_zoom_slider(self, change: dict) -> None:
        if self._busy:
            return
        first, last = change["new"]
        world = self.layout.world_size if self.layout is not None else (last + 1) * self._per_cell
        start, stop = first * self._per_cell, (last + 1) * self._per_cell
        self.on_zoom(None if (start, stop) == (0, world) else (start, stop))
