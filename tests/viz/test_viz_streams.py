"""Stream pictures: a Figure with the expected axes, the right pixels, and no pyplot state left behind."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

from fastdist_lab import Layout
from fastdist_lab.streams import predict
from fastdist_lab.viz import plot_sharing, plot_streams
from fastdist_lab.viz.colors import group_colors

LAYOUT = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)


@pytest.fixture(scope="module")
def report():
    return predict(LAYOUT, 1, "training")


def test_plot_streams_axes(report) -> None:
    fig = plot_streams(report)
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == list(report.generators)
    assert ax.get_xlabel() == "generator" and ax.get_ylabel() == "rank"
    assert "predicted, step 1, training" in ax.get_title()
    (image,) = ax.get_images()
    pixels = np.asarray(image.get_array())
    assert pixels.shape == (16, 5, 3)
    ids = report.stream_ids
    same_colour = (pixels[:, :, None, None, :] == pixels[None, None, :, :, :]).all(axis=-1)
    same_stream = ids[:, :, None, None] == ids[None, None, :, :]
    assert np.array_equal(same_colour, same_stream)
    # annotated with the stream ids
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(ids.ravel().tolist())


def test_plot_sharing_axes(report) -> None:
    fig = plot_sharing(report, "pp")
    (ax,) = fig.axes
    assert "pp stream" in ax.get_title() and "8 distinct pp streams" in ax.get_title()
    assert ax.get_xlabel() == ax.get_ylabel() == "rank"
    shares = np.asarray(ax.get_images()[0].get_array())
    ids = report.stream_ids[:, report.generator_index("pp")]
    assert np.array_equal(shares, ids[:, None] == ids[None, :])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "same stream", "tensor group", "data rank changes", "pipeline rank changes"
    ]  # fmt: skip
    # pipeline boundary between ranks 7 and 8 (data-first, tp*dp = 8), drawn both ways
    red = [line for line in ax.lines if line.get_color() == "#c0392b"]
    vertical = [float(line.get_xdata()[0]) for line in red if line.get_xdata()[0] == line.get_xdata()[1]]
    horizontal = [float(line.get_ydata()[0]) for line in red if line.get_ydata()[0] == line.get_ydata()[1]]
    assert vertical == horizontal == [7.5]
    # one outline per tensor group
    assert len(ax.patches) == 8


def test_large_worlds_show_the_first_ranks() -> None:
    big = predict(Layout(world_size=4096, local_world_size=8, tensor_parallel=4, pipeline_parallel=4), draws=1)
    (ax,) = plot_streams(big, max_ranks=100).axes
    assert "first 100 of 4096 ranks" in ax.get_title()
    assert ax.get_images()[0].get_array().shape[0] == 100
    (ax,) = plot_sharing(big, "tp").axes
    assert ax.get_images()[0].get_array().shape == (512, 512)
    with pytest.raises(ValueError, match="max_ranks"):
        plot_streams(big, max_ranks=0)


def test_unknown_generator(report) -> None:
    with pytest.raises(ValueError, match="generator='dropout' is not one of"):
        plot_sharing(report, "dropout")


def test_the_one_palette_gives_distinct_colours() -> None:
    for count in (5, 20, 300):
        colours = group_colors(count)
        assert colours.shape == (count, 3)
        assert len({tuple(np.round(c, 6)) for c in colours}) == count


def test_no_pyplot_and_no_open_figures() -> None:
    code = (
        "import sys\n"
        "from fastdist_lab import Layout\n"
        "from fastdist_lab.streams import predict\n"
        "from fastdist_lab.viz import plot_sharing, plot_streams\n"
        "r = predict(Layout(world_size=8, local_world_size=8, tensor_parallel=2))\n"
        "plot_streams(r); plot_sharing(r, 'tp')\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
        "import matplotlib.pyplot as plt\n"
        "assert plt.get_fignums() == [], plt.get_fignums()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
