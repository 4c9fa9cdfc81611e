"""Which layout should I run: every layout and training set-up a model allows on some GPUs, ranked by step time.

``search(model, gpus, hardware=..., global_batch_size=...)`` enumerates tensor, pipeline, virtual stages,
sequence-data, data, micro-batch size, recompute, sequence tensor parallel, ZeRO stage, schedule and rank order
(and, for a mixture of experts, expert parallel and expert tensor parallel), drops what the model cannot split or
the memory cannot hold, and ranks the rest by predicted step time. It runs the very formulas of
``CostReport.memory`` and ``CostReport.step`` on columns of set-ups (``Setups``), one schedule table at a time, so
a row's numbers are those ``estimate(result.layout(i), model, result.training(i)).step(hardware)`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CostError
from ..validation import check_int
from .efficiency import DEFAULT_EFFICIENCY, Efficiency
from .engines import DEFAULT_ENGINE, engine_allows
from .hardware import Hardware
from .memory import stage_memory
from .model import Transformer
from .schedule_kinds import MULTI_STAGE_SCHEDULES, SCHEDULE_KINDS, SCHEDULES, check_schedule
from .search_bounds import TableFloors, subset_setups, table_setups
from .setups import Setups, packed_keys
from .step import STEP_COLUMNS, lower_bound, step_columns
from .training import RECOMPUTE, Training
from .trust import frame_bands

if TYPE_CHECKING:
    import pandas as pd

SETUP_COLUMNS: tuple[str, ...] = (
    "tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages", "sequence_data_parallel", "data_parallel",
    "micro_batch_size", "num_microbatches", "global_batch_size", "schedule", "recompute", "sequence_tensor_parallel",
    "zero_stage", "pipeline_first", "expert_parallel", "expert_tensor_parallel",
)  # fmt: skip
"""The set-up columns of ``LayoutSearch.frame``; ``STEP_COLUMNS`` and ``peak_memory_bytes`` follow."""

LIMITS: dict[str, Any] = {
    "tensor_parallel": None,
    "pipeline_parallel": None,
    "virtual_pipeline_stages": (1, 2, 3, 4, 6, 8),
    "sequence_data_parallel": (1, 2, 4, 8),
    "micro_batch_size": (1, 2, 4, 8),
    "schedule": tuple(name for name, kind in SCHEDULE_KINDS.items() if kind.searched),
    "recompute": RECOMPUTE,
    "sequence_tensor_parallel": (False, True),
    "zero_stage": (0, 1, 2, 3),
    "pipeline_first": (False, True),
    "expert_parallel": None,
    "expert_tensor_parallel": None,
    "flash_attention": True,
    "overlap_data_parallel": True,
    "overlap_tensor_parallel": False,
    "overlap_pipeline_parallel": True,
    "expert_load_imbalance": 1.0,
    "engine": DEFAULT_ENGINE,
    "torch_compile": False,
    "allow_smaller_batch": False,
    "top": 100,
}
"""``search``'s ``**limits`` and their defaults: a sequence limits a dim to those values (``None``: every value the
model and the GPUs allow), a single value fixes it. ``expert_parallel`` (``None``: every divisor of the model's
experts that divides a pipeline stage) and ``expert_tensor_parallel`` (``None``: 1, and the tensor size too for
experts at least as wide as the hidden size) apply to a mixture of experts only; ``expert_load_imbalance``,
``engine`` and ``torch_compile`` are ``Training``'s, fixed for every row. ``allow_smaller_batch``: where
``global_batch_size`` does not divide over the data-parallel ranks, run the largest batch that does (Calculon's
``get_batch_size`` rule, Isaev et al. 2023) instead of dropping the layout; ``top``: the number of best rows
(``None``: every set-up that fits)."""

CHUNK = 512
"""Set-ups simulated at a time, in the order of their lower bound."""

SIMULATE_EVERY = 8
"""With ``top``, the search simulates what waits at least once every this many tables (else when ``top`` wait):
the best steps found so far are what lets it stop early, and each simulation has a fixed cost."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``: called once per schedule table searched."""


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _choices(name: str, value: Any, default: Iterable[Any]) -> list[Any]:
    if value is None:
        return list(default)
    if isinstance(value, (str, bool, int)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


class LayoutSearch:
    """The ranked set-ups of ``search``: ``frame`` (a DataFrame, best first, index 0, 1, ...), ``layout(i)`` and
    ``training(i)`` (row ``i`` as a ``Layout`` and a ``Training``), ``estimate(i)`` (its ``CostReport``).

    Columns: ``SETUP_COLUMNS``, then ``STEP_COLUMNS`` (seconds, tokens per second, TFLOP/s per GPU, MFU and the
    breakdown in seconds), ``peak_memory_bytes`` (the most loaded pipeline rank) and ``trust.TRUST_COLUMNS`` (the
    row's error band, whether it is validated, ties the best row, has an MFU above every measured run). ``searched``
    counts the set-ups looked at, ``dropped`` those that do not fit the memory, ``pruned`` those never priced because
    a floor of their step (``search_bounds``) is above the ``top``-th best one (whether they fit is not known).
    """

    def __init__(self, frame: pd.DataFrame, model: Transformer, gpus: int, gpus_per_node: int,
                 hardware: Hardware, fixed: dict[str, Any], searched: int, dropped: int,
                 pruned: int = 0) -> None:  # fmt: skip
        self.frame = frame
        self.model = model
        self.gpus = gpus
        self.gpus_per_node = gpus_per_node
        self.hardware = hardware
        self.fixed = fixed
        self.searched = searched
        self.dropped = dropped
        self.pruned = pruned

    def __len__(self) -> int:
        return len(self.frame)

    def _row(self, i: int) -> Any:
        if not -len(self.frame) <= i < len(self.frame):
            raise CostError(f"row {i!r} is not one of the {len(self.frame)} set-ups found")
        return self.frame.iloc[i]

    def layout(self, i: int = 0) -> Any:
        """Row ``i`` as a ``fastdist_lab.Layout`` (``gpus`` ranks, ``gpus_per_node`` per node)."""
        from ..layout import Layout

        row = self._row(i)
        return Layout(
            world_size=self.gpus,
            local_world_size=self.gpus_per_node,
            tensor_parallel=int(row.tensor_parallel),
            pipeline_parallel=int(row.pipeline_parallel),
            sequence_data_parallel=int(row.sequence_data_parallel),
            pipeline_first=bool(row.pipeline_first),
            expert_parallel=int(row.expert_parallel),
            expert_tensor_parallel=None if row.expert_tensor_parallel == row.tensor_parallel else int(
                row.expert_tensor_parallel),  # the tensor size: the default, as a dense layout has it
        )  # fmt: skip

    def training(self, i: int = 0) -> Training:
        """Row ``i`` as a ``Training``."""
        row = self._row(i)
        return Training(
            micro_batch_size=int(row.micro_batch_size),
            num_microbatches=int(row.num_microbatches),
            zero_stage=int(row.zero_stage),
            sequence_tensor_parallel=bool(row.sequence_tensor_parallel),
            recompute=str(row.recompute),
            schedule=str(row.schedule),
            virtual_pipeline_stages=int(row.virtual_pipeline_stages),
            **self.fixed,  # the attention kernel, overlaps, expert load and engine every row shares
        )

    def estimate(self, i: int = 0) -> Any:
        """Row ``i``'s ``CostReport`` (``estimate(layout(i), model, training(i))``)."""
        from .cost_report import estimate

        return estimate(self.layout(i), self.model, self.training(i))

    def __repr__(self) -> str:
        return (
            f"LayoutSearch({len(self.frame)} set-ups that fit of {self.searched} searched on {self.gpus} x "
            f"{self.hardware.name})"
        )

    def _repr_html_(self) -> str:
        return f"<div><b>{repr(self)}</b>{self.frame.head(20).to_html()}</div>"


def search(
    model: Transformer | str,
    gpus: int,
    *,
    gpus_per_node: int = 8,
    hardware: Hardware | str | None = None,
    global_batch_size: int,
    seq_length: int | None = None,
    efficiency: Efficiency | None = None,
    progress: ProgressCallback | None = None,
    **limits: Any,
) -> LayoutSearch:
    """Every layout and training set-up of ``model`` on ``gpus`` GPUs (``gpus_per_node`` per node) that fits
    ``hardware``'s memory, ranked by predicted step time for ``global_batch_size`` sequences per step (by
    throughput where ``allow_smaller_batch`` lets batches differ; ties: less memory first).

    ``seq_length`` overrides the model's. ``**limits`` narrow or fix dims (``LIMITS`` lists them with their
    defaults), e.g. ``tensor_parallel=(4, 8)``, ``recompute="selective"``, ``top=20``. ``progress(done, total,
    message)`` is called once per schedule table (wrap it in a progress bar where the search is slow).

    Example:
        >>> result = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=3)
        >>> bool(result.frame.loc[0, "seconds"] <= result.frame.loc[2, "seconds"])
        True
    """
    if isinstance(model, str):
        model = Transformer.preset(model)
    if not isinstance(model, Transformer):
        raise CostError(f"model={model!r} must be a Transformer or a preset name")
    if seq_length is not None:
        model = model.replace(seq_length=check_int("seq_length", seq_length, minimum=1, error=CostError))
    gpus = check_int("gpus", gpus, minimum=1, error=CostError)
    local = check_int("gpus_per_node", gpus_per_node, minimum=1, error=CostError)
    batch = check_int("global_batch_size", global_batch_size, minimum=1, error=CostError)
    if gpus % local and gpus > local:
        raise CostError(f"gpus={gpus} must be a multiple of gpus_per_node={local} (whole nodes)")
    local = min(local, gpus)
    unknown = sorted(set(limits) - set(LIMITS))
    if unknown:
        raise CostError(f"unknown search limit(s) {', '.join(unknown)}; use {', '.join(LIMITS)}")
    hw = Hardware.coerce(hardware)
    hw.require("peak_tflops", "memory_GBps", "memory_GiB")
    eff = DEFAULT_EFFICIENCY if efficiency is None else efficiency
    chosen = {**LIMITS, **limits}
    flags = ("flash_attention", "overlap_data_parallel", "overlap_tensor_parallel", "overlap_pipeline_parallel")
    fixed = {name: bool(chosen[name]) for name in (*flags, "torch_compile")}
    checked = Training(expert_load_imbalance=chosen["expert_load_imbalance"], engine=chosen["engine"])
    fixed.update(expert_load_imbalance=checked.expert_load_imbalance, engine=checked.engine)
    rows = _candidates(model, gpus, local, batch, chosen, fixed["flash_attention"])
    top = None if chosen["top"] is None else check_int("top", chosen["top"], minimum=1, error=CostError)
    import pandas as pd

    # Tables in the order of their floor (``search_bounds``); with ``top``, stop at the first whose floor is above the
    # top-th best step simulated so far: no row there can rank. Per table: the memory of every set-up and a lower
    # bound of the step of those that fit; set-ups are simulated in the order of that bound, where it is below the
    # next table's floor (or, at the end, below the top-th best).
    groups = _group(rows)
    keys = list(groups)
    if top is not None and keys:
        floors = TableFloors(model, rows, local, fixed, hw, eff)
        row_floors = {key: floors.floor(key, members) for key, members in groups.items()}
        floor = {key: float(values.min()) for key, values in row_floors.items()}
        keys.sort(key=floor.__getitem__)
    pending = _Pending(rows, hw, eff, top)
    total = len(groups) + (1 if top is None else 0)
    pruned = pruned_fitting = 0
    for done, key in enumerate(keys):
        if top is not None and floor[key] >= pending.threshold:
            pruned = sum(len(groups[k]) for k in keys[done:])
            break
        if progress is not None:
            progress(done, total, f"memory: {key[0]} pp={key[1]} v={key[2]} m={key[3]}")
        members = groups[key]
        setups = table_setups(model, key, {k: v[members] for k, v in rows.items()}, local, fixed)
        peak = stage_memory(setups)["total_bytes"].max(axis=1)
        fits = np.asarray(hw.fits(peak))
        if top is not None:  # rows that fit but whose floor is above the top-th best cannot rank either
            hopeless = fits & (row_floors[key] >= pending.threshold)
            pruned_fitting += int(hopeless.sum())
            fits &= ~hopeless
        if fits.any():
            kept = subset_setups(setups, fits)
            pending.add(kept, lower_bound(kept, hw, eff) / rows["global_batch_size"][members][fits], members[fits])
        if top is not None and pending.threshold == np.inf and pending.fitting >= top:
            # the first ``top`` steps as soon as there are that many: the threshold prunes from the next table on
            pending.simulate(np.nextafter(pending.kth_bound(top), np.inf))
        if top is not None:
            below = floor[keys[done + 1]] if done + 1 < len(keys) else np.inf
            if pending.waiting(below) >= top or done % SIMULATE_EVERY == SIMULATE_EVERY - 1:
                pending.simulate(below)  # in batches: each simulation has a fixed cost
    pending.simulate(np.inf, progress=None if top is not None or progress is None else (
        lambda start, count: progress(len(groups), total, f"steps: {start} of {count}")))  # fmt: skip
    if progress is not None:
        progress(total, total, "done")
    parts = pending.parts
    searched = len(rows["tensor_parallel"])
    columns = list(SETUP_COLUMNS) + list(STEP_COLUMNS) + ["peak_memory_bytes"]
    merged = {name: np.concatenate([part[name] for part in parts]) if parts else np.array([]) for name in columns}
    merged["recompute"] = np.array(RECOMPUTE, dtype=object)[merged["recompute"].astype(np.int64)]
    ranked = np.lexsort((merged["peak_memory_bytes"], merged["seconds"] / np.maximum(merged["global_batch_size"], 1)))
    ranked = ranked if top is None else ranked[:top]
    result = pd.DataFrame({name: merged[name][ranked] for name in columns})
    result = result.assign(**frame_bands(result, fixed["engine"], hw.family, gpus, int(model.seq_length)))
    result.attrs.update(hardware=hw, model=model, gpus=gpus)
    pruned += pruned_fitting
    return LayoutSearch(result, model, gpus, local, hw, fixed, searched, searched - pruned - pending.fitting, pruned)


def _candidates(model: Transformer, gpus: int, local: int, batch: int, chosen: dict[str, Any],
                flash: bool) -> dict[str, np.ndarray]:  # fmt: skip
    """Every valid set-up as columns (see ``search``): layouts, micro-batches and schedules in a loop, then the
    product with recompute, sequence tensor parallel, ZeRO stage and rank order as arrays."""
    heads, groups, ffn, seq, layers = (model.num_attention_heads, model.num_query_groups, model.ffn_hidden_size,
                                       model.seq_length, model.num_layers)  # fmt: skip
    tensor = _choices("tensor_parallel", chosen["tensor_parallel"], divisors(local))
    recompute = [RECOMPUTE.index(r) for r in _choices("recompute", chosen["recompute"], RECOMPUTE)
                 if r in RECOMPUTE and not (flash and r == "selective")]  # fmt: skip
    schedules = _choices("schedule", chosen["schedule"], SCHEDULES)
    virtual = [
        check_int("virtual_pipeline_stages", v, minimum=1, error=CostError)
        for v in _choices("v", chosen["virtual_pipeline_stages"], ())
    ]
    bases: list[tuple] = []
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
                    m = batch // (bdp * mbs)
                    if m < 1 or not (batch % (bdp * mbs) == 0 or chosen["allow_smaller_batch"]):
                        continue
                    for kind, v in _plans(pp, m, layers, schedules, virtual):
                        for ep, etp in _expert_choices(model, tp, dp, chosen):
                            bases.append((tp, pp, v, sdp, dp, mbs, m, m * bdp * mbs, SCHEDULES.index(kind), ep, etp))
    if not bases:
        raise CostError(
            f"no layout of {layers} layers, {heads} heads on {gpus} GPUs divides "
            f"global_batch_size={batch} under these limits (allow_smaller_batch=True accepts a smaller batch)"
        )
    base = np.array(bases, dtype=np.int64)
    options = [
        np.array(recompute, dtype=np.int64),
        np.array(_choices("s", chosen["sequence_tensor_parallel"], ()), dtype=bool),
        np.array(_choices("z", chosen["zero_stage"], ()), dtype=np.int64),
        np.array(_choices("o", chosen["pipeline_first"], ()), dtype=bool),
    ]
    grid = np.indices((len(base),) + tuple(len(o) for o in options)).reshape(len(options) + 1, -1)
    b = base[grid[0]]
    r, sp, z, first = (o[i] for o, i in zip(options, grid[1:]))
    tp, pp, sdp, dp = b[:, 0], b[:, 1], b[:, 3], b[:, 4]
    keep = ~(sp & (seq % (sdp * tp) != 0))
    # Where a dim does nothing (tp 1, dp 1, pp 1) keep one value of its option (the first), shown as its default.
    keep &= (tp > 1) | (sp == options[1][0])
    keep &= (dp > 1) | (z == options[2][0])
    keep &= ((pp > 1) & (dp > 1)) | (first == options[3][0])
    keep &= engine_allows(chosen["engine"], np.array(SCHEDULES, dtype=object)[b[:, 8]], pp, np.where(dp > 1, z, 0))
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
        etp = check_int("expert_tensor_parallel", etp, minimum=1, error=CostError)
        if model.moe_ffn_hidden_size % etp or stage % etp:
            continue
        for ep in _choices("expert_parallel", chosen["expert_parallel"], divisors(model.num_experts)):
            ep = check_int("expert_parallel", ep, minimum=1, error=CostError)
            if model.num_experts % ep == 0 and stage % (ep * etp) == 0:
                pairs.append((ep, etp))
    return pairs


def _plans(pp: int, m: int, layers: int, schedules: list[str], virtual: list[int]) -> list[tuple[str, int]]:
    """The (schedule, virtual stages) pairs to try for ``pp`` stages and ``m`` micro-batches."""
    if pp == 1:
        return [("1f1b", 1)]
    plans = []
    for kind in schedules:
        for v in [1] if kind not in MULTI_STAGE_SCHEDULES else virtual:
            if pp * v > layers:
                continue
            try:  # only what torch's class runs: every row can be trained as it stands (check_training)
                check_schedule(kind, pp, m, v, run=True)
            except CostError:
                continue
            plans.append((kind, v))
    return plans


def _group(rows: dict[str, np.ndarray]) -> dict[tuple[str, int, int, int], np.ndarray]:
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


class _Pending:
    """The set-ups that fit and are not simulated yet, with their lower bounds (seconds per sequence):
    ``simulate(below)`` runs those whose bound is below ``below`` (and below the ``top``-th best step found),
    best bound first, ``CHUNK`` at a time, keeping the frame columns found (``parts``) and the best steps."""

    def __init__(self, rows: dict[str, np.ndarray], hw: Hardware, eff: Efficiency, top: int | None) -> None:
        self.rows, self.hw, self.eff, self.top = rows, hw, eff, top
        self.tables: list[Setups] = []
        self.blocks: list[tuple[np.ndarray, ...]] = []  # (table, index in it, bound, row of ``rows``)
        self.parts: list[dict[str, np.ndarray]] = []
        self.best = np.zeros(0)
        self.fitting = 0

    @property
    def threshold(self) -> float:
        """The ``top``-th best step per sequence simulated so far (infinite before ``top`` are known)."""
        return float(self.best[self.top - 1]) if self.top is not None and len(self.best) >= self.top else np.inf

    def add(self, setups: Setups, bound: np.ndarray, rows: np.ndarray) -> None:
        """Set-ups that fit (one table's, ``rows`` of the search's columns) and their lower bounds."""
        self.tables.append(setups)
        table = np.full(len(bound), len(self.tables) - 1)
        self.blocks.append((table, np.arange(len(bound)), bound, rows))
        self.fitting += len(bound)

    def kth_bound(self, k: int) -> float:
        """The ``k``-th smallest lower bound of the pending set-ups (infinite when fewer wait)."""
        bounds = np.concatenate([block[2] for block in self.blocks]) if self.blocks else np.zeros(0)
        return float(np.partition(bounds, k - 1)[k - 1]) if len(bounds) >= k else np.inf

    def waiting(self, below: float) -> int:
        """How many pending set-ups have a bound below ``below`` and the ``top``-th best (would be simulated)."""
        limit = min(below, self.threshold)
        return sum(int((block[2] < limit).sum()) for block in self.blocks)

    def simulate(self, below: float, progress: Callable[[int, int], None] | None = None) -> None:
        """Simulate the pending set-ups whose bound is below ``below`` and the top-th best, best bound first."""
        taken, kept = [], []
        for block in self.blocks:
            live, now = block[2] < self.threshold, block[2] < below
            if (live & now).any():
                taken.append([part[live & now] for part in block])
            if (live & ~now).any():
                kept.append(tuple(part[live & ~now] for part in block))
        self.blocks = kept
        if not taken:
            return
        table, index, bound, row_of = (np.concatenate(parts) for parts in zip(*taken))
        order = np.argsort(bound, kind="stable")
        size = max(CHUNK, self.top or 0)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            chunk = chunk[bound[chunk] < self.threshold]
            if not len(chunk):
                break
            for t in np.unique(table[chunk]):
                picked = chunk[table[chunk] == t]
                setups = self.tables[t]
                mask = np.zeros(setups.size, dtype=bool)
                mask[index[picked]] = True
                chosen = {k: v[row_of[picked][np.argsort(index[picked])]] for k, v in self.rows.items()}
                found = _timed(setups, mask, chosen, self.hw, self.eff)
                self.parts.append(found)
                if self.top is not None:  # only the top-th best is ever read (``threshold``)
                    steps = np.concatenate([self.best, found["seconds"] / found["global_batch_size"]])
                    self.best = np.sort(steps)[: self.top]
            if progress is not None:
                progress(min(start + size, len(order)), len(order))


def _timed(setups: Setups, mask: np.ndarray, rows: dict[str, np.ndarray], hw: Hardware,
           eff: Efficiency) -> dict[str, np.ndarray]:  # fmt: skip
    """The frame columns of the set-ups where ``mask`` holds (``rows``: their set-up columns, in order)."""
    chosen = subset_setups(setups, mask)
    columns, _ = step_columns(chosen, hw, eff)
    found = {name: rows[name] for name in SETUP_COLUMNS}
    found.update({name: columns[name] for name in STEP_COLUMNS})
    found["peak_memory_bytes"] = stage_memory(chosen)["total_bytes"].max(axis=1)
    return found
