"""The pipeline schedules the lab knows, written once: for each, torch's class, how many stages a rank holds, whether
the backward is split, and whether the search tries it.

``SCHEDULE_KINDS`` is the registry (name -> ``ScheduleKind``); ``SCHEDULES`` its names. ``check_schedule`` is the
one validation of a schedule with its sizes, used by ``Training``, ``cost.schedule`` and ``checks.check_training``
alike; ``schedule_kind`` is the one place a schedule's name is looked up (a ``Training`` carries the record it names:
``Training.schedule_spec``). Every schedule is priced by the cost model and run by the training step. Pure Python: no
torch.

- ``gpipe``: torch's ``ScheduleGPipe`` (Huang et al. 2019), every forward then every backward;
- ``1f1b``: ``Schedule1F1B`` (Narayanan et al. 2021, Section 2.2.1; PipeDream-Flush);
- ``interleaved-1f1b``: ``ScheduleInterleaved1F1B`` (Narayanan et al. 2021, Section 2.2.2), ``v >= 2`` model
  chunks per rank;
- ``looped-bfs``: ``ScheduleLoopedBFS`` (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"), ``v`` chunks
  per rank, every micro-batch of the earlier chunk first;
- ``zero-bubble``: ``ScheduleInterleavedZeroBubble`` (Qi et al. 2023, ZB-H1 with ``v = 1``, ZB1P with ``v > 1``),
  the backward split into ``I`` (input) and ``W`` (weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..lazy import warn_deprecated
from ..validation import check_int

MAX_TABLE_ACTIONS = 2**18
"""The most compute actions (forwards and backwards of every micro-batch on every stage) a step's pipeline table may
hold: 262,144, above the largest published run priced (Narayanan et al. 2021's 529.6B on 560 GPUs, 1,120
micro-batches over 35 stages of 3 chunks: 235,200), a few seconds of a step's time on one core. A longer table is
refused before anything is built."""

MAX_MICROBATCHES = 2**14
"""The most micro-batches of a step (16,384): a step runs them one after the other, so their count bounds the
length of its table's critical path."""


@dataclass(frozen=True, eq=False)
class ScheduleKind:
    """One pipeline schedule: its ``name`` (as the CLI spells it), torch's class in
    ``torch.distributed.pipelining`` (``torch_class``), whether a rank holds several (virtual) stages
    (``multi_stage``; at least ``min_virtual_stages`` of them), whether the backward is split into input and weight
    halves (``split_backward``), whether its micro-batches go in rounds (``rounds``: torch's rule that they be a
    multiple of ``max(1, m // pp)``), the paper it comes from (``source``), and whether ``search`` tries it when not
    told which schedules to try (``searched``). Every schedule is priced and runnable (``priced`` and
    ``runnable``, which always said so, are deprecated). A record is its own identity (compared and hashed as the
    object); pickled by name, so one that crosses a process is the registry's own."""

    name: str
    torch_class: str
    multi_stage: bool
    min_virtual_stages: int
    split_backward: bool
    rounds: bool
    source: str
    searched: bool = True

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return schedule_kind, (self.name,)

    @property
    def priced(self) -> bool:
        """Deprecated (always ``True``: the cost model prices every schedule)."""
        warn_deprecated("fastdist_lab.cost.ScheduleKind.priced", "nothing (every schedule is priced)")
        return True

    @property
    def runnable(self) -> bool:
        """Deprecated (always ``True``: the training step runs every schedule)."""
        warn_deprecated("fastdist_lab.cost.ScheduleKind.runnable", "nothing (every schedule runs)")
        return True

    def stages(self, pipeline_parallel: int, virtual_pipeline_stages: int) -> int:
        """Stages over all pipeline ranks: ``pipeline_parallel`` times the virtual stages when ``multi_stage``."""
        return pipeline_parallel * (virtual_pipeline_stages if self.multi_stage else 1)

    def actions(self, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int) -> int:
        """The compute actions of the table: a forward and a backward (or its two halves) per micro-batch and stage."""
        return (3 if self.split_backward else 2) * num_microbatches * self.stages(pipeline_parallel,
                                                                                  virtual_pipeline_stages)


