"""Megatron-LM parity: ``initialize_model_parallel``'s refusals and named groups, its token rules, ``from_args``.

Expected groups are re-derived here from coordinates (ranks sharing every coordinate outside the token), not with
the code under test; ``crosscheck_megatron_state.py`` compares with Megatron-Core itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import Megatron, MegatronParallelState, equivalent
from fastdist_lab.errors import ConventionError

APPEND = ("tp", "pp", "dp", "ep", "cp")


def coordinate_groups(sizes: dict[str, int], order: str, tokens: set[str]) -> set[tuple[int, ...]]:
    names = order.split("-") + [t for t in APPEND if t not in order.split("-")]
    dims = [sizes[t] for t in names]
    by_key: dict[tuple[int, ...], list[int]] = {}
    for rank in range(math.prod(dims)):
        coords, rest = [], rank
        for d in dims:
            coords.append(rest % d)
            rest //= d
        key = tuple(c for c, t in zip(coords, names) if t not in tokens)
        by_key.setdefault(key, []).append(rank)
    return {tuple(g) for g in by_key.values()}


def as_set(rows: np.ndarray) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in row) for row in rows}


@st.composite
def configurations(draw):
    tp, pp, cp, ep = (draw(st.sampled_from([1, 2, 3, 4])) for _ in range(4))
    etp = draw(st.sampled_from([None, 1, 2]))
    dp = draw(st.sampled_from([1, 2, 4]))
    order = draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-cp-ep-dp"]))
    instances = draw(st.sampled_from([1, 1, 2]))
    return tp * pp * cp * dp, dict(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        order=order,
        num_distributed_optimizer_instances=instances,
    )


def megatron_accepts(world: int, k: dict) -> bool:
    """initialize_model_parallel's checks, restated."""
    tp, pp, cp, ep = (k[n] for n in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                     "context_parallel_size", "expert_model_parallel_size"))  # fmt: skip
    etp = k["expert_tensor_parallel_size"] or tp
    n = k["num_distributed_optimizer_instances"]
    if world % (tp * pp * cp) or world % (etp * ep * pp):
        return False
    dp, edp = world // (tp * pp * cp), world // (etp * ep * pp)
    if not (k["order"].endswith("pp") or pp == 1 or dp == edp):
        return False
    names = k["order"].split("-")
    if pp > 1 and names.index("pp") != len(names) - 1:
        before = names[: names.index("pp")]
        decoder = math.prod({"tp": tp, "cp": cp, "ep": 1, "dp": dp}[t] for t in before)
        expert = math.prod({"tp": etp, "cp": 1, "ep": ep, "dp": edp}[t] for t in before)
        if decoder != expert:
            return False  # the decoder and expert pipeline groups differ
    return (dp * cp) % n == 0 and edp % n == 0


