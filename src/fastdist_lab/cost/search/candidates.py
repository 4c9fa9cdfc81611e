"""What a search enumerates: its limits (``LIMITS``: the layout's dims, then each ``Training`` field the search
varies or fixes, declared once with its ``Setting``), the set-up columns of its frame (``SETUP_COLUMNS``) and every
candidate set-up as columns (``candidates``), grouped into schedule tables (``tables``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...errors import CostError
from ...formatting import quoted
from ...numbering import divisors
from ...setup import RECOMPUTE, SCHEDULES, TRAINING_SETTINGS, Setting, Training, Transformer, check_schedule
from ...setup.schedule_kinds import MAX_MICROBATCHES, MAX_TABLE_ACTIONS, MULTI_STAGE_SCHEDULES, SCHEDULE_KINDS
from ...setup.settings import defaults_of
from ...validation import check_flag, check_int
from ..formulas.setup_columns import packed_keys

MAX_GPUS = 2**20
"""The most GPUs a search lays out (1,048,576; a row is a whole-world ``Layout``, which holds up to 2**24 ranks)."""

MAX_GLOBAL_BATCH = 2**20
"""The most sequences of a step a search prices (1,048,576)."""

MAX_VALUES = 256
"""The most values a search limit may list."""

MAX_SETUPS = 4_000_000
"""The most set-ups a search considers (a few hundred thousand for the largest published models on thousands of
GPUs): beyond, it refuses before building them, naming this limit, rather than run for minutes."""

LAYOUT_SETTINGS: dict[str, Setting] = {
    "tensor_parallel": Setting(
        flag="--tensor-parallel", aliases=("--tp",), kind="int", minimum=1, maximum=MAX_GPUS, search="varied",
        help="tensor-parallel sizes (default: the divisors of a node)",
    ),
    "pipeline_parallel": Setting(
        flag="--pipeline-parallel", aliases=("--pp",), kind="int", minimum=1, maximum=MAX_GPUS, search="varied",
        help="pipeline-parallel sizes (default: every one)",
    ),
    "sequence_data_parallel": Setting(
        flag="--sequence-data-parallel", aliases=("--sdp",), kind="int", minimum=1, maximum=MAX_GPUS,
        search="varied", tried=(1, 2, 4, 8), help="sequence-data-parallel sizes",
    ),
    "pipeline_first": Setting(
        flag="--pipeline-first", kind="flag", search="varied", tried=(False, True),
        help="pipeline ranks vary before data ranks (the flag alone), or data first (off)",
    ),
    "expert_parallel": Setting(
        flag="--expert-parallel", aliases=("--ep",), kind="int", minimum=1, maximum=MAX_GPUS, search="varied",
        help="expert-parallel sizes (default: the divisors of the experts; 1 for a dense model)",
    ),
    "expert_tensor_parallel": Setting(
        flag="--expert-tensor-parallel", aliases=("--etp",), kind="int", minimum=1, maximum=MAX_GPUS, search="varied",
        help="expert-tensor-parallel sizes (default: 1, and the tensor size for wide experts)",
    ),
}  # fmt: skip
"""The layout's dims a search tries (``tried``; ``None``: every value the model and the GPUs allow)."""

SEARCH_SETTINGS: dict[str, Setting] = {
    **LAYOUT_SETTINGS, **{name: spec for name, spec in TRAINING_SETTINGS.items() if spec.search is not None},
}  # fmt: skip
"""Every limit of a search with its ``Setting``: the layout's dims, then each ``Training`` field it varies or fixes."""

OPTIONS: dict[str, Any] = {"allow_smaller_batch": False, "top": 100}
"""The search's own options (``search``'s docstring)."""

_DEFAULTS = defaults_of(Training)

