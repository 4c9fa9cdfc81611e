"""Pipeline schedules as tables: every pipeline rank's compute actions in order, in torch's notation.

``schedule(kind, pipeline_parallel, num_microbatches, virtual_pipeline_stages=1)`` returns a
``PipelineSchedule``; ``.actions(rank)`` lists that rank's actions as torch.distributed.pipelining writes them
(``"0F3"``: stage 0, forward, micro-batch 3; ``B`` a full backward, ``I`` the backward of the input, ``W`` the
backward of the weights). The tables are written here, in pure Python, and held equal to torch's own schedule
classes (``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
``ScheduleInterleavedZeroBubble`` of
``torch.distributed.pipelining.schedules``, their compute actions in order) by ``tests/cost/test_schedules.py``,
which sweeps sizes against ``_schedule_visualizer.get_schedule_ops``: the cost model stays importable and fast
without torch (building a table here takes microseconds; torch's takes about 15 ms, mostly mocking its stage).

- ``gpipe`` (Huang et al. 2019): every forward, then every backward.
- ``1f1b`` (Narayanan et al. 2021, Section 2.2.1; PipeDream-Flush): rank ``r`` runs ``min(m, pp - r)`` forwards,
  then alternates one backward and one forward, then the remaining backwards; what ``Schedule1F1B`` executes.
- ``interleaved-1f1b`` (Narayanan et al. 2021, Section 2.2.2): ``v`` model chunks per rank, stage ``s`` on rank
  ``s % pp``; micro-batches go in rounds of ``m // max(1, m // pp)`` (torch's flexible rule, which needs ``m`` a
  multiple of the number of rounds), warm-up ``(v - 1) * round + 2 (pp - 1 - r)`` forwards.
- ``looped-bfs`` (Lamy-Poirier 2023, breadth-first): rank ``r`` runs every micro-batch's forward on its first
  chunk, then on its next, ...; then the backwards, last chunk first and the micro-batches in reverse.
- ``zero-bubble`` (Qi et al. 2023, ZB-H1 with ``v = 1``, its interleaved form with ``v > 1``): as interleaved
  1F1B with warm-up ``(v - 1) * round + (pp - 1 - r)``, the backward split into ``I`` and ``W``; rank ``r``
  defers its first ``r`` weight backwards into the bubble at the end.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...errors import CostError
from ...setup import ScheduleKind, check_schedule, schedule_kind

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

    def __init__(self, kind: str | ScheduleKind, pipeline_parallel: int, num_microbatches: int,
                 virtual_pipeline_stages: int) -> None:  # fmt: skip
        self.spec = schedule_kind(kind)
        """The schedule's record (``ScheduleKind``)."""
        self.kind = self.spec.name
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
        """Per rank, a matrix (one row per action, one column per local stage) of micro-batches held after it.

        Only the actions up to the rank's peak matter, and after the warm-up the pattern repeats every round of
        micro-batches, so past three rounds (``1f1b``: ``pp + 2`` micro-batches) the counts come from the same
        table with three rounds: the rows differ, the peak does not (``tests/cost/test_schedules.py``).
        """
        return stage_counts(self.spec, self.pipeline_parallel, self.num_microbatches, self.virtual_pipeline_stages)

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


