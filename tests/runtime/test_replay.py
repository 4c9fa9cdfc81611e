"""The step's collectives replayed on the shared 8-rank gloo cluster's real groups, and the bandwidth sweep."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fastdist_lab import ClusterError, Layout
from fastdist_lab.checks.step_replay import (
    BANDWIDTH_COLUMNS,
    ELEMENT_BYTES,
    REPLAY_COLUMNS,
    REPLAY_ROW_COLUMNS,
    bandwidth,
    replay,
)
from fastdist_lab.cost import Hardware, Training, Transformer, bus_factor, estimate
from fastdist_lab.errors import CostError

TRAINING = Training(num_microbatches=4)
SMALL = Transformer.preset("gpt3-1.3b", num_layers=8)


@pytest.fixture
def applied(cluster, layout_of):
    """The shared cluster running tp 2, pp 2, sdp 2 (data-first) on 8 ranks of one node."""
    layout = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    assert cluster.apply(layout).ok
    return layout


def test_replay_per_dim_is_measured_and_predicted_in_the_same_units(cluster, applied):
    hw = Hardware(intra_node_GBps=100.0, inter_node_GBps=10.0)
    frame = replay(cluster, applied, SMALL, TRAINING, scale=1e-3, hardware=hw, progress=False)
    report = estimate(applied, SMALL, TRAINING)
    assert list(frame.columns) == list(REPLAY_COLUMNS)
    assert frame.index.tolist() == report.communication_time(hw).index.tolist()  # every dim that moves bytes
    for column in ("seconds", "algbw_GBps", "busbw_GBps", "predicted_seconds", "predicted_busbw_GBps"):
        values = frame[column].to_numpy(dtype=float)
        assert np.all(np.isfinite(values)) and np.all(values > 0), column
    # seconds per step, bytes per rank, GB/s = 1e9 bytes per second, on both sides
    np.testing.assert_allclose(frame["algbw_GBps"] * frame["seconds"] * 1e9, frame["replayed_bytes_per_step"])
    np.testing.assert_allclose(frame["busbw_GBps"] * frame["seconds"] * 1e9, frame["bus_bytes_per_step"])
    np.testing.assert_allclose(
        frame["predicted_seconds"], hw.seconds(frame["bus_bytes_per_step"].to_numpy(), frame["inter_node"].to_numpy())
    )
    np.testing.assert_allclose(frame["measured_over_predicted"], frame["seconds"] / frame["predicted_seconds"])
    assert frame.attrs["scale"] == 1e-3 and frame.attrs["backend"] == "gloo" and frame.attrs["hardware"] == hw


def test_replayed_bytes_per_rank_equal_the_scaled_prediction(cluster, applied):
    scale = 1e-4
    training = Training(num_microbatches=4, distributed_optimizer=True, sequence_tensor_parallel=True)
    rows = replay(cluster, applied, SMALL, training, scale, per="collective", progress=False)
    report = estimate(applied, SMALL, training)
    assert list(rows.columns) == list(REPLAY_ROW_COLUMNS)
    comm = report.communication
    assert rows[["dim", "collective", "calls_per_step", "bytes_per_call"]].values.tolist() == (
        comm[["dim", "collective", "calls_per_step", "bytes_per_call"]].values.tolist()
    )
    assert (rows["replayed_bytes_per_call"] == rows["scaled_bytes_per_call"]).all()
    for row in rows.itertuples():
        # whole float32 elements, a multiple of the group for gathers and scatters: within one such step
        step = ELEMENT_BYTES * (row.group_size if row.collective in ("all_gather", "reduce_scatter") else 1)
        assert abs(row.scaled_bytes_per_call - row.bytes_per_call * scale) <= step, row
        factor = bus_factor(row.collective, row.group_size)
        assert math.isclose(row.busbw_GBps, row.algbw_GBps * factor)
        assert math.isclose(row.seconds, row.seconds_per_call * row.calls_per_step)
        assert row.groups == len(report.groups(row.dim, row.collective))


def test_tied_embedding_pairs_replay_on_pool_groups_inside_the_pipeline_groups(cluster, layout_of):
    layout = layout_of(tensor_parallel=1, pipeline_parallel=4, sequence_data_parallel=1)
    assert cluster.apply(layout).ok
    rows = replay(cluster, layout, SMALL, TRAINING, per="collective", progress=False)
    pairs = rows[(rows.dim == "pipeline") & (rows.collective == "all_reduce")]
    assert len(pairs) == 1 and pairs.iloc[0]["group_size"] == 2 and pairs.iloc[0]["seconds"] > 0
    assert estimate(layout, SMALL, TRAINING).groups("pipeline", "all_reduce").tolist() == [[0, 6], [1, 7]]


def test_replay_on_another_layouts_groups_is_reported_by_the_ranks(cluster, applied, layout_of):
    other = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, pipeline_first=True)
    with pytest.raises(ClusterError, match=r"rank \d+: the \w+ group to replay \[.*\] is not this rank's real"):
        replay(cluster, other, SMALL, TRAINING, progress=False)
    # the check runs before any collective: nothing hangs, the cluster still serves its own layout
    assert cluster.layout == applied and cluster.run(lambda ctx: ctx.rank).values == list(range(8))
    assert len(replay(cluster, None, SMALL, TRAINING, progress=False)) == 4  # None: the applied layout


@pytest.mark.parametrize("scale", [0, -1e-3, 2.0, float("nan"), "0.1", True])
def test_a_bad_scale_is_a_cost_error_naming_it(cluster, applied, scale):
    with pytest.raises(CostError, match=r"scale="):
        replay(cluster, applied, SMALL, TRAINING, scale=scale, progress=False)


def test_bad_inputs_name_the_value(cluster, applied):
    with pytest.raises(CostError, match="scale=1.0 makes a message of"):
        replay(cluster, applied, "llama2-70b", TRAINING, scale=1.0, progress=False)
    with pytest.raises(CostError, match="per='rows'"):
        replay(cluster, applied, SMALL, TRAINING, per="rows", progress=False)
    with pytest.raises(CostError, match="iterations=0"):
        replay(cluster, applied, SMALL, TRAINING, iterations=0, progress=False)
    with pytest.raises(ClusterError, match="world_size=16 does not match the cluster's 8 ranks"):
        replay(cluster, Layout(world_size=16, local_world_size=8, tensor_parallel=2), SMALL, progress=False)
    idle = SimpleNamespace(layout=None, world_size=8, backend="gloo")
    with pytest.raises(ClusterError, match="no layout applied"):
        replay(idle, applied, SMALL, progress=False)
    with pytest.raises(CostError, match="moves no bytes"):
        replay(SimpleNamespace(layout=Layout(world_size=1), world_size=1, backend="gloo"), None, SMALL)


def test_progress_reaches_the_end_as_a_callback_and_a_bar_shows_only_where_watched(cluster, applied, capsys):
    seen = []
    replay(cluster, applied, SMALL, TRAINING, progress=lambda done, total, message: seen.append((done, total, message)))
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] == len(seen) - 1
    assert [message for _, _, message in seen[1:-1]] == [
        f"{d} {c}" for d, c in estimate(applied, SMALL, TRAINING).communication[["dim", "collective"]].values
    ]
    capsys.readouterr()
    replay(cluster, applied, SMALL, TRAINING)  # default: a bar only where someone watches (a terminal, a notebook)
    assert capsys.readouterr().err == ""  # pytest's captured stderr is no terminal: not one \r written into it
    from fastdist_lab.checks.step_replay import _progress_bar
    from fastdist_lab.runtime.progress import ProgressBar

    assert isinstance(_progress_bar(True, "replay")[0], ProgressBar)  # True: the tqdm.auto bar, wherever it goes


def test_bandwidth_sweeps_each_collective_like_nccl_tests(cluster, applied):
    sizes = (1000, 4096, 1 << 16)
    frame = bandwidth(cluster, "tensor_and_sequence_data", sizes=sizes, progress=False)
    assert list(frame.columns) == list(BANDWIDTH_COLUMNS)
    assert frame["collective"].tolist() == [c for c in ("all_reduce", "all_gather", "reduce_scatter") for _ in sizes]
    assert (frame["group_size"] == 4).all() and (frame["groups"] == 2).all()
    assert frame[frame.collective == "all_reduce"]["size"].tolist() == [1000, 4096, 1 << 16]
    assert frame[frame.collective == "all_gather"]["size"].tolist() == [992, 4096, 1 << 16]  # 4 ranks x 4 bytes
    assert frame.attrs["dim"] == "tensor_and_sequence_data"
    assert (frame["size"] == frame["count"] * ELEMENT_BYTES).all()
    assert (frame[["seconds", "algbw_GBps", "busbw_GBps"]] > 0).all().all()
    np.testing.assert_allclose(frame["algbw_GBps"], frame["size"] / frame["seconds"] / 1e9)
    factors = [bus_factor(c, 4) for c in frame["collective"]]
    np.testing.assert_allclose(frame["busbw_GBps"], frame["algbw_GBps"] * factors)


def test_bandwidth_bad_inputs_name_the_value(cluster, applied):
    with pytest.raises(CostError, match="dim='tensr' is not a dim"):
        bandwidth(cluster, "tensr", progress=False)
    with pytest.raises(CostError, match="collective='broadcast'"):
        bandwidth(cluster, "data", collectives=("broadcast",), progress=False)
    with pytest.raises(CostError, match="size=0"):
        bandwidth(cluster, "data", sizes=(0,), progress=False)
    with pytest.raises(CostError, match="dim='batch_data' has groups of one rank"):
        bandwidth(cluster, "batch_data", progress=False)


def test_the_cluster_methods_of_one_release_ago_warn_and_give_the_same(cluster, applied):
    with pytest.warns(DeprecationWarning, match=r"LocalCluster.replay is deprecated: use fastdist_lab.checks.replay"):
        frame = cluster.replay(applied, SMALL, TRAINING, scale=1e-3, iterations=1, progress=False)
    assert list(frame.columns) == list(REPLAY_COLUMNS)
    with pytest.warns(DeprecationWarning, match=r"LocalCluster.bandwidth is deprecated: use fastdist_lab.checks"):
        swept = cluster.bandwidth("data", sizes=(4096,), collectives=("all_reduce",), iterations=1, progress=False)
    assert list(swept.columns) == list(BANDWIDTH_COLUMNS) and len(swept) == 1
