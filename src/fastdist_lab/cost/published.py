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

from dataclasses import dataclass, field
from typing import Any

from .model import Transformer
from .step import model_flops


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int = 51200) -> float:
    """FLOPs of one step with full activation recompute as Narayanan et al. 2021 count them (Section 5.1,
    equation 3): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


@dataclass(frozen=True)
class PublishedRun:
    """One measured run: ``model`` (``Transformer`` fields), ``hardware`` (a preset), the layout sizes, the
    ``training`` (``Training`` fields), the sequences per step, the measured ``seconds`` per step, its
    ``source``. ``lighter_ends``: the first and the last stage hold one layer fewer (Llama 3's split).
    ``expert_parallel`` and ``expert_tensor_parallel`` place a mixture of experts' experts (the ``Layout`` fields of
    the same names; ``PUBLISHED_MOE_RUNS``)."""

    name: str
    source: str
    model: dict[str, Any]
    hardware: str
    gpus: int
    tensor_parallel: int
    pipeline_parallel: int
    training: dict[str, Any]
    global_batch_size: int
    seconds: float
    measured_from: str
    sequence_data_parallel: int = 1
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    calibration: bool = False
    lighter_ends: bool = False
    expert_parallel: int = 1
    expert_tensor_parallel: int | None = None

    def transformer(self) -> Transformer:
        """The model as a ``Transformer``."""
        return Transformer(**self.model)


def _gpt(hidden: int, layers: int, heads: int, vocab: int = 51200, seq: int = 2048) -> dict[str, Any]:
    """A GPT-3-style model (Brown et al. 2020): LayerNorm, GeLU MLP of 4 h, tied embeddings."""
    return dict(hidden_size=hidden, num_layers=layers, num_attention_heads=heads, vocab_size=vocab, seq_length=seq)


# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": Table 3 (model and
# layout: tensor 8, sequence 2048, micro-batch 4 for 22B and 1 else; global batch = GPUs: 4, 64, 280, 512) and
# Table 5 (iteration time, full recompute vs. selective recompute with sequence parallelism). A100 80GB on
# Selene (DGX A100), Megatron-LM 2022: fused softmax, no flash attention, data parallel 1. The interleaved
# stages (3 for 175B and 530B) as Calculon's validation inputs read them (Isaev et al. 2023,
# validation/seqsel/tab5).
_KORTHIKANTI = (
    ("22B", _gpt(6144, 48, 64), 1, 4, 4, 1, 1.42, 1.10),
    ("175B", _gpt(12288, 96, 96), 8, 1, 64, 3, 18.13, 13.75),
    ("530B", _gpt(20480, 105, 128), 35, 1, 280, 3, 49.05, 37.83),
    ("1T", _gpt(25600, 128, 160), 64, 1, 512, 1, 94.42, 71.49),
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


def _equal_chunks(layers: int, pipeline: int) -> tuple[int, ...]:
    """Virtual stages that split ``layers`` into equal chunks over ``pipeline`` stages (Megatron-LM's rule for
    the interleaved schedule)."""
    return (1,) if pipeline == 1 else tuple(v for v in range(1, layers // pipeline + 1) if layers % (pipeline * v) == 0)


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
            model=_gpt(hidden, layers, heads), hardware="a100-sxm-80gb", gpus=gpus, tensor_parallel=tp,
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
        model = _gpt(hidden, layers, heads, vocab=131072, seq=4096)
        flops = float(model_flops(Transformer(**model), batch, tp))
        runs.append(PublishedRun(
            name=f"GPT {name} (H100)", source=f"Megatron-LM README, Megatron-Core r0.8.0 weak scaling, {name} row",
            model=model, hardware="h100-sxm-80gb", gpus=gpus, tensor_parallel=tp, pipeline_parallel=pp,
            training=dict(zero_stage=1, sequence_tensor_parallel=tp > 1, overlap_tensor_parallel=tp > 1),
            global_batch_size=batch, seconds=flops / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, Megatron-LM's num_floating_point_operations (r0.8.0)",
            choices=dict(micro_batch_size=(1, 2, 4), recompute=("none", "full"),
                         virtual_pipeline_stages=_equal_chunks(layers, pp)),
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


PUBLISHED_RUNS: tuple[PublishedRun, ...] = _runs()
"""The measured runs ``validate`` compares with (29 runs from 4 sources, dense models)."""
