"""Measured dense runs added for issue 27 (item 4), every one held out: none is a calibration run, and the calibration
set (``published``'s, 10 runs) was fixed before these were looked at (``docs/validation.md``, "Held-out runs of
issue 27").

They add what the first 29 runs lack: ZeRO-3 / FSDP runs (up to 2,240 GPUs), H100 FSDP runs, runs of other
engines (``engine``: DeepSpeed for ZeRO-3, MT-NLG and BLOOM, ``fsdp2`` for torchtitan and for llm-foundry, whose FSDP
is torch's first ``FullyShardedDataParallel``, the closest the engines have), and many layouts of one model on the
same GPUs and batch (BLOOM's search; the ranking rows of ``published_comparisons``). Every number is the source's; a
source that reports TFLOP/s is turned into seconds with its own FLOP count, one that reports tokens per second with
the step's tokens. Settings a source does not give are in ``choices`` (the fastest the model predicts is taken).

Sources (each row's ``source`` names its table and row):

- Narayanan et al. 2021, Table 2: PTD-P (tensor 8 x pipeline 12 or 35) against ZeRO-3 without model parallelism
  (DeepSpeed), 174.6B and 529.6B GPT, 384 to 2,240 A100 80GB, equation 3's FLOPs (recompute counted). The settings
  Table 2 leaves out are those of Table 1's script (``examples/sc21``): fp16, local DDP, full recompute.
- Smith et al. 2022 (MT-NLG 530B), Section 2.4: 60.1, 50.2 and 44.4 s per iteration at batch 1920 on 280, 350 and
  420 DGX A100 (80GB) nodes, tensor 8 x pipeline 35 (DeepSpeed's pipeline engine and ZeRO-1, Megatron's tensor
  parallel); the paper's 126 / 121 / 113 TFLOP/s per GPU are equation 3's FLOPs over these times (126 and 113 to the
  rounding, 121 is 120.4). Quoted with the section by cli99/llm-analysis, ``examples/megatron-turing-nlg/README.md``
  at eb2d5c035c.
- torchtitan (Liang et al. 2024, arXiv 2410.06511), pytorch/torchtitan ``docs/performance.md`` at d4c86e3758 (Tables
  1 and 3, eager FSDP rows, bf16), ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` at 2887250bbd (vanilla TP,
  bf16 rows; taken per GPU, as Table 4's 829 TPS/GPU for the float8 set-up of the same run shows) and, on A100,
  ``docs/performance.md`` at 157a12c562 (Llama 3 on 64 A100 80GB, FSDP2). H100 rows ran on Grand Teton: H100 96GB
  HBM2e at 500 W, not the 700 W SXM of the ``h100-sxm-80gb`` preset (the only H100 preset); expect them predicted
  fast. The float8 rows are left out (the model has no FP8 setting); the torch.compile of the asyncTP rows is not
  modelled.
- BigScience's BLOOM topology search, bigscience-workshop/bigscience ``train/tr11-176B-ml/chronicles-prequel.md`` at
  053adafee8: seconds per iteration (measured at iteration 2; "the data isn't exact and can fluctuate a bit", says the
  author) of 176B-182B GPT models (64 heads, sequence 2048) on 48 nodes of 8 A100 80GB (384 GPUs), Megatron-DeepSpeed
  (DeepSpeed's pipeline engine, ZeRO-1, ``--checkpoint-activations``), in many layouts at one global batch: sections
  "GBS Variations" and "Tweaking TP" (02-25, fp16), "Another round of NHEADS" (02-26, fp16) and "Rebalancing layers"
  (02-28, bf16 with fp32 gradient accumulation, the embeddings given a pipeline slot each, as ``lighter_ends``). The
  vocabulary is 250,880 (the "250k" of the page, padded as ``tr11-176B-ml.slurm``'s ``--pad-vocab-size-to 250880``).
  The layout "DP 8, TP 4, PP 12, MBS 2" of "Tweaking TP" has two rows with different times (110.48 and 113.54 s) and
  is left out.
- MosaicML llm-foundry, ``scripts/train/benchmarking/README.md`` at 061f2c7ce6 (MPT on H100 80GB and A100 80GB,
  FSDP ``FULL_SHARD``); seconds = GlobalBatchSize (T) / Throughput (T/s); model sizes from
  ``scripts/train/yamls/pretrain/mpt-*.yaml`` (vocabulary 50,368, GeLU MLP of 4 h, LayerNorm, tied embeddings).
"""

from __future__ import annotations

