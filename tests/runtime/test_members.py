"""Member tuples as the pools key them: a wide range's tuple is shared and hashes once (``runtime.members``)."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.runtime.members import SHARED_FROM, SharedMembers, member_tuple


class CountedRank(int):
    """An int that counts how often it is hashed (a tuple's hash hashes every element)."""

    hashed = 0

    def __hash__(self) -> int:
        CountedRank.hashed += 1
        return int.__hash__(self)


def lookups(key: tuple, times: int) -> int:
    """Element hashes spent looking ``key`` up ``times`` times in a dict keyed by itself."""
    table = {key: "group"}
    CountedRank.hashed = 0
    for _ in range(times):
        assert table[key] == "group"
    return CountedRank.hashed


def test_a_shared_tuple_hashes_its_members_once_not_at_every_lookup():
    ranks = [CountedRank(rank) for rank in range(1000)]
    CountedRank.hashed = 0
    shared = SharedMembers(ranks)
    assert CountedRank.hashed == 1000  # once, when made
    assert lookups(shared, 10) == 0
    assert lookups(tuple(ranks), 10) == 10 * 1000  # a plain tuple walks its members at every hash: the cost gone


@given(
    start=st.integers(0, 10_000),
    count=st.integers(0, 3 * SHARED_FROM),
    step=st.integers(1, 64),
)
def test_member_tuple_of_a_range_is_the_plain_tuple_for_dicts_and_pickles(start, count, step):
    ranks = range(start, start + count * step, step)
    members, plain = member_tuple(ranks), tuple(ranks)
    assert members == plain and hash(members) == hash(plain)
    assert {plain: "group"}[members] == "group" and {members: "group"}[plain] == "group"
    assert list(members) == list(ranks) and all(type(rank) is int for rank in members)
    if count >= SHARED_FROM:
        assert isinstance(members, SharedMembers) and member_tuple(ranks) is members  # one object per range
    restored = pickle.loads(pickle.dumps(members))
    assert restored == plain and hash(restored) == hash(plain)
