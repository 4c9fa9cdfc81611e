"""Exercises of ``notebooks/10_memory_zero_schedules.ipynb`` on pipeline schedules: the bubble's share of a step
and the micro-batches each pipeline rank keeps in flight, on 4 ranks and 8 micro-batches (forward 1, backward 2)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .grading import correct, number, numbers, wrong

PIPELINE, MICROBATCHES = 4, 8
"""Pipeline ranks and micro-batches of the schedule exercises (readable as a picture)."""

VIRTUAL = {"gpipe": 1, "1f1b": 1, "interleaved-1f1b": 2, "zero-bubble": 1}
"""Model chunks per rank of each schedule in the exercises."""


def exercise_schedule(kind: str) -> Any:
    """The ``PipelineSchedule`` of ``kind`` on ``PIPELINE`` ranks and ``MICROBATCHES`` micro-batches."""
    from ..cost import schedule

    if kind not in VIRTUAL:
        wrong(f"kind={kind!r} should be one of {', '.join(map(repr, VIRTUAL))}")
    return schedule(kind, PIPELINE, MICROBATCHES, VIRTUAL[kind])


def bubble_share(kind: str) -> float:
    """Idle share of ``kind``'s schedule: 1 - busy time / (ranks x makespan), forward 1, backward 2 per chunk."""
    from ..viz import schedule_times

    times = schedule_times(exercise_schedule(kind))
    busy = float(np.sum(times["end"] - times["start"]))
    return 1.0 - busy / (PIPELINE * times["makespan"])


def check_bubble(kind: str, share: Any) -> None:
    """Exercise: the idle share (0-1) of the ``kind`` schedule on 4 ranks and 8 micro-batches."""
    got = number("share", share)
    truth = bubble_share(kind)
    p, m, v = PIPELINE, MICROBATCHES, VIRTUAL[kind]
    if abs(got - truth) > 0.005:
        if abs(got - (p - 1) / m) < 0.005:
            wrong("(p - 1) / m is the bubble against the ideal time; the share of the whole step is "
                  "(p - 1) / (m + p - 1)")  # fmt: skip
        if got > 1:
            wrong("a share is between 0 and 1")
        hints = {
            "gpipe": "the last rank starts p - 1 forwards late and the first ends p - 1 backwards early",
            "1f1b": "1F1B reorders the work of GPipe without removing a single idle slot",
            "interleaved-1f1b": f"with v = {v} chunks per rank, each ramp step is 1/v as long",
            "zero-bubble": "the weight-gradient halves (W) fill the ramp down: only the forward's ramp stays idle",
        }
        wrong(hints[kind])
    correct(f"{kind}: {truth:.3f} of the step is idle on {p} ranks and {m} micro-batches")


def check_in_flight(kind: str, per_rank: Any) -> None:
    """Exercise: micro-batches whose activations each of the 4 pipeline ranks holds at its peak (for interleaved,
    micro-batch chunks, summed over the rank's stages), checked against ``PipelineSchedule.in_flight()``."""
    table = exercise_schedule(kind)
    peak = table.in_flight()
    truth = np.array([peak[r::PIPELINE].sum() for r in range(PIPELINE)])
    got = numbers("per_rank", per_rank).reshape(-1)
    if got.shape != truth.shape:
        wrong(f"give one number per pipeline rank ({PIPELINE}), got {got.size}")
    if not np.array_equal(got, truth):
        hints = {
            "gpipe": "GPipe runs every forward before the first backward",
            "1f1b": "rank r runs p - r forwards before its first backward, then one forward per backward",
            "interleaved-1f1b": "count chunks: the warm-up is longer by a round of micro-batches per extra chunk",
            "zero-bubble": "the backward of the input (I) does not free a micro-batch: its weight part (W) does, and "
                           "rank r defers r of them",
        }  # fmt: skip
        wrong(hints[kind])
    correct(f"{kind}: {truth.astype(int).tolist()} in flight; memory of activations grows with these counts")