from typing import Any

from .efficiency import DEFAULT_EFFICIENCY
from .published_run import PublishedRun, equal_chunks, gpt_model, narayanan_flops

_GPT_175B = gpt_model(12288, 96, 96)
_GPT_530B = gpt_model(20480, 105, 128)

# Narayanan et al. 2021, Table 2: (model, name, layers, hidden, batch, GPUs, micro-batch, TFLOP/s per GPU).
_ZERO3 = (
    (_GPT_175B, "174.6B", 96, 12288, 1536, 384, 4, 144),
    (_GPT_175B, "174.6B", 96, 12288, 1536, 768, 2, 88),
    (_GPT_175B, "174.6B", 96, 12288, 1536, 1536, 1, 44),
    (_GPT_530B, "529.6B", 105, 20480, 2560, 640, 4, 138),
    (_GPT_530B, "529.6B", 105, 20480, 2240, 1120, 2, 98),
    (_GPT_530B, "529.6B", 105, 20480, 2240, 2240, 1, 48),
)
# PTD-P rows: model-parallel size 96 (tensor 8 x pipeline 12) and 280 (8 x 35), micro-batch 1.
_PTDP = (
    (_GPT_175B, "174.6B", 96, 12288, 12, 1536, 384, 153),
    (_GPT_175B, "174.6B", 96, 12288, 12, 1536, 768, 149),
    (_GPT_175B, "174.6B", 96, 12288, 12, 1536, 1536, 141),
    (_GPT_530B, "529.6B", 105, 20480, 35, 2240, 560, 171),
    (_GPT_530B, "529.6B", 105, 20480, 35, 2240, 1120, 167),
    (_GPT_530B, "529.6B", 105, 20480, 35, 2240, 2240, 159),
)

# Smith et al. 2022, Section 2.4: (DGX A100 nodes, seconds per iteration), batch 1920, sequence 2048.
_MTNLG = ((280, 60.1), (350, 50.2), (420, 44.4))

_LLAMA31_8B = dict(
    hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
    vocab_size=128256, seq_length=8192, swiglu=True, tied_embeddings=False, normalization="RMSNorm",
)  # fmt: skip
"""Llama 3 / 3.1 8B as torchtitan builds it (``models/llama``: dim 4096, 32 layers, 32 heads, 8 key/value heads,
ffn 14336 from multiplier 1.3 and multiple_of 1024, vocabulary 128,256), sequence 8192 (its train configs)."""
_LLAMA31_70B = {**_LLAMA31_8B, "hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64,
                "ffn_hidden_size": 28672}  # fmt: skip

# torchtitan: (name, model, hardware, GPUs, tensor, local batch, recompute, compiled, tokens/s per GPU, where). The
# asyncTP rows ran with --training.compile (the benchmark's commands), the performance.md rows in eager mode.
_TORCHTITAN = (
    ("Llama 3.1 8B FSDP on 8 H100", _LLAMA31_8B, "h100-sxm-80gb", 8, 1, 2, "selective", False, 5762,
     "docs/performance.md (d4c86e3758), Table 1, FSDP row"),
    ("Llama 3.1 8B FSDP on 128 H100", _LLAMA31_8B, "h100-sxm-80gb", 128, 1, 2, "selective", False, 5605,
     "docs/performance.md (d4c86e3758), Table 3, FSDP row"),
    ("Llama 3.1 8B FSDP 8 x TP 8 on 64 H100", _LLAMA31_8B, "h100-sxm-80gb", 64, 8, 12, "selective", True, 4378,
     "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (2887250bbd), 8B, bfloat16 row, vanilla TP"),
    ("Llama 3.1 70B FSDP 32 x TP 8 on 256 H100", _LLAMA31_70B, "h100-sxm-80gb", 256, 8, 16, "full", True, 597.3,
     "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (2887250bbd), 70B, bfloat16 row, vanilla TP"),
    ("Llama 3 8B FSDP on 64 A100", _LLAMA31_8B, "a100-sxm-80gb", 64, 1, 1, "selective", False, 2973,
     "docs/performance.md (157a12c562), Llama 3 8B, selective op row"),
    ("Llama 3 70B FSDP on 64 A100", _LLAMA31_70B, "a100-sxm-80gb", 64, 1, 1, "full", False, 331,
     "docs/performance.md (157a12c562), Llama 3 70B, full row"),
)  # fmt: skip