@functools.lru_cache(maxsize=512)
def schedule(
    kind: str | ScheduleKind, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int = 1
) -> PipelineSchedule:
    """The table of pipeline schedule ``kind`` (a name of ``SCHEDULES``, or its ``ScheduleKind``) for these sizes
    (cached); ``CostError`` from ``check_schedule`` naming the value torch's class would refuse.

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
    if table.kind == "looped-bfs":
        stages = range(rank, pp * v, pp)
        forwards = [Action(stage, "F", i) for stage in stages for i in range(m)]
        return tuple(forwards + [Action(stage, "B", i) for stage in reversed(stages) for i in reversed(range(m))])
    return _looped_actions(pp, m, v, rank, table.spec.split_backward, m // max(1, m // pp))


def _looped_actions(pp: int, m: int, v: int, rank: int, zero_bubble: bool, per_round: int) -> tuple[Action, ...]:
    """Interleaved 1F1B or its zero-bubble form on one rank (``per_round`` micro-batches per round): warm-up
    forwards, one forward and one backward at a time, the remaining backwards (and, zero bubble, the deferred
    weight backwards)."""
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


@functools.lru_cache(maxsize=4096)
def stage_counts(kind: str | ScheduleKind, pp: int, m: int, v: int) -> list[np.ndarray]:
    """``PipelineSchedule.stage_counts`` without building the table (cached; sizes already checked): each rank's
    forwards (+1 on their local stage) and releasing backwards (-1) as arrays, in the table's order."""
    spec = schedule_kind(kind)
    kind = spec.name
    result = []
    for rank in range(pp):
        if kind in ("gpipe", "1f1b"):
            signs = np.r_[np.ones(m), -np.ones(m)] if kind == "gpipe" else _one_f_one_b_signs(min(m, pp + 2), pp, rank)
            chunks = np.zeros(len(signs), dtype=np.int64)
        elif kind == "looped-bfs":  # every forward of every chunk, then the backwards, last chunk first
            chunks = np.r_[np.repeat(np.arange(v), m), np.repeat(np.arange(v)[::-1], m)]
            signs = np.r_[np.ones(m * v), -np.ones(m * v)]
        else:
            per_round = m // max(1, m // pp)
            chunks, signs = _looped_events(pp, per_round * min(m // per_round, 3), v, rank,
                                           spec.split_backward, per_round)  # fmt: skip
        held = np.zeros((len(chunks), v), dtype=np.int64)
        held[np.arange(len(chunks)), chunks] = signs
        result.append(np.cumsum(held, axis=0))
    return result


def _one_f_one_b_signs(m: int, pp: int, rank: int) -> np.ndarray:
    """+1 / -1 of rank ``rank``'s forwards and backwards under 1F1B (``_rank_actions``'s order)."""
    warmup = min(m, pp - rank)
    steady = np.ones(2 * m - warmup)
    steady[0::2] = -1  # backward, forward, backward, ...
    steady[2 * (m - warmup) :] = -1  # the last backwards
    return np.r_[np.ones(warmup), steady]


def _looped_events(
    pp: int, m: int, v: int, rank: int, zero_bubble: bool, per_round: int
) -> tuple[np.ndarray, np.ndarray]:
    """Local stage and +1 / -1 of every forward and releasing backward (``B``, or ``W`` under zero bubble) of one
    rank under ``_looped_actions``, in its order, computed with arrays."""
    warmup = min((v - 1) * per_round + (1 if zero_bubble else 2) * (pp - 1 - rank), m * v)
    steps = np.arange(m * v + warmup)
    forward = steps < m * v
    backward = steps >= warmup
    fwd_chunk = steps // per_round % v
    bwd_chunk = v - 1 - (steps - warmup) // per_round % v
    # Each step issues at most a forward, a backward and (zero bubble) a weight backward, in that order.
    slots = np.full((len(steps), 3), -1, dtype=np.int64)
    signs = np.zeros((len(steps), 3))
    slots[forward, 0], signs[forward, 0] = fwd_chunk[forward], 1
    if not zero_bubble:
        slots[backward, 1], signs[backward, 1] = bwd_chunk[backward], -1
        drain = np.zeros(0, dtype=np.int64)
    else:
        weighted = steps >= warmup + rank
        slots[weighted, 2], signs[weighted, 2] = bwd_chunk[steps[weighted] - rank], -1
        drain = bwd_chunk[np.arange(max(len(steps) - rank, warmup), len(steps))]
        slots[backward, 1], signs[backward, 1] = bwd_chunk[backward], 0  # ``I`` releases nothing
    keep = slots.ravel() >= 0
    chunks = np.r_[slots.ravel()[keep], drain]
    return chunks, np.r_[signs.ravel()[keep], -np.ones(len(drain))]
