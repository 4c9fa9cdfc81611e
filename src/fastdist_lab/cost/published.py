"""Measured training runs from published sources: what each reports, to hold the step-time model against.

Each ``PublishedRun`` gives the model, the GPUs and their layout, the training set-up and the measured step time
as its source reports it, with where (paper or table, row). A source that reports TFLOP/s instead of seconds is
turned into seconds with that source's own FLOP count (``measured_from``). Settings a source does not report are
listed in ``choices``: the validation takes, among them, the set-up the model predicts fastest (the authors tuned
theirs; memory is not used to choose, the run did fit), never the one closest to the measurement.
``calibration`` marks the runs the calibrated constants were fitted on (``docs/validation.md``): from each source
some runs, spanning its sizes.
"""

from __future__ import annotations

from .model import Transformer
from .published_held_out import HELD_OUT_RUNS
from .published_run import PublishedRun, equal_chunks, gpt_model, narayanan_flops
from .step import model_flops

__all__ = ["PUBLISHED_RUNS", "PublishedRun", "narayanan_flops"]


# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": Table 3 (model and
# layout: tensor 8, sequence 2048, micro-batch 4 for 22B and 1 else; global batch = GPUs: 4, 64, 280, 512) and
# Table 5 (iteration time, full recompute vs. selective recompute with sequence parallelism). A100 80GB on
# Selene (DGX A100), Megatron-LM 2022: fused softmax, no flash attention, data parallel 1. The interleaved
# stages (3 for 175B and 530B) as Calculon's validation inputs read them (Isaev et al. 2023,
# validation/seqsel/tab5).
_KORTHIKANTI = (
    ("22B", gpt_model(6144, 48, 64), 1, 4, 4, 1, 1.42, 1.10),
    ("175B", gpt_model(12288, 96, 96), 8, 1, 64, 3, 18.13, 13.75),
    ("530B", gpt_model(20480, 105, 128), 35, 1, 280, 3, 49.05, 37.83),
    ("1T", gpt_model(25600, 128, 160), 64, 1, 512, 1, 94.42, 71.49),
)

# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
# Table 1 (weak scaling, A100 80GB on Selene, fp16, vocabulary 51,200, sequence 2048) with the settings of the
# authors' script for it, Megatron-LM examples/sc21/run_table_1.sh: (hidden, layers, heads, tensor, pipeline,
# micro-batch, global batch, GPUs, torch DDP (overlapped) or Megatron's local DDP, virtual stages) and the
# achieved TFLOP/s per GPU; every run recomputes every layer (--activations-checkpoint-method uniform).
_KORTHIKANTI_CALIBRATION = ("175B", "1T")

_NARAYANAN = (
    ("1.7B", 2304, 24, 24, 1, 1, 16, 512, 32, True, 1, 137),
    ("3.6B", 3072, 30, 32, 2, 1, 16, 512, 64, True, 1, 138),
    ("7.5B", 4096, 36, 32, 4, 1, 16, 512, 128, True, 1, 142),
    ("18.4B", 6144, 40, 48, 8, 1, 8, 1024, 256, True, 1, 135),
    ("39.1B", 8192, 48, 64, 8, 2, 4, 1536, 512, False, 1, 138),
    ("76.1B", 10240, 60, 80, 8, 4, 2, 1792, 1024, False, 3, 140),
    ("145.6B", 12288, 80, 96, 8, 8, 2, 2304, 1536, False, 2, 148),
    ("310.1B", 16384, 96, 128, 8, 16, 1, 2160, 1920, False, 2, 155),
    ("529.6B", 20480, 105, 128, 8, 35, 1, 2520, 2520, False, 3, 163),
    ("1008.0B", 25600, 128, 160, 8, 64, 1, 3072, 3072, False, 1, 163),
)

# Megatron-LM README, "Training Speed and Scalability" (Megatron-Core r0.8.0, images/model_table.png): GPT models,
# vocabulary 131,072, sequence 4096, H100 (Eos), data parallel 48, with --overlap-grad-reduce,
# --overlap-param-gather, --tp-comm-overlap; (name, heads, hidden, layers, tensor, pipeline, GPUs, batch,
# TFLOP/s per GPU). Micro-batch size, virtual stages and recompute are not reported.
_NARAYANAN_CALIBRATION = ("1.7B", "145.6B", "1008.0B")

