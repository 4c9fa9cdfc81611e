"""Member lists of process groups as the pool keys them: one tuple per distinct group, and the store prefix
(the group's name) its members agree on without talking to each other, and a layout's groups in that form
(``layout_groups``: what every rank's pool must hold)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..layout import Layout

SHARED_FROM = 64
"""Ranges of at least this many ranks convert to one shared tuple per distinct range (``member_tuple``)."""


class SharedMembers(tuple):
    """A member tuple that remembers its hash (equal to the plain tuple's, so the two mix as dictionary keys).

    Python hashes a tuple anew at every dictionary lookup, walking every element: in a simulated world of 16,384
    ranks each rank looks its world group up about ten times, which made applying a layout grow with the square
    of the world size (16,384 ranks: about 2.7 billion element hashes). A wide shared tuple hashes once.
    """

    def __new__(cls, ranks: Iterable[int]) -> SharedMembers:
        members = super().__new__(cls, ranks)
        members._hash = tuple.__hash__(members)
        return members

    def __hash__(self) -> int:
        return self._hash


@functools.lru_cache(maxsize=4096)
def _range_members(start: int, stop: int, step: int) -> tuple[int, ...]:
    return SharedMembers(range(start, stop, step))


def member_tuple(ranks: Iterable[int]) -> tuple[int, ...]:
    """``ranks`` as a tuple of Python ints. A ``range`` of at least ``SHARED_FROM`` ranks gives the same tuple
    object every time (a ``SharedMembers``, which hashes once): the ranks of a simulated world ask for the same
    wide groups thousands of times, and dictionaries compare one object with itself at once."""
    if isinstance(ranks, range):
        if len(ranks) >= SHARED_FROM:
            return _range_members(ranks.start, ranks.stop, ranks.step)
        return tuple(ranks)
    return tuple(map(int, ranks))


def group_prefix(members: tuple[int, ...], ranks: Iterable[int] = ()) -> str:
    """A store prefix determined by the member list alone (the same for every member); ``ranks`` may be the
    ``range`` the members came from (then nothing is walked)."""
    if isinstance(ranks, range) and len(ranks) > 2 and ranks.step > 0:
        return f"range_{ranks.start}_{ranks[-1] + ranks.step}_{ranks.step}"
    if len(members) > 2:
        step = members[1] - members[0]
        regular = step > 0 and members[-1] - members[0] == step * (len(members) - 1)
        if regular and members == tuple(range(members[0], members[-1] + step, step)):
            return f"range_{members[0]}_{members[-1] + step}_{step}"
    return "ranks_" + "_".join(map(str, members))


@dataclass(frozen=True)
class GroupRecord:
    """What a pool created a group as: its ``members`` (group-rank order), this rank's ``group_rank`` in it, and
    the ``name`` its store keys (its rendezvous) live under."""

    members: tuple[int, ...]
    group_rank: int
    name: str


@functools.lru_cache(maxsize=4)
def layout_groups(layout: Layout) -> dict[str, tuple[list[tuple[int, ...]], list[int], list[int]]]:
    """Per dim of ``layout.group_dims`` (the expert dims too when it has experts): every group as a tuple of ints,
    each rank's row among them and its position in its group (cached for a few layouts: the ranks of a simulated
    world share them). A group that is a progression is the tuple
    ``member_tuple`` gives for its ``range``, so the pools' keys and these are the same objects."""
    out = {}
    for name in layout.group_dims:
        groups = layout.groups(name)
        steps = np.diff(groups, axis=1) if groups.shape[1] > 1 else np.ones((groups.shape[0], 1), dtype=np.int64)
        progression = (steps == steps[:, :1]).all(axis=1) & (steps[:, 0] > 0)
        rows = [
            member_tuple(range(row[0], row[-1] + int(step[0]), int(step[0]))) if regular else tuple(row)
            for row, step, regular in zip(groups.tolist(), steps, progression.tolist())
        ]
        out[name] = (rows, layout.group_index(name).tolist(), layout.dim_rank(name).tolist())
    return out
