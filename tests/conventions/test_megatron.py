"""Megatron-Core RankGenerator semantics against an independent loop implementation and hand-checked cases."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab.conventions import Megatron, MegatronParallelState
from fastdist_lab.errors import ConventionError

TOKENS = ("tp", "cp", "ep", "dp", "pp")
APPEND_ORDER = ("tp", "pp", "dp", "ep", "cp")  # the order Megatron appends missing tokens in


def full_order(order: str) -> list[str]:
    tokens = order.split("-")
    return tokens + [t for t in APPEND_ORDER if t not in tokens]


def loop_groups(sizes: dict[str, int], order: str, token: str) -> list[list[int]]:
    """Megatron's masked orthogonal groups, written as plain loops over coordinates."""
    tokens = full_order(order)
    dims = [sizes[t] for t in tokens]
    strides = [math.prod(dims[:i]) for i in range(len(dims))]
    wanted = set(token.split("-"))
    masked = [i for i, t in enumerate(tokens) if t in wanted]
    unmasked = [i for i, t in enumerate(tokens) if t not in wanted]
    groups = []
    for group_index in range(math.prod(dims[i] for i in unmasked)):
        base, rest = 0, group_index
        for i in unmasked:  # first unmasked axis fastest
            base += (rest % dims[i]) * strides[i]
            rest //= dims[i]
        members = []
        for rank_in_group in range(math.prod(dims[i] for i in masked)):
            offset, rest = 0, rank_in_group
            for i in masked:  # masked axes in order-string order, first fastest
                offset += (rest % dims[i]) * strides[i]
                rest //= dims[i]
            members.append(base + offset)
        groups.append(members)
    return groups


def coordinate_groups(sizes: dict[str, int], order: str, token: str) -> set[tuple[int, ...]]:
    """The same groups derived differently: ranks sharing every unmasked coordinate, sorted."""
    tokens = full_order(order)
    dims = [sizes[t] for t in tokens]
    world = math.prod(dims)
    wanted = set(token.split("-"))
    by_key: dict[tuple[int, ...], list[int]] = {}
    for rank in range(world):
        coords, rest = [], rank
        for d in dims:
            coords.append(rest % d)
            rest //= d
        key = tuple(c for c, t in zip(coords, tokens) if t not in wanted)
        by_key.setdefault(key, []).append(rank)
    return {tuple(sorted(g)) for g in by_key.values()}


@st.composite
def configurations(draw):
    sizes = {t: draw(st.integers(1, 4)) for t in TOKENS}
    if sizes["ep"] > 1 and sizes["cp"] > 1:
        sizes[draw(st.sampled_from(["ep", "cp"]))] = 1
    needed = [t for t in TOKENS if sizes[t] > 1]
    extra = [t for t in TOKENS if sizes[t] == 1 and draw(st.booleans())]
    order = draw(st.permutations(needed + extra)) if needed + extra else ["tp"]
    token_set = draw(st.sets(st.sampled_from(TOKENS), min_size=1))
    token = draw(st.permutations(sorted(token_set)))
    return sizes, "-".join(order), "-".join(token)


@settings(max_examples=400)
@given(configurations())
def test_groups_equal_loop_reimplementation(config):
    sizes, order, token = config
    m = Megatron(tp=sizes["tp"], pp=sizes["pp"], dp=sizes["dp"], cp=sizes["cp"], ep=sizes["ep"], order=order)
    assert m.get_ranks(token) == loop_groups(sizes, order, token)
    assert {tuple(g) for g in m.get_ranks(token)} == coordinate_groups(sizes, order, token)
    assert m.order == "-".join(full_order(order))
    assert m.world_size == math.prod(sizes.values())


@settings(max_examples=100)
@given(configurations())
def test_coordinates_and_rank_of_round_trip(config):
    sizes, order, _ = config
    m = Megatron(tp=sizes["tp"], pp=sizes["pp"], dp=sizes["dp"], cp=sizes["cp"], ep=sizes["ep"], order=order)
    for rank in range(m.world_size):
        coords = m.coordinates(rank)
        assert sum(coords[axis] * stride for axis, stride in m.strides.items()) == rank
        assert m.group_of("tp", rank)[coords["tp"]] == rank


