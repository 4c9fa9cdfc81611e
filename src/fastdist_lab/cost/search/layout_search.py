"""Which layout should I run: every layout and training set-up a model allows on some GPUs, ranked by step time.

``search(model, gpus, hardware=..., global_batch_size=...)`` enumerates tensor, pipeline, virtual stages,
sequence-data, data, micro-batch size, recompute, sequence tensor parallel, ZeRO stage, schedule and rank order
(and, for a mixture of experts, expert parallel and expert tensor parallel), drops what the model cannot split or
the memory cannot hold, and ranks the rest by predicted step time. It runs the very formulas of
``CostReport.memory`` and ``CostReport.step`` on columns of set-ups (``Setups``), one schedule table at a time, so
a row's numbers are those ``estimate(result.layout(i), model, result.training(i)).step(hardware)`` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CostError
from ...setup import RECOMPUTE, Efficiency, Hardware, Training, Transformer
from ...validation import check_int
from ..evidence.trust import frame_bands
from ..formulas.memory import stage_memory
from ..formulas.setup_columns import Setups
from ..formulas.step import STEP_COLUMNS, lower_bound, step_columns
from .bounds import TableFloors, subset_setups, table_setups
from .candidates import (
    FIXED,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    SETUP_COLUMNS,
    candidates,
    checked_limits,
    row_training,
    shared_training,
    tables,
)

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 512
"""Set-ups simulated at a time, in the order of their lower bound."""

SIMULATE_EVERY = 8
"""With ``top``, the search simulates what waits at least once every this many tables (else when ``top`` wait):
the best steps found so far are what lets it stop early, and each simulation has a fixed cost."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``: called once per schedule table searched."""


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
                 hardware: Hardware, fixed: dict[str, Any] | Training, searched: int, dropped: int,
                 pruned: int = 0) -> None:  # fmt: skip
        self.frame = frame
        self.model = model
        self.gpus = gpus
        self.gpus_per_node = gpus_per_node
        self.hardware = hardware
        self.shared = fixed if isinstance(fixed, Training) else Training(**fixed)
        """The ``Training`` every row shares (``candidates.FIXED``: the attention kernel, overlaps, expert load,
        engine); ``fixed`` holds its fields by name."""
        self.fixed = {name: getattr(self.shared, name) for name in FIXED}
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
        from ...layout import Layout

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
        """Row ``i`` as a ``Training`` (``candidates.row_training``)."""
        return row_training(self._row(i), self.shared)

    def estimate(self, i: int = 0) -> Any:
        """Row ``i``'s ``CostReport`` (``estimate(layout(i), model, training(i))``)."""
        from ..cost_report import estimate

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
        model = model.replace(seq_length=seq_length)  # checked by Transformer (its range)
    gpus = check_int("gpus", gpus, minimum=1, maximum=MAX_GPUS, error=CostError)
    local = check_int("gpus_per_node", gpus_per_node, minimum=1, maximum=MAX_GPUS, error=CostError)
    batch = check_int("global_batch_size", global_batch_size, minimum=1, maximum=MAX_GLOBAL_BATCH, error=CostError)
    if gpus % local and gpus > local:
        raise CostError(f"gpus={gpus} must be a multiple of gpus_per_node={local} (whole nodes)")
    local = min(local, gpus)
    chosen = checked_limits(limits)
    hw = Hardware.coerce(hardware)
    hw.require("peak_tflops", "memory_GBps", "memory_GiB")
    eff = Efficiency.coerce(efficiency)
    shared = shared_training(chosen)
    rows = candidates(model, gpus, local, batch, chosen, shared)
    top = chosen["top"]
    import pandas as pd

    # Tables in the order of their floor (``search_bounds``); with ``top``, stop at the first whose floor is above the
    # top-th best step simulated so far: no row there can rank. Per table: the memory of every set-up and a lower
    # bound of the step of those that fit; set-ups are simulated in the order of that bound, where it is below the
    # next table's floor (or, at the end, below the top-th best).
    groups = tables(rows)
    keys = list(groups)
    if top is not None and keys:
        floors = TableFloors(model, rows, local, shared, hw, eff)
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
        setups = table_setups(model, key, {k: v[members] for k, v in rows.items()}, local, shared)
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
    result = result.assign(**frame_bands(result, shared.engine, hw.family, gpus, int(model.seq_length)))
    result.attrs.update(hardware=hw, model=model, gpus=gpus)
    pruned += pruned_fitting
    return LayoutSearch(result, model, gpus, local, hw, shared, searched, searched - pruned - pending.fitting, pruned)


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
