"""Many training set-ups of one model as columns: what the memory and step-time formulas read, one entry each.

``Setups`` holds numpy arrays (one entry per set-up) for the sizes that vary and plain values for what the
set-ups share: the model, the pipeline schedule, pipeline size, virtual stages, micro-batches and the layers of
each stage. ``CostReport`` builds a one-row ``Setups`` for its layout; ``search`` builds one per schedule table
with thousands of rows, so the formulas are written once, for arrays.

Where groups sit on nodes follows the layout's rank numbering (Fast-LLM at commit 91b28fab, ``docs/formulas.md``):
the axis order is ``layout.LAYOUT_AXES`` and the strides ``numbering.axis_strides``, the numbering core's, never
written again here. ``placement`` computes from those strides, for every group of a dim, the
most nodes one group spans and its members per node, and whether each pipeline link crosses nodes; tests hold it
to the ``Layout``'s real groups.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ...errors import CostError
from ...layout import LAYOUT_AXES
from ...numbering import axis_strides
from ...setup import RECOMPUTE, Engine, ScheduleKind, Training, Transformer
from .moe import chunk_moe_layers, expert_placement


@dataclass(frozen=True)
class Spread:
    """How the groups of one dim sit on nodes: ``nodes`` (the most one group spans) and ``per_node`` (members of
    a group on one node, ``size / nodes``), as arrays over set-ups."""

    nodes: np.ndarray
    per_node: np.ndarray

    @property
    def inter_node(self) -> np.ndarray:
        """Whether the groups span nodes."""
        return self.nodes > 1


@functools.lru_cache(maxsize=4096)
def group_spread(stride: int, size: int, local_world_size: int) -> int:
    """The most nodes one group spans when its members are ``start + i * stride`` (``i < size``) and group starts
    are every rank whose coordinate along the group's axis is 0 (the pattern repeats every
    ``lcm(local_world_size, stride * size)`` ranks, so only those starts are looked at)."""
    if size == 1:
        return 1
    block = stride * size
    if block <= local_world_size and local_world_size % block == 0:
        return 1
    if stride % local_world_size == 0:
        return size
    period = math.lcm(local_world_size, block)
    starts = (np.arange(stride)[None, :] + np.arange(0, period, block)[:, None]).ravel()
    nodes = (starts[:, None] + stride * np.arange(size)[None, :]) // local_world_size
    return int(((nodes[:, 1:] != nodes[:, :-1]).sum(axis=1) + 1).max())


@functools.lru_cache(maxsize=4096)
def link_crossings(stride: int, size: int, local_world_size: int) -> tuple[bool, ...]:
    """For each pipeline link ``j`` (rank ``j`` of a group to rank ``j + 1``, the last back to the first), whether
    it joins two nodes in some group (members ``start + i * stride``, starts as in ``group_spread``)."""
    block = stride * size
    period = math.lcm(local_world_size, block)
    starts = (np.arange(stride)[None, :] + np.arange(0, period, block)[:, None]).ravel()
    nodes = (starts[:, None] + stride * np.arange(size)[None, :]) // local_world_size
    return tuple(bool(x) for x in (nodes != np.roll(nodes, -1, axis=1)).any(axis=0))


def placement(
    tensor_parallel: Any,
    pipeline_parallel: int,
    sequence_data_parallel: Any,
    data_parallel: Any,
    local_world_size: Any,
    pipeline_first: Any,
) -> dict[str, Any]:
    """``Spread`` of the tensor, sequence_data and data groups and the pipeline links' crossings, ``(n, pp)``,
    for set-ups given as arrays (or numbers) of the layout's sizes and order."""
    pp = int(pipeline_parallel)
    tensor, sequence, data = (x if isinstance(x, int) else np.asarray(x)
                              for x in (tensor_parallel, sequence_data_parallel, data_parallel))  # fmt: skip
    # The strides of the layout's axis order (the numbering core's rule; plain ints for one set-up, fast):
    sizes = {"tensor": tensor, "sequence_data": sequence, "batch_data": data // sequence, "pipeline": pp}
    strides = {order: axis_strides(LAYOUT_AXES[order], sizes) for order in (False, True)}
    # the data group runs over sequence-data then batch-data, adjacent axes: its stride is sequence-data's
    if isinstance(pipeline_first, bool) and all(isinstance(x, int) for x in (tensor, sequence, data, local_world_size)):
        return _one_placement(tensor, sequence, data, pp, local_world_size, strides[pipeline_first])
    stride_of = {axis: np.where(np.asarray(pipeline_first, dtype=bool), strides[True][axis], strides[False][axis])
                 for axis in ("sequence_data", "pipeline")}  # fmt: skip
    tp, sdp, dp, local, data_stride, pipeline_stride = (np.atleast_1d(x) for x in np.broadcast_arrays(
        np.asarray(tensor), np.asarray(sequence), np.asarray(data), np.asarray(local_world_size),
        stride_of["sequence_data"], stride_of["pipeline"],
    ))  # fmt: skip

    def each(function: Callable[..., Any], *columns: np.ndarray) -> np.ndarray:
        # once per distinct row of ``columns`` (a search repeats a few hundred of them over many set-ups)
        _, first, inverse = np.unique(packed_keys(list(columns)), return_index=True, return_inverse=True)
        return np.array([function(*(int(column[i]) for column in columns)) for i in first])[inverse.reshape(-1)]

    def spread(strides: np.ndarray, sizes: np.ndarray) -> Spread:
        nodes = each(group_spread, strides, sizes, local)
        return Spread(nodes=nodes, per_node=np.maximum(sizes // nodes, 1))

    links = each(lambda stride, w: link_crossings(stride, pp, w), pipeline_stride, local).astype(bool)
    return {
        "tensor": spread(np.ones_like(tp), tp),
        "sequence_data": spread(data_stride, sdp),
        "data": spread(data_stride, dp),
        "pipeline_links": links.reshape(len(tp), pp),
    }


def _one_placement(tp: int, sdp: int, dp: int, pp: int, local: int, strides: dict[str, int]) -> dict[str, Any]:
    """``placement`` of one set-up given as ints (what ``estimate`` asks), without array arithmetic."""

    def spread(stride: int, size: int) -> Spread:
        nodes = group_spread(stride, size, local)
        return Spread(nodes=np.array([nodes]), per_node=np.array([max(size // nodes, 1)]))

    return {
        "tensor": spread(1, tp),
        "sequence_data": spread(strides["sequence_data"], sdp),
        "data": spread(strides["sequence_data"], dp),
        "pipeline_links": np.array([link_crossings(strides["pipeline"], pp, local)], dtype=bool).reshape(1, pp),
    }


class PlacementOnDemand(Mapping):
    """``placement(*args)`` (or ``function(*args)``: ``expert_spreads``), computed when first read: a one-layout
    ``estimate`` needs it only for its step time, and computing it for every call was a sixth of an ``estimate``
    (issue 26); the search prices the placement of the rows it simulates only."""

    def __init__(self, *args: Any, function: Callable[..., Mapping[str, Any]] | None = None):
        self._args = args
        self._function = placement if function is None else function
        self._value: Mapping[str, Any] | None = None

    def _computed(self) -> Mapping[str, Any]:
        if self._value is None:
            self._value = self._function(*self._args)
        return self._value

    def subset(self, mask: np.ndarray) -> Mapping[str, Any]:
        """The placement of the set-ups where ``mask`` holds: still on demand when not computed yet."""
        if self._value is not None:
            return masked_spreads(self._value, mask)
        args = tuple(arg[mask] if isinstance(arg, np.ndarray) and arg.ndim >= 1 else arg for arg in self._args)
        return PlacementOnDemand(*args, function=self._function)

    def __getitem__(self, key: str) -> Any:
        return self._computed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def packed_keys(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 per row of non-negative integer ``columns`` (mixed radix), equal where the rows are equal: a
    one-dimensional ``np.unique`` over it is many times quicker than ``np.unique(..., axis=0)``."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        column = np.asarray(column).astype(np.int64)
        key = key * (int(column.max(initial=0)) + 1) + column
    return key


def masked_spreads(spreads: Mapping[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """A placement (``Spread`` or array per key) of the set-ups where ``mask`` holds."""
    return {
        key: value[mask] if isinstance(value, np.ndarray) else Spread(value.nodes[mask], value.per_node[mask])
        for key, value in spreads.items()
    }


def layout_expert_sizes(layout: Any) -> tuple[int, int]:
    """``(EP, ETP)`` of a ``Layout`` (ETP resolved: the tensor size when unset); ``(1, tensor size)`` for a layout
    object without expert fields."""
    sizes = getattr(layout, "expert_sizes", None)
    if sizes is None:
        return 1, int(layout.tensor_parallel)
    return int(sizes["expert"]), int(sizes["expert_tensor"])


def expert_spreads(
    tensor_parallel: Any, pipeline_parallel: int, sequence_data_parallel: Any, data_parallel: Any,
    expert_parallel: Any, expert_tensor_parallel: Any, local_world_size: Any, pipeline_first: Any,
) -> dict[str, Spread]:  # fmt: skip
    """Per expert dim, the ``Spread`` of the expert groups of set-ups given as arrays or numbers (read off the
    ``Layout``'s own expert groups: ``moe.expert_placement``)."""
    found = expert_placement(
        tensor_parallel, pipeline_parallel, sequence_data_parallel, data_parallel, expert_parallel,
        expert_tensor_parallel, local_world_size, pipeline_first,
    )  # fmt: skip
    return {dim: Spread(nodes=nodes, per_node=per_node) for dim, (nodes, per_node) in found.items()}


@functools.lru_cache(maxsize=4096)
def chunk_layers(
    num_layers: int, pipeline_parallel: int, virtual_stages: int, explicit: tuple[int, ...] | None
) -> np.ndarray:
    """Layers of each stage (model chunk) in stage order: ``explicit`` (checked), or ``num_layers`` split evenly
    over ``pipeline_parallel * virtual_stages`` chunks, the first ``num_layers % chunks`` one layer more (cached and
    read-only: every estimate reads it twice, every search table once)."""
    chunks = pipeline_parallel * virtual_stages
    if explicit is not None:
        if len(explicit) != chunks or sum(explicit) != num_layers:
            raise CostError(
                f"layers_per_stage={explicit!r} must give {chunks} stages (pipeline_parallel * "
                f"virtual_pipeline_stages) summing to num_layers={num_layers}"
            )
        return _read_only(np.array(explicit, dtype=np.int64))
    if chunks > num_layers:
        raise CostError(
            f"pipeline_parallel * virtual_pipeline_stages = {chunks} stages is more than num_layers={num_layers}"
        )
    return _read_only(num_layers // chunks + (np.arange(chunks) < num_layers % chunks).astype(np.int64))


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _shared(name: str, doc: str) -> property:
    """A ``Setups`` property reading the shared ``Training``'s field ``name``."""
    return property(lambda setups: getattr(setups.training, name), doc=f"{doc} (``Training.{name}``, shared)")


@dataclass(frozen=True)
class Setups:
    """Set-ups of one model sharing a schedule table; arrays have one entry per set-up.

    Shared: ``model``, ``training`` (the training set-up they share: its schedule, virtual stages and micro-batches,
    the bytes per weight, gradient and optimizer state, the expert load, the engine and ``torch_compile``; the fields
    that vary per set-up are the arrays below, never read from it), ``pipeline_parallel`` and ``chunk_layers``
    (layers of each stage, stage ``s`` on pipeline rank ``s % pipeline_parallel``). Per set-up: ``tensor_parallel``,
    ``data_parallel`` (sequence-data x batch-data), ``sequence_data_parallel``, ``micro_batch_size``,
    ``sequence_parallel`` (sequence tensor parallel as it takes effect), ``recompute`` (index into ``RECOMPUTE``),
    ``zero_stage``, ``flash_attention``, the three ``overlap_*`` flags, ``expert_parallel`` and
    ``expert_tensor_parallel`` (resolved: the tensor size where the layout leaves it unset), and ``placement``
    (``placement()``'s result, or a ``PlacementOnDemand`` computing it when first read). For a mixture of experts,
    ``expert_placement`` (``moe.expert_placement``'s result: per expert dim, nodes spanned and members per node;
    ``None`` for a dense model). The shared fields the formulas read are properties (``schedule_spec`` and
    ``engine_spec``: the records the training carries).
    """

    model: Transformer
    training: Training
    pipeline_parallel: int
    chunk_layers: np.ndarray
    tensor_parallel: np.ndarray
    data_parallel: np.ndarray
    sequence_data_parallel: np.ndarray
    micro_batch_size: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    zero_stage: np.ndarray
    flash_attention: np.ndarray
    overlap_data_parallel: np.ndarray
    overlap_tensor_parallel: np.ndarray
    overlap_pipeline_parallel: np.ndarray
    expert_parallel: np.ndarray
    expert_tensor_parallel: np.ndarray
    placement: Mapping[str, Any]
    expert_placement: Mapping[str, Any] | None = None

    @classmethod
    def single(cls, layout: Any, model: Transformer, training: Training, sequence_parallel: bool,
               numbers: bool = False) -> Setups:  # fmt: skip
        """The one set-up of ``training`` on ``layout`` (already checked by ``Sizes.of``): one-entry arrays, or with
        ``numbers`` plain numbers (``memory.as_numbers``' form, built directly: what ``estimate``'s memory reads)."""
        pp, v = int(layout.pipeline_parallel), training.virtual_pipeline_stages
        tp, sdp, dp = int(layout.tensor_parallel), int(layout.sequence_data_parallel), int(layout.data_parallel)
        ep, etp = layout_expert_sizes(layout)
        if numbers:
            one = lambda value, dtype=int: dtype(value)  # noqa: E731
        else:
            one = lambda value, dtype=np.int64: np.array([value], dtype=dtype)  # noqa: E731
        return cls(
            model=model,
            training=training,
            pipeline_parallel=pp,
            chunk_layers=chunk_layers(model.num_layers, pp, v, training.layers_per_stage),
            tensor_parallel=one(tp),
            data_parallel=one(dp),
            sequence_data_parallel=one(sdp),
            micro_batch_size=one(training.micro_batch_size),
            sequence_parallel=one(sequence_parallel, bool),
            recompute=one(RECOMPUTE.index(training.recompute)),
            zero_stage=one(training.zero_stage),
            flash_attention=one(training.flash_attention, bool),
            overlap_data_parallel=one(training.overlap_data_parallel, bool),
            overlap_tensor_parallel=one(training.overlap_tensor_parallel, bool),
            overlap_pipeline_parallel=one(training.overlap_pipeline_parallel, bool),
            expert_parallel=one(ep),
            expert_tensor_parallel=one(etp),
            placement=PlacementOnDemand(tp, pp, sdp, dp, int(layout.local_world_size), bool(layout.pipeline_first)),
            expert_placement=expert_spreads(
                tp, pp, sdp, dp, ep, etp, int(layout.local_world_size), bool(layout.pipeline_first)
            ) if model.is_moe else None,
        )  # fmt: skip

    @property
    def schedule_spec(self) -> ScheduleKind:
        """The pipeline schedule's record (``ScheduleKind``)."""
        return self.training.schedule_spec

    @property
    def engine_spec(self) -> Engine:
        """The engine's record (``Engine``: its traits)."""
        return self.training.engine_spec

    schedule = _shared("schedule", "The pipeline schedule's name.")
    engine = _shared("engine", "The engine's name.")
    virtual_pipeline_stages = _shared("virtual_pipeline_stages", "Model chunks per pipeline rank.")
    bytes_per_weight = _shared("bytes_per_weight", "Bytes per weight.")
    bytes_per_gradient = _shared("bytes_per_gradient", "Bytes per gradient.")
    bytes_per_optimizer_state = _shared("bytes_per_optimizer_state", "Bytes of optimizer state per parameter.")
    expert_load_imbalance = _shared("expert_load_imbalance", "The busiest expert rank's tokens over the mean.")
    torch_compile = _shared("torch_compile", "Whether the model runs under ``torch.compile``.")

    @property
    def microbatches(self) -> int:
        """Micro-batches per step and pipeline (``Training.microbatches``)."""
        return self.training.microbatches(self.pipeline_parallel)

    @property
    def size(self) -> int:
        """Number of set-ups."""
        return int(self.tensor_parallel.shape[0])

    @property
    def num_stages(self) -> int:
        """Stages (model chunks) over all pipeline ranks."""
        return int(self.chunk_layers.shape[0])

    @property
    def tokens(self) -> np.ndarray:
        """Tokens of one sequence a rank holds: ``seq_length / sequence_data_parallel``."""
        return self.model.seq_length // self.sequence_data_parallel

    @property
    def chunk_moe_layers(self) -> np.ndarray:
        """Mixture-of-experts layers of each stage (model chunk), stage order (zeros for a dense model)."""
        return chunk_moe_layers(self.model, self.chunk_layers)

    def rank_moe_layers(self) -> np.ndarray:
        """Mixture-of-experts layers of each pipeline rank (the sum of its stages; zeros for a dense model)."""
        if not self.model.is_moe:
            return np.zeros(self.pipeline_parallel, dtype=np.int64)
        return self.chunk_moe_layers.reshape(self.virtual_pipeline_stages, self.pipeline_parallel).sum(axis=0)

    def rank_layers(self) -> np.ndarray:
        """Layers of each pipeline rank (the sum of its stages; a new array each call, which callers may change)."""
        return self._rank_layers.copy()

    @cached_property
    def _rank_layers(self) -> np.ndarray:
        return self.chunk_layers.reshape(self.virtual_pipeline_stages, self.pipeline_parallel).sum(axis=0)