def test_every_order_of_the_defaults_on_a_fixed_world():
    sizes = {"tp": 2, "cp": 2, "ep": 1, "dp": 3, "pp": 2}
    for order in itertools.permutations(["tp", "cp", "dp", "pp"]):
        order = "-".join(order)
        m = Megatron(tp=2, pp=2, dp=3, cp=2, order=order)
        for k in range(1, 5):
            for subset in itertools.combinations(["tp", "cp", "dp", "pp"], k):
                token = "-".join(reversed(subset))
                assert m.get_ranks(token) == loop_groups(sizes, order, token)


# ---------------------------------------------------------------------- hand-checked cases
def test_docstring_example_16_gpus_tp2_pp4():
    # initialize_model_parallel's docstring: 16 GPUs, tp=2, pp=4 (dp=2), default order.
    m = Megatron(tp=2, pp=4, dp=2)
    assert m.get_ranks("dp") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert m.get_ranks("tp") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert m.get_ranks("pp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_masked_generator_examples():
    # tp-pp-dp with sizes 2-2-2: dp groups [[0, 4], [1, 5], [2, 6], [3, 7]].
    assert Megatron(tp=2, pp=2, dp=2, order="tp-pp-dp").get_ranks("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # tp-dp-pp with sizes 2-3-4: the 8th dp group is [19, 21, 23], the first [0, 2, 4].
    groups = Megatron(tp=2, dp=3, pp=4, order="tp-dp-pp").get_ranks("dp")
    assert groups[0] == [0, 2, 4] and groups[1] == [1, 3, 5] and groups[7] == [19, 21, 23]


def test_context_parallel_example():
    # 8 GPUs, tp=4, cp=2: cp groups [0, 4], [1, 5], [2, 6], [3, 7].
    assert Megatron(tp=4, cp=2).get_ranks("cp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_member_order_follows_order_string_not_token():
    m = Megatron(tp=2, dp=2, cp=2, pp=1)  # tp-cp-ep-dp-pp
    assert m.get_ranks("dp-cp") == m.get_ranks("cp-dp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # in tp-dp-cp order, dp varies faster than cp inside the group
    m2 = Megatron(tp=2, dp=2, cp=2, order="tp-dp-cp-pp")
    assert m2.get_ranks("dp-cp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert m2.get_ranks("cp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert m2.get_ranks("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_named_groups_and_expert_generator():
    m = Megatron(tp=2, pp=2, dp=2, cp=2)
    named = m.named_groups()
    assert named["DATA_PARALLEL_GROUP_WITH_CP"].tolist() == m.get_ranks("dp-cp")
    assert named["MODEL_PARALLEL_GROUP"].tolist() == m.get_ranks("tp-pp")
    expert = MegatronParallelState(
        16,
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2,
        expert_model_parallel_size=2,
        expert_tensor_parallel_size=1,
    ).expert
    assert (expert.tp, expert.ep, expert.dp, expert.cp, expert.pp) == (1, 2, 4, 1, 2)
    # pipeline groups agree between the decoder and expert generators (Megatron asserts this)
    assert expert.get_ranks("pp") == m.get_ranks("pp")
    assert expert.get_ranks("ep") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tp": 2, "cp": 2, "ep": 2}, "does not allow both"),
        ({"tp": 2, "order": "tp-dp-pp", "cp": 2}, "does not name cp"),
        ({"order": "tp-xx"}, "unknown token"),
        ({"order": "tp-tp"}, "twice"),
        ({"tp": 0}, "tp=0"),
        ({"dp": True}, "dp=True"),
    ],
)
def test_invalid_generators(kwargs, message):
    with pytest.raises(ConventionError, match=message):
        Megatron(**kwargs)


def test_unknown_token_in_get_ranks():
    with pytest.raises(ConventionError, match="'xp' is not an axis"):
        Megatron(tp=2).get_ranks("tp-xp")
