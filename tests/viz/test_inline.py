"""Every picture the library returns shows itself when it is the last expression of a notebook cell: IPython's own
display formatter (no inline backend, no pyplot, no helper) makes a PNG of it."""

from __future__ import annotations

import pytest
from IPython.core.formatters import DisplayFormatter

import fastdist_lab as fdl
from fastdist_lab import viz
from fastdist_lab.conventions import Megatron
from fastdist_lab.cost import schedule
from fastdist_lab.streams import predict

LAYOUT = fdl.Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
REPORT = fdl.estimate(LAYOUT, "llama2-7b")
STREAMS = predict(LAYOUT)
SEARCH = fdl.search("llama2-7b", 8, global_batch_size=64, top=5)

PICTURES = {
    "plot_layout": lambda: viz.plot_layout(LAYOUT, "data", highlight=5),
    "plot_dims": lambda: viz.plot_dims(LAYOUT),
    "grid_picture": lambda: viz.grid_picture(LAYOUT, "data"),
    "plot_streams": lambda: viz.plot_streams(STREAMS),
    "plot_sharing": lambda: viz.plot_sharing(STREAMS, "pp"),
    "stream_picture": lambda: viz.stream_picture(STREAMS, "tp"),
    "plot_conventions": lambda: viz.plot_conventions(LAYOUT, Megatron.from_layout(LAYOUT)),
    "plot_seed_sharing": lambda: viz.plot_seed_sharing(LAYOUT),
    "plot_memory": lambda: viz.plot_memory(REPORT),
    "plot_traffic": lambda: viz.plot_traffic(REPORT),
    "plot_cost": lambda: viz.plot_cost(REPORT),
    "plot_cost_comparison": lambda: viz.plot_cost_comparison([REPORT, REPORT], names=["a", "b"]),
    "GridPicture.figure": lambda: viz.grid_picture(LAYOUT, "tensor").figure(),
    "plot_schedule": lambda: viz.plot_schedule(schedule("1f1b", 2, 4)),
    "Layout.plot": lambda: LAYOUT.plot("data"),
    "Layout.plot_dims": lambda: LAYOUT.plot_dims(),
    "CostReport.plot": lambda: REPORT.plot(),
    "StreamReport.plot": lambda: STREAMS.plot("tp"),
    "plot_search": lambda: viz.plot_search(SEARCH, highlight=0),
    "SearchPicture": lambda: viz.SearchPicture(SEARCH),
}


def test_every_public_picture_function_is_covered():
    public = {name for name in viz.__all__ if name.startswith("plot_") or name.endswith("_picture")}
    assert public <= set(PICTURES), public - set(PICTURES)


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_a_picture_displays_itself_as_png(name):
    picture = PICTURES[name]()
    data, _ = DisplayFormatter().format(picture)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n", name
