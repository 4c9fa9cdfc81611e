"""A rank's expert groups: the four expert dims of a layout with experts, taken from the rank's pool beside the
dense ones, and the check of any dim's group as the pool holds it (no communication).

Fast-LLM's ``DistributedConfig`` (commit 91b28fab) has no experts, so ``Distributed`` builds the nine dense dims from
its config and this module the expert dims from the ``Layout`` (``Layout.groups``: Megatron-Core's expert rank
generator over the Layout's order, ``fastdist_lab.experts``). The pool makes one group per distinct member list, so an
expert group with the members of a dense group (say ``expert_tensor`` = ``tensor`` when the expert-tensor size is the
tensor size) is that group's object, created once. A dense layout (``not layout.has_experts``) has no expert dims:
nothing here runs for it, and its groups and reports are what they were before experts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..config import DIM_NAMES
from ..formatting import members_text
from ..layout import Layout
from .members import layout_groups, member_tuple


def expert_dims(layout: Layout) -> tuple[str, ...]:
    """The expert dims whose groups ``layout`` has (``layout.group_dims`` beyond the nine dense ones; none for a
    dense layout)."""
    return tuple(layout.group_dims[len(DIM_NAMES) :])


def expert_members(layout: Layout | None, rank: int) -> list[tuple[int, ...]]:
    """The member tuples of ``rank``'s expert groups in ``layout`` (empty for a dense layout or ``None``)."""
    if layout is None or not layout.has_experts:
        return []
    groups = layout_groups(layout)
    return [groups[name][0][groups[name][1][rank]] for name in expert_dims(layout)]


def dim_members(distributed: Any, layout: Layout, name: str) -> tuple[Sequence[int], int]:
    """The members of ``distributed``'s group of dim ``name`` as it holds them and its group rank there: a dense dim's
    from its ``DistributedConfig`` (Fast-LLM's own), an expert dim's from ``layout``."""
    config = distributed.config
    if name in config.distributed_dims:
        dim = config.distributed_dims[name]
        return dim.global_ranks, dim.rank
    rows, index, positions = layout_groups(layout)[name]
    return rows[index[config.rank]], positions[config.rank]


def attach_expert_groups(distributed: Any, layout: Layout) -> None:
    """Get each expert dim's group of ``layout`` from ``distributed``'s pool (created on first request, reused when
    its members are those of a group the pool holds) into ``distributed.expert_groups``, timing it in
    ``group_seconds`` / ``group_created`` as ``Distributed`` does its dense dims."""
    pool = distributed.pool
    for name in expert_dims(layout):
        members, position = dim_members(distributed, layout, name)
        count = pool.created_count
        begin = time.perf_counter()
        distributed.expert_groups[name] = pool.get_process_group(members, position)
        distributed.group_seconds[name] = time.perf_counter() - begin
        distributed.group_created[name] = pool.created_count != count


def identity_problems(
    distributed: Any, name: str, expected: tuple[int, ...], position: int, layout: Layout
) -> list[str]:
    """What is wrong with dim ``name``'s group (dense or expert) as this rank's ``distributed`` holds it, against the
    ``expected`` members and this rank's ``position`` among them (empty when nothing is): the members and group rank
    it holds them as, the group object's size and group rank, and that its pool created that very object for those
    members."""
    claimed, claimed_rank = dim_members(distributed, layout, name)
    problems = []
    members = member_tuple(claimed)
    if members is not expected and members != expected:
        problems.append(f"its config gives members {members_text(claimed)}")
    if claimed_rank != position:
        problems.append(f"its config gives group rank {claimed_rank}, expected {position}")
    group = distributed.group(name)
    if group is None:
        if len(expected) != 1:
            problems.append("it has no group")
        return problems
    if group.size() != len(expected):
        problems.append(f"its group has {group.size()} members, expected {len(expected)}")
    if group.rank() != position:
        problems.append(f"its group gives it group rank {group.rank()}, expected {position}")
    record = distributed.pool.record_of(group)
    if record is None:
        problems.append("its group was not created by its pool")
    elif record.members is not expected and record.members != expected:
        problems.append(f"its group was created for members {members_text(record.members)}")
    return problems
