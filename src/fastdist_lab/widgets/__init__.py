"""ipywidgets panels (pure Python, no front-end build).

``LayoutPanel``, ``ClusterPanel``, ``StreamsPanel``, ``CostPanel`` and ``lab()`` (all linked in one widget).
"""

from __future__ import annotations

from .app import Lab, lab
from .cluster_panel import ClusterPanel
from .cost_panel import CostPanel
from .layout_panel import LayoutPanel
from .streams_panel import StreamsPanel

__all__ = ["ClusterPanel", "CostPanel", "Lab", "LayoutPanel", "StreamsPanel", "lab"]
