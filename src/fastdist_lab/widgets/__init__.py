"""ipywidgets panels (pure Python, no front-end build).

``LayoutPanel``, ``ClusterPanel``, ``StreamsPanel``, ``CostPanel``, ``AdvisorPanel`` and ``lab()`` (all linked in one
widget);
``ConfigLoad`` is what ``LayoutPanel.load_config`` (the *paste a config* box) did.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .advisor_panel import AdvisorPanel
from .app import Lab, lab
from .cluster_panel import ClusterPanel
from .config_box import ConfigLoad
from .cost_panel import CostPanel
from .layout_panel import LayoutPanel
from .streams_panel import StreamsPanel

__all__ = ["AdvisorPanel", "ClusterPanel", "ConfigLoad", "CostPanel", "Lab", "LayoutPanel", "StreamsPanel", "lab"]

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