# llm-foundry benchmarking README: (name, hidden, heads, layers, hardware, GPUs, micro-batch, grad accum, activation
# checkpointing, bytes per gradient (PURE bf16: 2, DEFAULT: fp32 reduce, 4), tokens/s, table); sequence 2048.
_LLM_FOUNDRY = (
    ("70b", 8192, 64, 80, "h100-sxm-80gb", 64, 8, 4, True, 4, 66523, "H100 80GB BF16"),
    ("70b", 8192, 64, 80, "h100-sxm-80gb", 32, 2, 16, True, 4, 28242, "H100 80GB BF16"),
    ("30b", 7168, 56, 48, "h100-sxm-80gb", 32, 14, 3, True, 4, 73860, "H100 80GB BF16"),
    ("13b", 5120, 40, 40, "h100-sxm-80gb", 64, 2, 1, False, 4, 307209, "H100 80GB BF16"),
    ("7b", 4096, 32, 32, "h100-sxm-80gb", 8, 6, 1, False, 4, 85144, "H100 80GB BF16"),
    ("70b", 8192, 64, 80, "a100-sxm-80gb", 64, 8, 4, True, 2, 26274, "A100 80GB"),
)


JEAN_ZAY_ADAPTER_BUSBW_GBPS = 40.55 / 8
"""Bus bandwidth (GB/s) NCCL reached through one network adapter of Jean Zay's A100 nodes, where BLOOM and its layout
search ran (8 A100 80GB SXM4 and 4 Omni-Path 100 Gb/s adapters per node; Le Scao et al. 2022, BLOOM, Section 3.4.1
"Hardware"). Measured by BigScience: ``experiments/bandwidth/all_reduce_bench-a100-n4.txt`` in
bigscience-workshop/bigscience (committed 2022-01-28, NCCL 2.10.3), a 4 GB fp32 all-reduce over 4 nodes of 8 GPUs,
nccl-tests' bus bandwidth 40.49 to 40.83 Gb/s (median 40.55) in the four trials after the first (which warms up at
15 Gb/s). NCCL's log there shows the ring's 2 channels leaving and entering each node through one adapter
(``via NET/IB/3`` out, ``NET/IB/1`` in; "2 coll channels"): 41% of that adapter's line rate. The page beside it
says the same of its V100 nodes ("an issue with nccl that doesn't fully utilize Intel OPA full bandwidth")."""

JEAN_ZAY_INTER_NODE_GBPS = JEAN_ZAY_ADAPTER_BUSBW_GBPS * 4 / 8 / DEFAULT_EFFICIENCY.network_efficiency
"""Network bandwidth per GPU (GB/s) of Jean Zay's A100 nodes as NCCL used it: what one adapter carried
(``JEAN_ZAY_ADAPTER_BUSBW_GBPS``) times the node's 4 adapters over its 8 GPUs, stated at line rate (divided by
``Efficiency.network_efficiency``, which the model applies again), 2.82 GB/s, where the adapters' line rate would
give 6.25 (a quarter of the DGX A100 preset's 25). Each GPU's data-parallel ring crosses nodes through the adapter
nearest to it, two GPUs to an adapter, each adapter carrying what NCCL was measured to reach through one. What a
ring of whole nodes gets (NCCL gave the benchmark's ring one adapter, not four) and the hypercube's own contention
are not priced."""


# BigScience chronicles-prequel: (section, hidden, layers, fp16, global batch, ((DP, TP, PP, MBS, seconds), ...)).
_BLOOM = (
    ("GBS Variations and Tweaking TP (02-25)", 14336, 72, True, 2048, (
        (8, 8, 6, 4, 114.11), (4, 8, 12, 4, 117.07), (4, 8, 12, 2, 128.82), (8, 4, 12, 4, 111.89),
        (16, 4, 6, 4, 117.11), (16, 4, 6, 2, 111.71), (16, 2, 12, 2, 112.50), (8, 2, 24, 1, 119.53),
        (8, 2, 24, 2, 122.75), (4, 4, 24, 1, 130.60))),
    ("GBS Variations, GBS 2016 (02-25)", 14336, 72, True, 2016, (
        (8, 8, 6, 6, 123.57), (6, 8, 8, 4, 113.16), (12, 8, 4, 2, 125.52), (12, 8, 4, 4, 114.81),
        (24, 8, 2, 1, 145.45), (24, 8, 2, 2, 136.13))),
    ("Another round of NHEADS, NHIDDEN=13312 / NLAYERS=84 (02-26)", 13312, 84, True, 2048, (
        (8, 4, 12, 2, 103.82), (8, 4, 12, 4, 113.21), (8, 8, 6, 2, 129.61))),
    ("Rebalancing layers, NHIDDEN=14336; NLAYERS=70 (02-28)", 14336, 70, False, 2048, (
        (4, 8, 12, 2, 121.63), (8, 4, 12, 2, 102.03), (8, 4, 12, 4, 102.27))),
    ("Rebalancing layers, NHIDDEN=13312; NLAYERS=82 (02-28)", 13312, 82, False, 2048, (
        (4, 8, 12, 4, 111.79), (8, 4, 12, 2, 104.45), (8, 4, 12, 4, 104.82))),
)  # fmt: skip


