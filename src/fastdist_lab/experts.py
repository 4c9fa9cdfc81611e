"""Expert parallelism on a layout: where expert ranks sit, and the expert groups of the whole world at once.

A mixture-of-experts layer splits its experts over ``expert_parallel`` (EP) ranks and each expert's weights over
``expert_tensor_parallel`` (ETP) ranks; the ranks of a pipeline stage that hold the same experts form the expert
data-parallel group (EDP = stage size / (ETP * EP)). Fast-LLM at commit 91b28fab has no expert parallelism, so the
lab follows Megatron-Core's expert rank generator (``initialize_model_parallel``: a second ``RankGenerator`` with
``tp=expert_tensor_parallel_size``, ``ep=expert_model_parallel_size``, ``dp=expert_data_parallel_size``, the same
``pp``, ``cp=1``), written over the Layout's own rank order:

    Number the ranks of each pipeline stage in increasing global rank (``i`` = 0 .. stage size - 1). Rank ``i`` of
    the stage has expert-tensor rank ``i % ETP``, expert rank ``(i // ETP) % EP`` and expert-data rank
    ``i // (ETP * EP)``.

The ranks of one stage are the Layout's ``tensor_and_data`` group, whose group rank is exactly ``i``, so the rule
needs no second copy of the axis order. It is Megatron-Core's wherever Megatron-Core accepts the set-up in the
Layout's order: with the pipeline last (data-first, Megatron's default ``tp-cp-ep-dp-pp``) a stage is one block of
consecutive ranks; with the pipeline first (``tp-pp-cp-ep-dp``) Megatron-Core refuses unless its expert pipeline
groups are the dense ones and the expert data-parallel size is the dense one, and then both give the same groups
(``docs/formulas.md``, "Experts"; ``tests/test_layout_experts.py`` checks it on every drawn set-up).

Pure numpy, no torch: a 2**20-rank world's expert groups in tens of milliseconds.
"""

from __future__ import annotations

import numpy as np

from .errors import LayoutError
from .numbering import RankGrid
from .validation import is_bool

EXPERT_DIM_AXES: dict[str, tuple[str, ...]] = {
    "expert": ("expert",),
    "expert_tensor": ("expert_tensor",),
    "expert_data": ("expert_data",),
    "expert_tensor_and_expert": ("expert_tensor", "expert"),
}
"""The expert dims and the expert axes each spans (first fastest): Megatron-Core's expert-model-parallel,
expert-tensor-parallel, expert-data-parallel and expert-tensor-and-model-parallel groups."""

EXPERT_DIM_NAMES: tuple[str, ...] = tuple(EXPERT_DIM_AXES)
"""The four expert dims, in order."""

EXPERT_AXES: tuple[str, ...] = ("expert_tensor", "expert", "expert_data", "pipeline")
"""The axes of a stage's expert numbering, fastest first, with the pipeline stage slowest."""

EXPERT_GROUP_DIMS: tuple[str, ...] = tuple(name for name, axes in EXPERT_DIM_AXES.items() if len(axes) == 1)
"""The expert dims of one axis each (``expert``, ``expert_tensor``, ``expert_data``): the groups the training step
runs on and whose spread over nodes the cost model reads."""


def held_experts(slot: int, expert_parallel: int, num_experts: int | None = None) -> str:
    """Which experts expert rank ``slot`` of ``expert_parallel`` (EP) holds, in words.

    With ``num_experts`` (E, a multiple of EP) the experts themselves: each expert rank holds E / EP consecutive
    experts, ``slot * E / EP`` to ``(slot + 1) * E / EP - 1``, as Megatron-Core numbers its local experts
    (``"experts 4 .. 7 of 16"``). Without it, only the slot (``"expert slot 1 of 4"``): a layout does not know E.

        >>> held_experts(1, 4, 16), held_experts(1, 4)
        ('experts 4 .. 7 of 16', 'expert slot 1 of 4')
    """
    if num_experts is None:
        return f"expert slot {slot} of {expert_parallel}"
    if is_bool(num_experts) or not isinstance(num_experts, int) or num_experts < 1 or num_experts % expert_parallel:
        raise LayoutError(
            f"num_experts={num_experts!r} must be a positive multiple of expert_parallel={expert_parallel}"
        )
    local = num_experts // expert_parallel
    if local == 1:
        return f"expert {slot} of {num_experts}"
    return f"experts {slot * local} .. {(slot + 1) * local - 1} of {num_experts}"