SCHEDULE_KINDS: dict[str, ScheduleKind] = {
    kind.name: kind
    for kind in (
        ScheduleKind("gpipe", "ScheduleGPipe", False, 1, False, False, "Huang et al. 2019"),
        ScheduleKind("1f1b", "Schedule1F1B", False, 1, False, False, "Narayanan et al. 2021, 2.2.1"),
        ScheduleKind(
            "interleaved-1f1b", "ScheduleInterleaved1F1B", True, 2, False, True, "Narayanan et al. 2021, 2.2.2"
        ),
        ScheduleKind("looped-bfs", "ScheduleLoopedBFS", True, 1, False, False, "Lamy-Poirier 2023", False),
        ScheduleKind("zero-bubble", "ScheduleInterleavedZeroBubble", True, 1, True, True, "Qi et al. 2023"),
    )
}  # fmt: skip
"""Every pipeline schedule by name (``ScheduleKind``). ``looped-bfs`` is
searched only when asked for (``search(..., schedule=...)``, ``--schedule``): it holds every micro-batch of every
chunk at its peak, as GPipe does, and its tables (``m * v`` forwards a rank) made the whole search 4x slower."""

SCHEDULES: tuple[str, ...] = tuple(SCHEDULE_KINDS)
"""The schedule names, as the CLI spells them."""

MULTI_STAGE_SCHEDULES: tuple[str, ...] = tuple(name for name, kind in SCHEDULE_KINDS.items() if kind.multi_stage)
"""Schedules that accept several (virtual) stages per pipeline rank."""


SEARCHED_SCHEDULES: tuple[str, ...] = tuple(name for name, kind in SCHEDULE_KINDS.items() if kind.searched)
"""The schedules ``search`` tries when not told which."""


def schedule_kind(name: str | ScheduleKind, *, error: type[ValueError] = CostError) -> ScheduleKind:
    """The ``ScheduleKind`` called ``name`` (a ``ScheduleKind`` is itself); ``error`` naming the value and the choices
    otherwise."""
    if isinstance(name, ScheduleKind):
        return name
    kind = SCHEDULE_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise error(f"schedule={name!r} must be one of {', '.join(map(repr, SCHEDULES))}")
    return kind


def check_schedule(
    kind: str | ScheduleKind,
    pipeline_parallel: int,
    num_microbatches: int,
    virtual_pipeline_stages: int = 1,
    *,
    run: bool = False,
    error: type[ValueError] = CostError,
) -> int:
    """The number of stages of schedule ``kind`` with these sizes, or ``error`` (one line naming the value) when
    torch's schedule class would refuse them. ``run``: also what torch refuses only when the schedule runs
    (``Schedule1F1B`` needs at least as many micro-batches as stages; the cost model prices fewer, as Megatron-LM
    runs them).

    Example:
        >>> check_schedule("interleaved-1f1b", 4, 8, 2)
        8
    """
    spec = schedule_kind(kind, error=error)
    pp = check_int("pipeline_parallel", pipeline_parallel, minimum=1, error=error)
    m = check_int("num_microbatches", num_microbatches, minimum=1, maximum=MAX_MICROBATCHES, error=error)
    v = check_int("virtual_pipeline_stages", virtual_pipeline_stages, minimum=1, error=error)
    name = spec.name
    if not spec.multi_stage and v != 1:
        raise error(f"schedule={name!r} runs one stage per rank: virtual_pipeline_stages={v} must be 1")
    if v < spec.min_virtual_stages:
        raise error(f"schedule={name!r} needs virtual_pipeline_stages >= {spec.min_virtual_stages}, got {v}")
    if spec.rounds and m % max(1, m // pp):
        raise error(
            f"schedule={name!r} needs num_microbatches={m} to be a multiple of its {max(1, m // pp)} rounds "
            f"(max(1, num_microbatches // pipeline_parallel), torch.distributed.pipelining's rule)"
        )
    actions = spec.actions(pp, m, v)
    if actions > MAX_TABLE_ACTIONS:
        raise error(
            f"num_microbatches={m} over {spec.stages(pp, v)} stages of schedule={name!r} is {actions:,} actions, more "
            f"than the {MAX_TABLE_ACTIONS:,} a step's table may hold (fewer micro-batches or stages)"
        )
    if run and name == "1f1b" and m < pp:
        raise error(f"schedule='1f1b' needs num_microbatches >= pipeline_parallel={pp} to run, got {m}")
    return spec.stages(pp, v)
