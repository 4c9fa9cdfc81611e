"""Overlap bounded by what can hide it (issue 27, item 2): the exposed seconds of data-parallel collectives that an
engine runs one transformer block at a time, beside the compute of the blocks (docs/step_time.md, "Engines").

A pass (one forward, or one backward) over ``L`` equal blocks computes ``P`` seconds in all; it gathers ``G``
seconds of weights ahead of the blocks (ZeRO 3 / FSDP all-gathers) and reduce-scatters ``R`` seconds of gradients
behind them. A gather can only run while an earlier block computes, and only as far ahead as the engine prefetches
(``depth``: a fraction of the next block when it is below 1, DeepSpeed's prefetch bucket; 1, FSDP2's implicit
prefetch); a reduce-scatter only after its block's backward, and the last bucket of the pass after the last block.
So ``block_exposure``:

- the first block's gather is exposed (``lead``: nothing computes before it; torchtitan leaves the last block
  unsharded, so a backward starts without one);
- the last reduce-scatter bucket is exposed (``tail``: one block, or a bucket of ``bucket`` of the pass's
  gradients, whichever is larger);
- the rest runs beside the other ``L - 1`` blocks' compute, one block ahead: exposed is what exceeds that compute,
  and at least the part of each gather that was not prefetched.

It is never negative, never more than ``G + R`` and never less than ``G + R - P`` (hypothesis holds it,
tests/cost/test_engines.py). A DeepSpeed "block" is a sub-module (``EngineTraits.units_per_block``). ``Megatron``
keeps its earlier pricing (``compute.stage_components``: the whole stage's gathers against the whole stage's
compute); the engines whose ``EngineTraits.per_block`` is set use this.

An engine with ``EngineTraits.rank_copies`` (DeepSpeed v0.3.15 on PyTorch 1.8) also pays ``copy_seconds``: each
parameter tensor's gather and reduce-scatter launches a copy kernel per rank of the data group, behind a
``torch.cuda.synchronize()``, so none of it hides; it grows with the data-parallel size at a fixed per-GPU batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...setup import EngineTraits


def block_exposure(
    gather: Any, scatter: Any, compute: Any, blocks: Any, *, depth: Any = 1.0, lead: bool = True, bucket: Any = 0.0
) -> Any:
    """Exposed seconds of a pass over ``blocks`` equal blocks computing ``compute`` seconds in all, gathering
    ``gather`` seconds ahead of them with ``depth`` blocks prefetched, and reduce-scattering ``scatter`` seconds
    behind them, its last ``bucket`` share (at least one block's) after the last block (the module docstring).
    Arrays broadcast.

    >>> float(block_exposure(8.0, 0.0, 4.0, 4))  # 2 s gathers, 1 s blocks: 2 + 3 x (2 - 1)
    5.0
    >>> float(block_exposure(0.0, 4.0, 8.0, 4, lead=False))  # only the last block's reduce-scatter shows
    1.0
    """
    blocks = np.maximum(np.asarray(blocks, dtype=np.float64), 1.0)
    unit = 1.0 / blocks
    first = unit * gather if lead else 0.0 * unit
    tail_share = np.minimum(np.maximum(unit, bucket), 1.0)
    tail = tail_share * scatter
    gathers, scatters = gather - first, scatter - tail
    hidden_share = np.minimum(np.maximum(depth, 0.0), 1.0)
    covered = compute * (1.0 - unit)  # the other blocks' compute
    middle = np.maximum(np.maximum(gathers + scatters - covered, (1.0 - hidden_share) * gathers), 0.0)
    return first + tail + middle


def prefetch_depth(traits: EngineTraits, block_parameters: Any) -> Any:
    """Units gathered ahead: ``prefetch_blocks``, or ``prefetch_elements`` over one unit's parameters on a rank
    (DeepSpeed counts the ``ds_numel`` of the tensor-parallel shard it holds)."""
    if traits.prefetch_blocks > 0:
        return traits.prefetch_blocks
    return traits.prefetch_elements / np.maximum(np.asarray(block_parameters, dtype=np.float64), 1.0)


def bucket_share(traits: EngineTraits, parameters: Any) -> Any:
    """The share of a pass's gradients in its last reduction bucket (0: per block, ``block_exposure`` keeps one
    block's)."""
    if traits.reduce_bucket_elements <= 0:
        return 0.0
    return np.minimum(traits.reduce_bucket_elements / np.maximum(np.asarray(parameters, dtype=np.float64), 1.0), 1.0)


def gathered_once(setups: Any) -> Any:
    """Per set-up, whether ZeRO 2/3 weights are gathered once per step and kept whole (and gradients reduced on the
    last micro-batch only): an engine that does not reshard under a pipeline (torchtitan's FSDP2 with PP)."""
    if not setups.engine_spec.gathers_once(setups.pipeline_parallel):
        return np.zeros(np.shape(setups.zero_stage), dtype=bool)
    return np.asarray(setups.zero_stage) >= 2


def block_tensors(model: Any) -> int:
    """Parameter tensors of one transformer block as a Megatron-style module holds them: four linears (fused QKV,
    attention output, the MLP's two, SwiGLU's gate fused into the first), each with a bias in a LayerNorm
    (GPT-3-style) model and none with RMSNorm (Llama-style), and the two norms' weights (and biases).

    >>> from fastdist_lab.cost import Transformer
    >>> block_tensors(Transformer.preset("gpt3-175b")), block_tensors(Transformer.preset("llama2-7b"))
    (12, 6)
    """
    layer_norm = model.normalization == "LayerNorm"
    return 4 * (2 if layer_norm else 1) + 2 * model.norm_size


def copy_seconds(traits: EngineTraits, model: Any, layers: Any, data_parallel: Any, kernel_s: float) -> Any:
    """Seconds of the per-rank copy kernels of one ZeRO 3 gather (or reduce-scatter) of ``layers`` blocks over a data
    group of ``data_parallel`` ranks: ``rank_copies`` kernels of ``kernel_s`` per rank and parameter tensor (0 for an
    engine without them, or one rank). Arrays broadcast.

    >>> from fastdist_lab.setup import ENGINE_TRAITS, Transformer
    >>> gpt = Transformer.preset("gpt3-175b")
    >>> round(float(copy_seconds(ENGINE_TRAITS["deepspeed-0.3"], gpt, 96, 1536, 11.4e-6)), 2)  # 96 x 12 x 1536
    20.17
    >>> float(copy_seconds(ENGINE_TRAITS["deepspeed"], gpt, 96, 1536, 11.4e-6))
    0.0
    """
    ranks = np.asarray(data_parallel, dtype=np.float64)
    per_rank = traits.rank_copies * np.where(ranks > 1, ranks, 0.0) * kernel_s
    return np.asarray(layers, dtype=np.float64) * block_tensors(model) * per_rank


def zero_action_exposure(
    setups: Any, params: np.ndarray, gather: np.ndarray, scatter: np.ndarray, forward: np.ndarray,
    backward: np.ndarray, kernel_s: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Exposed per-micro-batch ZeRO 2/3 seconds of each stage ``(set-ups, stages)``, forward and backward, for an
    engine with ``per_block`` (``compute.stage_components`` keeps Megatron's): ``gather`` and ``scatter`` are a
    stage's whole all-gather and reduce-scatter seconds, ``params`` its parameters per GPU. ZeRO 3 gathers block by
    block in the forward and again in the backward, reduce-scattering behind it; ZeRO 2 only reduce-scatters; rows
    gathered once per step (``gathered_once``) show nothing here (``data_parallel_terms`` prices them per step).
    ``kernel_s``: seconds per kernel, what each of ``copy_seconds``' copies costs on top (ZeRO 3 only)."""
    traits = setups.engine_spec.traits
    zero = setups.zero_stage[:, None]
    blocks = np.maximum(setups.chunk_layers[None, :], 1).astype(np.float64) * traits.units_per_block
    depth = prefetch_depth(traits, params / blocks)
    bucket = bucket_share(traits, params)
    forward_exposed = block_exposure(gather, 0.0, forward, blocks, depth=depth)
    backward3 = block_exposure(gather, scatter, backward, blocks, depth=depth, lead=not traits.keeps_last_block,
                               bucket=bucket)  # fmt: skip
    backward2 = block_exposure(0.0, scatter, backward, blocks, lead=False, bucket=bucket)
    copies = copy_seconds(traits, setups.model, setups.chunk_layers[None, :], setups.data_parallel[:, None], kernel_s)
    forward_exposed, backward3 = forward_exposed + copies, backward3 + 2 * copies  # the backward's gather + scatter
    once = gathered_once(setups)[:, None]
    forward_exposed = np.where((zero == 3) & ~once, forward_exposed, 0.0)
    backward_exposed = np.where(once, 0.0, np.where(zero == 3, backward3, np.where(zero == 2, backward2, 0.0)))
    return forward_exposed, backward_exposed


def data_parallel_terms(
    setups: Any, params: np.ndarray, collective: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What ``step.rank_tails`` reduces and gathers once per step, ``(set-ups, local stage, rank)`` seconds each
    (``collective(kind, bytes)`` prices one over the data group), and per set-up and rank: whether it overlaps the
    pipeline's compute, the seconds exposed whatever overlaps, and the least exposed where it overlaps (the last
    bucket or block's reduction, the first block's gather: nothing can hide them).

    Megatron (the calibrated engine): stage 0 all-reduces the gradients, 1 reduce-scatters them, 1 and 2 gather the
    weights, overlapped as ``Training.overlap_data_parallel`` says. Other engines: DeepSpeed reduces after the
    pipeline's last backward (``ReduceGrads``) and without ZeRO after the backward, and gathers ZeRO 1/2 weights in
    its optimizer step; FSDP2 under a pipeline gathers ZeRO 2/3 weights once per step and reduce-scatters on the
    last micro-batch (``gathered_once``)."""
    zero = setups.zero_stage[:, None, None]
    grads, weights = params * setups.bytes_per_gradient, params * setups.bytes_per_weight
    once = gathered_once(setups)[:, None, None]
    reduce = np.where(zero == 0, collective("all_reduce", grads),
                      np.where((zero == 1) | once, collective("reduce_scatter", grads), 0.0))  # fmt: skip
    gather = np.where((zero == 1) | (zero == 2) | once, collective("all_gather", weights), 0.0)
    overlap = setups.overlap_data_parallel[:, None] & np.ones(setups.pipeline_parallel, dtype=bool)
    n, pp = setups.size, setups.pipeline_parallel
    traits = setups.engine_spec.traits
    if not traits.per_block:  # Megatron's and megatron-2021's: the whole stage's collectives (compute.py)
        return reduce, gather, overlap, np.zeros((n, pp)), np.zeros((n, pp))
    if traits.reduce_after_pipeline and pp > 1:
        overlap = overlap & False
    if setups.engine_spec.all_reduces_whole_gradients(pp, setups.bytes_per_gradient):  # ZeRO 1's, not reduce-scattered
        reduce = np.where(zero == 1, collective("all_reduce", grads), reduce)
    if not traits.overlaps_zero0:
        overlap = overlap & (setups.zero_stage[:, None] >= 1)
    after_step = np.zeros((n, pp))
    if traits.gather_after_step:
        after_step = np.where(overlap, gather.sum(axis=1), 0.0)  # not overlapped: counted with the rest
        gather = np.where(overlap[:, None, :], 0.0, gather)
    layers = np.maximum(setups.chunk_layers, 1).reshape(setups.virtual_pipeline_stages, pp)[None]
    share = np.maximum(1.0 / layers, bucket_share(traits, params))
    floor = (reduce * share)[:, 0, :] + (gather / layers)[:, 0, :]  # chunk 0: the last reduced, the first gathered
    return reduce, gather, overlap, after_step, floor


def engine_buffer_bytes(setups: Any, parameters: Any) -> Any:
    """Bytes per GPU an engine holds beside its shards and ``memory.gathered_bytes``' blocks, per pipeline rank
    (``parameters``: a rank's parameters per GPU): DeepSpeed's gradient bucket (``reduce_bucket_size`` elements in
    the weights' precision, ZeRO >= 1 with overlap) and, under ZeRO 3, its prefetch bucket in place of a whole
    prefetched block; torchtitan's FSDP2 under a pipeline, the whole stage's weights (ZeRO 3) and gradients held
    unsharded through the step. 0 for Megatron."""
    traits = setups.engine_spec.traits
    parameters = np.asarray(parameters, dtype=np.float64)
    zero = np.asarray(setups.zero_stage)
    zero = zero[:, None] if zero.ndim else zero
    if not traits.per_block:
        return np.zeros(parameters.shape, dtype=np.int64)
    model = setups.model
    tp = np.asarray(setups.tensor_parallel)
    tp = tp[:, None] if tp.ndim else tp
    layer = (model.attention_parameters + model.mlp_parameters) // tp + model.layer_norm_parameters
    extra = np.zeros(parameters.shape)
    overlap = np.asarray(setups.overlap_data_parallel)
    overlap = overlap[:, None] if overlap.ndim else overlap
    if traits.reduce_bucket_elements > 0:
        bucket = np.minimum(traits.reduce_bucket_elements, parameters) * setups.bytes_per_weight
        extra = extra + np.where((zero >= 1) & overlap, bucket, 0.0)
    if traits.prefetch_blocks <= 0:  # a prefetch bucket, not a whole block ahead
        ahead = (np.minimum(traits.prefetch_elements, layer) - layer) * setups.bytes_per_weight
        extra = extra + np.where(zero == 3, ahead, 0.0)
    if not traits.reshard_with_pipeline and setups.pipeline_parallel > 1:
        dp = np.asarray(setups.data_parallel)
        dp = dp[:, None] if dp.ndim else dp
        whole = parameters * (1.0 - 1.0 / dp) * (np.where(zero == 3, setups.bytes_per_weight, 0.0)
                                                 + setups.bytes_per_gradient)  # fmt: skip
        extra = extra + np.where(zero >= 2, whole, 0.0)
    return np.ceil(extra).astype(np.int64)
