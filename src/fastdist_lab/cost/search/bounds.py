"""The search's schedule tables and the bounds that let it skip most of them.

``search`` prices set-ups one schedule table at a time (``table_setups``: the rows sharing a schedule, pipeline
size, virtual stages and micro-batch count, as one ``Setups``). Before it prices a table it knows a floor of every
step in it (``TableFloors``), so that with ``top`` it can stop at the first table whose floor is above the
``top``-th best step already simulated: no row there can rank (branch and bound over tables, exact).

The floor of a row is the largest of things no schedule can beat (a rank runs one action at a time; a micro-batch
goes forward through the chunks in order and back in reverse), from the compute and exposed tensor and expert
communication of its actions (``compute.stage_components``' parts that sit on an action's own time):

- the mean pipeline rank's work: ``m`` micro-batches of the whole model's actions over ``pp`` ranks;
- each rank's: it cannot start before micro-batch 0's forward has passed the chunks before its first one, then runs
  its own ``m`` forwards and backwards, and after the last backward of its first chunk the gradient still goes back
  through every chunk below (their backwards, or the input halves ``I`` of a split backward);
- rank 0's: none of chunk 0's ``m`` backwards starts before micro-batch 0 has gone forward through every chunk and
  back through every chunk above chunk 0.

All leave out what depends on the rank order or the schedule (sequence-data and data-parallel exposure, pipeline
sends, the gradient tail, the bubble beyond what these bounds see), so they stay below the simulated step; the expert
all-to-all is priced on the tightest placement any order gives (data-first: an expert group on the fewest nodes).
``tests/cost/test_search_bounds.py`` checks the floor against every simulated row of whole searches and that the
pruned search returns the rows of the unpruned one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...setup import Efficiency, Hardware, Training, Transformer, schedule_kind
from ..formulas.compute import end_times, layer_times, moe_times
from ..formulas.moe import chunk_moe_layers
from ..formulas.setup_columns import (
    PlacementOnDemand,
    Setups,
    chunk_layers,
    expert_spreads,
    masked_spreads,
    packed_keys,
)

TableKey = tuple[str, int, int, int]
"""A schedule table: ``(schedule, pipeline size, virtual stages, micro-batches)``."""

FLOOR_COLUMNS: tuple[str, ...] = (
    "tensor_parallel",
    "sequence_data_parallel",
    "micro_batch_size",
    "recompute",
    "sequence_tensor_parallel",
    "expert_parallel",
    "expert_tensor_parallel",
)
"""The set-up columns a row's per-layer compute depends on (its floor's ``config``)."""


def table_setups(model: Transformer, key: TableKey, rows: dict[str, np.ndarray], local: int,
                 shared: Training | dict[str, Any]) -> Setups:  # fmt: skip
    """The ``Setups`` of the rows sharing one schedule table ``key`` (``search``'s columns) and the ``shared``
    training set-up (with the table's schedule, virtual stages and micro-batches; its fields by name are taken too);
    the placements are computed when first read (memory needs none)."""
    kind, pp, v, m = key
    shared = shared if isinstance(shared, Training) else Training(**shared)
    n = len(rows["tensor_parallel"])
    tp = rows["tensor_parallel"].astype(np.int64)
    first = rows["pipeline_first"].astype(bool)
    sdp, dp = rows["sequence_data_parallel"].astype(np.int64), rows["data_parallel"].astype(np.int64)
    ep, etp = rows["expert_parallel"].astype(np.int64), rows["expert_tensor_parallel"].astype(np.int64)
    training = shared.replace(schedule=kind, virtual_pipeline_stages=v, num_microbatches=m)
    return Setups(
        model=model, training=training, pipeline_parallel=pp, chunk_layers=chunk_layers(model.num_layers, pp, v, None),
        tensor_parallel=tp, data_parallel=dp, sequence_data_parallel=sdp,
        micro_batch_size=rows["micro_batch_size"].astype(np.int64),
        sequence_parallel=rows["sequence_tensor_parallel"].astype(bool) & (tp > 1),
        recompute=rows["recompute"].astype(np.int64), zero_stage=rows["zero_stage"].astype(np.int64),
        flash_attention=np.full(n, training.flash_attention),
        overlap_data_parallel=np.full(n, training.overlap_data_parallel),
        overlap_tensor_parallel=np.full(n, training.overlap_tensor_parallel),
        overlap_pipeline_parallel=np.full(n, training.overlap_pipeline_parallel),
        expert_parallel=ep, expert_tensor_parallel=etp,
        placement=PlacementOnDemand(tp, pp, sdp, dp, local, first),
        expert_placement=PlacementOnDemand(tp, pp, sdp, dp, ep, etp, local, first, function=expert_spreads)
        if model.is_moe and n else None,
    )  # fmt: skip


def subset_setups(setups: Setups, mask: np.ndarray) -> Setups:
    """The set-ups where ``mask`` holds (placements not yet computed stay so, for those rows only)."""
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
        if isinstance(spreads, PlacementOnDemand):
            changes[name] = spreads.subset(mask)
        elif spreads is not None:
            changes[name] = masked_spreads(spreads, mask)
    return dataclasses.replace(setups, **changes)


class TableFloors:
    """Floors of the step of every row of ``rows`` (``search``'s columns), table by table (``floor(key, members)``,
    seconds per sequence of the global batch). Per-layer times are computed once per distinct ``FLOOR_COLUMNS``
    row, on one stage holding the whole model with the expert groups on the fewest nodes."""

    def __init__(self, model: Transformer, rows: dict[str, np.ndarray], local: int, shared: Training | dict[str, Any],
                 hardware: Hardware, efficiency: Efficiency) -> None:  # fmt: skip
        self.model = model
        self.rows = rows
        _, first, inverse = np.unique(packed_keys([rows[name] for name in FLOOR_COLUMNS]), return_index=True,
                                      return_inverse=True)  # fmt: skip
        self.config = inverse.reshape(-1)
        """Row -> index of its distinct ``FLOOR_COLUMNS`` values."""
        configs = {name: rows[name][first].astype(np.int64) for name in FLOOR_COLUMNS}
        n = len(first)
        # a stage of the smallest data size these sizes allow; the expert groups data-first (their fewest nodes)
        configs["data_parallel"] = np.lcm(
            configs["sequence_data_parallel"],
            configs["expert_parallel"] * configs["expert_tensor_parallel"] // np.gcd(
                configs["expert_parallel"] * configs["expert_tensor_parallel"], configs["tensor_parallel"]),
        )  # fmt: skip
        configs.update(zero_stage=np.zeros(n, dtype=np.int64), pipeline_first=np.zeros(n, dtype=bool))
        one = table_setups(model, ("1f1b", 1, 1, 1), configs, local, shared)
        layer, ends = layer_times(one, hardware, efficiency), end_times(one, hardware, efficiency)
        tensor_back = np.minimum(layer["tensor_backward"], layer["tensor_input"])  # B, or I of a split backward
        self.layer_forward = layer["forward"] + layer["tensor_forward"]
        self.layer_all = self.layer_forward + layer["backward"] + layer["recompute"] + tensor_back
        # what a backward passes on to the chunk before it no later than: I of a split backward (B less W)
        self.layer_input = layer["backward"] - layer["weight"] + layer["recompute"] + tensor_back
        self.moe_forward = self.moe_all = self.moe_input = np.zeros(n)
        if model.is_moe:
            times, full = moe_times(one, hardware, efficiency), one.recompute == 2
            self.moe_forward = times["forward"] + times["expert_forward"]
            recompute = np.where(full, self.moe_forward, 0.0)
            self.moe_all = self.moe_forward + times["backward"] + times["expert_backward"] + recompute
            self.moe_input = times["backward"] - times["weight"] + times["expert_backward"] + recompute
        self.embedding_forward = ends["embedding_forward"] + ends["embedding_tensor_forward"]
        self.embedding_input = ends["embedding_backward"] + ends["embedding_tensor_backward"]
        self.embedding_all = self.embedding_forward + self.embedding_input
        self.output_forward = ends["output_forward"] + ends["output_tensor_forward"]
        self.output_input = ends["output_backward"] + ends["output_tensor_backward"]
        self.output_all = self.output_forward + self.output_input

    def floor(self, key: TableKey, members: np.ndarray) -> np.ndarray:
        """The floor of each row ``members`` of table ``key``, in seconds per sequence of its global batch."""
        kind, pp, v, m = key
        chunks = chunk_layers(self.model.num_layers, pp, v, None).astype(np.float64)
        moe = chunk_moe_layers(self.model, chunks.astype(np.int64)).astype(np.float64)
        configs, inverse = np.unique(self.config[members], return_inverse=True)  # priced once per distinct config

        def per_chunk(layer: np.ndarray, expert: np.ndarray, embedding: np.ndarray, output: np.ndarray) -> np.ndarray:
            values = chunks * layer[configs, None] + moe * expert[configs, None]  # (configs, chunks)
            values[:, 0] += embedding[configs]
            values[:, -1] += output[configs]
            return values

        forward = per_chunk(self.layer_forward, self.moe_forward, self.embedding_forward, self.output_forward)
        every = per_chunk(self.layer_all, self.moe_all, self.embedding_all, self.output_all)
        # what each backward must finish before the chunk below can start its own: I of a split backward, else B
        passed = every - forward
        if schedule_kind(kind).split_backward:
            passed = per_chunk(self.layer_input, self.moe_input, self.embedding_input, self.output_input)
        n = len(configs)
        mean = m * every.sum(axis=1) / pp
        # rank 0 runs chunk 0's backwards one after the other, none before micro-batch 0's chain is back
        chain = forward.sum(axis=1) + passed[:, 1:].sum(axis=1) + m * passed[:, 0]
        # each rank starts no earlier than micro-batch 0's forward reaches its first chunk (chunk ``rank``), runs
        # all its actions, and the last backward of its first chunk still has the way back to chunk 0 to go
        fill = (np.cumsum(forward, axis=1) - forward)[:, :pp]
        drain = (np.cumsum(passed, axis=1) - passed)[:, :pp]
        work = m * every.reshape(n, v, pp).sum(axis=1)
        before_w = m * (forward + passed).reshape(n, v, pp).sum(axis=1)
        ranks = (fill + np.maximum(work, before_w + drain)).max(axis=1)
        bound = np.maximum(np.maximum(mean, chain), ranks)[inverse.reshape(-1)]
        return bound / self.rows["global_batch_size"][members]
