"""AdvisorPanel: a search shown as ranked rows and a scatter; a row chosen (in the list or on the scatter) loads its
layout into the layout panel and its set-up into the cost panel; bad input as text; in a kernel's event loop the
search runs on a thread (the loop keeps answering), one at a time, with progress."""

from __future__ import annotations

import asyncio
import threading
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import fastdist_lab  # noqa: E402
from fastdist_lab.cost import ENGINES, Hardware, ranked_lines, search  # noqa: E402
from fastdist_lab.errors import CostError  # noqa: E402
from fastdist_lab.widgets import AdvisorPanel  # noqa: E402
from fastdist_lab.widgets.advisor_panel import NO_BREAK  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = {"model": "llama2-7b", "gpus": 16, "global_batch_size": 64, "hardware": "h100-sxm-80gb", "top": 12}


@pytest.fixture(scope="module")
def expected():
    """The search the small panel runs, run directly."""
    return search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=12)


def small_panel(**changes) -> AdvisorPanel:
    panel = AdvisorPanel(**{**SMALL, **changes})
    panel.search()
    return panel


def test_a_search_shows_the_ranked_rows_and_the_scatter(expected):
    panel = AdvisorPanel(**SMALL)
    assert panel.result is None and panel.searches == 0  # nothing is searched before it is asked for
    panel.search()
    assert panel.searches == 1 and panel.error == "" and not panel.searching
    pd.testing.assert_frame_equal(panel.result.frame, expected.frame)
    lines = ranked_lines(expected)
    assert len(panel.rows.options) == len(expected) == 12
    assert [label.replace(NO_BREAK, " ") for label, _ in panel.rows.options] == lines[1:]
    assert [value for _, value in panel.rows.options] == list(range(12)) and panel.rows.value is None
    assert lines[0] in panel.header.value.replace(NO_BREAK, " ") and "MFU" in panel.header.value
    assert panel.png.startswith(PNG_MAGIC) and panel.selected == -1 and panel.choice is None
    assert "llama2-7b, global batch 64 on 16 x h100-sxm-80gb" in panel.status.value
    assert "the best 12 of" in panel.status.value and "fdl-advisor-panel" in panel.widget._dom_classes
    assert " band " in panel.header.value.replace(NO_BREAK, " ") and "band: where the measured" in panel.legend.value
    ties = int(expected.frame["tie"].sum())  # the rows that tie the best are said, and marked = in their line
    assert (f"{ties} row" if ties else "no row ties the best") in panel.status.value
    marked = [label.replace(NO_BREAK, " ").lstrip().startswith("=") for label, _ in panel.rows.options]
    assert marked == expected.frame["tie"].tolist()
    assert plt.get_fignums() == []


def test_choosing_a_row_loads_its_layout_and_set_up_into_the_lab(expected):
    app = fastdist_lab.lab()
    advisor = app.advisor_panel
    assert "fdl-advisor" in app.children[0]._dom_classes and app.children[0].selected_index is None  # folded
    for name in ("hardware", "top", "global_batch_size", "gpus"):  # each change searches again (at once here)
        getattr(advisor, name).value = SMALL[name]
    assert advisor.error == "" and advisor.result.frame.equals(expected.frame)
    row = len(expected) - 1
    grid, schedule_png = app.layout_panel.png, bytes(app.cost_panel.step_view.picture.value)
    advisor.rows.value = row  # what a click on the row's line does
    app.flush()
    assert advisor.selected == row and advisor.choice.row == row
    layout, training = expected.layout(row), expected.training(row)
    shown = app.layout_panel.layout
    assert shown.fields() == {**layout.fields(), "backend": "gloo"}  # the layout panel runs gloo on this machine
    assert app.layout_panel.world_size.value == 16 and app.layout_panel.png != grid
    cost = app.cost_panel
    assert cost.report.layout == shown and cost.report.training == training and cost.error == ""
    assert cost.model.value == "llama2-7b" and cost.hardware.value == "h100-sxm-80gb"
    step = cost.step_view.step
    assert step.seconds == pytest.approx(expected.frame.loc[row, "seconds"], rel=1e-9)
    assert "Step time on h100-sxm-80gb" in cost.step_view.headline.value
    assert "where the time goes" in cost.step_view.breakdown.value and "forward" in cost.step_view.breakdown.value
    schedule = bytes(cost.step_view.picture.value)
    assert schedule.startswith(PNG_MAGIC) and schedule != schedule_png
    assert app.streams_panel.layout == shown  # the other panels follow the layout panel as ever
    assert plt.get_fignums() == []