def bloom_run(section: str, hidden: int, layers: int, fp16: bool, batch: int, dp: int, tp: int, pp: int, mbs: int,
              seconds: float, heads: int = 64) -> PublishedRun:  # fmt: skip
    """One row of BigScience's tr11 chronicles-prequel (053adafee8) as a run: GPT of ``hidden`` x ``layers`` (``heads``
    heads, vocabulary 250,880) on ``dp x tp x pp`` A100 80GB of Jean Zay (``JEAN_ZAY_INTER_NODE_GBPS``) under the
    Megatron-DeepSpeed of February 2022 (engine ``deepspeed-0.5``, ZeRO 1, full recompute, no flash attention),
    micro-batch ``mbs`` at global batch ``batch``; fp16 (bf16 with fp32 gradients and lighter ends otherwise, as the
    02-28 rows); ``seconds`` per iteration as the row of ``section`` gives it."""
    return PublishedRun(
        name=f"BLOOM search {hidden}x{layers}, batch {batch}: dp{dp} tp{tp} pp{pp} mbs{mbs}",
        engine="deepspeed-0.5", source=f"BigScience tr11 chronicles-prequel (053adafee8), {section}, "
                                   f"DP {dp} TP {tp} PP {pp} MBS {mbs} row",
        model=gpt_model(hidden, layers, heads, vocab=250880), hardware="a100-sxm-80gb", gpus=dp * tp * pp,
        inter_node_GBps=JEAN_ZAY_INTER_NODE_GBPS,
        tensor_parallel=tp, pipeline_parallel=pp,
        training=dict(zero_stage=1, micro_batch_size=mbs, num_microbatches=batch // (dp * mbs),
                      recompute="full", flash_attention=False, bytes_per_gradient=2 if fp16 else 4,
                      overlap_data_parallel=False, overlap_pipeline_parallel=False),
        global_batch_size=batch, seconds=seconds, measured_from=f"{seconds} s per iteration (measured)",
        lighter_ends=not fp16,
    )  # fmt: skip


def _bloom() -> list[PublishedRun]:
    return [bloom_run(section, hidden, layers, fp16, batch, *row)
            for section, hidden, layers, fp16, batch, rows in _BLOOM for row in rows]  # fmt: skip


