"""What a layout costs: memory per pipeline stage, the bytes each group moves, and the time of a training step.

``estimate(layout, model, training)`` returns a ``CostReport``; ``compare``, ``schedule`` (``SCHEDULE_KINDS``,
``check_schedule``), ``search``, ``validate`` and ``collective_table`` (the collective model beside published
nccl-tests bus bandwidths) are listed in README.md, "Public API"; the step-time model is
docs/step_time.md. Pure Python and numpy (pandas only when a table is asked for); it reads the layout's real groups.
Every formula cites its source in its module; the memory figures match Megatron-LM's theoretical memory estimator
where that covers the set-up (``tests/cost/crosscheck_megatron_memory.py``).

Four concepts, apart (ARCHITECTURE.md, "Cost"): the vocabulary of a set-up lives in ``fastdist_lab.setup`` (re-exported
here: ``Training``, ``Transformer``, ``Hardware``, ...); the formulas in ``cost.formulas``, which never read the
evidence; the search in ``cost.search``; the evidence (published runs as package data, the validation, the error
bands) in ``cost.evidence``, served here on first use. The report (``estimate``, ``compare``) and the search attach a
result's error band where they show it.
"""

from __future__ import annotations

from ..formatting import format_bytes
from ..lazy import lazy_attributes, moved_modules
from ..setup import (
    BAND_ENGINES,
    DEFAULT_EFFICIENCY,
    DEFAULT_ENGINE,
    ENGINE_TRAITS,
    ENGINES,
    HARDWARE_PRESETS,
    KIND_DIMS,
    PRESETS,
    RECOMPUTE,
    SCHEDULE_KINDS,
    SCHEDULES,
    SUSTAINED,
    VOCAB_PADDING,
    Efficiency,
    EngineTraits,
    Hardware,
    ScheduleKind,
    Training,
    Transformer,
    band_engines,
    check_engine,
    check_schedule,
    kind_codes,
    schedule_kind,
    setup_kind,
)
from .comparison import COMPARE_COLUMNS, compare, compare_reports, heaviest_inter_node_dim, layout_name
from .cost_report import TIME_COLUMNS, CostReport, estimate
from .evidence.trust import (
    BAND_FLOOR,
    NEAREST,
    SCALE_REACH,
    SEQUENCE_REACH,
    TRUST_COLUMNS,
    ErrorBand,
    TrustRun,
    band_for,
    frame_bands,
    mfu_ceiling,
    mfu_flagged,
    outside_reason,
)
from .formulas.communication import COLLECTIVES, COMMUNICATION_COLUMNS, CollectiveRow, bus_factor, nodes_spanned
from .formulas.compute import COMPONENTS, chunk_parameters, layer_times, stage_components
from .formulas.links import collective_seconds, message_seconds, nccl_choice
from .formulas.memory import MEMORY_COLUMNS, stage_memory
from .formulas.overlap import block_exposure
from .formulas.schedules import ACTION_KINDS, Action, PipelineSchedule, schedule, stage_counts
from .formulas.setup_columns import Setups, chunk_layers, placement
from .formulas.step import (
    BREAKDOWN,
    BREAKDOWN_COLUMNS,
    STEP_COLUMNS,
    action_components,
    link_seconds,
    lower_bound,
    model_flops,
    rank_tails,
    step_columns,
)
from .formulas.timeline import TableGraph, Timeline, run, table_graph
from .search import LIMITS, SETUP_COLUMNS, LayoutSearch, divisors, search
from .search.ranking import (
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
from .step_time import StepTime

_EVIDENCE: dict[str, str] = {
    **dict.fromkeys(
        ("BREAKDOWN_BY", "CALIBRATED", "VALIDATION_COLUMNS", "calibrate", "error_breakdown", "error_summary",
         "predict", "trust_rows", "validate", "parallelism_kind"), ".evidence.accuracy"),
    **dict.fromkeys(("PUBLISHED_RUNS", "HELD_OUT_RUNS", "PUBLISHED_MOE_RUNS"), ".evidence.published"),
    **dict.fromkeys(("PublishedRun", "narayanan_flops"), ".evidence.published_run"),
    **dict.fromkeys(("COLLECTIVE_MEASUREMENTS", "CollectiveMeasurement", "collective_table"),
                    ".evidence.published_collectives"),
    **dict.fromkeys(("PUBLISHED_COMPARISONS", "RANKING_COLUMNS", "PublishedComparison", "validate_rankings"),
                    ".evidence.published_comparisons"),
    "TRUST_RUNS": ".evidence.trust",
}  # fmt: skip
"""The evidence's names, served on first use (importing ``fastdist_lab.cost`` reads no published run).
``parallelism_kind`` is deprecated (it warns when called: ``setup_kind`` is the one classifier) and not listed."""

__all__ = [
    "ACTION_KINDS", "BAND_ENGINES", "BAND_FLOOR", "BREAKDOWN", "BREAKDOWN_BY", "BREAKDOWN_COLUMNS", "CALIBRATED",
    "COLLECTIVES", "COLLECTIVE_MEASUREMENTS", "COMMUNICATION_COLUMNS", "COMPARE_COLUMNS", "COMPONENTS",
    "DEFAULT_EFFICIENCY", "DEFAULT_ENGINE", "ENGINES", "ENGINE_TRAITS", "EXPERT_COLUMNS", "EXPERT_LEGEND",
    "HARDWARE_PRESETS", "HELD_OUT_RUNS", "KIND_DIMS", "LIMITS", "MEMORY_COLUMNS", "NEAREST", "PRESETS",
    "PUBLISHED_COMPARISONS", "PUBLISHED_MOE_RUNS", "PUBLISHED_RUNS", "RANKED_COLUMNS", "RANKED_LEGEND",
    "RANKED_ROWS", "RANKING_COLUMNS", "RECOMPUTE", "SCALE_REACH", "SEQUENCE_REACH", "SCHEDULES", "SCHEDULE_KINDS",
    "SETUP_COLUMNS", "STEP_COLUMNS", "SUSTAINED", "TIME_COLUMNS", "TOKENS_LEGEND", "TRUST_COLUMNS", "TRUST_LEGEND",
    "TRUST_RUNS", "VALIDATION_COLUMNS", "VOCAB_PADDING", "Action", "CollectiveMeasurement", "CollectiveRow",
    "CostReport", "Efficiency", "EngineTraits", "ErrorBand", "Hardware", "LayoutSearch", "PipelineSchedule",
    "PublishedComparison", "PublishedRun", "ScheduleKind", "Setups", "StepTime", "TableGraph", "Timeline",
    "Training", "Transformer", "TrustRun", "action_components", "band_engines", "band_for", "block_exposure",
    "bus_factor", "calibrate", "check_engine", "check_schedule", "chunk_layers", "chunk_parameters",
    "collective_seconds", "collective_table", "compare", "compare_reports", "divisors", "error_breakdown",
    "error_summary", "estimate", "format_bytes", "frame_bands", "heaviest_inter_node_dim", "kind_codes",
    "layer_times", "layout_name", "link_seconds", "lower_bound", "message_seconds", "mfu_ceiling", "mfu_flagged",
    "outside_reason", "model_flops", "narayanan_flops", "nccl_choice", "nodes_spanned", "placement", "predict",
    "rank_tails", "ranked_columns", "ranked_legend", "ranked_lines", "run", "schedule", "schedule_kind", "search",
    "search_summary", "setup_kind", "stage_components", "stage_counts", "stage_memory", "step_columns",
    "table_graph", "trust_rows", "validate", "validate_rankings",
]  # fmt: skip

__getattr__, __dir__ = lazy_attributes(__name__, _EVIDENCE, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""

_FORMULAS = ("sizes", "memory", "communication", "compute", "overlap", "links", "nccl_tuning", "moe",
             "schedules", "timeline", "step")  # fmt: skip
_EVIDENCE_MODULES = ("accuracy", "trust", "trust_table", "published", "published_run", "published_comparisons",
                     "published_collectives")  # fmt: skip
moved_modules(__name__, {
    **{name: f"fastdist_lab.setup.{name}" for name in ("training", "hardware", "efficiency", "schedule_kinds",
                                                        "engines")},
    "model": "fastdist_lab.setup.transformer",
    **{name: f"fastdist_lab.cost.formulas.{name}" for name in _FORMULAS},
    "setups": "fastdist_lab.cost.formulas.setup_columns",
    "search_bounds": "fastdist_lab.cost.search.bounds",
    "ranking": "fastdist_lab.cost.search.ranking",
    **{name: f"fastdist_lab.cost.evidence.{name}" for name in _EVIDENCE_MODULES},
    "published_held_out": "fastdist_lab.cost.evidence.published",
    "published_moe": "fastdist_lab.cost.evidence.published",
})  # fmt: skip
"""The module paths of ``fastdist_lab.cost`` before issue 44 split it by concept: they import the module that holds
their code now, with a ``DeprecationWarning``, for one release."""