def test_the_engine_dropdown_searches_for_that_engine_and_a_chosen_row_carries_it_to_the_lab(expected):
    """The engine every row is priced for (``search(engine=...)``); a chosen row's ``Training`` carries it into the
    cost panel (its dropdown, its step time and error band) and the cluster panel's *Train step*."""
    app = fastdist_lab.lab()
    advisor, cost = app.advisor_panel, app.cost_panel
    assert advisor.engine.options == ENGINES and advisor.engine.value == "megatron"
    assert "fdl-advisor-engine" in advisor.engine._dom_classes and "engine" in advisor.inputs()
    for name in ("hardware", "top", "global_batch_size", "gpus"):
        getattr(advisor, name).value = SMALL[name]
    assert advisor.result.frame.equals(expected.frame) and "engine" not in advisor.status.value
    advisor.engine.value = "deepspeed"  # searches again, for DeepSpeed
    deepspeed = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=12, engine="deepspeed")
    assert advisor.error == "" and advisor.result.frame.equals(deepspeed.frame)
    assert (
        not deepspeed.frame.equals(expected.frame) and "global batch 64, engine deepspeed on 16" in advisor.status.value
    )
    row = len(deepspeed) - 1  # (its top rows have no pipeline: test_cost_panel prices one per engine)
    advisor.rows.value = row
    app.flush()
    training = deepspeed.training(row)
    assert training.engine == "deepspeed" and advisor.choice.training == training
    assert cost.engine.value == "deepspeed" and cost.report.training == training and cost.error == ""
    step = cost.step_view.step
    assert step.seconds == pytest.approx(deepspeed.frame.loc[row, "seconds"], rel=1e-9)
    assert step.band == cost.report.step("h100-sxm-80gb").band and "fdl-step-band" in cost.step_view.headline.value
    assert app.cluster_panel.train.training().engine == "deepspeed"  # Train step runs the row as searched
    advisor.engine.value = "megatron"
    advisor.select(0)
    assert cost.engine.value == "megatron" and cost.report.training == expected.training(0)


def test_the_compile_box_searches_compiled_rows_and_a_chosen_row_carries_it_to_the_cost_panel():
    """``torch_compile`` is a search input like the engine: every row priced compiled; a chosen row's ``Training``
    ticks the cost panel's box."""
    app = fastdist_lab.lab()
    advisor, cost = app.advisor_panel, app.cost_panel
    assert "torch_compile" in advisor.inputs() and "fdl-advisor-compile" in advisor.torch_compile._dom_classes
    for name in ("hardware", "top", "global_batch_size", "gpus"):
        getattr(advisor, name).value = SMALL[name]
    advisor.engine.value = "fsdp2"
    advisor.torch_compile.value = True  # searches again
    compiled = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=12, engine="fsdp2",
                      torch_compile=True)  # fmt: skip
    assert advisor.error == "" and advisor.result.frame.equals(compiled.frame)
    advisor.select(0)
    app.flush()
    assert advisor.choice.training.torch_compile and cost.torch_compile.value is True
    assert cost.report.training == compiled.training(0) and cost.error == ""


