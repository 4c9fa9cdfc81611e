"""What a layout costs: memory per pipeline stage, the bytes each group moves, and the time of a training step.

``estimate(layout, model, training)`` returns a ``CostReport``; ``compare``, ``schedule`` (``SCHEDULE_KINDS``,
``check_schedule``), ``search``, ``validate`` and ``collective_table`` (the collective model beside published
nccl-tests bus bandwidths) are listed in README.md, "Public API"; the step-time model is
docs/step_time.md. Pure Python and numpy (pandas only when a table is asked for); it reads the layout's real groups.
Every formula cites its source in its module; the memory figures match Megatron-LM's theoretical memory estimator
where that covers the set-up (``tests/cost/crosscheck_megatron_memory.py``).
"""

from __future__ import annotations

from ..formatting import format_bytes
from ..lazy import lazy_attributes
from .accuracy import (
    BREAKDOWN_BY,
    CALIBRATED,
    VALIDATION_COLUMNS,
    calibrate,
    error_breakdown,
    error_summary,
    parallelism_kind,
    predict,
    trust_rows,
    validate,
)
from .communication import COLLECTIVES, COMMUNICATION_COLUMNS, CollectiveRow, bus_factor, nodes_spanned
from .comparison import COMPARE_COLUMNS, compare, compare_reports, heaviest_inter_node_dim, layout_name
from .compute import COMPONENTS, chunk_parameters, layer_times, stage_components
from .cost_report import TIME_COLUMNS, CostReport, estimate
from .efficiency import DEFAULT_EFFICIENCY, Efficiency
from .engines import BAND_ENGINES, DEFAULT_ENGINE, ENGINE_TRAITS, ENGINES, EngineTraits, band_engines, check_engine
from .hardware import HARDWARE_PRESETS, SUSTAINED, Hardware
from .links import collective_seconds, message_seconds, nccl_choice
from .memory import MEMORY_COLUMNS, stage_memory
from .model import PRESETS, VOCAB_PADDING, Transformer
from .overlap import block_exposure
from .published import PUBLISHED_RUNS, PublishedRun, narayanan_flops
from .published_collectives import COLLECTIVE_MEASUREMENTS, CollectiveMeasurement, collective_table
from .published_comparisons import (
    PUBLISHED_COMPARISONS,
    RANKING_COLUMNS,
    PublishedComparison,
    validate_rankings,
)
from .published_held_out import HELD_OUT_RUNS
from .published_moe import PUBLISHED_MOE_RUNS
from .ranking import (
    EXPERT_COLUMNS,
    EXPERT_LEGEND,
    RANKED_COLUMNS,
    RANKED_LEGEND,
    RANKED_ROWS,
    TOKENS_LEGEND,
    TRUST_LEGEND,
    ranked_columns,
    ranked_legend,
    ranked_lines,
    search_summary,
)
from .schedule_kinds import SCHEDULE_KINDS, SCHEDULES, ScheduleKind, check_schedule, schedule_kind
from .schedules import ACTION_KINDS, Action, PipelineSchedule, schedule, stage_counts
from .search import LIMITS, SETUP_COLUMNS, LayoutSearch, divisors, search
from .setups import Setups, chunk_layers, placement
from .step import (
    BREAKDOWN,
    BREAKDOWN_COLUMNS,
    STEP_COLUMNS,
    StepTime,
    action_components,
    link_seconds,
    lower_bound,
    model_flops,
    rank_tails,
    step_columns,
)
from .timeline import TableGraph, Timeline, run, table_graph
from .training import RECOMPUTE, Training
from .trust import (
    BAND_FLOOR,
    KIND_DIMS,
    NEAREST,
    SCALE_REACH,
    SEQUENCE_REACH,
    TRUST_COLUMNS,
    TRUST_RUNS,
    ErrorBand,
    TrustRun,
    band_for,
    frame_bands,
    kind_codes,
    mfu_ceiling,
    mfu_flagged,
    outside_reason,
    setup_kind,
)

__all__ = [
    "ACTION_KINDS",
    "BAND_ENGINES",
    "BAND_FLOOR",
    "BREAKDOWN",
    "BREAKDOWN_BY",
    "BREAKDOWN_COLUMNS",
    "CALIBRATED",
    "COLLECTIVES",
    "COLLECTIVE_MEASUREMENTS",
    "COMMUNICATION_COLUMNS",
    "COMPARE_COLUMNS",
    "COMPONENTS",
    "DEFAULT_EFFICIENCY",
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENGINE_TRAITS",
    "EXPERT_COLUMNS",
    "EXPERT_LEGEND",
    "HARDWARE_PRESETS",
    "HELD_OUT_RUNS",
    "KIND_DIMS",
    "LIMITS",
    "MEMORY_COLUMNS",
    "NEAREST",
    "PRESETS",
    "PUBLISHED_COMPARISONS",
    "PUBLISHED_MOE_RUNS",
    "PUBLISHED_RUNS",
    "RANKED_COLUMNS",
    "RANKED_LEGEND",
    "RANKED_ROWS",
    "RANKING_COLUMNS",
    "RECOMPUTE",
    "SCALE_REACH",
    "SEQUENCE_REACH",
    "SCHEDULES",
    "SCHEDULE_KINDS",
    "SETUP_COLUMNS",
    "STEP_COLUMNS",
    "SUSTAINED",
    "TIME_COLUMNS",
    "TOKENS_LEGEND",
    "TRUST_COLUMNS",
    "TRUST_LEGEND",
    "TRUST_RUNS",
    "VALIDATION_COLUMNS",
    "VOCAB_PADDING",
    "Action",
    "CollectiveMeasurement",
    "CollectiveRow",
    "CostReport",
    "Efficiency",
    "EngineTraits",
    "ErrorBand",
    "Hardware",
    "LayoutSearch",
    "PipelineSchedule",
    "PublishedComparison",
    "PublishedRun",
    "ScheduleKind",
    "Setups",
    "StepTime",
    "TableGraph",
    "Timeline",
    "Training",
    "Transformer",
    "TrustRun",
    "action_components",
    "band_engines",
    "band_for",
    "block_exposure",
    "bus_factor",
    "calibrate",
    "check_engine",
    "check_schedule",
    "chunk_layers",
    "chunk_parameters",
    "collective_seconds",
    "collective_table",
    "compare",
    "compare_reports",
    "divisors",
    "error_breakdown",
    "error_summary",
    "estimate",
    "format_bytes",
    "frame_bands",
    "heaviest_inter_node_dim",
    "kind_codes",
    "layer_times",
    "layout_name",
    "link_seconds",
    "lower_bound",
    "message_seconds",
    "mfu_ceiling",
    "mfu_flagged",
    "outside_reason",
    "model_flops",
    "narayanan_flops",
    "nccl_choice",
    "nodes_spanned",
    "parallelism_kind",
    "placement",
    "predict",
    "rank_tails",
    "ranked_columns",
    "ranked_legend",
    "ranked_lines",
    "run",
    "schedule",
    "schedule_kind",
    "search",
    "search_summary",
    "setup_kind",
    "stage_components",
    "stage_counts",
    "stage_memory",
    "step_columns",
    "table_graph",
    "trust_rows",
    "validate",
    "validate_rankings",
]

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
