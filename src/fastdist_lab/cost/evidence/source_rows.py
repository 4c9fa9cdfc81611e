"""Rows of two sources' tables as runs, written once for the runs the validation reads (``runs/*.toml`` entries with
a ``maker``) and for the scripts that price more rows of the same tables (``scripts/bloom_chronicle.py``,
``scripts/llm_foundry_h100.py``): ``bloom_run`` (BigScience's BLOOM layout search, on Jean Zay's network) and
``llm_foundry_run`` (MosaicML's llm-foundry benchmarks)."""

from __future__ import annotations

from ...setup import DEFAULT_EFFICIENCY
from .published_run import PublishedRun, gpt_model

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
