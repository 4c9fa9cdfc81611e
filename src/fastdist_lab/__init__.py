"""fastdist_lab: see, check and compare the parallel layouts of large-model training.

The numbering and seeds are those of ServiceNow's Fast-LLM (``fast_llm/engine/distributed``, commit 91b28fab).
Layout math (``config``, ``layout``, ``seeds``, ``numbering``) is imported eagerly and never touches torch;
everything heavier (the process-group runtime, pictures, widgets) is imported on first use of its name.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .config import (
    MAX_SEED,
    DistributedBackend,
    DistributedConfig,
    DistributedDim,
    DistributedDimNames,
    LayoutError,
    PhaseType,
)
from .layout import Layout
from .numbering import RankGrid
from .seeds import generator_seeds

__version__ = "0.1.0"

# Public names served lazily: name -> module that defines it.
_LAZY: dict[str, str] = {
    # process-group runtime (imports torch)
    "LocalCluster": ".runtime",
    "SimulatedCluster": ".runtime",
    "open_cluster": ".runtime",
    "CLUSTER_MODES": ".runtime",
    "CapacityError": ".runtime",
    "InProcessUnavailable": ".runtime",
    "ClusterError": ".runtime",
    "ClusterTimeout": ".runtime",
    "BackendUnavailable": ".runtime",
    "RankResults": ".runtime",
    "Verification": ".runtime",
    "load_report": ".runtime",
    # generator streams
    "StreamReport": ".streams",
    # checks that drive a running cluster
    "check_layout": ".checks",
    "LayoutCheck": ".checks",
    "device_mesh_check": ".checks",
    # pictures (matplotlib)
    "plot_layout": ".viz",
    "grid_picture": ".viz",
    "plot_dims": ".viz",
    "plot_streams": ".viz",
    "plot_sharing": ".viz",
    "plot_conventions": ".viz",
    "plot_seed_sharing": ".viz",
    "plot_cost": ".viz",
    "plot_cost_comparison": ".viz",
    # widgets (ipywidgets)
    "LayoutPanel": ".widgets",
    "ClusterPanel": ".widgets",
    "StreamsPanel": ".widgets",
    "CostPanel": ".widgets",
    "lab": ".widgets",
    "ConfigLoad": ".widgets",
    # other frameworks' rank conventions
    "Megatron": ".conventions",
    "DeviceMesh": ".conventions",
    "equivalent": ".conventions",
    # what a layout costs (memory per stage, bytes per group per step)
    "Transformer": ".cost",
    "Training": ".cost",
    "Hardware": ".cost",
    "estimate": ".cost",
    "compare": ".cost",
    "CostReport": ".cost",
    "CostError": ".cost",
    "MegatronParallelState": ".conventions",
    "torchtitan": ".conventions",
    "load_config": ".conventions",
    "LoadedConfig": ".conventions",
    "WorldSizeNeeded": ".fastllm",
}

__all__ = [
    "MAX_SEED",
    "DistributedBackend",
    "DistributedConfig",
    "DistributedDim",
    "DistributedDimNames",
    "Layout",
    "LayoutError",
    "PhaseType",
    "RankGrid",
    "generator_seeds",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fastdist_lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _layout_html(layout: Layout) -> str:
    from .viz import layout_html  # matplotlib is imported on the first display, not with the package

    return layout_html(layout)


def _register_notebook_display() -> None:
    """Inside a running IPython (a notebook), show a ``Layout`` with its rank grid (drawn by ``viz``)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if formatters and "text/html" in formatters:
        formatters["text/html"].for_type(Layout, _layout_html)


_register_notebook_display()