LIMITS: dict[str, Any] = {
    **{name: spec.tried if spec.search == "varied" else _DEFAULTS[name] for name, spec in SEARCH_SETTINGS.items()},
    **OPTIONS,
}  # fmt: skip
"""``search``'s ``**limits`` and their defaults: a sequence limits a dim to those values (``None``: every value the
model and the GPUs allow), a single value fixes it. ``expert_parallel`` (``None``: every divisor of the model's
experts that divides a pipeline stage) and ``expert_tensor_parallel`` (``None``: 1, and the tensor size too for
experts at least as wide as the hidden size) apply to a mixture of experts only; the ``Training`` fields the search
does not vary (``Setting.search == "fixed"``: the attention kernel, the overlaps, the expert load, the engine,
``torch_compile``) are fixed for every row. ``allow_smaller_batch``: where ``global_batch_size`` does not divide over
the data-parallel ranks, run the largest batch that does (Calculon's ``get_batch_size`` rule, Isaev et al. 2023)
instead of dropping the layout; ``top``: the number of best rows (``None``: every set-up that fits)."""

FIXED: tuple[str, ...] = tuple(name for name, spec in TRAINING_SETTINGS.items() if spec.search == "fixed")
"""The ``Training`` fields one value of which every row of a search shares."""

SETUP_COLUMNS: tuple[str, ...] = (
    "tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages", "sequence_data_parallel", "data_parallel",
    "micro_batch_size", "num_microbatches", "global_batch_size", "schedule", "recompute", "sequence_tensor_parallel",
    "zero_stage", "pipeline_first", "expert_parallel", "expert_tensor_parallel",
)  # fmt: skip
"""The set-up columns of ``LayoutSearch.frame``: each varied limit (``SEARCH_SETTINGS``), with the data-parallel
size, the micro-batches and the global batch they give; ``STEP_COLUMNS`` and ``peak_memory_bytes`` follow."""


def checked_limits(limits: dict[str, Any]) -> dict[str, Any]:
    """``LIMITS`` with ``limits`` over them, each value checked by its declaration (``SEARCH_SETTINGS``) before any
    work: a varied limit as one value or up to ``MAX_VALUES`` of them (each of its kind and range, repeats dropped),
    a fixed one as one value (``shared_training`` checks those), ``top`` and ``allow_smaller_batch``. ``CostError``
    names the first bad one."""
    unknown = sorted(set(limits) - set(LIMITS), key=str)
    if unknown:
        raise CostError(f"unknown search limit(s) {', '.join(map(quoted, unknown))}; use {', '.join(LIMITS)}")
    chosen = {**LIMITS, **limits}
    for name, spec in SEARCH_SETTINGS.items():
        if spec.search != "varied" or chosen[name] is None:
            continue
        values = _choices(name, chosen[name], ())
        if len(values) > MAX_VALUES or not values:
            raise CostError(f"{name}={quoted(chosen[name])} must list 1 to {MAX_VALUES} values")
        chosen[name] = list(dict.fromkeys(spec.check(name, value) for value in values))
    if chosen["top"] is not None:
        chosen["top"] = check_int("top", chosen["top"], minimum=1, maximum=MAX_SETUPS, error=CostError)
    chosen["allow_smaller_batch"] = check_flag("allow_smaller_batch", chosen["allow_smaller_batch"], error=CostError)
    return chosen


def shared_training(chosen: dict[str, Any]) -> Training:
    """The ``Training`` every row shares (its ``FIXED`` fields from the chosen limits, each checked by its
    ``Setting``: ``CostError`` naming a bad one); a schedule table's set-ups take its schedule, virtual stages and
    micro-batches on top (``bounds.table_setups``)."""
    return Training(**{name: chosen[name] for name in FIXED})


def row_training(row: Any, shared: Training) -> Training:
    """Row ``row`` of a search frame (its ``SETUP_COLUMNS``) as the ``Training`` it was priced with."""
    varied = {name: TRAINING_SETTINGS[name].check(name, row[name]) for name in SETUP_COLUMNS if name in _DEFAULTS}
    return shared.replace(**varied)


