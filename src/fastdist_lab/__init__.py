"""fastdist_lab: see, check and compare the parallel layouts of large-model training.

Layout math (``config``, ``layout``, ``seeds``) is imported eagerly and never touches torch; everything
heavier (the process-group runtime, pictures, widgets) is imported on first use of its name.
"""

from __future__ import annotations

import importlib
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
from .seeds import generator_seeds

__version__ = "0.1.0"

# Public names served lazily: name -> module that defines it.
_LAZY: dict[str, str] = {
    # process-group runtime (imports torch)
    "LocalCluster": ".runtime",
    "ClusterError": ".runtime",
    "ClusterTimeout": ".runtime",
    "RankResults": ".runtime",
    "Verification": ".runtime",
    "load_report": ".runtime",
    # generator streams
    "StreamReport": ".streams",
    # pictures (matplotlib)
    "plot_layout": ".viz",
    "plot_dims": ".viz",
    # widgets (ipywidgets)
    "LayoutPanel": ".widgets",
    "ClusterPanel": ".widgets",
    "StreamsPanel": ".widgets",
    "lab": ".widgets",
    # other frameworks' rank conventions
    "Megatron": ".conventions",
    "DeviceMesh": ".conventions",
    "equivalent": ".conventions",
    "MegatronParallelState": ".conventions",
    "torchtitan": ".conventions",
    "load_config": ".conventions",
    "LoadedConfig": ".conventions",
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
