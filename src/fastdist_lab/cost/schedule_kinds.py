"""The pipeline schedules the lab knows, written once: for each, torch's class, how many stages a rank holds, whether
the backward is split, and whether the cost model prices it and the training step runs it.

``SCHEDULE_KINDS`` is the registry (name -> ``ScheduleKind``); ``SCHEDULES`` its names. ``check_schedule`` is the
one validation of a schedule with its sizes, used by ``cost.Training``, ``cost.schedule`` and
``checks.check_training`` alike. Pure Python: no torch.

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

from ..errors import CostError
from ..validation import check_int


@dataclass(frozen=True)
class ScheduleKind:
    """One pipeline schedule: its ``name`` (as the CLI spells it), torch's class in
    ``torch.distributed.pipelining`` (``torch_class``), whether a rank holds several (virtual) stages
    (``multi_stage``; at least ``min_virtual_stages`` of them), whether the backward is split into input and weight
    halves (``split_backward``), whether its micro-batches go in rounds (``rounds``: torch's rule that they be a
    multiple of ``max(1, m // pp)``), whether the cost model prices it (``priced``) and the training step runs it
    (``runnable``), the paper it comes from (``source``), and whether ``search`` tries it when not told which
    schedules to try (``searched``)."""

    name: str
    torch_class: str
    multi_stage: bool
    min_virtual_stages: int
    split_backward: bool
    rounds: bool
    priced: bool
    runnable: bool
    source: str
    searched: bool = True

    def stages(self, pipeline_parallel: int, virtual_pipeline_stages: int) -> int:
        """Stages over all pipeline ranks: ``pipeline_parallel`` times the virtual stages when ``multi_stage``."""
        return pipeline_parallel * (virtual_pipeline_stages if self.multi_stage else 1)


SCHEDULE_KINDS: dict[str, ScheduleKind] = {
    kind.name: kind
    for kind in (
        ScheduleKind("gpipe", "ScheduleGPipe", False, 1, False, False, True, True, "Huang et al. 2019"),
        ScheduleKind("1f1b", "Schedule1F1B", False, 1, False, False, True, True, "Narayanan et al. 2021, 2.2.1"),
        ScheduleKind(
            "interleaved-1f1b", "ScheduleInterleaved1F1B", True, 2, False, True, True, True,
            "Narayanan et al. 2021, 2.2.2",
        ),
        ScheduleKind(
            "looped-bfs", "ScheduleLoopedBFS", True, 1, False, False, True, True, "Lamy-Poirier 2023", False,
        ),
        ScheduleKind(
            "zero-bubble", "ScheduleInterleavedZeroBubble", True, 1, True, True, True, True, "Qi et al. 2023",
        ),
    )
}  # fmt: skip
"""Every pipeline schedule by name (``ScheduleKind``); every one is both priced and runnable. ``looped-bfs`` is
searched only when asked for (``search(..., schedule=...)``, ``--schedule``): it holds every micro-batch of every
chunk at its peak, as GPipe does, and its tables (``m * v`` forwards a rank) made the whole search 4x slower."""

SCHEDULES: tuple[str, ...] = tuple(SCHEDULE_KINDS)
"""The schedule names, as the CLI spells them."""

MULTI_STAGE_SCHEDULES: tuple[str, ...] = tuple(name for name, kind in SCHEDULE_KINDS.items() if kind.multi_stage)
"""Schedules that accept several (virtual) stages per pipeline rank."""


def schedule_kind(name: str, *, error: type[ValueError] = CostError) -> ScheduleKind:
    """The ``ScheduleKind`` called ``name``; ``error`` naming the value and the choices otherwise."""
    kind = SCHEDULE_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise error(f"schedule={name!r} must be one of {', '.join(map(repr, SCHEDULES))}")
    return kind


def check_schedule(
    kind: str,
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
    m = check_int("num_microbatches", num_microbatches, minimum=1, error=error)
    v = check_int("virtual_pipeline_stages", virtual_pipeline_stages, minimum=1, error=error)
    if not spec.multi_stage and v != 1:
        raise error(f"schedule={kind!r} runs one stage per rank: virtual_pipeline_stages={v} must be 1")
    if v < spec.min_virtual_stages:
        raise error(f"schedule={kind!r} needs virtual_pipeline_stages >= {spec.min_virtual_stages}, got {v}")
    if spec.rounds and m % max(1, m // pp):
        raise error(
            f"schedule={kind!r} needs num_microbatches={m} to be a multiple of its {max(1, m // pp)} rounds "
            f"(max(1, num_microbatches // pipeline_parallel), torch.distributed.pipelining's rule)"
        )
    if run and kind == "1f1b" and m < pp:
        raise error(f"schedule='1f1b' needs num_microbatches >= pipeline_parallel={pp} to run, got {m}")
    return spec.stages(pp, v)
