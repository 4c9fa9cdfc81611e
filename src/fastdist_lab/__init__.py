"""fastdist_lab: see, check and compare the parallel layouts of large-model training.

The numbering and seeds are those of ServiceNow's Fast-LLM (``fast_llm/engine/distributed``, commit 91b28fab).
The top level holds what a notebook needs; the rest lives in subpackages: ``fastdist_lab.errors`` (every exception),
``viz`` (pictures as free functions), ``conventions``, ``streams``, ``setup`` (the vocabulary of a training set-up),
``cost``, ``runtime``, ``checks``, ``widgets``, ``exercises`` (the course's self-checking exercises).
Layout math is imported eagerly and never touches torch; the runtime, pictures and widgets are imported on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .config import DistributedConfig, PhaseType
from .errors import ClusterError, LayoutError
from .layout import Layout
from .lazy import SUCCESSORS, lazy_attributes
from .numbering import RankGrid
from .painters import PAINTERS

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "LocalCluster": ".runtime",
    "SimulatedCluster": ".runtime",
    "open_cluster": ".runtime",
    "check_layout": ".checks",
    "check_training": ".checks",
    "load_config": ".conventions",
    "lab": ".widgets",
    "estimate": ".cost",
    "compare": ".cost",
    "Transformer": ".setup",
    "Training": ".setup",
    "Hardware": ".setup",
    "search": ".cost",
}
"""Public names imported on first use (they import torch, matplotlib or ipywidgets), and their modules."""

__all__ = [
    "ClusterError",
    "DistributedConfig",
    "Layout",
    "LayoutError",
    "PhaseType",
    "RankGrid",
    "__version__",
    *_LAZY,
]

_SUBPACKAGES = ("errors", "viz", "conventions", "streams", "setup", "cost", "runtime", "checks", "widgets", "exercises")
"""The public subpackages (and ``errors``), imported when first read as attributes of the root."""

_MOVED: dict[str, tuple[str, ...]] = {
    ".config": ("MAX_SEED", "DistributedBackend", "DistributedDim", "DistributedDimNames"),
    ".seeds": ("generator_seeds",),
    ".errors": (
        "CapacityError",
        "InProcessUnavailable",
        "ClusterTimeout",
        "BackendUnavailable",
        "CostError",
        "WorldSizeNeeded",
    ),  # fmt: skip
    ".runtime": ("CLUSTER_MODES", "RankResults", "Verification", "load_report"),
    ".streams": ("StreamReport",),
    ".checks": ("LayoutCheck", "device_mesh_check"),
    ".viz": (
        "plot_layout",
        "grid_picture",
        "plot_dims",
        "plot_streams",
        "plot_sharing",
        "plot_conventions",
        "plot_seed_sharing",
        "plot_cost",
        "plot_cost_comparison",
    ),  # fmt: skip
    ".widgets": ("LayoutPanel", "ClusterPanel", "StreamsPanel", "CostPanel", "ConfigLoad"),
    ".conventions": ("Megatron", "DeviceMesh", "equivalent", "MegatronParallelState", "torchtitan", "LoadedConfig"),
    ".cost": ("CostReport",),
}
"""Names the top level held before it kept to what a notebook needs, by the module that holds them now: they still
work, with a ``DeprecationWarning`` naming the new spelling, for one release."""

_METHODS = {
    "plot_layout": "layout.plot(...)",
    "plot_dims": "layout.plot_dims()",
    "plot_streams": "report.plot()",
    "plot_sharing": "report.plot(generator)",
    "plot_cost": "report.plot()",
}

__getattr__, __dir__ = lazy_attributes(
    __name__,
    _LAZY,
    __all__,
    submodules=_SUBPACKAGES,
    deprecated={
        name: (module, f"fastdist_lab{module}.{name}" + (f" or {_METHODS[name]}" if name in _METHODS else ""))
        for module, names in _MOVED.items()
        for name in names
    },
)


def _painter(name: str) -> Callable[..., Any]:
    """A painter that imports ``fastdist_lab.viz`` (and matplotlib) only when it draws."""

    def draw(*args: Any, **kwargs: Any) -> Any:
        from . import viz

        return getattr(viz, name)(*args, **kwargs)

    return draw


PAINTERS.update(
    layout=_painter("plot_layout"),
    dims=_painter("plot_dims"),
    streams=_painter("plot_streams"),
    sharing=_painter("plot_sharing"),
    cost=_painter("plot_cost"),
)


def _checks_name(name: str) -> Callable[[], Any]:
    """What loads ``fastdist_lab.checks.<name>`` for a lower layer's deprecated spelling (``lazy.SUCCESSORS``)."""

    def load() -> Any:
        from . import checks

        return getattr(checks, name)

    return load


SUCCESSORS.update(
    {
        f"fastdist_lab.checks.{name}": _checks_name(name)
        for name in ("draw_streams", "compare_streams", "replay", "bandwidth")
    }
)


def _register_notebook_display() -> None:
    """Inside a running IPython (a notebook), show a ``Layout`` with its rank grid (drawn by ``viz``)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if formatters and "text/html" in formatters:
        formatters["text/html"].for_type(Layout, _painter("layout_html"))


_register_notebook_display()
