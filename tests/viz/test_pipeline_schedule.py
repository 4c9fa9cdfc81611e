"""The schedule picture: one row per rank, one cell per action, two colours, the bubble shaded."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.cost import Training, estimate, schedule  # noqa: E402
from fastdist_lab.viz import plot_schedule, schedule_times  # noqa: E402
from fastdist_lab.viz.colors import ACTION_COLORS, BUBBLE_COLOR  # noqa: E402


def bars(figure: Figure) -> list:
    ax = figure.axes[0]
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_a_table_in_unit_times():
    table = schedule("1f1b", 4, 8)
    times = schedule_times(table)
    assert times["makespan"] == pytest.approx((8 + 3) * 3)
    figure = plot_schedule(table)
    assert isinstance(figure, Figure)
    collections = bars(figure)
    colours = {tuple(round(x, 3) for x in c.get_facecolor()[0][:3]) for c in collections}
    assert tuple(round(x, 3) for x in ACTION_COLORS["F"]) in colours
    assert tuple(round(x, 3) for x in ACTION_COLORS["B"]) in colours
    assert tuple(round(x, 3) for x in BUBBLE_COLOR) in colours
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert "F0" in texts and "B7" in texts and len(texts) == 4 * 16
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == [f"rank {r}" for r in range(4)]
    assert "bubble 27%" in figure.axes[0].get_title(loc="left")  # 3 of 11 slots


def test_a_step_in_seconds_and_bad_input():
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=4, pipeline_parallel=4)
    step = estimate(layout, "llama2-7b", Training(num_microbatches=4, schedule="zero-bubble")).step("h100-sxm-80gb")
    times = schedule_times(step)
    assert times["unit"] == "seconds" and times["makespan"] <= step.seconds
    texts = [t.get_text() for t in plot_schedule(step).axes[0].texts]
    assert {"F0", "I0", "W0"} <= set(texts)
    with pytest.raises(TypeError, match="StepTime or a PipelineSchedule"):
        plot_schedule("1f1b")