_MEGATRON_CORE = (
    ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    ("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    ("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    ("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    ("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    ("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    ("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
)
_MEGATRON_CORE_CALIBRATION = ("1.7B", "70B", "462B")

# Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4 (Llama 3 405B on H100, 8K sequences, 16M tokens per
# step) and Section 3.3.2 (interleaved pipeline, one layer fewer on the first and the last stage, all-gather
# context parallelism, optimizer states and gradients sharded, weights not); (GPUs, data parallel, sequences per
# data-parallel rank, TFLOP/s per GPU). Its 131K-token row is left out: its TFLOP/s depend on how causal
# attention is counted, which the paper does not say, by a third.
_LLAMA3 = ((8192, 64, 32, 430), (16384, 128, 16, 400))
_LLAMA3_405B = dict(
    hidden_size=16384, num_layers=126, num_attention_heads=128, num_query_groups=8, ffn_hidden_size=53248,
    vocab_size=128256, seq_length=8192, swiglu=True, tied_embeddings=False, normalization="RMSNorm",
)  # fmt: skip


def _runs() -> tuple[PublishedRun, ...]:
    runs: list[PublishedRun] = []
    for name, model, pp, mbs, batch, v, full, selective in _KORTHIKANTI:
        common = dict(micro_batch_size=mbs, num_microbatches=batch // mbs, flash_attention=False,
                      schedule="interleaved-1f1b" if v > 1 else "1f1b", virtual_pipeline_stages=v,
                      overlap_data_parallel=False, overlap_pipeline_parallel=False)  # fmt: skip
        for label, seconds, extra in (
            ("full recompute", full, dict(recompute="full")),
            ("selective recompute + sequence parallel", selective,
             dict(recompute="selective", sequence_tensor_parallel=True)),
        ):  # fmt: skip
            runs.append(PublishedRun(
                name=f"{name} {label}", source=f"Korthikanti et al. 2022, Tables 3 and 5, {name}, {label}",
                model=model, hardware="a100-sxm-80gb", gpus=8 * pp, tensor_parallel=8, pipeline_parallel=pp,
                training={**common, **extra}, global_batch_size=batch, seconds=seconds,
                measured_from="iteration time (Table 5)", calibration=name in _KORTHIKANTI_CALIBRATION,
            ))  # fmt: skip
    for name, hidden, layers, heads, tp, pp, mbs, batch, gpus, torch_ddp, v, tflops in _NARAYANAN:
        dp = gpus // (tp * pp)
        runs.append(PublishedRun(
            name=f"GPT {name}", source=f"Narayanan et al. 2021, Table 1, {name} row (settings: run_table_1.sh)",
            engine="megatron-2021",
            model=gpt_model(hidden, layers, heads), hardware="a100-sxm-80gb", gpus=gpus, tensor_parallel=tp,
            pipeline_parallel=pp,
            training=dict(micro_batch_size=mbs, num_microbatches=batch // (dp * mbs), recompute="full",
                          flash_attention=False, overlap_data_parallel=torch_ddp, bytes_per_gradient=2,
                          overlap_pipeline_parallel=False,
                          schedule="interleaved-1f1b" if v > 1 else "1f1b", virtual_pipeline_stages=v),
            global_batch_size=batch, seconds=narayanan_flops(batch, 2048, layers, hidden) / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, FLOPs of equation 3 (with recompute)",
            calibration=name in _NARAYANAN_CALIBRATION,
        ))  # fmt: skip
    for name, heads, hidden, layers, tp, pp, gpus, batch, tflops in _MEGATRON_CORE:
        model = gpt_model(hidden, layers, heads, vocab=131072, seq=4096)
        flops = float(model_flops(Transformer(**model), batch, tp))
        runs.append(PublishedRun(
            name=f"GPT {name} (H100)", source=f"Megatron-LM README, Megatron-Core r0.8.0 weak scaling, {name} row",
            model=model, hardware="h100-sxm-80gb", gpus=gpus, tensor_parallel=tp, pipeline_parallel=pp,
            training=dict(zero_stage=1, sequence_tensor_parallel=tp > 1, overlap_tensor_parallel=tp > 1),
            global_batch_size=batch, seconds=flops / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, Megatron-LM's num_floating_point_operations (r0.8.0)",
            choices=dict(micro_batch_size=(1, 2, 4), recompute=("none", "full"),
                         virtual_pipeline_stages=equal_chunks(layers, pp)),
            calibration=name in _MEGATRON_CORE_CALIBRATION,
        ))  # fmt: skip
    for gpus, dp, per_rank, tflops in _LLAMA3:
        flops = float(model_flops(Transformer(**_LLAMA3_405B), dp * per_rank, 8))
        runs.append(PublishedRun(
            name=f"Llama 3 405B on {gpus:,}", source=f"Dubey et al. 2024, Table 4, {gpus:,} GPUs, 8K sequences",
            model=_LLAMA3_405B, hardware="h100-sxm-80gb", gpus=gpus, tensor_parallel=8, pipeline_parallel=16,
            training=dict(micro_batch_size=1, num_microbatches=per_rank, zero_stage=1,
                          sequence_tensor_parallel=True),
            global_batch_size=dp * per_rank, seconds=flops / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, Megatron-LM's FLOP count (the paper does not give its own)",
            choices=dict(virtual_pipeline_stages=(1, 2, 4, 8), recompute=("none", "full")), lighter_ends=True,
        ))  # fmt: skip
    return tuple(runs)


PUBLISHED_RUNS: tuple[PublishedRun, ...] = _runs() + HELD_OUT_RUNS
"""The measured runs ``validate`` compares with (dense models): the 29 runs of issue 21 from 4 sources, 10 of them
the calibration runs, then ``HELD_OUT_RUNS`` (issue 27, all held out)."""