def _narayanan_table_2() -> list[PublishedRun]:
    runs = []
    common: dict[str, Any] = dict(flash_attention=False, recompute="full", bytes_per_gradient=2)
    for model, name, layers, hidden, batch, gpus, mbs, tflops in _ZERO3:
        runs.append(PublishedRun(
            name=f"GPT {name} ZeRO-3 on {gpus:,}", engine="deepspeed-0.3",
            source=f"Narayanan et al. 2021, Table 2, ZeRO-3 without model parallelism, {name}, {gpus} GPUs row",
            model=model, hardware="a100-sxm-80gb", gpus=gpus, tensor_parallel=1, pipeline_parallel=1,
            training=dict(common, zero_stage=3, micro_batch_size=mbs, num_microbatches=batch // (gpus * mbs)),
            global_batch_size=batch, seconds=narayanan_flops(batch, 2048, layers, hidden) / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, FLOPs of equation 3 (with recompute)",
        ))  # fmt: skip
    for model, name, layers, hidden, pp, batch, gpus, tflops in _PTDP:
        dp = gpus // (8 * pp)
        runs.append(PublishedRun(
            name=f"GPT {name} PTD-P on {gpus:,}", engine="megatron-2021",
            source=f"Narayanan et al. 2021, Table 2, PTD parallelism, {name}, {gpus} GPUs row",
            model=model, hardware="a100-sxm-80gb", gpus=gpus, tensor_parallel=8, pipeline_parallel=pp,
            training=dict(common, micro_batch_size=1, num_microbatches=batch // dp, overlap_data_parallel=False,
                          overlap_pipeline_parallel=False),
            global_batch_size=batch, seconds=narayanan_flops(batch, 2048, layers, hidden) / (tflops * 1e12 * gpus),
            measured_from=f"{tflops} TFLOP/s per GPU, FLOPs of equation 3 (with recompute)",
            choices=dict(virtual_pipeline_stages=equal_chunks(layers, pp)),
        ))  # fmt: skip
    return runs


def _mt_nlg() -> list[PublishedRun]:
    runs = []
    for nodes, seconds in _MTNLG:
        runs.append(PublishedRun(
            name=f"MT-NLG 530B on {nodes * 8:,}", engine="deepspeed-0.5",
            source=f"Smith et al. 2022, Section 2.4, {nodes} DGX A100 nodes, batch 1920",
            model=_GPT_530B, hardware="a100-sxm-80gb", gpus=nodes * 8, tensor_parallel=8, pipeline_parallel=35,
            training=dict(zero_stage=1, recompute="full", flash_attention=False, bytes_per_gradient=2,
                          overlap_data_parallel=False, overlap_pipeline_parallel=False),
            global_batch_size=1920, seconds=seconds, measured_from=f"{seconds} s per iteration (measured)",
            choices=dict(micro_batch_size=(1, 2, 4)),
        ))  # fmt: skip
    return runs


def _torchtitan() -> list[PublishedRun]:
    runs = []
    for name, model, hardware, gpus, tp, local, recompute, compiled, tps, where in _TORCHTITAN:
        batch = gpus // tp * local
        runs.append(PublishedRun(
            name=name, engine="fsdp2", source=f"torchtitan (Liang et al. 2024), {where}", model=model,
            hardware=hardware, gpus=gpus, tensor_parallel=tp, pipeline_parallel=1,
            training=dict(zero_stage=3, micro_batch_size=local, num_microbatches=1, recompute=recompute,
                          sequence_tensor_parallel=tp > 1, torch_compile=compiled),
            global_batch_size=batch, seconds=batch * model["seq_length"] / (tps * gpus),
            measured_from=f"{tps:,} tokens/s per GPU, {batch} x {model['seq_length']} tokens per step",
        ))  # fmt: skip
    return runs


def llm_foundry_run(size: str, hidden: int, heads: int, layers: int, hardware: str, gpus: int, mbs: int, accum: int,
                    checkpointing: bool, grad: int, tokens_per_second: float, table: str,
                    seq: int = 2048) -> PublishedRun:  # fmt: skip
    """One row of llm-foundry's benchmarking README (061f2c7ce6) as a run: MPT of ``hidden`` x ``layers`` (``heads``
    heads, vocabulary 50,368) on ``gpus`` GPUs of ``hardware`` under Composer's FSDP (``FULL_SHARD``: ZeRO 3),
    micro-batch ``mbs`` x ``accum`` accumulation steps of ``seq`` tokens, full recompute where ``checkpointing``,
    ``grad`` bytes per reduced gradient; seconds: tokens per step over the measured ``tokens_per_second``."""
    batch = gpus * mbs * accum
    tokens = batch * seq
    return PublishedRun(
        name=f"MPT-{size} FSDP on {gpus} {hardware.split('-')[0].upper()}", engine="composer-fsdp",
        source=f"llm-foundry benchmarking README (061f2c7ce6), {table}, {size} seq {seq} {gpus} GPUs row",
        model=gpt_model(hidden, layers, heads, vocab=50368, seq=seq), hardware=hardware, gpus=gpus, tensor_parallel=1,
        pipeline_parallel=1,
        training=dict(zero_stage=3, micro_batch_size=mbs, num_microbatches=accum,
                      recompute="full" if checkpointing else "none", bytes_per_gradient=grad),
        global_batch_size=batch, seconds=tokens / tokens_per_second,
        measured_from=f"{tokens:,} tokens per step over {tokens_per_second:,} tokens/s (measured)",
    )  # fmt: skip


def _llm_foundry() -> list[PublishedRun]:
    return [llm_foundry_run(*row) for row in _LLM_FOUNDRY]


HELD_OUT_RUNS: tuple[PublishedRun, ...] = tuple(
    _narayanan_table_2() + _mt_nlg() + _bloom() + _torchtitan() + _llm_foundry()
)
"""The runs added for issue 27 (52 runs, all held out): ZeRO-3 / FSDP up to 2,240 GPUs, H100 FSDP, DeepSpeed and
FSDP engines, BLOOM's layout search; part of ``PUBLISHED_RUNS``."""