def expert_sizes(tensor_parallel: int, stage_size: int, expert_parallel: int, expert_tensor_parallel: int | None):
    """``(ETP, EP, EDP)`` for a stage of ``stage_size`` ranks (ETP ``None``: the tensor size, as Megatron-Core
    defaults), or a ``LayoutError`` naming the values and what must divide what."""
    etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
    if stage_size % (etp * expert_parallel):
        raise LayoutError(
            f"expert_tensor_parallel={etp} * expert_parallel={expert_parallel} = {etp * expert_parallel} must divide "
            f"the ranks of one pipeline stage, tensor_parallel * data_parallel = {stage_size}"
        )
    return etp, expert_parallel, stage_size // (etp * expert_parallel)


class ExpertGrid:
    """The expert numbering of a whole world: every rank's expert coordinates and the expert groups.

    ``stages`` is the layout's ``tensor_and_data`` groups (one row per pipeline stage, members in increasing rank,
    rows in stage order); ``error`` the exception raised for a bad dim name or rank.
    """

    def __init__(self, stages: np.ndarray, etp: int, ep: int, *, error: type[ValueError] = LayoutError):
        pp, stage = stages.shape
        self.sizes = {"expert_tensor": etp, "expert": ep, "expert_data": stage // (etp * ep), "pipeline": pp}
        self.error = error
        self.grid = RankGrid(EXPERT_AXES, tuple(self.sizes.values()), error=error)
        self.global_of = np.asarray(stages).reshape(-1)
        """Global rank of each position of the expert numbering (stage-major, stage-local index within)."""
        position = np.empty_like(self.global_of)
        position[self.global_of] = np.arange(self.global_of.size, dtype=self.global_of.dtype)
        self.position_of = position
        """Position in the expert numbering of each global rank (the inverse of ``global_of``)."""

    def axes(self, name: str) -> tuple[str, ...]:
        """The expert axes dim ``name`` spans, first fastest."""
        try:
            return EXPERT_DIM_AXES[name]
        except (KeyError, TypeError):
            raise self.error(f"dim={name!r} is not an expert dim; use one of {', '.join(EXPERT_DIM_NAMES)}") from None

    def _row_order(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The grid's rows of ``name`` in global ranks, and each grid row's place once rows go by first member."""
        rows = self.grid.arrange(self.global_of, self.axes(name))
        order = np.argsort(rows[:, 0], kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(order.size, dtype=order.dtype)
        return rows[order], place

    def groups(self, name: str) -> np.ndarray:
        """Every group of expert dim ``name``: one row per group, members in group-rank order, rows by first member
        (members of a group lie in one stage and grow with their group rank)."""
        return self._row_order(name)[0]

    def group_index(self, name: str) -> np.ndarray:
        """Each global rank's row in ``groups(name)`` (array indexed by global rank)."""
        _, place = self._row_order(name)
        return place[self.grid.group_index(self.axes(name))][self.position_of]

    def dim_rank(self, name: str) -> np.ndarray:
        """Each global rank's index inside its group of expert dim ``name`` (array indexed by global rank)."""
        return self.grid.group_rank(self.axes(name))[self.position_of]

    def coordinates_of(self, rank: int) -> dict[str, int]:
        """Global rank ``rank``'s ``expert_tensor``, ``expert`` and ``expert_data`` ranks and its ``pipeline`` stage."""
        return self.grid.coordinates_of(int(self.position_of[rank]))

    def coordinate(self, axis: str) -> np.ndarray:
        """Each global rank's expert-tensor, expert or expert-data rank (``axis`` one of the expert axes)."""
        return self.grid.coordinate(axis)[self.position_of]
