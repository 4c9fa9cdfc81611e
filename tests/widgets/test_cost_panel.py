"""CostPanel: every control changes the estimate, picture and tables; errors as text; the side-by-side view;
following the layout panel and the lab; Replay on a real 4-rank gloo cluster."""

from __future__ import annotations

import html

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import pytest  # noqa: E402

import fastdist_lab  # noqa: E402
from fastdist_lab import Layout  # noqa: E402
from fastdist_lab.cost import ENGINES, Hardware, Training, Transformer, estimate  # noqa: E402
from fastdist_lab.widgets import CostPanel, LayoutPanel  # noqa: E402
from fastdist_lab.widgets.cost_panel import other_order  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def layout_64(**kw) -> Layout:
    return Layout(**{"world_size": 64, "local_world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 4, **kw})


def test_panel_shows_the_estimate_of_its_layout():
    layout = layout_64()
    panel = CostPanel(layout)
    expected = estimate(layout, "llama2-7b")
    assert panel.report.peak_bytes == expected.peak_bytes and panel.other is None
    assert panel.png.startswith(PNG_MAGIC) and len(panel.traffic_box.children) == 1
    assert (
        "Communication per step" in panel.tables.value
        and "Communication time per step on dgx-h100" in panel.tables.value
    )
    assert "Step time on dgx-h100" in panel.step_view.headline.value and "Step time" not in panel.tables.value
    assert "pipeline bubble" in panel.step_view.breakdown.value and panel.step_view.step is not None
    band = panel.step_view.step.band  # its error band, from the nearest validated runs (issue 27, item 5)
    assert band == expected.step("dgx-h100").band and band.text().split(";")[0] in panel.step_view.headline.value
    assert "fdl-step-band" in panel.step_view.headline.value and "outside validated runs" in band.text()
    assert bytes(panel.step_view.picture.value).startswith(PNG_MAGIC)  # the 1F1B schedule of 4 stages
    assert "tp2 pp4 dp8 data-first: peak" in panel.status.value and panel.error == ""
    assert panel.replay_button.disabled  # no cluster
    assert "fdl-cost-panel" in panel.widget._dom_classes
    assert plt.get_fignums() == []


@pytest.mark.parametrize(
    ("control", "value", "field"),
    [
        ("micro_batch_size", 2, "micro_batch_size"),
        ("num_microbatches", 16, "num_microbatches"),
        ("zero_stage", 1, "zero_stage"),
        ("sequence_tensor_parallel", True, "sequence_tensor_parallel"),
        ("recompute", "full", "recompute"),
    ],
)
def test_each_training_control_changes_the_estimate_and_the_picture(control, value, field):
    panel = CostPanel(layout_64())
    before_png, before_tables, renders = panel.png, panel.tables.value, panel.renders
    getattr(panel, control).value = value
    assert getattr(panel.report.training, field) == value
    assert panel.report.training == panel.training()
    expected = estimate(layout_64(), "llama2-7b", panel.training())
    assert panel.report.peak_bytes == expected.peak_bytes
    assert panel.renders == renders + 1 and panel.render_seconds > 0
    assert panel.png != before_png or panel.tables.value != before_tables


def test_schedule_controls_and_a_whole_set_up_loaded_at_once():
    panel = CostPanel(layout_64())
    picture = bytes(panel.step_view.picture.value)
    panel.schedule.value = "interleaved-1f1b"
    assert "virtual_pipeline_stages >= 2" in panel.error and panel.report is None  # said as text
    panel.virtual_pipeline_stages.value = 2
    assert panel.error == "" and panel.report.training.schedule == "interleaved-1f1b"
    assert (
        panel.report.training.virtual_pipeline_stages == 2 and panel.step_view.step.schedule_kind == "interleaved-1f1b"
    )
    assert bytes(panel.step_view.picture.value) != picture
    renders = panel.renders
    training = Training(
        micro_batch_size=2,
        num_microbatches=16,
        zero_stage=1,
        sequence_tensor_parallel=True,
        recompute="full",
        schedule="zero-bubble",
        virtual_pipeline_stages=2,
        flash_attention=False,
    )
    panel.load(model="llama2-70b", training=training, hardware="h100-sxm-80gb")
    assert panel.renders == renders + 1  # one estimate, one redraw for every control
    assert panel.report.training == training and panel.other_training == {"flash_attention": False}
    assert panel.report.model == Transformer.preset("llama2-70b") and panel.seq_length.value == 4096
    step = estimate(layout_64(), "llama2-70b", training).step("h100-sxm-80gb")
    assert panel.step_view.step.seconds == pytest.approx(step.seconds)
    with panel.hold():  # a layout and controls changed together: one estimate
        panel.layout = layout_64(pipeline_parallel=2)
        panel.micro_batch_size.value = 1
    assert panel.renders == renders + 2 and panel.report.layout.pipeline_parallel == 2


def test_model_and_sequence_length_and_hardware():
    panel = CostPanel(layout_64())
    panel.model.value = "gpt3-1.3b"
    assert panel.seq_length.value == Transformer.preset("gpt3-1.3b").seq_length == 2048
    assert panel.report.model == Transformer.preset("gpt3-1.3b")
    panel.seq_length.value = 1024
    assert panel.report.model.seq_length == 1024
    png = panel.png
    panel.hardware.value = "pcie-100gbe"
    assert (
        "Communication time per step on pcie-100gbe" in panel.tables.value and panel.png == png
    )  # memory does not depend on it


def test_an_impossible_setting_is_shown_as_text_and_fixing_it_recovers():
    panel = CostPanel(layout_64(sequence_data_parallel=2))
    png = panel.png
    panel.seq_length.value = 4095
    assert panel.report is None
    assert "seq_length=4095 must be a multiple of 2" in panel.error and "Traceback" not in panel.status.value
    assert panel.png == png  # the last picture stays
    panel.seq_length.value = 4096
    assert panel.error == "" and panel.report is not None
    panel.layout = None
    assert "fix the layout" in panel.error and panel.report is None


def test_side_by_side_view_compares_the_two_orderings():
    layout = layout_64()
    panel = CostPanel(layout)
    single = panel.png
    panel.view.value = "compare"
    assert panel.other.layout == other_order(layout) and panel.other.layout.pipeline_first
    assert len(panel.traffic_box.children) == 2 and panel.png != single
    tables = panel.tables.value
    assert "Side by side" in tables
    assert "tp2 pp4 dp8 data-first" in tables and "tp2 pp4 dp8 pipeline-first" in tables
    panel.view.value = "single"
    assert panel.other is None and len(panel.traffic_box.children) == 1


def test_the_panel_follows_a_layout_panel_and_lives_in_the_lab():
    layout_panel = LayoutPanel(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                               sequence_data_parallel=1)  # fmt: skip
    panel = CostPanel(layout_panel)
    assert panel.layout == layout_panel.layout
    layout_panel.tensor_parallel.value = 4
    assert panel.layout == layout_panel.layout and panel.report.layout.tensor_parallel == 4
    app = fastdist_lab.lab()
    assert any("fdl-cost-panel" in child._dom_classes for child in app.children)
    app.layout_panel.pipeline_parallel.value = 1
    assert app.cost_panel.layout == app.layout_panel.layout and app.cost_panel.report.sizes.pipeline_parallel == 1
    app.layout_panel.tensor_parallel.value = 8  # impossible on 8 GPUs with sequence-data 2
    assert app.cost_panel.layout is None and "fix the layout" in app.cost_panel.error
    app.flush()
    assert plt.get_fignums() == []


def test_replay_on_a_running_cluster():
    from fastdist_lab import LocalCluster

    layout = Layout(world_size=4, local_world_size=2, tensor_parallel=2, pipeline_parallel=2)
    panel = CostPanel(layout, model="gpt3-1.3b")
    assert panel.replay() is False and "no running cluster" in panel.error
    with LocalCluster(4, backend="gloo", local_world_size=2, progress=False) as cluster:
        panel.cluster = cluster
        assert not panel.replay_button.disabled
        assert panel.replay() is False and "Apply this layout" in panel.error  # nothing applied yet
        assert cluster.apply(layout).ok
        assert panel.replay(iterations=2) is True, panel.error
        frame = panel.replayed
        assert frame.index.tolist() == panel.report.communication_time().index.tolist()
        assert (frame["seconds"] > 0).all() and panel.progress.value == panel.progress.max
        assert "Replayed on the cluster" in panel.replay_table.value and "gloo" in panel.replay_table.value
        panel.micro_batch_size.value = 2  # a new estimate drops the old replay
        assert panel.replayed is None and panel.replay_table.value == ""
        training = Training(micro_batch_size=2)
        assert panel.training() == training
    panel.cluster = None
    assert panel.replay_button.disabled


def test_the_expert_load_control_prices_a_mixture_of_experts_and_sits_out_a_dense_model():
    layout = layout_64(expert_parallel=8)  # a stage of 16 ranks: 8 expert ranks x expert-tensor 2 (the tensor size)
    panel = CostPanel(layout, model="mixtral-8x7b")
    control = panel.expert_load_imbalance
    assert not control.disabled and "fdl-cost-expert-load" in control._dom_classes
    balanced = panel.step_view.step.seconds
    panel.expert_load_imbalance.value = 1.5
    assert panel.error == "" and panel.report.training.expert_load_imbalance == 1.5
    step = estimate(layout, "mixtral-8x7b", Training(expert_load_imbalance=1.5)).step("dgx-h100")
    assert panel.step_view.step.seconds == pytest.approx(step.seconds) and step.seconds > balanced
    loaded = Training(expert_load_imbalance=1.25, micro_batch_size=2)
    panel.load(training=loaded)
    assert panel.expert_load_imbalance.value == 1.25 and panel.report.training == loaded
    assert panel.other_training == {}  # a control of its own, not a hidden field
    panel.model.value = "llama2-7b"  # dense: nothing is routed, so the control is off
    assert panel.expert_load_imbalance.disabled


def test_the_network_box_prices_the_step_on_a_clusters_own_network():
    """``inter_node_GBps`` (0: the preset's) prices the step on ``Hardware.with_network``, as the CLI's
    ``--inter-node-GBps``: slower across nodes, named in the headline; ``load`` sets it with the rest."""
    panel = CostPanel(layout_64(), model="llama2-7b")  # tp2 pp4 dp8: the data-parallel groups cross nodes
    assert panel.inter_node_GBps.value == 0 and "fdl-cost-network" in panel.inter_node_GBps._dom_classes
    preset = panel.step_view.step.seconds
    assert preset == pytest.approx(estimate(layout_64(), "llama2-7b", Training()).step("dgx-h100").seconds)
    panel.inter_node_GBps.value = 2.0
    slow = Hardware.preset("dgx-h100").with_network(2.0)
    expected = estimate(layout_64(), "llama2-7b", Training()).step(slow)
    assert panel.error == "" and panel.machine() == slow and panel.step_view.step.seconds == pytest.approx(
        expected.seconds, rel=1e-12)  # fmt: skip
    assert expected.seconds > preset and "network 2 GB/s per GPU" in panel.step_view.headline.value
    panel.inter_node_GBps.value = 0  # back to the preset's
    assert panel.step_view.step.seconds == pytest.approx(preset, rel=1e-12) and panel.machine().name == "dgx-h100"
    panel.load(hardware="a100-sxm-80gb", inter_node_GBps=2.82)
    assert panel.machine() == Hardware.preset("a100-sxm-80gb").with_network(2.82)


def test_the_engine_control_prices_the_step_for_that_engine_and_a_refused_one_is_one_line():
    """The engine dropdown (``cost.ENGINES``, default megatron) goes into the ``Training``: on a pipeline + data
    layout DeepSpeed and FSDP2 predict other step times than Megatron, with their own error band in the headline; a
    combination the engine refuses is the one-line ``CostError`` in the status, and fixing it recovers."""
    panel = CostPanel(layout_64())  # tp2 pp4 dp8
    assert panel.engine.options == ENGINES and panel.engine.value == "megatron" == panel.report.training.engine
    assert "fdl-cost-engine" in panel.engine._dom_classes
    seconds, headlines = {}, {}
    for engine in ("megatron", "deepspeed", "fsdp2", "megatron"):
        renders = panel.renders
        panel.engine.value = engine
        assert panel.error == "" and panel.report.training == Training(engine=engine) == panel.training()
        expected = estimate(layout_64(), "llama2-7b", Training(engine=engine)).step("dgx-h100")
        step = panel.step_view.step
        assert step.seconds == pytest.approx(expected.seconds, rel=1e-12) and step.band == expected.band
        assert html.escape(expected.trust_text()) in panel.step_view.headline.value  # the band follows the engine
        assert engine == "megatron" or panel.renders == renders + 1
        seconds[engine], headlines[engine] = step.seconds, panel.step_view.headline.value
    assert len(set(seconds.values())) == 3 and len(set(headlines.values())) == 3  # three engines, three predictions
    for control, value, message in (
        ("schedule", "zero-bubble", "engine='deepspeed' runs schedule '1f1b' only, not schedule='zero-bubble'"),
        ("zero_stage", 2, "engine='deepspeed' runs ZeRO stage 1 at most with a pipeline, not zero_stage=2"),
    ):
        panel.engine.value = "deepspeed"
        getattr(panel, control).value = value
        assert panel.report is None and panel.error.startswith("CostError: ") and message in panel.error
        assert "\n" not in panel.error and "Traceback" not in panel.status.value
        assert html.escape(message) in panel.status.value
        panel.engine.value = "megatron"  # Megatron runs it: the estimate is back
        assert panel.error == "" and getattr(panel.report.training, control) == value
        getattr(panel, control).value = getattr(Training(), control)
    panel.load(training=Training(engine="fsdp2", zero_stage=3))  # a whole set-up, its engine included
    assert panel.engine.value == "fsdp2" and panel.report.training == Training(engine="fsdp2", zero_stage=3)
    assert panel.other_training == {}


def test_the_compile_control_prices_the_step_compiled_and_a_loaded_row_sets_it():
    """``torch_compile`` (a checkbox beside the engine) goes into the ``Training``: under fsdp2 it fuses the
    element-wise work, so the step is faster; ``load`` of a compiled set-up ticks it."""
    panel = CostPanel(layout_64())
    assert panel.torch_compile.value is False and "fdl-cost-compile" in panel.torch_compile._dom_classes
    panel.engine.value = "fsdp2"
    eager = panel.step_view.step.seconds
    panel.torch_compile.value = True
    assert panel.error == "" and panel.report.training == Training(engine="fsdp2", torch_compile=True)
    expected = estimate(layout_64(), "llama2-7b", Training(engine="fsdp2", torch_compile=True)).step("dgx-h100")
    assert panel.step_view.step.seconds == pytest.approx(expected.seconds, rel=1e-12)
    assert expected.seconds < eager
    panel.load(training=Training(engine="megatron"))
    assert panel.torch_compile.value is False and panel.other_training == {}
    panel.load(training=Training(engine="fsdp2", zero_stage=3, torch_compile=True))
    assert panel.torch_compile.value is True and panel.report.training.torch_compile
