"""Pictures (matplotlib ``Figure`` objects, never pyplot): rank grids, per-dim small multiples, generator streams,
conventions side by side, and the notebook display of a ``Layout``. One palette for all (``viz.colors``)."""

from __future__ import annotations

from .conventions import plot_conventions, plot_seed_sharing
from .grid import plot_dims, plot_layout
from .notebook import layout_html
from .render import to_pixels, to_png
from .streams import plot_sharing, plot_streams

__all__ = [
    "layout_html",
    "plot_conventions",
    "plot_dims",
    "plot_layout",
    "plot_seed_sharing",
    "plot_sharing",
    "plot_streams",
    "to_pixels",
    "to_png",
]
