"""Member lists of process groups as the pool keys them: one tuple per distinct group, and the store prefix
(the group's name) its members agree on without talking to each other."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

SHARED_FROM = 64
"""Ranges of at least this many ranks convert to one shared tuple per distinct range (``member_tuple``)."""


@functools.lru_cache(maxsize=4096)
def _range_members(start: int, stop: int, step: int) -> tuple[int, ...]:
    return tuple(range(start, stop, step))


def member_tuple(ranks: Iterable[int]) -> tuple[int, ...]:
    """``ranks`` as a tuple of Python ints. A ``range`` of at least ``SHARED_FROM`` ranks gives the same tuple
    object every time: the ranks of a simulated world ask for the same wide groups thousands of times, and
    dictionaries compare one object with itself at once."""
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
