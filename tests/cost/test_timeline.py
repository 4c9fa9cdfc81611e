"""Running a schedule's table with durations: the bubbles the literature gives, and properties of the run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab.cost import run, table_graph


def uniform(kind: str, pp: int, m: int, v: int, f: float, b: float, w: float = 0.0, link: float = 0.0):
    """Every stage the same: forward ``f``, backward ``b`` (split into ``b - w`` and ``w``), per chunk."""
    graph = table_graph(kind, pp, m, v)
    durations = np.zeros((1, pp * v, 4))
    durations[..., 0], durations[..., 1], durations[..., 2], durations[..., 3] = f / v, b / v, (b - w) / v, w / v
    return run(graph, durations, np.full((1, pp), link))


@pytest.mark.parametrize(("pp", "m"), [(1, 4), (2, 2), (4, 8), (8, 32), (4, 3)])
def test_1f1b_and_gpipe_take_m_plus_pp_minus_1_slots(pp, m):
    # Narayanan et al. 2021, Section 2.2.1: bubble (pp - 1) (f + b) for both.
    for kind in ("1f1b", "gpipe"):
        timeline = uniform(kind, pp, m, 1, 1.0, 2.0)
        assert timeline.makespan[0] == pytest.approx((m + pp - 1) * 3.0)
        assert timeline.busy[0].tolist() == pytest.approx([m * 3.0] * pp)


@pytest.mark.parametrize(("pp", "m", "v"), [(4, 8, 2), (4, 16, 4), (8, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(pp, m, v):
    # Narayanan et al. 2021, Section 2.2.2: bubble (pp - 1) (f + b) / v when m is a multiple of pp.
    timeline = uniform("interleaved-1f1b", pp, m, v, 1.0, 2.0)
    assert timeline.makespan[0] == pytest.approx(m * 3.0 + (pp - 1) * 3.0 / v)


def test_zero_bubble_h1_bubble():
    # Qi et al. 2023, ZB-H1: bubble (pp - 1) (f + b_input - b_weight) with f = b_input = b_weight.
    pp, m = 4, 8
    timeline = uniform("zero-bubble", pp, m, 1, 1.0, 2.0, w=1.0)
    assert timeline.makespan[0] == pytest.approx(m * 3.0 + (pp - 1) * 1.0)


@settings(deadline=None)
@given(st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"]), st.integers(1, 6), st.integers(1, 12),
       st.integers(1, 3), st.integers(0, 2**31))  # fmt: skip
def test_a_run_respects_every_dependency_and_rows_are_independent(kind, pp, m, v, seed):
    v = 1 if kind in ("gpipe", "1f1b") else max(v, 2 if kind == "interleaved-1f1b" else 1)
    try:
        graph = table_graph(kind, pp, m, v)
    except ValueError:
        return
    rng = np.random.default_rng(seed)
    durations = rng.uniform(0.1, 2.0, size=(3, pp * v, 4))
    links = rng.uniform(0.0, 0.5, size=(3, pp))
    timeline = run(graph, durations, links)
    start, end = timeline.start, timeline.end
    before = graph.prev < graph.size
    assert (start[:, before] >= end[:, graph.prev[before]] - 1e-9).all()  # one action at a time per rank
    needs = graph.dep < graph.size
    hop = np.where(graph.link >= 0, links[:, np.maximum(graph.link, 0)], 0.0)
    assert (start[:, needs] >= end[:, graph.dep[needs]] + hop[:, needs] - 1e-9).all()
    assert (timeline.makespan >= timeline.busy.max(axis=1) - 1e-9).all()
    single = run(graph, durations[1:2], links[1:2])
    assert single.makespan[0] == pytest.approx(timeline.makespan[1])
    slower = run(graph, durations, links * 2)
    assert (slower.makespan >= timeline.makespan - 1e-9).all()
