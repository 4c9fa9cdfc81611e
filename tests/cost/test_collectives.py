"""The collective model (issue 27): group size, span, NCCL's algorithm and protocol, NVLink and network latency and
bandwidth, adapters shared between groups, and published bus bandwidths at 8 to 1,984 GPUs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.cost import Efficiency, Hardware
from fastdist_lab.cost.evidence.published_collectives import COLLECTIVE_MEASUREMENTS, collective_table
from fastdist_lab.cost.formulas.links import FACTORS, bus_GBps, collective_seconds, message_seconds, nccl_choice
from fastdist_lab.setup.efficiency import DEFAULT_EFFICIENCY

A100 = Hardware.preset("a100-sxm-80gb")
H100 = Hardware.preset("h100-sxm-80gb")
E = DEFAULT_EFFICIENCY
DOC = Path(__file__).resolve().parents[2] / "docs" / "step_time.md"
WORST, MEAN = 0.20, 0.10


def problems(table) -> list[str]:
    """What breaks the bounds on the held-out rows: each within WORST, their mean within MEAN."""
    held = table[~table["calibration"]]
    found = [f"{r.measurement}: {r.error:+.1%}" for r in held.itertuples() if abs(r.error) > WORST]
    if held["error"].abs().mean() > MEAN:
        found.append(f"mean {held['error'].abs().mean():.1%}")
    return found


def test_published_bus_bandwidths_within_the_bounds():
    table = collective_table()
    assert len(table) >= 12 and table["gpus"].max() >= 1000 and table["gpus"].min() == 8
    assert problems(table) == [], table[["measurement", "measured_busbw_GBps", "predicted_busbw_GBps", "error"]]


def test_a_wrong_measurement_is_caught():
    broken = tuple(
        dataclasses.replace(m, busbw_GBps=m.busbw_GBps * 1.5) if i == 4 else m
        for i, m in enumerate(COLLECTIVE_MEASUREMENTS)
    )
    assert problems(collective_table(broken)) != []


def test_the_document_shows_this_table():
    from importlib import util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_validation.py"
    spec = util.spec_from_file_location("bench_validation", path)
    bench = util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.collectives_markdown(collective_table()) in DOC.read_text(), (
        "docs/step_time.md is stale: python benchmarks/bench_validation.py --write-docs"
    )


def test_a_pipelined_ring_runs_at_its_slowest_link():
    # 2 DGX A100: NVLink 300 x 0.78 = 234 GB/s, 8 adapters of 25 GB/s x 0.9 = 180: the network bounds the ring.
    assert float(bus_GBps(8, 2, A100, E)) == pytest.approx(180.0)
    assert float(bus_GBps(8, 1, A100, E)) == pytest.approx(234.0)
    assert float(bus_GBps(1, 4, A100, E)) == pytest.approx(22.5)  # one member per node: its own adapter


def test_groups_sharing_the_adapters_get_their_share():
    # Two members per node, four groups at once (default): each group gets two adapters. Eight groups at once
    # (e.g. another dimension's collectives on the same adapters): half of that.
    alone = float(collective_seconds("all_gather", 2**30, 2, 8, A100, E))
    shared = float(collective_seconds("all_gather", 2**30, 2, 8, A100, E, concurrent=8))
    fewer = float(collective_seconds("all_gather", 2**30, 2, 8, A100, E, concurrent=1))
    assert shared == pytest.approx(2 * alone, rel=0.02)
    assert fewer == pytest.approx(alone, rel=1e-9)  # a member sends through its own adapter only


def test_ring_latency_grows_with_the_group_and_nccl_switches_to_the_tree():
    small = 1 << 20
    times = [float(collective_seconds("all_gather", small, 8, k, H100, E)) for k in (1, 4, 16, 64, 192)]
    assert times == sorted(times) and times[-1] > 20 * times[0]
    assert nccl_choice("all_reduce", 160e6, 8, 1, A100, E)[0] == "ring"  # one node: ring
    assert nccl_choice("all_reduce", 160e6, 8, 192, A100, E)[0] == "tree"  # 1,536 ranks: tree
    assert nccl_choice("all_reduce", 1e5, 8, 1, A100, E)[1] == "LL"  # small messages: the low-latency protocol
    assert nccl_choice("all_reduce", 4 * 2**30, 8, 1, A100, E) == ("ring", "Simple")
    # 3,070 steps of a 1,536-rank ring: the tree all-reduce of 160 MB is far faster than the ring's latency alone.
    ring_latency = (14.0 + (3070 - 384) * 1.9 + 384 * 4.0) * 1e-6  # LL128, NCCL's tuning.cc
    assert float(collective_seconds("all_reduce", 160e6, 8, 192, A100, E)) < ring_latency


@given(
    st.sampled_from(sorted(FACTORS)),
    st.floats(1e3, 1e10),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 512),
)
def test_never_faster_than_the_bus_allows(collective, payload, g, k):
    n = g * k
    seconds = float(collective_seconds(collective, payload, g, k, H100, E))
    if n == 1:
        assert seconds == 0.0
        return
    bound = FACTORS[collective] * (n - 1) / n * payload / (float(bus_GBps(g, k, H100, E)) * 1e9)
    assert seconds >= bound * (1 - 1e-9)
    assert seconds >= 6.6e-6  # every call pays at least the smallest base latency (ring LL)


def test_arrays_broadcast_like_numbers():
    payload = np.array([[1e6, 1e8], [1e9, 0.0]])
    got = collective_seconds("all_reduce", payload, np.array([[8], [1]]), np.array([[1], [4]]), A100, E)
    want = [[float(collective_seconds("all_reduce", p, g, k, A100, E)) for p in row] for row, g, k in
            zip(payload, (8, 1), (1, 4))]  # fmt: skip
    np.testing.assert_allclose(got, want)
    assert got[1, 1] == 0.0


def test_messages_pay_one_step_of_their_link():
    nvlink = float(message_seconds(0.0, False, A100, E))
    network = float(message_seconds(0.0, True, A100, E))
    assert nvlink == pytest.approx((8.4 + 3.4) * 1e-6) and network == pytest.approx((8.4 + 14.0) * 1e-6)


def test_the_fixed_latency_is_deprecated_and_still_honoured():
    with pytest.warns(DeprecationWarning, match="collective_latency_s"):
        fixed = Efficiency(collective_latency_s=15e-6)
    seconds = float(collective_seconds("all_gather", 8.0, 8, 1, A100, fixed))
    assert seconds == pytest.approx(15e-6, rel=1e-3)
    assert float(message_seconds(0.0, True, A100, fixed)) == pytest.approx(15e-6)


def test_zero_3_pays_each_layers_collective_latency_at_scale():
    # Same work per GPU (one sequence of Llama 2 7B, no tensor or pipeline parallel), more data-parallel ranks:
    # the per-layer gathers and reduce-scatters (FSDP2's fully_shard per block) cost more latency as the ring grows,
    # until the compute of a micro-batch no longer hides them.
    from fastdist_lab import Layout
    from fastdist_lab.cost import Training, estimate

    def exposed(gpus: int) -> float:
        layout = Layout(world_size=gpus, local_world_size=8)
        step = estimate(layout, "llama2-7b", Training(zero_stage=3, num_microbatches=1)).step("h100-sxm-80gb")
        return float(step.breakdown.loc["data-parallel communication", "seconds"])

    small, large = exposed(64), exposed(1536)
    assert small == 0.0 and large > 0.01