def test_the_network_box_searches_on_that_network_and_a_chosen_row_carries_it_to_the_cost_panel():
    """``inter_node_GBps`` (0: the preset's) makes every row priced on ``Hardware.with_network``, as the CLI's
    ``--inter-node-GBps``; a chosen row sets the cost panel's box, so its step is the row's."""
    app = fastdist_lab.lab()
    advisor, cost = app.advisor_panel, app.cost_panel
    assert advisor.inter_node_GBps.value == 0 and "fdl-advisor-network" in advisor.inter_node_GBps._dom_classes
    for name in ("hardware", "top", "global_batch_size", "gpus"):
        getattr(advisor, name).value = SMALL[name]
    assert advisor.inputs()["hardware"] == "h100-sxm-80gb"
    advisor.inter_node_GBps.value = 2.0  # searches again, on that network
    slow = Hardware.preset("h100-sxm-80gb").with_network(2.0)
    expected = search("llama2-7b", 16, hardware=slow, global_batch_size=64, top=12)
    assert advisor.inputs()["hardware"] == slow and advisor.error == "" and advisor.result.frame.equals(expected.frame)
    assert "network 2 GB/s per GPU" in advisor.status.value
    advisor.select(0)
    app.flush()
    assert advisor.choice.hardware == "h100-sxm-80gb" and advisor.choice.inter_node_GBps == 2.0
    assert cost.inter_node_GBps.value == 2.0 and cost.machine() == slow and cost.error == ""
    assert cost.step_view.step.seconds == pytest.approx(expected.frame.loc[0, "seconds"], rel=1e-9)


def test_a_click_on_the_scatter_chooses_the_nearest_point(expected):
    panel = small_panel()
    before = panel.png
    pixels = panel._pixels
    assert pixels.shape == (12, 2)
    x, y = pixels[4]
    chosen = panel.click(x + 3, y - 2)
    assert chosen == int(np.flatnonzero(np.hypot(*(pixels - pixels[4]).T) <= 12)[0])  # the best-ranked one there
    assert panel.selected == chosen and panel.rows.value == chosen and panel.png != before
    assert panel.choice.layout == expected.layout(chosen) and panel.choice.training == expected.training(chosen)
    assert panel.click(1, 1) is None and panel.selected == chosen  # off every point: nothing changes
    with pytest.raises(CostError, match="row=12"):
        panel.select(12)
    assert panel.select(None) is None and panel.rows.value is None and panel.selected == -1


def test_choosing_the_same_row_again_loads_it_again():
    app = fastdist_lab.lab()
    advisor = app.advisor_panel
    for name in ("hardware", "top", "global_batch_size", "gpus"):
        getattr(advisor, name).value = SMALL[name]
    advisor.select(0)
    app.layout_panel.set(world_size=8, tensor_parallel=2)
    assert app.layout_panel.layout.world_size == 8
    advisor.select(0)
    assert app.layout_panel.layout.world_size == 16


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"gpus": 12}, "gpus=12 must be a multiple of gpus_per_node=8"),
        ({"model": "gpt3-175b", "gpus": 8, "top": 3}, "set-ups searched fits the memory: more GPUs"),
    ],
)
def test_bad_input_is_text_in_the_panel_and_fixing_it_recovers(changes, message):
    panel = small_panel()
    assert panel.result is not None
    for name, value in changes.items():
        getattr(panel, name).value = value
    assert message in panel.error or message in panel.status.value
    assert "Traceback" not in panel.status.value and panel.rows.options == () and panel.choice is None
    for name in changes:
        getattr(panel, name).value = SMALL[name]
    assert panel.error == "" and len(panel.result) == 12 and len(panel.rows.options) == 12


def test_the_defaults_are_those_of_the_cli():
    panel = AdvisorPanel()
    assert panel.hardware.value == "dgx-h100" and panel.model.value == "llama2-7b"  # as fastdist-lab search / cost
    assert panel.top.value == 20 and panel.gpus_per_node.value == 8


