"""The reduction proof of ``verification.REDUCTION_TERMS``, as properties: the all-reduce of a group's members gives
``expected_reduction`` exactly when its communicator's slots hold the group's members, each at its own slot,
each checking that group of that dim; any wrong member, duplicate, wrong slot, other group or other dim shows.

Each slot's occupant contributes ``reduction_terms(dim, rank, at_slot, first)`` as ``checks.group_check.check_groups``
computes it from what the occupant believes: its own group (in a partition of the world into ordered groups, as a
layout's dim is) tells it the first member and whether it sits at its own slot.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.checks.group_check import FIRST_SPLIT, expected_reduction, reduction_terms

MAX_RANK = 2**24  # a Layout's limit: the sums must stay exact up there


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[list[int]], int, int]:
    """A dim of a world: its ordered groups of equal size (a partition of ``offset + range(n)``), the dim's
    number and the index of the group under check."""
    size = draw(st.integers(2, 8))
    count = draw(st.integers(1, 6))
    offset = draw(st.integers(0, MAX_RANK - size * count))
    ranks = draw(st.permutations(range(offset, offset + size * count)))
    groups = [list(ranks[i * size : (i + 1) * size]) for i in range(count)]
    return groups, draw(st.integers(0, 8)), draw(st.integers(0, count - 1))


def contributions(occupants: list[int], groups: list[list[int]], dim: int, dims: dict[int, int] | None = None):
    """What each slot's occupant all-reduces: it believes in its own group of the partition (of dim ``dims[slot]``
    when given, else ``dim``)."""
    group_of = {rank: group for group in groups for rank in group}
    out = []
    for slot, rank in enumerate(occupants):
        believed = group_of[rank]
        at_slot = slot < len(believed) and believed[slot] == rank
        out.append(reduction_terms((dims or {}).get(slot, dim), rank, at_slot, believed[0]))
    return out


def reduced(terms: list[list[int]]) -> list[int]:
    return [sum(column) for column in zip(*terms)]


@given(worlds())
def test_the_true_members_give_the_expected_reduction(world):
    groups, dim, index = world
    group = groups[index]
    assert reduced(contributions(group, groups, dim)) == expected_reduction(dim, group)


@given(worlds(), st.data())
def test_a_wrong_member_changes_the_sums(world, data):
    groups, dim, index = world
    group = groups[index]
    outsiders = [rank for other in groups for rank in other if rank not in group]
    if not outsiders:
        outsiders = [groups[0][0] + len(group) * len(groups)]  # a rank of no group of this dim
        groups = [*groups, [outsiders[0]]]
    slot = data.draw(st.integers(0, len(group) - 1))
    occupants = list(group)
    occupants[slot] = data.draw(st.sampled_from(outsiders))
    assert reduced(contributions(occupants, groups, dim)) != expected_reduction(dim, group)


@given(worlds(), st.data())
def test_a_duplicate_member_changes_the_sums(world, data):
    groups, dim, index = world
    group = groups[index]
    slot, twice = data.draw(st.permutations(range(len(group))))[:2]
    occupants = list(group)
    occupants[slot] = group[twice]
    assert reduced(contributions(occupants, groups, dim)) != expected_reduction(dim, group)


@given(worlds(), st.data())
def test_members_in_another_order_change_the_sums(world, data):
    groups, dim, index = world
    group = groups[index]
    occupants = data.draw(st.permutations(group).filter(lambda order: list(order) != group))
    assert reduced(contributions(list(occupants), groups, dim)) != expected_reduction(dim, group)


@given(worlds(), st.data())
def test_a_member_checking_another_dim_changes_the_sums(world, data):
    groups, dim, index = world
    group = groups[index]
    slot = data.draw(st.integers(0, len(group) - 1))
    other = data.draw(st.integers(0, 8).filter(lambda d: d != dim))
    assert reduced(contributions(group, groups, dim, {slot: other})) != expected_reduction(dim, group)


@given(worlds(), st.data())
def test_any_occupants_give_the_expected_sums_only_when_they_are_the_group(world, data):
    groups, dim, index = world
    group = groups[index]
    everyone = [rank for other in groups for rank in other]
    occupants = data.draw(st.lists(st.sampled_from(everyone), min_size=len(group), max_size=len(group)))
    same = reduced(contributions(occupants, groups, dim)) == expected_reduction(dim, group)
    assert same == (occupants == group)


@given(st.integers(0, MAX_RANK - 1), st.integers(0, 8))
def test_a_first_member_enters_as_two_halves(first, dim):
    high, low = divmod(first, FIRST_SPLIT)
    assert reduction_terms(dim, first, True, first) == [1, first, 1, dim, dim**2, high, high**2, low, low**2]


def test_no_sum_overflows_int64_at_the_largest_world():
    # The widest group (every rank of a 2**24-rank world) and a group starting at the last ranks.
    for members in (range(MAX_RANK), range(MAX_RANK - FIRST_SPLIT - 1, MAX_RANK)):
        assert all(0 <= value < 2**63 for value in expected_reduction(8, members))
