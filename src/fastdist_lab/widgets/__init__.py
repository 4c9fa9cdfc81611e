"""ipywidgets panels (pure Python, no front-end build).

``LayoutPanel``, ``ClusterPanel``, ``StreamsPanel`` and ``lab()`` (the three linked in one widget).
"""

from __future__ import annotations

from .app import Lab, lab
from .cluster_panel import ClusterPanel
from .layout_panel import LayoutPanel
from .streams_panel import StreamsPanel

__all__ = ["ClusterPanel", "Lab", "LayoutPanel", "StreamsPanel", "lab"]
