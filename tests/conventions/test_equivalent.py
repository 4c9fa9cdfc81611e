"""as_convention(layout) and equivalent(): the required equivalences, and differences reported precisely."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import (
    LAYOUT_DIM_TOKENS,
    Convention,
    DeviceMesh,
    Equivalence,
    Megatron,
    as_convention,
    equivalent,
    megatron_dim_table,
    picotron,
    torchtitan,
)
from fastdist_lab.errors import ConventionError

sizes = st.tuples(
    st.sampled_from([1, 2, 4]),  # tp
    st.integers(1, 4),  # pp
    st.integers(1, 4),  # sdp
    st.integers(1, 3),  # bdp
)


def make_layout(tp: int, pp: int, sdp: int, bdp: int, pipeline_first: bool) -> Layout:
    return Layout(
        world_size=tp * pp * sdp * bdp,
        local_world_size=tp,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=pipeline_first,
    )


@settings(max_examples=120)
@given(sizes, st.booleans())
def test_as_convention_groups_equal_layout_groups(s, pipeline_first):
    layout = make_layout(*s, pipeline_first)
    conv = as_convention(layout)
    expected_axes = (
        ("tensor", "pipeline", "sequence_data", "batch_data")
        if pipeline_first
        else ("tensor", "sequence_data", "batch_data", "pipeline")
    )
    assert conv.axes == expected_axes
    for dim in layout.dim_names:
        assert np.array_equal(conv.groups(dim), layout.groups(dim)), dim
    ranks = layout.ranks
    for axis in ("tensor", "pipeline", "sequence_data", "batch_data"):
        assert (conv.rank_grid.coordinate(axis) == ranks[f"{axis}_rank"].to_numpy()).all()


@settings(max_examples=120)
@given(sizes)
def test_data_first_equals_megatron_tp_cp_dp_pp(s):
    tp, pp, sdp, bdp = s
    layout = make_layout(tp, pp, sdp, bdp, False)
    megatron = Megatron(tp=tp, pp=pp, dp=bdp, cp=sdp, order="tp-cp-dp-pp")
    result = equivalent(layout, megatron, {"tensor": "tp", "sequence_data": "cp", "batch_data": "dp", "pipeline": "pp"})
    assert result and result.difference is None and len(result.results) == 15
    # Megatron's "dp-cp" group is this project's data group, its "dp" group the batch-data group
    assert np.array_equal(megatron.groups("dp-cp"), layout.groups("data"))
    assert np.array_equal(megatron.groups("dp"), layout.groups("batch_data"))
    assert megatron_dim_table(layout)["same"].all()
    # the default Megatron order, with ep=1, is the same numbering
    assert equivalent(layout, Megatron(tp=tp, pp=pp, dp=bdp, cp=sdp))


@settings(max_examples=120)
@given(sizes)
def test_pipeline_first_equals_megatron_tp_pp_cp_dp(s):
    tp, pp, sdp, bdp = s
    layout = make_layout(tp, pp, sdp, bdp, True)
    megatron = Megatron(tp=tp, pp=pp, dp=bdp, cp=sdp, order="tp-pp-cp-dp")
    assert equivalent(layout, megatron)  # default mapping: cp = sequence-data, dp = batch-data
    for dim, token in LAYOUT_DIM_TOKENS.items():
        assert np.array_equal(layout.groups(dim), megatron.groups(token)), dim
    assert Megatron.from_layout(layout).order.startswith("tp-pp-cp-dp")


@settings(max_examples=60)
@given(sizes)
def test_torchtitan_and_picotron(s):
    tp, pp, sdp, bdp = s
    data_first = make_layout(tp, pp, sdp, bdp, False)
    titan = torchtitan(pp=pp, dp_replicate=bdp, dp_shard=1, cp=sdp, tp=tp)
    mapping = {"tensor": "tp", "sequence_data": "cp", "batch_data": ("dp_replicate", "dp_shard"), "pipeline": "pp"}
    assert equivalent(data_first, titan, mapping)
    assert equivalent(data_first, titan, {"data": "dp_cp", "tensor": "tp", "pipeline": "pp"})
    pipeline_first = make_layout(tp, pp, sdp, bdp, True)
    pico = picotron(dp=bdp, pp=pp, cp=sdp, tp=tp)
    mapping = {"tensor": "tp", "sequence_data": "cp", "batch_data": "dp", "pipeline": "pp"}
    # picotron is tp-cp-pp-dp (cp faster than pp): pipeline-first only when cp or pp is 1
    result = equivalent(pipeline_first, pico, mapping)
    assert bool(result) == (sdp == 1 or pp == 1)
    if not result:
        assert result.difference.left_axes == ("sequence_data",) and result.difference.rank == 0
        assert result.difference.right_group == tuple(range(0, sdp * tp, tp))
    assert equivalent(
        pico,
        Megatron(tp=tp, cp=sdp, pp=pp, dp=bdp, order="tp-cp-pp-dp"),
        {"tp": "tp", "cp": "cp", "pp": "pp", "dp": "dp"},
    )


def test_first_difference_is_reported():
    layout = make_layout(2, 2, 2, 2, False)
    other = Megatron(tp=2, pp=2, dp=2, cp=2, order="tp-dp-cp-pp")
    result = equivalent(layout, other)
    assert isinstance(result, Equivalence) and not result
    diff = result.difference
    # cp is the first axis set checked after tensor, and rank 0 already differs: ours [0, 2], theirs [0, 4]
    assert diff.left_axes == ("sequence_data",) and diff.right_axes == ("cp",)
    assert (diff.rank, diff.left_group, diff.right_group) == (0, (0, 2), (0, 4))
    assert "rank 0" in result.reason and "[0, 2]" in result.reason and "[0, 4]" in result.reason
    frame = result.to_frame()
    assert len(frame) == 15
    # the tensor, pipeline and data (dp+cp together) groups still agree
    same = dict(zip(frame.iloc[:, 0], frame["same"]))
    assert same["tensor"] and same["pipeline"] and same["sequence_data+batch_data"]
    assert not same["sequence_data"] and not same["batch_data"]
    assert "NOT equivalent" in result._repr_html_()


def test_data_first_is_not_pipeline_first():
    a = make_layout(2, 2, 1, 2, False)
    b = make_layout(2, 2, 1, 2, True)
    result = equivalent(a, as_convention(b), {"tensor": "tensor", "batch_data": "batch_data", "pipeline": "pipeline"})
    assert not result
    assert result.difference.left_axes == ("batch_data",)
    assert result.difference.left_group == (0, 2) and result.difference.right_group == (0, 4)


def test_world_size_mismatch_and_bad_mappings():
    layout = make_layout(2, 1, 1, 2, False)
    result = equivalent(layout, Megatron(tp=2, dp=4))
    assert not result and "world sizes differ: 4 vs 8" in result.reason
    with pytest.raises(ConventionError, match="share no axis name"):
        equivalent(DeviceMesh((2,), ("a",)), DeviceMesh((2,), ("b",)))
    with pytest.raises(ConventionError, match="twice"):
        equivalent(layout, Megatron(tp=2, dp=2), {"tensor": "tp", "batch_data": "tp"})
    with pytest.raises(ConventionError, match="not an axis"):
        equivalent(layout, Megatron(tp=2, dp=2), {"tensor": "xx"})
    with pytest.raises(ConventionError, match="neither"):
        equivalent(object(), layout)


def test_generic_convention():
    conv = Convention(["x", "y"], [2, 3], name="xy")
    assert conv.groups("y").tolist() == [[0, 2, 4], [1, 3, 5]]
    assert conv.coordinates(5) == {"x": 1, "y": 2}
    assert conv.grid[2, 1] == 5  # y slowest, x fastest
    assert conv.group_rank("y").tolist() == [0, 0, 1, 1, 2, 2]
    assert conv.group_of("x", 3) == (2, 3)
    assert "x=2 < y=3" in repr(conv)
    with pytest.raises(ConventionError, match="size of axis 'y'"):
        Convention(["x", "y"], [2, 0])
    with pytest.raises(ConventionError, match="rank=6"):
        conv.coordinates(6)


@settings(max_examples=80)
@given(
    st.permutations(["tp", "cp", "dp", "pp"]),
    st.permutations(["tp", "cp", "dp", "pp"]),
    st.sets(st.sampled_from(["tp", "cp", "dp", "pp"]), min_size=1),
    st.tuples(*[st.integers(1, 3)] * 4),
)
def test_differing_ranks_equals_rank_by_rank_comparison(order_a, order_b, token, s):
    from fastdist_lab.conventions.equivalence import differing_ranks

    tp, cp, dp, pp = s
    a = Megatron(tp=tp, cp=cp, dp=dp, pp=pp, order="-".join(order_a))
    b = Megatron(tp=tp, cp=cp, dp=dp, pp=pp, order="-".join(order_b))
    token = "-".join(sorted(token))

    def group_table(conv, spec):
        axes = conv.member_axes(spec)
        return conv.rank_grid.groups(axes)[conv.rank_grid.group_index(axes)]

    brute = (group_table(a, token) != group_table(b, token)).any(axis=1)
    assert np.array_equal(differing_ranks(a, a.member_axes(token), b, b.member_axes(token)), brute)
    result = equivalent(a, b, {t: t for t in token.split("-")})
    assert bool(result) == all(not (group_table(a, t) != group_table(b, t)).any() for t in _tokens(token))
    if not result:
        d = result.difference
        assert d.left_group == a.group_of(d.left_axes, d.rank) and d.right_group == b.group_of(d.right_axes, d.rank)
        assert d.left_group != d.right_group


def _tokens(token: str) -> list[str]:
    from itertools import combinations

    parts = token.split("-")
    return ["-".join(c) for k in range(1, len(parts) + 1) for c in combinations(parts, k)]


def test_large_world_without_quadratic_memory():
    layout = make_layout(8, 8, 8, 64, False)  # 32768 ranks; a per-rank table of the world group would be 8 GiB
    assert layout.world_size == 32768
    assert equivalent(layout, Megatron.from_layout(layout))
    result = equivalent(layout, Megatron(tp=8, pp=8, dp=64, cp=8, order="tp-dp-cp-pp"))
    assert not result and result.difference.rank == 0


def test_megatron_tokens_as_mapping_values():
    layout = make_layout(2, 2, 2, 2, False)
    megatron = Megatron.from_layout(layout)
    result = equivalent(layout, megatron, {"data": "dp-cp", "tensor": "tp", "pipeline": "pp"})
    assert result and result.mapping[0] == (("sequence_data", "batch_data"), ("cp", "dp"))
    assert megatron.groups(["dp-cp"]).tolist() == megatron.groups("cp-dp").tolist() == layout.groups("data").tolist()
