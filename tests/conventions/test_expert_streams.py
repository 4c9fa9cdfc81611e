"""Which generators differ across expert ranks (docs/formulas.md, "Expert streams"): the lab's rule (an expert layer
draws from the rank's ``tp`` generator, which differs on every rank) beside Megatron-Core's ``expert-parallel-rng``
(base + 1024 + 100 * ep_rank + etp_rank, shared by an expert-data group), as tables and as real draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from fastdist_lab import Layout, SimulatedCluster
from fastdist_lab.checks import draw_streams
from fastdist_lab.conventions import (
    EXPERT_STREAMS,
    expert_seed_streams,
    expert_sharing_table,
    megatron_expert_seeds,
    megatron_seeds,
)
from fastdist_lab.errors import ConventionError
from fastdist_lab.seeds import GENERATORS
from fastdist_lab.streams.draws import draw_values

SMALL = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=2,
               expert_tensor_parallel=1)  # fmt: skip
"""An expert group is a tensor group here: the pp generator would give two experts one mask."""
WIDE = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=2)


def sharing(layout: Layout) -> dict[str, tuple]:
    table = expert_sharing_table(layout)
    columns = ["distinct", "expert_tensor", "expert", "expert_data", "pipeline"]
    return {stream: tuple(row) for stream, row in table[columns].iterrows()}


def test_the_side_by_side_table_is_the_one_in_the_docs():
    assert sharing(WIDE) == {
        "fastdist tp": (16, "differs", "differs", "differs", "differs"),
        "fastdist pp": (8, "shared", "differs", "differs", "differs"),
        "Megatron expert-parallel-rng": (6, "differs", "differs", "shared", "differs"),
    }
    assert sharing(SMALL)["fastdist pp"][2] == "shared"  # why pp is no expert generator
    assert sharing(SMALL)["Megatron expert-parallel-rng"][0] == 3  # 4 (stage, expert) pairs, one seed collides
    assert list(expert_sharing_table(SMALL).index) == list(EXPERT_STREAMS)


def test_megatron_expert_seed_is_its_formula_over_the_layouts_expert_coordinates():
    frame = expert_seed_streams(WIDE, seed=1234)
    pipeline = frame["pipeline"].to_numpy()
    expected = 1234 + 100 * pipeline + 1024 + 100 * frame["expert"].to_numpy() + frame["expert_tensor"].to_numpy()
    assert frame["Megatron expert-parallel-rng"].tolist() == expected.tolist()
    grid = WIDE.expert_grid
    assert frame["expert"].tolist() == grid.coordinate("expert").tolist()
    base = megatron_seeds(np.zeros(16, int), pipeline, np.zeros(16, int), 1234)["Megatron data-parallel-rng"]
    assert (frame["Megatron expert-parallel-rng"] - base).min() == 1024
    with_dp = megatron_expert_seeds(np.array([0]), np.array([0]), np.array([0]), np.array([3]), 1, True)
    assert with_dp.tolist() == [1 + 30 + 1024]


def test_a_dense_layout_has_no_expert_streams():
    with pytest.raises(ConventionError, match="no experts"):
        expert_seed_streams(Layout(world_size=8, tensor_parallel=2))


def megatron_draws(seeds: object) -> list[tuple[float, ...]]:
    """The first values of a CPU generator seeded with each of Megatron-Core's seeds."""
    out = []
    for seed in seeds:
        generator = torch.Generator()
        generator.manual_seed(int(seed))
        out.append(tuple(draw_values(generator, 4)))
    return out


def test_real_draws_follow_each_rule_for_ranks_of_one_and_of_different_expert_ranks():
    frame = expert_seed_streams(SMALL)
    with SimulatedCluster(8, "threads", local_world_size=8, timeout=60, progress=False) as cluster:
        assert cluster.apply(SMALL).ok
        report = draw_streams(cluster)
    tp = [tuple(values) for values in report.values[:, GENERATORS.index("tp")]]
    pp = [tuple(values) for values in report.values[:, GENERATORS.index("pp")]]
    megatron = megatron_draws(frame["Megatron expert-parallel-rng"])
    coords = frame[["expert_tensor", "expert", "expert_data", "pipeline"]].to_numpy()
    same_expert = [(a, b) for a in range(8) for b in range(a + 1, 8) if coords[a][1] == coords[b][1]
                   and coords[a][3] == coords[b][3]]  # fmt: skip
    other_expert = [(a, b) for a in range(8) for b in range(a + 1, 8) if coords[a][1] != coords[b][1]
                    and coords[a][3] == coords[b][3]]  # fmt: skip
    assert same_expert and other_expert
    for a, b in same_expert:  # one expert, another expert-data rank: the lab differs, Megatron-Core shares
        assert tp[a] != tp[b] and megatron[a] == megatron[b]
    for a, b in other_expert:  # two experts: both rules differ; the dense pp generator may not
        assert tp[a] != tp[b] and megatron[a] != megatron[b]
    assert any(pp[a] == pp[b] for a, b in other_expert)  # SMALL: an expert group is a tensor group
    assert len(set(tp)) == 8 and len(set(megatron)) == 3


@st.composite
def expert_layouts(draw) -> Layout:
    """Layouts with experts (EP > 1) of up to 64 ranks, either order, ETP 1 to the stage."""
    tp, pp, sdp, bdp = (draw(st.sampled_from(sizes)) for sizes in ([1, 2, 4], [1, 2], [1, 2], [1, 2, 4]))
    stage = tp * sdp * bdp
    etp = draw(st.sampled_from([d for d in (1, 2, 4) if stage % d == 0]))
    assume(stage // etp >= 2)
    ep = draw(st.sampled_from([d for d in (2, 4, 8) if (stage // etp) % d == 0]))
    fields = dict(
        tensor_parallel=tp, pipeline_parallel=pp, sequence_data_parallel=sdp, pipeline_first=draw(st.booleans())
    )
    return Layout(world_size=stage * pp, **fields, expert_parallel=ep, expert_tensor_parallel=etp)


@given(expert_layouts(), st.integers(0, 2**40))
def test_each_rule_holds_on_every_layout_with_experts(layout, seed):
    sizes = {**layout.expert_sizes, "pipeline": layout.pipeline_parallel}
    table = expert_sharing_table(layout, seed=seed)
    for axis in ("expert_tensor", "expert", "expert_data", "pipeline"):
        lab, megatron = table.loc["fastdist tp", axis], table.loc["Megatron expert-parallel-rng", axis]
        if sizes[axis] == 1:
            assert lab == megatron == "-"
        else:  # the lab's tp differs along every expert axis; Megatron-Core shares along expert-data alone
            assert lab == "differs"
            assert megatron == ("shared" if axis == "expert_data" else "differs")
    assert table.loc["fastdist tp", "distinct"] == layout.world_size
