"""Pictures (matplotlib ``Figure`` objects, never pyplot): rank grids, per-dim small multiples, generator streams,
conventions side by side, what a layout costs (memory per stage, inter-node traffic), and the notebook display
of a ``Layout``. One palette for all (``viz.colors``)."""

from __future__ import annotations

from .conventions import plot_conventions, plot_seed_sharing
from .cost import plot_cost, plot_cost_comparison, plot_memory, plot_traffic
from .grid import plot_dims, plot_layout
from .notebook import layout_html
from .render import to_pixels, to_png
from .streams import plot_sharing, plot_streams

__all__ = [
    "layout_html",
    "plot_cost",
    "plot_cost_comparison",
    "plot_conventions",
    "plot_dims",
    "plot_layout",
    "plot_memory",
    "plot_seed_sharing",
    "plot_sharing",
    "plot_streams",
    "plot_traffic",
    "to_pixels",
    "to_png",
]