class HeldSearches:
    """``cost.search``, each call held at its first progress report until the test releases it: whether a search
    still runs is then up to the test, not to how fast the machine is. Records every call's inputs, the threads
    they ran on and the most searches that ever ran at once."""

    def __init__(self, held: int) -> None:
        self.held = held  # the first ``held`` calls wait; the later ones run straight through
        self.waiting = [threading.Event() for _ in range(held)]  # call i waits at its first progress report
        self.release = [threading.Event() for _ in range(held)]
        self.calls: list[dict] = []
        self.threads: list[threading.Thread] = []
        self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, progress, **inputs):
        with self.lock:
            call = len(self.calls)
            self.calls.append(inputs)
            self.threads.append(threading.current_thread())
            self.running += 1
            self.most = max(self.most, self.running)
        first = [True]

        def held_progress(done: int, total: int, message: str) -> None:
            if call < self.held and first[0]:
                first[0] = False
                self.waiting[call].set()
                assert self.release[call].wait(60), "the test never released the search"
            progress(done, total, message)  # the panel's: a superseded search stops here

        try:
            return search(**inputs, progress=held_progress)
        finally:
            with self.lock:
                self.running -= 1


async def until(event: threading.Event, ticks: list[int]) -> None:
    """Wait (on the loop, ticking) until ``event`` is set by the search thread."""
    deadline = time.monotonic() + 120
    while not event.is_set():
        assert time.monotonic() < deadline, "the search never reached its first progress report"
        await asyncio.sleep(0.005)
        ticks[0] += 1


def test_in_an_event_loop_a_search_runs_on_a_thread_one_at_a_time_with_progress(monkeypatch):
    """As in a kernel: input changes are debounced into one search on a thread; the loop keeps running while it is
    held (a ticker); a newer request abandons the running search at its next progress report; one search runs at
    a time; progress shows; the result is applied on the loop's thread. Searches are held by events the test
    sets, so nothing depends on how long a search takes."""
    monkeypatch.setenv("FASTDIST_LAB_BAR_DELAY", "0")  # show progress from the start
    panel = AdvisorPanel(**{**SMALL, "gpus": 512, "global_batch_size": 1024}, debounce=0.05)
    assert panel.bar_delay == 0.0
    held = panel.searcher = HeldSearches(held=2)
    seen: dict[str, list] = {"progress": [], "result_thread": []}
    panel.progress.observe(lambda c: seen["progress"].append((c["new"], panel.progress.layout.display)), "value")
    panel.observe(lambda c: seen["result_thread"].append(threading.current_thread()), "result")

    async def scenario() -> list[int]:
        ticks = [0]
        panel.gpus.value = 256  # three changes inside the debounce: one search
        panel.global_batch_size.value = 512
        panel.gpus.value = 512
        await until(held.waiting[0], ticks)  # the first search is held at its first progress report
        assert panel.searching and panel._worker is not None and len(held.calls) == 1
        held_ticks = ticks[0]
        for _ in range(5):  # the loop keeps answering while the search thread is busy
            await asyncio.sleep(0)
        panel.search()  # a newer request: the held search is abandoned at its next progress report
        held.release[0].set()
        await until(held.waiting[1], ticks)  # ... and this one runs (on the same thread), held in turn
        assert len(held.calls) == 2 and held.threads[0] is held.threads[1] is not threading.main_thread()
        panel.gpus.value = 16  # a third request abandons the second
        panel.global_batch_size.value = 64
        panel.flush()  # the inputs rest now (no waiting for the debounce)
        held.release[1].set()
        deadline = time.monotonic() + 300
        while (panel.searching or panel._worker is not None) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            ticks[0] += 1
        return [held_ticks, ticks[0]]

    held_ticks, ticks = asyncio.run(scenario())
    assert held_ticks >= 1 and ticks > held_ticks  # the loop ran while searches were held
    assert [(c["gpus"], c["global_batch_size"]) for c in held.calls] == [(512, 512), (512, 512), (16, 64)]
    assert held.most == 1  # one search at a time
    assert panel.searches == 1 and panel.error == "" and panel.result.gpus == 16  # only the last one is shown
    assert panel.result.frame["global_batch_size"].eq(64).all()
    assert seen["result_thread"] == [threading.main_thread()]
    assert seen["progress"] and all(display is None for _, display in seen["progress"])
    assert panel.progress.layout.display == "none"  # hidden again when done


