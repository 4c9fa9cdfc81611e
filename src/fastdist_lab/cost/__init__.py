"""What a layout costs: memory per pipeline stage and the bytes each group moves in one training step.

``estimate(layout, model, training)`` returns a ``CostReport``: ``.memory`` (one row per stage),
``.most_loaded``, ``.communication`` (one row per (dim, collective)) and ``.time(hardware)``;
``compare(layout_a, layout_b, model=...)`` sets the headline figures of several layouts side by side.
Pure Python and numpy (pandas only when a table is asked for); it reads the layout's real groups.
Every formula cites its source in ``memory`` and ``communication``; the figures match Megatron-LM's
theoretical memory estimator where that covers the set-up (``tests/cost/crosscheck_megatron_memory.py``).
"""

from __future__ import annotations

from .communication import COLLECTIVES, COMMUNICATION_COLUMNS, CollectiveRow, bus_factor, nodes_spanned
from .comparison import COMPARE_COLUMNS, compare, compare_reports, heaviest_inter_node_dim, layout_name
from .cost_report import TIME_COLUMNS, CostReport, estimate, format_bytes
from .hardware import HARDWARE_PRESETS, Hardware
from .memory import MEMORY_COLUMNS
from .model import PRESETS, VOCAB_PADDING, Transformer
from .training import RECOMPUTE, Training

__all__ = [
    "COLLECTIVES",
    "COMMUNICATION_COLUMNS",
    "COMPARE_COLUMNS",
    "HARDWARE_PRESETS",
    "MEMORY_COLUMNS",
    "PRESETS",
    "RECOMPUTE",
    "TIME_COLUMNS",
    "VOCAB_PADDING",
    "CollectiveRow",
    "CostReport",
    "Hardware",
    "Training",
    "Transformer",
    "bus_factor",
    "compare",
    "compare_reports",
    "estimate",
    "format_bytes",
    "heaviest_inter_node_dim",
    "layout_name",
    "nodes_spanned",
]
