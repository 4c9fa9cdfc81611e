"""Cost pictures: memory bars per stage in the palette, inter-node traffic on the rank grid, no pyplot state."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.cost import Training, estimate  # noqa: E402
from fastdist_lab.viz import plot_cost, plot_cost_comparison, plot_memory, plot_traffic, to_png  # noqa: E402
from fastdist_lab.viz.colors import PALETTE  # noqa: E402
from fastdist_lab.viz.cost_pictures import MEMORY_PARTS, traffic_dim, traffic_title  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRAINING = Training(num_microbatches=8, distributed_optimizer=True)


def report(**kw):
    fields = dict(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=4)
    fields.update(kw)
    return estimate(Layout(**fields), "llama2-7b", TRAINING)


def test_memory_bars_stack_each_part_of_each_stage_in_the_palette():
    r = report()
    figure = plot_memory(r)
    assert isinstance(figure, Figure)
    (ax,) = figure.axes
    (bars,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    boxes = bars.get_paths()
    parts = len(MEMORY_PARTS)
    assert len(boxes) == parts * 4  # 5 parts (weights ... temporaries) x 4 stages
    heights = np.array([p.vertices[:, 1].max() - p.vertices[:, 1].min() for p in boxes]).reshape(parts, 4)
    expected = np.stack([r.memory[c].to_numpy() for c, _ in MEMORY_PARTS]) / 2**30
    np.testing.assert_allclose(heights, expected)
    np.testing.assert_allclose(bars.get_facecolors()[::4, :3], PALETTE[:parts])
    assert "peak" in ax.get_title(loc="left") and to_png(figure).startswith(PNG_MAGIC)


def test_side_by_side_memory_shares_one_scale():
    a, b = report(), report(tensor_parallel=8, pipeline_parallel=1)
    figure = plot_memory([a, b], names=["A", "B"])
    left, right = figure.axes
    assert left.get_ylim() == right.get_ylim()
    assert left.get_title(loc="left").startswith("A: peak") and right.get_title(loc="left").startswith("B: peak")


def test_traffic_shows_the_dim_moving_most_bytes_across_nodes():
    data_first, pipeline_first = report(), report(pipeline_first=True)
    assert traffic_dim(data_first)[0] == traffic_dim(pipeline_first)[0] == "data"
    assert traffic_title(data_first, detail=False) == "data groups cross nodes (each spans 2)"
    assert traffic_title(pipeline_first, detail=False) == "data groups cross nodes (each spans 8)"
    one_node = report(world_size=8)
    dim, nbytes, crossing = traffic_dim(one_node)
    assert not crossing and nbytes == one_node.communication.groupby("dim")["bytes_per_step"].sum().max()
    assert traffic_title(one_node).startswith("no group crosses nodes; busiest: ")
    alone = estimate(Layout(world_size=1), "llama2-7b")
    assert traffic_title(alone) == "no communication"
    for r in (data_first, one_node, alone, report(world_size=256, tensor_parallel=4, pipeline_parallel=8)):
        assert to_png(plot_traffic(r)).startswith(PNG_MAGIC)


def test_cost_figures_leave_no_pyplot_state():
    a, b = report(), report(pipeline_first=True)
    assert len(plot_cost(a).axes) == 2
    figure = plot_cost_comparison([a, b])
    assert len(figure.axes) == 4 and to_png(figure).startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="at least one report"):
        plot_cost_comparison([])
    assert plt.get_fignums() == []
