"""Pictures of layouts (matplotlib ``Figure``s, never pyplot): rank grids and per-dim small multiples."""

from __future__ import annotations

from .grid import plot_dims, plot_layout
from .render import to_pixels, to_png
from .streams import plot_sharing, plot_streams  # noqa: F401  (stream pictures, re-exported)

__all__ = ["plot_layout", "plot_dims", "to_png", "to_pixels"]
