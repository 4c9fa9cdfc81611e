"""The panels fuzzed (issue 45): the layout panel, the cost panel that follows it and the Advisor, each of their
controls set to what the control itself lets a person enter (any option of a menu, any number inside a box's
bounds, the boxes' ends most often) in random orders. Every change must end with the panel showing a result or an
error of one short line, never an exception out of a control's observer, and a panel that shows no error must hold
a result that agrees with its controls. A break test shows that a panel whose error is lost is reported."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdist_lab.setup import Training
from fastdist_lab.widgets import AdvisorPanel, CostPanel, LayoutPanel
from fastdist_lab.widgets.panel_parts import FactorDropdown

pytestmark = pytest.mark.slow

MESSAGE_LIMIT = 600
"""The most characters of a panel's error (the fuzz of the entry points holds errors to the same)."""

EDITABLE = (widgets.Dropdown, widgets.ToggleButtons, widgets.Checkbox, widgets.BoundedIntText,
            widgets.BoundedFloatText, widgets.IntText)  # fmt: skip
"""The kinds of controls a person changes (outputs, buttons and lists of results are not among them)."""


def controls_of(widget: Any) -> list[Any]:
    """The editable controls under ``widget``, in the order shown."""
    found = [widget] if isinstance(widget, EDITABLE) and not widget.disabled else []
    for child in getattr(widget, "children", ()):
        found += controls_of(child)
    return found


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Draw from one of ``choices`` (weight, strategy) with odds as its weight."""
    picks = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(picks) - 1).flatmap(lambda pick: picks[pick])


def entered(control: Any, data: st.DataObject) -> Any:
    """A value a person can give ``control``: an option of a menu (from Python, any positive integer of a factor
    menu, one time in five), a number inside a box's bounds (small ones most often, then its ends), a flag either
    way."""
    if isinstance(control, widgets.Checkbox):
        return data.draw(st.booleans())
    if isinstance(control, FactorDropdown):
        return data.draw(weighted((4, st.sampled_from(list(control._options_values))), (1, st.integers(1, 2**20))))
    if isinstance(control, (widgets.Dropdown, widgets.ToggleButtons)):
        return data.draw(st.sampled_from(list(control._options_values)))
    low, high = getattr(control, "min", -(2**31)), getattr(control, "max", 2**31)
    ends = st.sampled_from([low, high, low + 1, high - 1])
    if isinstance(control, widgets.BoundedFloatText):
        return data.draw(weighted((2, st.floats(low, min(high, low + 1000))), (1, ends), (1, st.floats(low, high))))
    small = st.sampled_from([v for v in (1, 2, 4, 8, 16, 32, 64) if low <= v <= high] or [low])
    return data.draw(weighted((4, small), (1, ends), (1, st.integers(low, high))))


def one_short_line(error: str) -> bool:
    """Whether ``error`` is one line of at most ``MESSAGE_LIMIT`` characters."""
    return bool(error) and "\n" not in error and len(error) <= MESSAGE_LIMIT


def judge(layout_panel: LayoutPanel, cost: CostPanel) -> list[str]:
    """What the two panels break of the promise after a change (empty: nothing)."""
    broken = []
    if layout_panel.layout is None and not one_short_line(layout_panel.error):
        broken.append(f"no layout and no one-line error: {layout_panel.error!r}")
    if layout_panel.layout is not None and layout_panel.error:
        broken.append(f"a layout and an error: {layout_panel.error!r}")
    if cost.error:
        if not one_short_line(cost.error) or cost.report is not None:
            broken.append(f"cost panel error {cost.error!r} with report {cost.report is not None}")
    elif cost.report is None or cost.report.layout != layout_panel.layout:
        broken.append("cost panel shows no error and no report of the layout shown")
    return broken


FUZZ = settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))


START = dict(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=1, sequence_data_parallel=1,
             expert_parallel=1)  # fmt: skip


def two_panels() -> tuple[LayoutPanel, CostPanel]:
    """A layout panel of 16 GPUs and the cost panel that follows it."""
    layout_panel = LayoutPanel(**START, debounce=0)
    return layout_panel, CostPanel(layout_panel, model="gpt3-1.3b", debounce=0)


@pytest.fixture(scope="module")
def panels() -> tuple[LayoutPanel, CostPanel]:
    return two_panels()


@FUZZ
@given(data=st.data())
def test_the_layout_and_cost_panels_take_whatever_their_controls_offer(panels, data):
    layout_panel, cost = panels
    with cost.hold():  # each example from a set-up that works, as a person starts from the defaults
        layout_panel.set(**START)
        cost.load(model="gpt3-1.3b", training=Training(), hardware="h100-sxm-80gb", inter_node_GBps=0.0)
    for _ in range(data.draw(st.integers(1, 6))):
        control = data.draw(st.sampled_from(controls_of(layout_panel.widget) + controls_of(cost.widget)))
        value = entered(control, data)
        control.value = value  # an exception out of an observer fails the test here
        layout_panel.flush()
        assert judge(layout_panel, cost) == [], f"{control.description}={value!r}"


@pytest.fixture(scope="module")
def advisor() -> AdvisorPanel:
    panel = AdvisorPanel(model="gpt3-1.3b", gpus=16, global_batch_size=64, debounce=0)
    return panel


@FUZZ
@given(data=st.data())
def test_the_advisor_takes_whatever_its_controls_offer(advisor, data):
    for _ in range(data.draw(st.integers(1, 4))):
        control = data.draw(st.sampled_from(controls_of(advisor.widget)))
        if control is advisor.gpus:  # a search over tens of thousands of GPUs takes seconds: fewer of them
            value = data.draw(st.one_of(st.integers(1, 512), st.just(advisor.gpus.max)))
        else:
            value = entered(control, data)
        control.value = value
    advisor.search()
    if advisor.error:
        assert one_short_line(advisor.error) and advisor.result is None, advisor.error
    else:
        assert advisor.result is not None and len(advisor.rows.options) == len(advisor.result)


def test_a_panel_whose_error_is_lost_is_reported():
    layout_panel, cost = two_panels()
    layout_panel.set(world_size=16, tensor_parallel=2, pipeline_parallel=1)
    layout_panel.flush()
    assert judge(layout_panel, cost) == []
    layout_panel.set(tensor_parallel=3)
    layout_panel.flush()
    assert layout_panel.layout is None and judge(layout_panel, cost) == []
    layout_panel.error = ""  # the error lost
    assert judge(layout_panel, cost) == [f"no layout and no one-line error: {''!r}"]
    cost.report = None
    cost.error = ""
    layout_panel.set(tensor_parallel=2)
    layout_panel.flush()
    assert judge(layout_panel, cost) == []
    cost.report = None  # a panel that shows nothing and says nothing
    assert judge(layout_panel, cost) == ["cost panel shows no error and no report of the layout shown"]
