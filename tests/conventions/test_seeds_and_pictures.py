"""Seeds side by side (who shares a dropout stream) and the convention pictures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from fastdist_lab import Layout
from fastdist_lab.conventions import Megatron, seed_streams, sharing_table, stream_groups
from fastdist_lab.viz import plot_conventions, plot_seed_sharing


def make_layout(tp, pp, sdp, bdp, pipeline_first=False, seed=1234):
    return Layout(
        world_size=tp * pp * sdp * bdp,
        local_world_size=tp,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=pipeline_first,
        seed=seed,
    )


def test_seed_formulas_on_the_worked_example():
    layout = make_layout(2, 2, 2, 2)
    frame = seed_streams(layout)
    for rank in range(16):
        config = layout.config(rank)
        pp, tp, bdp = config.pipeline_rank, config.tensor_rank, config.batch_data_rank
        assert frame.loc[rank, "Megatron data-parallel-rng"] == 1234 + 100 * pp
        assert frame.loc[rank, "Megatron model-parallel-rng"] == 1234 + 100 * pp + 2718 + tp
        assert frame.loc[rank, "torchtitan"] == 1234 + pp
        assert (frame.loc[rank, "tensor"], frame.loc[rank, "batch_data"]) == (tp, bdp)
    random_init = seed_streams(layout, data_parallel_random_init=True)
    assert random_init.loc[5, "Megatron data-parallel-rng"] == 1234 + 10 * layout.config(5).batch_data_rank
    assert stream_groups(layout, "torchtitan") == [tuple(range(8)), tuple(range(8, 16))]


@settings(max_examples=40)
@given(
    st.sampled_from([1, 2, 4]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 2**40),
)
def test_who_shares_what(tp, pp, sdp, bdp, pipeline_first, seed):
    layout = make_layout(tp, pp, sdp, bdp, pipeline_first, seed)
    table = sharing_table(layout)
    size = {"tensor": tp, "sequence_data": sdp, "batch_data": bdp, "pipeline": pp}

    def expect(stream, axis, when_bigger):
        assert table.loc[stream, axis] == (when_bigger if size[axis] > 1 else "-"), (stream, axis)

    for axis in size:
        # this project: pp shared in a tensor group, different across data and pipeline; tp different everywhere
        expect("fastdist pp", axis, "shared" if axis == "tensor" else "differs")
        expect("fastdist tp", axis, "differs")
        # Megatron: default stream shared by tp, cp and dp; tensor-parallel stream differs across tp only;
        # both differ across pipeline stages (100 * pp_rank)
        expect("Megatron data-parallel-rng", axis, "differs" if axis == "pipeline" else "shared")
        expect("Megatron model-parallel-rng", axis, "differs" if axis in ("tensor", "pipeline") else "shared")
        # torchtitan: one seed per pipeline stage
        expect("torchtitan", axis, "differs" if axis == "pipeline" else "shared")
    assert table.loc["fastdist tp", "distinct"] == layout.world_size
    assert table.loc["Megatron model-parallel-rng", "distinct"] == tp * pp
    assert table.loc["torchtitan", "distinct"] == pp


def test_pictures_are_figures():
    layout = make_layout(2, 2, 2, 2)
    fig = plot_conventions(layout, Megatron(tp=2, pp=2, dp=2, cp=2, order="tp-dp-cp-pp"))
    assert isinstance(fig, Figure) and "16 of 16 ranks" in fig._suptitle.get_text()
    fig = plot_conventions(layout, Megatron.from_layout(layout), spec="data")
    assert "same groups" in fig._suptitle.get_text()
    fig = plot_seed_sharing(layout, streams=["torchtitan", "fastdist tp"])
    assert len([ax for ax in fig.axes if ax.get_title()]) == 2
    assert "2 streams" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="unknown stream"):
        plot_seed_sharing(layout, streams="nope")
    with pytest.raises(ValueError, match="not in the mapping"):
        plot_conventions(layout, Megatron.from_layout(layout), spec="tensor", mapping={"pipeline": "pp"})
    big = make_layout(4, 4, 4, 8)  # 512 ranks: no per-cell text
    fig = plot_conventions(big, Megatron.from_layout(big))
    assert not fig.axes[0].texts
    assert np.isfinite(fig.get_size_inches()).all()


def test_cpu_generators_read_only_32_bits_of_the_seed():
    import torch

    # a pipeline shift of 2**32: different seeds per stage, but the same CPU (mt19937) stream
    layout = Layout(world_size=4, local_world_size=2, tensor_parallel=2, pipeline_parallel=2, pp_seed_shift=2**32)
    seeds = seed_streams(layout)["fastdist pp"]
    assert seeds[0] != seeds[2] and int(seeds[0]) % 2**32 == int(seeds[2]) % 2**32
    draws = [torch.rand(4, generator=torch.Generator().manual_seed(int(seeds[r]))) for r in (0, 2)]
    assert torch.equal(draws[0], draws[1])
    assert sharing_table(layout).loc["fastdist pp", "pipeline"] == "differs"
    assert sharing_table(layout, device="cpu").loc["fastdist pp", "pipeline"] == "shared"
    assert stream_groups(layout, "fastdist pp", device="cpu") == [(0, 1, 2, 3)]
    with pytest.raises(ValueError, match="device='tpu'"):
        sharing_table(layout, device="tpu")
