"""Which layout should I run: every layout and training set-up a model allows on some GPUs, ranked by step time.

``search(model, gpus, hardware=..., global_batch_size=...)`` enumerates tensor, pipeline, virtual stages,
sequence-data, data, micro-batch size, recompute, sequence tensor parallel, ZeRO stage, schedule and rank order
(and, for a mixture of experts, expert parallel and expert tensor parallel), drops what the model cannot split or
the memory cannot hold, and ranks the rest by predicted step time. It runs
the very formulas of ``CostReport.memory`` and ``CostReport.step`` on columns of set-ups (``Setups``), one
schedule table at a time, so a row's numbers are those ``estimate(result.layout(i), model,
result.training(i)).step(hardware)`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CostError
from ..validation import check_int
from .efficiency import DEFAULT_EFFICIENCY, Efficiency
from .hardware import Hardware
from .memory import stage_memory
from .model import Transformer
from .schedule_kinds import MULTI_STAGE_SCHEDULES, SCHEDULE_KINDS, SCHEDULES, check_schedule
from .setups import Setups, chunk_layers, expert_spreads, placement
from .step import STEP_COLUMNS, lower_bound, step_columns
from .training import RECOMPUTE, Training

if TYPE_CHECKING:
    import pandas as pd

SETUP_COLUMNS: tuple[str, ...] = (
    "tensor_parallel",
    "pipeline_parallel",
    "virtual_pipeline_stages",
    "sequence_data_parallel",
    "data_parallel",
    "micro_batch_size",
    "num_microbatches",
    "global_batch_size",
    "schedule",
    "recompute",
    "sequence_tensor_parallel",
    "zero_stage",
    "pipeline_first",
    "expert_parallel",
    "expert_tensor_parallel",
)
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
    "allow_smaller_batch": False,
    "top": 100,
}
"""``search``'s ``**limits`` and their defaults: a sequence limits a dim to those values (``None``: every value
the model and the GPUs allow), a single value fixes it. ``expert_parallel`` (``None``: every divisor of the
model's experts that divides a pipeline stage) and ``expert_tensor_parallel`` (``None``: 1, and the tensor size
too for experts at least as wide as the model's hidden size) apply to a mixture of experts only (1 and the tensor
size for a dense model); ``expert_load_imbalance`` is ``Training``'s, fixed for every row. ``allow_smaller_batch``:
where ``global_batch_size`` does not divide over the data-parallel ranks, run the largest batch that does
(Calculon's ``get_batch_size`` rule, Isaev et al. 2023) instead of dropping the layout; ``top``: the number of best
rows to return (``None``: every set-up that fits, which simulates them all and is much slower)."""

CHUNK = 512
"""Set-ups simulated at a time, in the order of their lower bound."""

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
    breakdown in seconds) and ``peak_memory_bytes`` (the most loaded pipeline rank). ``searched`` counts the
    set-ups looked at, ``dropped`` those that do not fit the memory.
    """

    def __init__(self, frame: pd.DataFrame, model: Transformer, gpus: int, gpus_per_node: int,
                 hardware: Hardware, fixed: dict[str, Any], searched: int, dropped: int) -> None:  # fmt: skip
        self.frame = frame
        self.model = model
        self.gpus = gpus
        self.gpus_per_node = gpus_per_node
        self.hardware = hardware
        self.fixed = fixed
        self.searched = searched
        self.dropped = dropped

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
            flash_attention=self.fixed["flash_attention"],
            overlap_data_parallel=self.fixed["overlap_data_parallel"],
            overlap_tensor_parallel=self.fixed["overlap_tensor_parallel"],
            overlap_pipeline_parallel=self.fixed["overlap_pipeline_parallel"],
            expert_load_imbalance=self.fixed["expert_load_imbalance"],
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
    throughput, which orders equal batches the same way, when ``allow_smaller_batch`` lets batches differ; ties:
    less memory first).

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
    fixed = {
        name: bool(chosen[name])
        for name in ("flash_attention", "overlap_data_parallel", "overlap_tensor_parallel", "overlap_pipeline_parallel")
    }
    imbalance = Training(expert_load_imbalance=chosen["expert_load_imbalance"]).expert_load_imbalance  # checked
    fixed["expert_load_imbalance"] = imbalance
    rows = _candidates(model, gpus, local, batch, chosen, fixed["flash_attention"])
    top = None if chosen["top"] is None else check_int("top", chosen["top"], minimum=1, error=CostError)
    import pandas as pd

    # Phase 1: per schedule table, the memory of every set-up and a lower bound of the step of those that fit.
    groups = _group(rows)
    tables, ids, bounds, peaks = [], [], [], []
    total = len(groups) + (1 if top is None else 0)
    for done, (key, members) in enumerate(groups.items()):
        if progress is not None:
            progress(done, total, f"memory: {key[0]} pp={key[1]} v={key[2]} m={key[3]}")
        setups = _setups(model, key, {k: v[members] for k, v in rows.items()}, local, fixed)
        peak = stage_memory(setups)["total_bytes"].max(axis=1)
        fits = np.asarray(hw.fits(peak))
        if fits.any():
            kept = _subset(setups, fits)
            tables.append((key, kept))
            ids.append(np.stack([np.full(int(fits.sum()), len(tables) - 1), np.arange(int(fits.sum()))], axis=1))
            bounds.append(lower_bound(kept, hw, eff) / rows["global_batch_size"][members][fits])
            peaks.append(members[fits])
    searched = len(rows["tensor_parallel"])
    where = np.concatenate(ids) if ids else np.zeros((0, 2), dtype=np.int64)
    bound = np.concatenate(bounds) if bounds else np.zeros(0)
    row_of = np.concatenate(peaks) if peaks else np.zeros(0, dtype=np.int64)
    # Phase 2: simulate in the order of the bound; with ``top``, stop where the bound passes the top-th best.
    order = np.argsort(bound, kind="stable")
    parts: list[dict[str, np.ndarray]] = []
    best = np.zeros(0)
    start = 0
    while start < len(order):
        chunk = order[start : start + max(CHUNK, top or 0)]
        if top is not None and len(best) >= top:
            chunk = chunk[bound[chunk] < best[top - 1]]
            if not len(chunk):
                break
        for table in np.unique(where[chunk, 0]):
            picked = chunk[where[chunk, 0] == table]
            key, setups = tables[table]
            mask = np.zeros(setups.size, dtype=bool)
            mask[where[picked, 1]] = True
            found = _timed(
                setups, mask, {k: v[row_of[picked][np.argsort(where[picked, 1])]] for k, v in rows.items()}, hw, eff
            )
            parts.append(found)
            best = np.sort(np.concatenate([best, found["seconds"] / found["global_batch_size"]]))
        start += len(order[start : start + max(CHUNK, top or 0)])
        if progress is not None and top is None:
            progress(len(groups), total, f"steps: {start} of {len(order)}")
    if progress is not None:
        progress(total, total, "done")
    columns = list(SETUP_COLUMNS) + list(STEP_COLUMNS) + ["peak_memory_bytes"]
    merged = {name: np.concatenate([part[name] for part in parts]) if parts else np.array([]) for name in columns}
    merged["recompute"] = np.array(RECOMPUTE, dtype=object)[merged["recompute"].astype(np.int64)]
    ranked = np.lexsort((merged["peak_memory_bytes"], merged["seconds"] / np.maximum(merged["global_batch_size"], 1)))
    ranked = ranked if top is None else ranked[:top]
    result = pd.DataFrame({name: merged[name][ranked] for name in columns})
    result.attrs.update(hardware=hw, model=model, gpus=gpus)
    return LayoutSearch(result, model, gpus, local, hw, fixed, searched, searched - len(order))


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
    b, r, sp, z, first = b[keep], r[keep], sp[keep] & (b[keep, 0] > 1), z[keep], first[keep]
    z = np.where(b[:, 4] > 1, z, 0)
    first = np.where((b[:, 1] > 1) & (b[:, 4] > 1), first, False)
    names = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages", "sequence_data_parallel",
             "data_parallel", "micro_batch_size", "num_microbatches", "global_batch_size")  # fmt: skip
    rows = {name: b[:, i] for i, name in enumerate(names)}
    rows.update(schedule=np.array(SCHEDULES, dtype=object)[b[:, 8]], recompute=r, sequence_tensor_parallel=sp,
                zero_stage=z, pipeline_first=first, expert_parallel=b[:, 9],
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
    kind = np.array([SCHEDULES.index(k) for k in rows["schedule"]]) if len(rows["schedule"]) else np.zeros(0)
    key = np.stack([kind, rows["pipeline_parallel"], rows["virtual_pipeline_stages"], rows["num_microbatches"]], 1)
    unique, inverse = np.unique(key, axis=0, return_inverse=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    bounds = np.flatnonzero(np.diff(inverse.ravel()[order])) + 1
    return {
        (SCHEDULES[int(u[0])], int(u[1]), int(u[2]), int(u[3])): members
        for u, members in zip(unique, np.split(order, bounds))
    }


def _setups(model: Transformer, key: tuple[str, int, int, int], rows: dict[str, np.ndarray], local: int,
            fixed: dict[str, bool]) -> Setups:  # fmt: skip
    """The ``Setups`` of the rows sharing one schedule table ``key``."""
    kind, pp, v, m = key
    n = len(rows["tensor_parallel"])
    tp = rows["tensor_parallel"].astype(np.int64)
    return Setups(
        model=model, schedule=kind, pipeline_parallel=pp, virtual_pipeline_stages=v, microbatches=m,
        chunk_layers=chunk_layers(model.num_layers, pp, v, None),
        tensor_parallel=tp, data_parallel=rows["data_parallel"].astype(np.int64),
        sequence_data_parallel=rows["sequence_data_parallel"].astype(np.int64),
        micro_batch_size=rows["micro_batch_size"].astype(np.int64),
        sequence_parallel=rows["sequence_tensor_parallel"].astype(bool) & (tp > 1),
        recompute=rows["recompute"].astype(np.int64), zero_stage=rows["zero_stage"].astype(np.int64),
        flash_attention=np.full(n, fixed["flash_attention"]),
        overlap_data_parallel=np.full(n, fixed["overlap_data_parallel"]),
        overlap_tensor_parallel=np.full(n, fixed["overlap_tensor_parallel"]),
        overlap_pipeline_parallel=np.full(n, fixed["overlap_pipeline_parallel"]),
        expert_parallel=rows["expert_parallel"].astype(np.int64),
        expert_tensor_parallel=rows["expert_tensor_parallel"].astype(np.int64),
        placement=placement(tp, pp, rows["sequence_data_parallel"], rows["data_parallel"], local,
                            rows["pipeline_first"].astype(bool)),
        expert_load_imbalance=fixed["expert_load_imbalance"],
        expert_placement=expert_spreads(
            tp, pp, rows["sequence_data_parallel"], rows["data_parallel"], rows["expert_parallel"],
            rows["expert_tensor_parallel"], local, rows["pipeline_first"].astype(bool),
        ) if model.is_moe and n else None,
    )  # fmt: skip


def _timed(setups: Setups, mask: np.ndarray, rows: dict[str, np.ndarray], hw: Hardware,
           eff: Efficiency) -> dict[str, np.ndarray]:  # fmt: skip
    """The frame columns of the set-ups where ``mask`` holds (``rows``: their set-up columns, in order)."""
    chosen = _subset(setups, mask)
    columns, _ = step_columns(chosen, hw, eff)
    found = {name: rows[name] for name in SETUP_COLUMNS}
    found.update({name: columns[name] for name in STEP_COLUMNS})
    found["peak_memory_bytes"] = stage_memory(chosen)["total_bytes"].max(axis=1)
    return found


def _subset(setups: Setups, mask: np.ndarray) -> Setups:
    """The set-ups where ``mask`` holds."""
    import dataclasses

    changes: dict[str, Any] = {}
    for field in dataclasses.fields(setups):
        value = getattr(setups, field.name)
        if (
            isinstance(value, np.ndarray)
            and value.ndim >= 1
            and value.shape[0] == setups.size
            and field.name != "chunk_layers"
        ):
            changes[field.name] = value[mask]
    for name in ("placement", "expert_placement"):
        spreads = getattr(setups, name)
        if spreads is not None:
            changes[name] = {
                dim: value[mask] if isinstance(value, np.ndarray) else type(value)(value.nodes[mask],
                                                                                   value.per_node[mask])
                for dim, value in spreads.items()
            }
    return dataclasses.replace(setups, **changes)