def test_a_search_error_on_a_thread_is_text_too():
    panel = AdvisorPanel(**{**SMALL, "gpus": 12}, debounce=0.05)

    async def scenario() -> None:
        panel.search()
        while panel.searching or panel._worker is not None:
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert "gpus=12 must be a multiple" in panel.error and panel.result is None and panel.searches == 1


def test_train_this_row_runs_exactly_the_rows_set_up_on_the_labs_cluster(expected):
    """One click: the chosen row's layout and ``cost.Training`` (schedule, micro-batches, ZeRO stage, recompute, ...)
    trained on a small TinyGPT on the lab's cluster (threads here), started at the row's world size."""
    app = fastdist_lab.lab(mode="threads")
    advisor, cluster = app.advisor_panel, app.cluster_panel
    try:
        assert advisor.train_button.disabled and advisor.train_row() is None  # no row chosen: nothing to train
        for name in ("hardware", "top", "global_batch_size", "gpus"):
            getattr(advisor, name).value = SMALL[name]
        row = int(np.flatnonzero(expected.frame["pipeline_parallel"] > 1)[0])  # a row with a pipeline schedule
        advisor.rows.value = row
        app.flush()
        training, layout = expected.training(row), expected.layout(row)
        assert not advisor.train_button.disabled and cluster.train.training() == training  # offered as it stands
        advisor.train_button.click()
        check = cluster.train.check
        assert check is not None and check.ok, check.summary()
        assert check.training == training and check.schedule == training.schedule
        assert check.layout.fields() == {**layout.fields(), "backend": check.layout.backend}
        assert cluster.running and cluster.cluster.world_size == layout.world_size == 16
        assert check.settings["micro_batches"] == training.num_microbatches
        assert "everything agrees" in cluster.train.status.value
    finally:
        app.close()


def test_a_mixture_of_experts_row_loads_its_expert_layout_and_prices_as_searched():
    moe = {**SMALL, "model": "qwen3-30b-a3b"}
    expected = search("qwen3-30b-a3b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=12)
    app = fastdist_lab.lab()
    advisor = app.advisor_panel
    for name in ("gpus", "global_batch_size", "hardware", "top", "model"):  # each searches again: the MoE last
        getattr(advisor, name).value = moe[name]
    assert advisor.error == "" and advisor.result.frame.equals(expected.frame)
    rows = [i for i in range(len(expected)) if expected.frame.loc[i, "expert_parallel"] > 1]
    assert rows, "the search found no row with expert parallelism: pick another size for this test"
    for row in (0, rows[0]):  # row 0: expert-tensor 1 under tensor 2 (an expert layout even with EP 1)
        advisor.rows.value = row
        app.flush()
        layout = expected.layout(row)
        shown = app.layout_panel.layout
        assert shown.fields() == {**layout.fields(), "backend": "gloo"}
        assert shown.expert_sizes == layout.expert_sizes and shown.has_experts == layout.has_experts
        cost = app.cost_panel
        assert cost.error == "" and cost.model.value == "qwen3-30b-a3b"
        assert cost.report.training == expected.training(row) and not cost.expert_load_imbalance.disabled
        assert cost.step_view.step.seconds == pytest.approx(expected.frame.loc[row, "seconds"], rel=1e-9)
    assert app.layout_panel.layout.expert_parallel == expected.frame.loc[rows[0], "expert_parallel"]