def _choices(name: str, value: Any, default: Iterable[Any]) -> list[Any]:
    if value is None:
        return list(default)
    if isinstance(value, (str, bool, int)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def candidates(model: Transformer, gpus: int, local: int, batch: int, chosen: dict[str, Any],
               shared: Training) -> dict[str, np.ndarray]:  # fmt: skip
    """Every valid set-up as columns (see ``search``): layouts, micro-batches and schedules in a loop, then the
    product with recompute, sequence tensor parallel, ZeRO stage and rank order as arrays."""
    heads, groups, ffn, seq, layers = (model.num_attention_heads, model.num_query_groups, model.ffn_hidden_size,
                                       model.seq_length, model.num_layers)  # fmt: skip
    tensor = _choices("tensor_parallel", chosen["tensor_parallel"], divisors(local))
    recompute = [RECOMPUTE.index(r) for r in _choices("recompute", chosen["recompute"], RECOMPUTE)
                 if r in RECOMPUTE and not (shared.flash_attention and r == "selective")]  # fmt: skip
    schedules = _choices("schedule", chosen["schedule"], SCHEDULES)
    virtual = _choices("v", chosen["virtual_pipeline_stages"], ())
    bases: list[tuple] = []
    budget = Budget(f"{gpus:,} GPUs")

    @functools.cache
    def experts(tp: int, dp: int) -> list[tuple[int, int]]:
        pairs = _expert_choices(model, tp, dp, chosen)
        budget.spend(len(pairs))
        return pairs

    for tp in tensor:
        if gpus % tp or local % tp or heads % tp or groups % tp or ffn % tp:
            continue
        for pp in _choices("pipeline_parallel", chosen["pipeline_parallel"], divisors(gpus // tp)):
            if (gpus // tp) % pp or pp > layers:
                continue
            dp = gpus // (tp * pp)
            for sdp in _choices("sequence_data_parallel", chosen["sequence_data_parallel"], ()):
                if dp % sdp or seq % sdp:
                    continue
                bdp = dp // sdp
                for mbs in _choices("micro_batch_size", chosen["micro_batch_size"], ()):
                    budget.spend(1)
                    m = batch // (bdp * mbs)
                    if m < 1 or not (batch % (bdp * mbs) == 0 or chosen["allow_smaller_batch"]):
                        continue
                    for kind, v in _plans(pp, m, layers, schedules, virtual, budget):
                        for ep, etp in experts(tp, dp):
                            budget.spend(1)
                            bases.append((tp, pp, v, sdp, dp, mbs, m, m * bdp * mbs, SCHEDULES.index(kind), ep, etp))
    if not bases:
        longer = (f"; {budget.too_long:,} would need more than {MAX_MICROBATCHES:,} micro-batches or a pipeline table "
                  f"of more than {MAX_TABLE_ACTIONS:,} actions") if budget.too_long else ""  # fmt: skip
        raise CostError(
            f"no layout of {layers} layers, {heads} heads on {gpus} GPUs divides "
            f"global_batch_size={batch} under these limits (allow_smaller_batch=True accepts a smaller batch){longer}"
        )
    base = np.array(bases, dtype=np.int64)
    options = [
        np.array(recompute, dtype=np.int64),
        np.array(_choices("s", chosen["sequence_tensor_parallel"], ()), dtype=bool),
        np.array(_choices("z", chosen["zero_stage"], ()), dtype=np.int64),
        np.array(_choices("o", chosen["pipeline_first"], ()), dtype=bool),
    ]
    budget.spend(len(base) * int(np.prod([len(o) for o in options])) - len(base))
    grid = np.indices((len(base),) + tuple(len(o) for o in options)).reshape(len(options) + 1, -1)
    b = base[grid[0]]
    r, sp, z, first = (o[i] for o, i in zip(options, grid[1:]))
    tp, pp, sdp, dp = b[:, 0], b[:, 1], b[:, 3], b[:, 4]
    keep = ~(sp & (seq % (sdp * tp) != 0))
    # Where a dim does nothing (tp 1, dp 1, pp 1) keep one value of its option (the first), shown as its default.
    keep &= (tp > 1) | (sp == options[1][0])
    keep &= (dp > 1) | (z == options[2][0])
    keep &= ((pp > 1) & (dp > 1)) | (first == options[3][0])
    keep &= shared.engine_spec.allows(np.array(SCHEDULES, dtype=object)[b[:, 8]], pp, np.where(dp > 1, z, 0))
    b, r, sp, z, first = b[keep], r[keep], sp[keep] & (b[keep, 0] > 1), z[keep], first[keep]
    z = np.where(b[:, 4] > 1, z, 0)
    first = np.where((b[:, 1] > 1) & (b[:, 4] > 1), first, False)
    rows = {name: b[:, i] for i, name in enumerate(SETUP_COLUMNS[:8])}  # the sizes, in ``bases``' order
    rows.update(schedule=np.array(SCHEDULES, dtype=object)[b[:, 8]], schedule_index=b[:, 8], recompute=r,
                sequence_tensor_parallel=sp, zero_stage=z, pipeline_first=first, expert_parallel=b[:, 9],
                expert_tensor_parallel=b[:, 10])  # fmt: skip
    return rows


def _expert_choices(model: Transformer, tp: int, dp: int, chosen: dict[str, Any]) -> list[tuple[int, int]]:
    """The (expert parallel, expert tensor parallel) pairs to try on a stage of ``tp * dp`` ranks: ``(1, tp)`` for a
    dense model; for a mixture of experts, what divides the experts, their width and the stage."""
    if not model.is_moe:
        return [(1, tp)]
    stage = tp * dp
    pairs = []
    # by default ETP 1, and the tensor size too for experts at least as wide as the model (Megatron-Core's guide:
    # expert tensor parallel only pays for coarse experts; fine-grained ones run whole on a rank)
    default = (1, tp) if model.moe_ffn_hidden_size >= model.hidden_size else (1,)
    for etp in sorted(set(_choices("expert_tensor_parallel", chosen["expert_tensor_parallel"], default))):
        if model.moe_ffn_hidden_size % etp or stage % etp:
            continue
        for ep in _choices("expert_parallel", chosen["expert_parallel"], divisors(model.num_experts)):
            if model.num_experts % ep == 0 and stage % (ep * etp) == 0:
                pairs.append((ep, etp))
    return pairs


def _plans(pp: int, m: int, layers: int, schedules: list[str], virtual: list[int],
           budget: Budget) -> list[tuple[str, int]]:  # fmt: skip
    """The (schedule, virtual stages) pairs to try for ``pp`` stages and ``m`` micro-batches: what torch's class
    runs (every row can be trained as it stands, ``check_training``), within ``MAX_TABLE_ACTIONS`` (the others are
    counted in ``budget.too_long``)."""
    plans = []
    for kind in ["1f1b"] if pp == 1 else schedules:
        for v in [1] if kind not in MULTI_STAGE_SCHEDULES else virtual:
            if pp * v > layers:
                continue
            budget.spend(1)
            if m > MAX_MICROBATCHES or SCHEDULE_KINDS[kind].actions(pp, m, v) > MAX_TABLE_ACTIONS:
                budget.too_long += 1
                continue
            try:
                check_schedule(kind, pp, m, v, run=True)
            except CostError:
                continue
            plans.append((kind, v))
    return plans


class Budget:
    """The set-ups (and the steps of building them) a search may still take: ``spend`` refuses beyond
    ``MAX_SETUPS``, in one line naming the limit, before anything more is built."""

    def __init__(self, where: str) -> None:
        self.left = MAX_SETUPS
        self.where = where
        self.too_long = 0
        """Plans left out because their pipeline table would be longer than ``MAX_TABLE_ACTIONS``."""

    def spend(self, count: int) -> None:
        """Take ``count`` more; ``CostError`` past ``MAX_SETUPS``."""
        self.left -= count
        if self.left < 0:
            raise CostError(
                f"the search would consider more than {MAX_SETUPS:,} set-ups on {self.where}: narrow it (e.g. "
                "tensor_parallel=..., pipeline_parallel=..., micro_batch_size=..., zero_stage=...)"
            )


def tables(rows: dict[str, np.ndarray]) -> dict[tuple[str, int, int, int], np.ndarray]:
    """Row indices per schedule table ``(schedule, pipeline, virtual stages, micro-batches)``."""
    columns = [rows["schedule_index"], rows["pipeline_parallel"], rows["virtual_pipeline_stages"],
               rows["num_microbatches"]]  # fmt: skip
    _, first, inverse = np.unique(packed_keys(columns), return_index=True, return_inverse=True)
    unique = np.stack([column[first] for column in columns], axis=1)
    order = np.argsort(inverse.ravel(), kind="stable")
    bounds = np.flatnonzero(np.diff(inverse.ravel()[order])) + 1
    return {
        (SCHEDULES[int(u[0])], int(u[1]), int(u[2]), int(u[3])): members
        for u, members in zip(unique, np.split(order, bounds))
    }


