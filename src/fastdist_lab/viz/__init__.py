"""Pictures: matplotlib ``Figure`` objects, never pyplot, that show themselves in a notebook (``InlineFigure``;
a ``GridPicture`` does too), with one palette (``viz.colors``). What they draw and how the rank grids are composed
pixel by pixel is ARCHITECTURE.md, "Viz"; the names, README.md, "Public API".
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .convention_pictures import plot_conventions, plot_seed_sharing
from .cost_pictures import plot_cost, plot_cost_comparison, plot_memory, plot_traffic
from .grid import plot_dims
from .layout_picture import grid_picture, plot_layout
from .marks import stream_marks, training_marks, verdict_marks
from .notebook import layout_html
from .picture import DETAIL_LIMIT, GridGeometry, GridPicture, Marks
from .pipeline_schedule import plot_schedule, schedule_times
from .render import InlineFigure, to_pixels, to_png
from .search_pictures import SearchPicture, plot_search, point_pixels
from .stream_pictures import plot_sharing, plot_streams, stream_picture

__all__ = [
    "DETAIL_LIMIT",
    "GridGeometry",
    "GridPicture",
    "InlineFigure",
    "Marks",
    "SearchPicture",
    "grid_picture",
    "layout_html",
    "plot_cost",
    "plot_cost_comparison",
    "plot_conventions",
    "plot_dims",
    "plot_layout",
    "plot_memory",
    "plot_schedule",
    "plot_search",
    "plot_seed_sharing",
    "plot_sharing",
    "plot_streams",
    "schedule_times",
    "stream_marks",
    "stream_picture",
    "plot_traffic",
    "point_pixels",
    "to_pixels",
    "to_png",
    "training_marks",
    "verdict_marks",
]

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
