"""Activation memory for every set-up: the attention kernel, the schedule's micro-batches in flight, and the
activation memory Korthikanti et al. 2022 measured."""

from __future__ import annotations

import pytest

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate

GPT = dict(vocab_size=51200, seq_length=2048)


def first_stage_activations(layout: Layout, model: Transformer, training: Training) -> float:
    return float(estimate(layout, model, training).memory["activations_bytes"].iloc[0])


def test_without_a_fused_kernel_each_layer_keeps_its_scores():
    # Korthikanti et al. 2022, Table 2: s b h (10 + 24 / t + 5 a s / (h t)) per layer; selective drops the last term.
    model = Transformer(hidden_size=1024, num_layers=4, num_attention_heads=16, **GPT)
    layout = Layout(world_size=2, local_world_size=2, tensor_parallel=2)
    fused = first_stage_activations(layout, model, Training())
    kept = first_stage_activations(layout, model, Training(flash_attention=False))
    s, b, a, t = 2048, 1, 16, 2
    assert kept - fused == pytest.approx(4 * 5 * a * s * s * b / t, rel=1e-6)  # 4 layers
    assert first_stage_activations(layout, model, Training(flash_attention=False, recompute="selective")) == fused
    full = first_stage_activations(layout, model, Training(flash_attention=False, recompute="full"))
    assert fused < full < kept  # full recompute keeps layer inputs and one layer's working set, scores included


def test_micro_batches_in_flight_follow_the_schedule():
    model = Transformer(hidden_size=1024, num_layers=16, num_attention_heads=16, **GPT)
    layout = Layout(world_size=4, local_world_size=4, pipeline_parallel=4)
    one = first_stage_activations(layout, model, Training(num_microbatches=1))
    f1b = first_stage_activations(layout, model, Training(num_microbatches=8))
    gpipe = first_stage_activations(layout, model, Training(num_microbatches=8, schedule="gpipe"))
    assert f1b == pytest.approx(4 * one, rel=1e-6) and gpipe == pytest.approx(8 * one, rel=1e-6)
    # Interleaved, m >= 2 pp: Megatron-LM's estimator's 1 + (pp - 1) / (pp v) times the 1F1B first stage.
    for v in (2, 4):
        interleaved = Training(num_microbatches=8, schedule="interleaved-1f1b", virtual_pipeline_stages=v)
        ratio = first_stage_activations(layout, model, interleaved) / f1b
        assert ratio == pytest.approx(1 + 3 / (4 * v), rel=0.01)


# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198),
# Figure 1: activation memory of the first stage, GiB, A100, tensor 8, sequence 2048, no flash attention; the values
# as Calculon's validation transcribes them (calculon/llm/validation.py, seqsel_fig1):
# (hidden, layers, heads, pipeline, micro-batch, virtual stages, micro-batches, none, selective + sequence parallel).
FIGURE_1 = {
    "22B": (6144, 48, 64, 1, 4, 1, 1, 59.25, 9.5625),
    "175B": (12288, 96, 96, 8, 1, 3, 64, 66.84375, 12.3515625),
    "530B": (20480, 105, 128, 35, 1, 3, 280, 114.0234375, 23.076171875),
    "1T": (25600, 128, 160, 64, 1, 1, 512, 131.25, 26.5625),
}


@pytest.mark.parametrize("name", list(FIGURE_1))
def test_figure_1_is_the_papers_table_2_formula(name):
    # The figure is s b h L (10 + 24 / t + 5 a s / (h t)) (none) and 34 s b h L / t (selective + sequence
    # parallel) times the interleaved factor 1 + (p - 1) / (p v), nothing else: no embedding, no output layer, no
    # allowance for temporaries. What the lab adds to it is what the paper's Section 4.4 names and leaves out.
    hidden, layers, heads, pp, mbs, v, _, none, selective = FIGURE_1[name]
    s, t = 2048, 8
    interleaved = 1 + (pp - 1) / (pp * v) if v > 1 else 1
    sbhl = s * mbs * hidden * layers * interleaved / 2**30
    assert sbhl * (10 + 24 / t + 5 * heads * s / (hidden * t)) == pytest.approx(none, rel=1e-9)
    assert sbhl * 34 / t == pytest.approx(selective, rel=1e-9)


@pytest.mark.parametrize("name", list(FIGURE_1))
def test_activations_of_korthikantis_figure_1_within_5_percent(name):
    # Issue 27: before, Megatron-LM's 5% allowance for temporaries was counted as activations (5.4-7.5% above the
    # figure without recompute); it is now ``temporaries_bytes``. What remains is the embedding's token ids and
    # dropout mask of the p micro-batches in flight (and the output layer on 22B's one stage): +0.3% to +2.4%.
    hidden, layers, heads, pp, mbs, v, m, none, selective = FIGURE_1[name]
    model = Transformer(hidden_size=hidden, num_layers=layers, num_attention_heads=heads, **GPT)
    layout = Layout(world_size=8 * pp, local_world_size=8, tensor_parallel=8, pipeline_parallel=pp)
    common = dict(micro_batch_size=mbs, num_microbatches=m, flash_attention=False, virtual_pipeline_stages=v,
                  schedule="interleaved-1f1b" if v > 1 else "1f1b")  # fmt: skip
    for measured, extra in ((none, {}), (selective, dict(recompute="selective", sequence_tensor_parallel=True))):
        ours = first_stage_activations(layout, model, Training(**common, **extra)) / 2**30
        assert 0 <= ours / measured - 1 < 0.025, (name, extra, ours, measured)


def test_the_temporaries_allowance_is_not_activations():
    # Megatron-LM's compute_activation_memory_without_sp multiplies by 1.05 "for optimizer and miscellaneous
    # temporaries"; the lab keeps the total and shows the 5% as its own column.
    model = Transformer(hidden_size=1024, num_layers=4, num_attention_heads=16, **GPT)
    layout = Layout(world_size=2, local_world_size=2, tensor_parallel=2)
    row = estimate(layout, model, Training()).memory.iloc[0]
    assert row["temporaries_bytes"] == pytest.approx(0.05 * row["activations_bytes"], abs=1)
    with_sp = estimate(layout, model, Training(sequence_tensor_parallel=True, recompute="selective")).memory
    assert (with_sp["temporaries_bytes"] == 0).all()


def test_zero_3_holds_gathered_layers_as_temporaries():
    # Two layers' weights gathered (current and prefetched) and one layer's gradients unsharded, per GPU: only ZeRO 3.
    model = Transformer(hidden_size=1024, num_layers=4, num_attention_heads=16, **GPT)
    layout = Layout(world_size=8, local_world_size=8)
    layer = model.attention_parameters + model.mlp_parameters + model.layer_norm_parameters
    rows = {z: estimate(layout, model, Training(zero_stage=z, sequence_tensor_parallel=False)).memory.iloc[0]
            for z in (2, 3)}  # fmt: skip
    assert rows[3]["temporaries_bytes"] - rows[2]["temporaries_bytes"] == layer * (2 * 2 + 4)
    assert rows[3]["weights_bytes"] < rows[2]["weights_bytes"]  # the shards themselves are smaller