@settings(max_examples=250, deadline=None)
@given(configurations())
def test_refusals_and_groups_follow_initialize_model_parallel(config):
    world, kwargs = config
    accepts = megatron_accepts(world, kwargs)
    if not accepts:
        with pytest.raises(ConventionError, match="initialize_model_parallel refuses this"):
            MegatronParallelState(world, **kwargs)
        return
    state = MegatronParallelState(world, **kwargs)
    tp, pp, cp = state.tp, state.pp, state.cp
    decoder = {"tp": tp, "pp": pp, "cp": cp, "ep": 1, "dp": state.dp}
    expert = {"tp": state.expert_tp, "pp": pp, "cp": 1, "ep": state.expert_ep, "dp": state.expert_dp}
    groups = state.named_groups()
    order = kwargs["order"]
    assert as_set(groups["DATA_PARALLEL_GROUP_WITH_CP"]) == coordinate_groups(decoder, order, {"dp", "cp"})
    assert as_set(groups["MODEL_PARALLEL_GROUP"]) == coordinate_groups(decoder, order, {"tp", "pp"})
    assert as_set(groups["EXPERT_MODEL_PARALLEL_GROUP"]) == coordinate_groups(expert, order, {"ep"})
    assert as_set(groups["EXPERT_DATA_PARALLEL_GROUP"]) == coordinate_groups(expert, order, {"dp"})
    pipelines = coordinate_groups(decoder, order, {"pp"})
    assert as_set(groups["EMBEDDING_GROUP"]) == {(g[0], g[-1]) if len(g) > 1 else (g[0],) for g in pipelines}
    assert as_set(groups["POSITION_EMBEDDING_GROUP"]) == {(g[0],) for g in pipelines}
    n = kwargs["num_distributed_optimizer_instances"]
    instances = groups["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"]
    assert instances.shape == (n, world // n)
    assert sorted(instances.ravel().tolist()) == list(range(world))  # a partition of the world
    for row in instances:  # each instance is a union of whole expert tp-ep-pp groups
        members = set(row.tolist())
        for group in coordinate_groups(expert, order, {"tp", "ep", "pp"}):
            assert set(group) <= members or not set(group) & members
    pieces = groups["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"]
    assert pieces.shape == (world // (state.dp * cp) * n, state.dp * cp // n)


def test_pp_last_rule_and_pipeline_groups_rule_quote_megatron():
    with pytest.raises(ConventionError, match="When not using pp-last rank ordering"):
        MegatronParallelState(
            16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, expert_model_parallel_size=4,
            order="tp-cp-ep-pp-dp",
        )  # fmt: skip
    with pytest.raises(ConventionError, match="Pipeline parallel groups are expected to be the same"):
        MegatronParallelState(
            16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2,
            expert_model_parallel_size=4, expert_tensor_parallel_size=1, order="tp-pp-cp-ep-dp",
        )  # fmt: skip
    with pytest.raises(ConventionError, match=r"world_size \(12\) is not divisible by 8"):
        MegatronParallelState(12, tensor_model_parallel_size=8)
    with pytest.raises(ConventionError, match="greater than 1 with interleaved schedule"):
        MegatronParallelState(8, virtual_pipeline_model_parallel_size=2)
    with pytest.raises(ConventionError, match="partial DistOpt shard factor"):
        MegatronParallelState(12, context_parallel_size=2, num_distributed_optimizer_instances=8)
    with pytest.raises(ConventionError, match="multiply to 4, not context_parallel_size=8"):
        MegatronParallelState(16, context_parallel_size=8, hierarchical_context_parallel_sizes=[2, 2])
    with pytest.raises(ConventionError, match="pp-last"):
        MegatronParallelState(
            16,
            tensor_model_parallel_size=2,
            pipeline_model_parallel_size=2,
            expert_model_parallel_size=4,
            order="tp-cp-ep-pp-dp",
        )


def test_named_groups_docstring_example_and_hierarchical_cp():
    state = MegatronParallelState(16, tensor_model_parallel_size=2, pipeline_model_parallel_size=4)
    groups = state.named_groups()
    assert groups["PIPELINE_MODEL_PARALLEL_GROUP"].tolist()[0] == [0, 4, 8, 12]
    assert groups["EMBEDDING_GROUP"].tolist() == [[0, 12], [1, 13], [2, 14], [3, 15]]
    assert groups["POSITION_EMBEDDING_GROUP"].tolist() == [[0], [1], [2], [3]]
    assert groups["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"].tolist() == [list(range(16))]
    cp = MegatronParallelState(16, context_parallel_size=8, hierarchical_context_parallel_sizes=[2, 4])
    named = cp.named_groups()
    assert named["HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L0"].tolist()[:2] == [[0, 1], [2, 3]]
    assert named["HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L1"].tolist()[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_plain_megatron_names_embedding_groups_too():
    groups = Megatron(tp=2, pp=2, dp=2).named_groups()
    assert groups["EMBEDDING_GROUP"].tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert Megatron(tp=2, dp=2).named_groups()["EMBEDDING_GROUP"].tolist() == [[0], [1], [2], [3]]


def test_upper_case_tokens_are_refused_as_megatron_does():
    m = Megatron(tp=2, pp=2, dp=2, order="TP-CP-EP-DP-PP")  # Megatron lower-cases the order string
    assert m.order == "tp-cp-ep-dp-pp"
    for token in ("TP", "dp-CP", ["tp", "PP"]):
        with pytest.raises(ConventionError, match="lower-case tokens only"):
            m.get_ranks(token)
    assert m.get_ranks("tp-tp") == m.get_ranks("tp")  # a repeated get_ranks token masks the same axis, as in Megatron


def test_repeated_order_token_is_refused_and_says_megatron_would_accept_it():
    with pytest.raises(ConventionError, match="names tp twice; Megatron-Core's RankGenerator would accept it and "
                                              "build broken strides"):  # fmt: skip
        Megatron(tp=2, dp=2, order="tp-tp-dp-pp")


def test_layout_equivalents():
    state = MegatronParallelState(
        16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2, local_world_size=8
    )
    layout, why = state.layout_equivalent()
    assert layout == Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                            sequence_data_parallel=2)  # fmt: skip
    assert equivalent(layout, state) and "decoder groups" in why
    tp_pp_dp = MegatronParallelState(16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                                                  order="tp-cp-ep-pp-dp")  # fmt: skip
    assert tp_pp_dp.layout_equivalent()[0].pipeline_first
    none, why = MegatronParallelState(
        16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2,
        expert_model_parallel_size=4, expert_tensor_parallel_size=1, order="tp-cp-ep-pp-dp",
    ).layout_equivalent()  # fmt: skip
    assert none is None and "no Layout numbers ranks like order tp-cp-ep-pp-dp" in why
    wide = MegatronParallelState(16, tensor_model_parallel_size=16, local_world_size=8)
    assert wide.layout_equivalent() == (None, "no Layout: tensor_parallel=16 must divide local_world_size=8")
