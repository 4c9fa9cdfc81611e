"""The step time: its breakdown adds up, it moves the right way with the hardware and the set-up, and it states
what it does not know (a GPU without compute figures, memory that does not fit)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import BREAKDOWN, Hardware, Training, Transformer, estimate, model_flops
from fastdist_lab.errors import CostError

H100 = Hardware.preset("h100-sxm-80gb")


@st.composite
def setups(draw):
    """A random (layout, model, training) that splits evenly, on nodes of 4."""
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    sdp = draw(st.sampled_from([1, 2]))
    bdp = draw(st.integers(1, 3))
    world = tp * pp * sdp * bdp
    layout = Layout(world_size=world, local_world_size=min(4, world) if world % 4 == 0 or world < 4 else world,
                    tensor_parallel=tp, pipeline_parallel=pp, sequence_data_parallel=sdp,
                    pipeline_first=draw(st.booleans()))  # fmt: skip
    heads = 4 * tp
    model = Transformer(hidden_size=heads * 32, num_layers=pp * draw(st.integers(1, 4)), num_attention_heads=heads,
                        num_query_groups=draw(st.sampled_from([tp, heads])), vocab_size=draw(st.integers(500, 5000)),
                        seq_length=256 * sdp * tp, swiglu=draw(st.booleans()),
                        tied_embeddings=draw(st.booleans()))  # fmt: skip
    kind = "1f1b" if pp == 1 else draw(st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"]))
    v = 2 if kind == "interleaved-1f1b" else 1
    if v * pp > model.num_layers:
        model = model.replace(num_layers=v * pp)
    training = Training(
        micro_batch_size=draw(st.integers(1, 2)),
        num_microbatches=pp * draw(st.integers(1, 3)),
        zero_stage=draw(st.integers(0, 3)),
        sequence_tensor_parallel=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        schedule=kind,
        virtual_pipeline_stages=v,
        flash_attention=draw(st.booleans()),
    )
    return layout, model, training


@settings(deadline=None, max_examples=60)
@given(setups())
def test_breakdown_adds_up_and_the_headline_figures_agree(setup):
    layout, model, training = setup
    report = estimate(layout, model, training)
    step = report.step(H100)
    parts = step.breakdown
    assert list(parts.index) == list(BREAKDOWN)
    assert (parts["seconds"] >= -1e-12).all()
    assert parts["seconds"].sum() == pytest.approx(step.seconds, rel=1e-9)
    assert parts["share"].sum() == pytest.approx(1.0)
    sequences = layout.data_parallel // layout.sequence_data_parallel * report.sizes.microbatches
    sequences *= training.micro_batch_size
    assert step.global_batch_size == sequences
    assert step.tokens_per_second == pytest.approx(sequences * model.seq_length / step.seconds)
    flops = model_flops(model, sequences, layout.tensor_parallel)
    assert step.tflops_per_gpu == pytest.approx(flops / step.seconds / layout.world_size / 1e12)
    assert step.mfu == pytest.approx(step.tflops_per_gpu / H100.peak_tflops)
    if layout.pipeline_parallel == 1:
        assert parts.loc["pipeline bubble", "seconds"] == pytest.approx(0, abs=1e-12)
    if layout.sequence_data_parallel == 1:
        assert parts.loc["sequence-data communication", "seconds"] == 0
    if layout.tensor_parallel == 1:
        assert parts.loc["tensor communication", "seconds"] == 0
    if training.recompute == "none" or (training.recompute == "selective" and training.flash_attention):
        assert parts.loc["recompute", "seconds"] == 0


@settings(deadline=None, max_examples=40)
@given(setups())
def test_faster_hardware_and_overlap_never_slow_a_step_down(setup):
    layout, model, training = setup
    report = estimate(layout, model, training)
    base = report.step(H100).seconds
    assert report.step(H100.replace(peak_tflops=2 * H100.peak_tflops)).seconds <= base * (1 + 1e-9)
    assert report.step(H100.replace(memory_GBps=2 * H100.memory_GBps)).seconds <= base * (1 + 1e-9)
    assert report.step(H100.replace(inter_node_GBps=4 * H100.inter_node_GBps)).seconds <= base * (1 + 1e-9)
    for flag in ("overlap_data_parallel", "overlap_tensor_parallel", "overlap_pipeline_parallel"):
        on = estimate(layout, model, training.replace(**{flag: True})).step(H100).seconds
        off = estimate(layout, model, training.replace(**{flag: False})).step(H100).seconds
        assert on <= off * (1 + 1e-9), flag
    if training.recompute != "full":
        assert estimate(layout, model, training.replace(recompute="full")).step(H100).seconds >= base * (1 - 1e-9)


def test_llama3_405b_with_lighter_first_and_last_stages():
    # Dubey et al. 2024, Section 3.3.2: 126 layers over 16 stages, one fewer on the first and the last.
    model = Transformer(hidden_size=16384, num_layers=126, num_attention_heads=128, num_query_groups=8,
                        ffn_hidden_size=53248, vocab_size=128256, seq_length=8192, swiglu=True, tied_embeddings=False,
                        normalization="RMSNorm")  # fmt: skip
    layout = Layout(world_size=8192, local_world_size=8, tensor_parallel=8, pipeline_parallel=16)
    split = (7,) + (8,) * 14 + (7,)
    training = Training(num_microbatches=32, zero_stage=1, sequence_tensor_parallel=True, layers_per_stage=split,
                        recompute="full")  # fmt: skip
    report = estimate(layout, model, training)
    assert report.memory["parameters"].iloc[0] < report.memory["parameters"].iloc[1]
    step = report.step(H100)
    assert 0.15 < step.mfu < 0.5 and step.fits  # 1F1B over 16 stages, 32 micro-batches: a large bubble
    even = estimate(layout, model, training.replace(layers_per_stage=None))
    assert even.memory["parameters"].iloc[0] > report.memory["parameters"].iloc[0]
    with pytest.raises(CostError, match="must give 16 stages"):
        estimate(layout, model, training.replace(layers_per_stage=(8,) * 16))
    with pytest.raises(CostError, match=r"layers_per_stage=\(1, -1\) must hold integers from 0"):
        Training(layers_per_stage=(1, -1))


def test_memory_fits_and_what_a_report_says_about_it():
    model = Transformer.preset("llama2-70b")
    layout = Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2)
    big = estimate(layout, model, Training(num_microbatches=8))
    table = big.fits("h100-sxm-80gb")
    assert list(table.columns[-2:]) == ["usable_bytes", "fits"] and not table["fits"].all()
    assert not big.step("h100-sxm-80gb").fits and "does NOT fit" in big.step("h100-sxm-80gb").to_text()
    assert "need more than" in big.to_text("h100-sxm-80gb")
    assert big.fits("h200-sxm-141gb")["fits"].all()
    small = estimate(layout, model, Training(num_microbatches=8, recompute="full", sequence_tensor_parallel=True))
    assert small.fits("h100-sxm-80gb")["fits"].all() and small.step("h100-sxm-80gb").fits


def test_hardware_presets_and_missing_figures():
    for name in ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200", "dgx-h100", "dgx-a100", "pcie-100gbe"):
        hw = Hardware.preset(name)
        assert hw.peak_tflops and hw.memory_GiB and hw.memory_GBps and hw.gpus_per_node == 8
    assert Hardware.preset("b200").peak_tflops > Hardware.preset("h200-sxm-141gb").peak_tflops
    assert Hardware.preset("h200-sxm-141gb").usable_bytes > Hardware.preset("h100-sxm-80gb").usable_bytes
    report = estimate(Layout(world_size=8, local_world_size=8, tensor_parallel=2), "llama2-7b")
    links_only = Hardware(intra_node_GBps=100, inter_node_GBps=10)
    with pytest.raises(CostError, match="hardware 'custom' has no peak_tflops"):
        report.step(links_only)
    assert "no step time" in report.to_text(links_only)
    assert report.step(links_only.replace(peak_tflops=500, memory_GBps=2000)).seconds > 0
    with pytest.raises(CostError, match="matmul_efficiency=1.5"):
        Hardware(100, 10, matmul_efficiency=1.5)
    with pytest.raises(CostError, match="family='tpu'"):
        Hardware(100, 10, family="tpu")


def test_the_communication_figure_is_no_longer_called_a_time_per_step():
    report = estimate(Layout(world_size=16, local_world_size=8, tensor_parallel=8, pipeline_parallel=2), "llama2-7b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = report.time("dgx-h100")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert old.equals(report.communication_time("dgx-h100"))
    text = report.to_text("dgx-h100")
    assert "time per step on" not in text.replace("communication time per step on", "")
    assert "step time on dgx-h100" in text


def test_a_step_knows_its_schedule_and_timeline():
    layout = Layout(world_size=32, local_world_size=8, tensor_parallel=4, pipeline_parallel=4)
    training = Training(num_microbatches=8, schedule="interleaved-1f1b", virtual_pipeline_stages=2)
    step = estimate(layout, "llama2-7b", training).step("a100-sxm-80gb")
    assert step.schedule.kind == "interleaved-1f1b" and step.schedule.num_stages == 8
    assert step.timeline.end.shape == (1, 4 * 8 * 2 * 2)
    assert 0 <= step.critical_rank < 4 and np.isfinite(step.seconds)
    bubble = step.breakdown.loc["pipeline bubble", "seconds"]
    one = estimate(layout, "llama2-7b", Training(num_microbatches=8)).step("a100-sxm-80gb")
    assert bubble < one.breakdown.loc["pipeline bubble", "seconds"]  # interleaving shrinks the bubble
