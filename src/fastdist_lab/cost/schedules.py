"""Pipeline schedules as tables: every pipeline rank's compute actions in order, in torch's notation.

``schedule(kind, pipeline_parallel, num_microbatches, virtual_pipeline_stages=1)`` returns a
``PipelineSchedule``; ``.actions(rank)`` lists that rank's actions as torch.distributed.pipelining writes them
(``"0F3"``: stage 0, forward, micro-batch 3; ``B`` a full backward, ``I`` the backward of the input, ``W`` the
backward of the weights). The tables are written here, in pure Python, and held equal to torch's own schedule
classes (``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble`` of
``torch.distributed.pipelining.schedules``, their compute actions in order) by ``tests/cost/test_schedules.py``,
which sweeps sizes against ``_schedule_visualizer.get_schedule_ops``: the cost model stays importable and fast
without torch (building a table here takes microseconds; torch's takes about 15 ms, mostly mocking its stage).

- ``gpipe`` (Huang et al. 2019): every forward, then every backward.
- ``1f1b`` (Narayanan et al. 2021, Section 2.2.1; PipeDream-Flush): rank ``r`` runs ``min(m, pp - r)`` forwards,
  then alternates one backward and one forward, then the remaining backwards; what ``Schedule1F1B`` executes.
- ``interleaved-1f1b`` (Narayanan et al. 2021, Section 2.2.2): ``v`` model chunks per rank, stage ``s`` on rank
  ``s % pp``; micro-batches go in rounds of ``m // max(1, m // pp)`` (torch's flexible rule, which needs ``m`` a
  multiple of the number of rounds), warm-up ``(v - 1) * round + 2 (pp - 1 - r)`` forwards.
- ``zero-bubble`` (Qi et al. 2023, ZB-H1 with ``v = 1``, its interleaved form with ``v > 1``): as interleaved
  1F1B with warm-up ``(v - 1) * round + (pp - 1 - r)``, the backward split into ``I`` and ``W``; rank ``r``
  defers its first ``r`` weight backwards into the bubble at the end.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .errors import CostError, positive_int
from .training import MULTI_STAGE_SCHEDULES, SCHEDULES

if TYPE_CHECKING:
    import pandas as pd

ACTION_KINDS: tuple[str, ...] = ("F", "B", "I", "W")
"""Forward, full backward, backward of the input, backward of the weights (torch's ``_ComputationType``)."""


class Action(NamedTuple):
    """One compute action of a pipeline rank: ``stage`` (global stage index), ``kind`` and ``microbatch``."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


class PipelineSchedule:
    """The compute actions of every pipeline rank in order (build with ``schedule``).

    ``num_stages`` is ``pipeline_parallel * virtual_pipeline_stages``; stage ``s`` runs on rank
    ``s % pipeline_parallel``. ``actions(rank)`` gives torch's notation, ``steps(rank)`` the ``Action`` tuples.
    """

    def __init__(self, kind: str, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int) -> None:
        self.kind = kind
        self.pipeline_parallel = pipeline_parallel
        self.num_microbatches = num_microbatches
        self.virtual_pipeline_stages = virtual_pipeline_stages
        self.table: tuple[tuple[Action, ...], ...] = tuple(
            _rank_actions(self, rank) for rank in range(pipeline_parallel)
        )

    @property
    def num_stages(self) -> int:
        """Stages (model chunks) over all ranks: ``pipeline_parallel * virtual_pipeline_stages``."""
        return self.pipeline_parallel * self.virtual_pipeline_stages

    def rank_of(self, stage: int) -> int:
        """The pipeline rank that runs ``stage``."""
        return stage % self.pipeline_parallel

    def steps(self, rank: int) -> tuple[Action, ...]:
        """Rank ``rank``'s compute actions in order, as ``Action`` tuples."""
        if not 0 <= rank < self.pipeline_parallel:
            raise CostError(f"rank={rank!r} is not a pipeline rank of 0..{self.pipeline_parallel - 1}")
        return self.table[rank]

    def actions(self, rank: int) -> list[str]:
        """Rank ``rank``'s compute actions in order in torch's notation, e.g. ``['0F0', '0F1', '0B0', ...]``."""
        return [str(action) for action in self.steps(rank)]

    def in_flight(self) -> np.ndarray:
        """Micro-batches whose activations each stage holds at once at its rank's peak, one entry per stage.

        Walking each rank's actions in order, a forward adds one micro-batch to its stage and the action that
        ends its backward (``B``, or ``W`` when the backward is split) removes it; the rank's peak is the
        position where the sum over its stages is largest (ties: the earliest). 1F1B gives ``min(m, pp - r)``
        (Narayanan et al. 2021, Section 2.2.1), GPipe ``m``, interleaved 1F1B its warm-up plus one on rank 0.
        """
        counts = self.stage_counts()
        peak = np.zeros(self.num_stages, dtype=np.int64)
        for rank, matrix in enumerate(counts):
            if len(matrix):
                best = int(np.argmax(matrix.sum(axis=1)))
                peak[rank :: self.pipeline_parallel] = matrix[best]
        return peak

    def stage_counts(self) -> list[np.ndarray]:
        """Per rank, a matrix (one row per action, one column per local stage) of micro-batches held after it."""
        return _stage_counts(self.kind, self.pipeline_parallel, self.num_microbatches, self.virtual_pipeline_stages)

    def frame(self) -> pd.DataFrame:
        """Every action as a row: ``rank``, ``position`` (order on the rank), ``stage``, ``kind``, ``microbatch``."""
        import pandas as pd

        rows = [
            (rank, position, a.stage, a.kind, a.microbatch)
            for rank, actions in enumerate(self.table)
            for position, a in enumerate(actions)
        ]
        return pd.DataFrame(rows, columns=["rank", "position", "stage", "kind", "microbatch"])

    def __repr__(self) -> str:
        return (
            f"PipelineSchedule({self.kind!r}, pipeline_parallel={self.pipeline_parallel}, "
            f"num_microbatches={self.num_microbatches}, virtual_pipeline_stages={self.virtual_pipeline_stages})"
        )


def check_schedule(kind: str, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int) -> None:
    """``CostError`` naming the value when torch's schedule class would refuse these sizes (or ours cannot)."""
    if kind not in SCHEDULES:
        raise CostError(f"schedule={kind!r} must be one of {', '.join(map(repr, SCHEDULES))}")
    pp = positive_int("pipeline_parallel", pipeline_parallel)
    m = positive_int("num_microbatches", num_microbatches)
    v = positive_int("virtual_pipeline_stages", virtual_pipeline_stages)
    if kind == "interleaved-1f1b" and v < 2:
        raise CostError(f"schedule='interleaved-1f1b' needs virtual_pipeline_stages >= 2, got {v}")
    if kind not in MULTI_STAGE_SCHEDULES and v != 1:
        raise CostError(f"schedule={kind!r} runs one stage per rank: virtual_pipeline_stages={v}")
    if kind in MULTI_STAGE_SCHEDULES:
        rounds = max(1, m // pp)
        if m % rounds:
            raise CostError(
                f"schedule={kind!r} needs num_microbatches={m} to be a multiple of its {rounds} rounds "
                f"(max(1, num_microbatches // pipeline_parallel), torch.distributed.pipelining's rule)"
            )


@functools.lru_cache(maxsize=512)
def schedule(
    kind: str, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int = 1
) -> PipelineSchedule:
    """The table of pipeline schedule ``kind`` (``SCHEDULES``) for these sizes (cached).

    Example:
        >>> schedule("1f1b", 2, 3).actions(1)
        ['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']
    """
    check_schedule(kind, pipeline_parallel, num_microbatches, virtual_pipeline_stages)
    return PipelineSchedule(kind, int(pipeline_parallel), int(num_microbatches), int(virtual_pipeline_stages))


def _rank_actions(table: PipelineSchedule, rank: int) -> tuple[Action, ...]:
    pp, m, v = table.pipeline_parallel, table.num_microbatches, table.virtual_pipeline_stages
    if table.kind == "gpipe":
        return tuple([Action(rank, "F", i) for i in range(m)] + [Action(rank, "B", i) for i in range(m)])
    if table.kind == "1f1b":
        warmup = min(m, pp - rank)
        actions = [Action(rank, "F", i) for i in range(warmup)]
        for i in range(m):
            actions.append(Action(rank, "B", i))
            if warmup + i < m:
                actions.append(Action(rank, "F", warmup + i))
        return tuple(actions)
    return _looped_actions(pp, m, v, rank, zero_bubble=table.kind == "zero-bubble")


def _looped_actions(pp: int, m: int, v: int, rank: int, zero_bubble: bool) -> tuple[Action, ...]:
    """Interleaved 1F1B or its zero-bubble form on one rank: warm-up forwards, one forward and one backward at a
    time, the remaining backwards (and, zero bubble, the deferred weight backwards)."""
    per_round = m // max(1, m // pp)
    warmup = min((v - 1) * per_round + (1 if zero_bubble else 2) * (pp - 1 - rank), m * v)
    steady = m * v - warmup
    backward_kind = "I" if zero_bubble else "B"

    def forward_stage(step: int) -> int:
        return (step // per_round) % v * pp + rank

    def backward_stage(step: int) -> int:
        return (v - 1 - (step - warmup) // per_round % v) * pp + rank

    issued: dict[tuple[str, int], int] = defaultdict(int)
    actions: list[Action] = []

    def add(stage: int, kind: str) -> None:
        actions.append(Action(stage, kind, issued[kind, stage]))
        issued[kind, stage] += 1

    backward_steps: list[int] = []
    weights_done = 0
    for step in range(m * v + warmup):
        if step < warmup + steady:
            add(forward_stage(step), "F")
        if step >= warmup:
            add(backward_stage(step), backward_kind)
            backward_steps.append(step)
            if zero_bubble and step - warmup >= rank:
                add(backward_stage(backward_steps[weights_done]), "W")
                weights_done += 1
    while zero_bubble and weights_done < len(backward_steps):
        add(backward_stage(backward_steps[weights_done]), "W")
        weights_done += 1
    return tuple(actions)


@functools.lru_cache(maxsize=512)
def _stage_counts(kind: str, pp: int, m: int, v: int) -> list[np.ndarray]:
    table = schedule(kind, pp, m, v)
    releasing = "W" if kind == "zero-bubble" else "B"
    result = []
    for rank, actions in enumerate(table.table):
        held = np.zeros(v, dtype=np.int64)
        rows = np.zeros((len(actions), v), dtype=np.int64)
        for position, action in enumerate(actions):
            local = (action.stage - rank) // pp
            if action.kind == "F":
                held[local] += 1
            elif action.kind == releasing:
                held[local] -= 1
            rows[position] = held
        result.append(rows)
    return result
