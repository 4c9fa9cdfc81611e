"""A pipeline schedule's table run with per-action durations: when each action starts and ends.

Each rank runs its actions in the table's order; an action also waits for the one it needs from another stage:
a forward for the same micro-batch's forward on the previous stage, a backward (``B`` or ``I``) for the next
stage's backward (the last stage's for its own forward: the loss), a ``W`` for its own ``I``. Crossing ranks
costs the point-to-point time of that pipeline link. This is the longest path through the table's dependency
graph, computed once per graph "level" (actions whose inputs are all known) for many durations at once: the
search runs one table for thousands of set-ups in a few numpy operations per level.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...errors import CostError
from ...setup import ScheduleKind
from .schedules import ACTION_KINDS, schedule


@dataclass(frozen=True)
class TableGraph:
    """A schedule's actions as flat arrays (in rank order, then table order) and their dependencies.

    ``prev`` and ``dep`` index the action a rank ran before and the action this one needs (``size``: none);
    ``link`` is the pipeline link (from rank ``j`` to ``j + 1``, cyclically) a dependency crosses, or -1;
    ``levels`` groups the actions whose two inputs come from earlier levels; ``first_forward`` and
    ``last_backward`` (ranks x local stages) index each local stage's first forward and its last action that
    completes weight gradients (``B``, or ``W`` when the backward is split).
    """

    rank: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    microbatch: np.ndarray
    prev: np.ndarray
    dep: np.ndarray
    link: np.ndarray
    levels: tuple[np.ndarray, ...]
    first_forward: np.ndarray
    last_backward: np.ndarray

    @property
    def size(self) -> int:
        """Number of actions."""
        return int(self.rank.shape[0])


@functools.lru_cache(maxsize=256)
def table_graph(
    kind: str | ScheduleKind, pipeline_parallel: int, num_microbatches: int, virtual_pipeline_stages: int = 1
) -> TableGraph:
    """The ``TableGraph`` of ``schedule(kind, ...)`` (cached)."""
    table = schedule(kind, pipeline_parallel, num_microbatches, virtual_pipeline_stages)
    pp, last = table.pipeline_parallel, table.num_stages - 1
    actions = [(rank, a) for rank, row in enumerate(table.table) for a in row]
    index = {(a.stage, a.kind, a.microbatch): i for i, (_, a) in enumerate(actions)}
    n = len(actions)
    rank = np.array([r for r, _ in actions], dtype=np.int64)
    stage = np.array([a.stage for _, a in actions], dtype=np.int64)
    kinds = np.array([ACTION_KINDS.index(a.kind) for _, a in actions], dtype=np.int64)
    microbatch = np.array([a.microbatch for _, a in actions], dtype=np.int64)
    prev, dep, link = (np.full(n, fill, dtype=np.int64) for fill in (n, n, -1))  # n: none; -1: no link
    split = table.spec.split_backward
    backward = "I" if split else "B"
    for i, (r, a) in enumerate(actions):
        if i and actions[i - 1][0] == r:
            prev[i] = i - 1
        if a.kind == "F" and a.stage > 0:
            dep[i] = index[a.stage - 1, "F", a.microbatch]
            link[i] = (a.stage - 1) % pp
        elif a.kind in ("B", "I"):
            if a.stage == last:
                dep[i] = index[a.stage, "F", a.microbatch]
            else:
                dep[i] = index[a.stage + 1, backward, a.microbatch]
                link[i] = a.stage % pp
        elif a.kind == "W":
            dep[i] = index[a.stage, "I", a.microbatch]
    link[rank[np.minimum(dep, n - 1)] == rank] = -1  # same rank (pp == 1): no point-to-point
    v = table.virtual_pipeline_stages
    first_forward = np.zeros((pp, v), dtype=np.int64)
    last_backward = np.zeros((pp, v), dtype=np.int64)
    weights = "W" if split else "B"
    for local in range(v):
        for r in range(pp):
            first_forward[r, local] = index[local * pp + r, "F", 0]  # last_backward: the last in the rank's order
            last_backward[r, local] = max(index[local * pp + r, weights, i] for i in range(table.num_microbatches))
    levels = _levels(prev, dep, rank, n)
    return TableGraph(rank, stage, kinds, microbatch, prev, dep, link, levels, first_forward, last_backward)


def _levels(prev: np.ndarray, dep: np.ndarray, rank: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Level of each action: one more than the larger level of its two inputs (0 for none); grouped."""
    level = np.full(n + 1, -1, dtype=np.int64)  # level[n]: the missing input
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    ends = np.r_[starts[1:], n]
    pointer = starts.copy()
    placed = 0
    while placed < n:
        progress = False
        for j in range(len(pointer)):
            i = pointer[j]
            while i < ends[j] and (dep[i] == n or level[dep[i]] >= 0):
                level[i] = 1 + max(level[prev[i]], level[dep[i]])
                i += 1
                placed += 1
                progress = True
            pointer[j] = i
        if not progress:
            raise CostError("the pipeline schedule deadlocks: an action waits for one that never runs")
    level = level[:n]
    order = np.argsort(level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    return tuple(np.split(order, bounds))


@dataclass(frozen=True)
class Timeline:
    """Start and end of every action of a ``TableGraph`` for ``n`` sets of durations (arrays ``(n, actions)``).

    ``makespan``: when the last action ends; ``busy``: per rank, the seconds it computes; ``link_into``: the
    point-to-point seconds on the longest path into each action; ``critical_link``: those of the last action.
    """

    graph: TableGraph
    start: np.ndarray
    end: np.ndarray
    makespan: np.ndarray
    busy: np.ndarray
    link_into: np.ndarray
    critical_link: np.ndarray


def run(graph: TableGraph, durations: np.ndarray, link_seconds: np.ndarray) -> Timeline:
    """Run ``graph`` with ``durations`` (``(n, stages, 4)``: seconds of one ``F``/``B``/``I``/``W`` of each stage)
    and ``link_seconds`` (``(n, pipeline_parallel)``: one message over link ``j``, rank ``j`` to ``j + 1``)."""
    durations = np.asarray(durations, dtype=np.float64)
    links = np.asarray(link_seconds, dtype=np.float64)
    rows, size = durations.shape[0], graph.size
    flat = durations.reshape(rows, -1)[:, graph.stage * len(ACTION_KINDS) + graph.kind]
    hop = np.where(graph.link >= 0, links[:, np.maximum(graph.link, 0)], 0.0)
    end = np.zeros((rows, size + 1))
    via = np.zeros((rows, size + 1))  # point-to-point seconds on the critical path into each action
    for idx in graph.levels:
        before, needed = graph.prev[idx], graph.dep[idx]
        after_rank = end[:, before]
        after_dep = end[:, needed] + hop[:, idx]
        waits = after_dep > after_rank
        end[:, idx] = np.where(waits, after_dep, after_rank) + flat[:, idx]
        via[:, idx] = np.where(waits, via[:, needed] + hop[:, idx], via[:, before])
    end = end[:, :size]
    last = np.argmax(end, axis=1)
    busy = np.zeros((rows, int(graph.rank.max()) + 1))
    np.add.at(busy.T, graph.rank, flat.T)
    return Timeline(
        graph=graph,
        start=end - flat,
        end=end,
        makespan=end[np.arange(rows), last],
        busy=busy,
        link_into=via[:, :size],
        critical_link=via[np.arange(rows), last],
    )
