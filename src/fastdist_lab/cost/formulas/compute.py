"""Seconds of one micro-batch's forward and backward on each pipeline stage, split into what they are made of.

A layer is a list of kernels, each timed by a roofline with a fixed cost (Williams et al. 2009); the kernels, their
FLOPs and bytes per GPU are the table of docs/step_time.md, section 1 (``T`` the tokens of a micro-batch on the
rank, ``t`` tensor parallel, ``a`` heads, ``g`` key/value groups, ``d`` head size, ``f`` the MLP width). Beside it:

- the backward runs each GEMM twice (input and weight gradients), the weight half being what a zero-bubble ``W``
  action does; without a fused attention kernel the scores are two batched GEMMs (``s_local x s x d``,
  ``s_local x d x s``; Korthikanti et al. 2022, Section 4.1);
- with sequence tensor parallel the backward runs 4 all-gathers (2 of them the inputs gathered again for the weight
  gradients) and 2 reduce-scatters (Korthikanti et al. 2022, Section 4.2.2); backward all-reduces
  (reduce-scatters) hide behind the weight-gradient GEMMs (Megatron-LM's asynchronous all-reduce) up to their
  time, the gathering again before them only under ``overlap_tensor_parallel``;
- ``"full"`` recompute includes the layer's communication; stage 0's embedding is a lookup forward, an fp32
  scatter-add backward and a tensor all-reduce or reduce-scatter; the cross-entropy moves 20 bytes per logit,
  forward and backward; ZeRO 2 and 3 follow Rajbhandari et al. 2020, Section 5, ZeRO 3 one layer per collective
  (torch FSDP2's ``fully_shard`` per block, as torchtitan wraps a model), each paying its latency;
- a mixture-of-experts layer (``moe_times``; what it runs: ``cost.moe``) adds the router, the experts' grouped
  GEMMs on the busiest rank's tokens, the permutation and the shared experts, less the dense MLP it replaces, and
  its exposed all-to-alls (component ``expert``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...setup import Efficiency, Hardware, Transformer
from .links import collective_seconds
from .moe import all_to_all_seconds, expert_parameters_per_gpu, moe_dense_parameters
from .overlap import block_tensors, zero_action_exposure
from .setup_columns import Setups
from .sizes import ACTIVATION_BYTES

COMPONENTS: tuple[str, ...] = (
    "forward", "backward", "recompute", "tensor", "sequence_data", "data", "pipeline", "expert",
)  # fmt: skip
"""What a stage's action time is made of: compute of the forward, of the backward, of the recompute, and the
exposed tensor, sequence-data, data-parallel (ZeRO 2-3), blocking pipeline communication (added by
``step.action_components``) and a mixture of experts' all-to-all and expert-tensor communication."""


def gemm(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, hw: Hardware, eff: Efficiency, batch: np.ndarray | int = 1
) -> np.ndarray:
    """Seconds of ``batch`` GEMMs of ``m x k`` by ``k x n`` in bf16 (roofline plus a fixed cost)."""
    flops = 2.0 * batch * m * n * k
    moved = ACTIVATION_BYTES * batch * (m * k + k * n + m * n)
    compute = flops / (hw.peak_tflops * 1e12 * hw.matmul_efficiency * hw.tensor_core_sustained)
    memory = moved / (hw.memory_GBps * 1e9 * eff.memory_efficiency)
    return np.maximum(compute, memory) + eff.kernel_overhead_s


def streamed(moved: np.ndarray, kernels: np.ndarray | int, hw: Hardware, eff: Efficiency) -> np.ndarray:
    """Seconds of ``kernels`` memory-bound kernels moving ``moved`` bytes in all."""
    return moved / (hw.memory_GBps * 1e9 * eff.memory_efficiency) + kernels * eff.kernel_overhead_s


def elementwise_bytes(model: Transformer, norm_width: np.ndarray, t: np.ndarray, fused: bool) -> tuple[Any, int]:
    """Bytes per token and kernels of one layer's forward element-wise work on a rank (the backward moves twice).

    ``fused`` (Megatron, as calibrated): two norms of 4 bytes and two dropout + residual adds of 7 bytes per value
    of ``norm_width``, GeLU 4 or SwiGLU 6 bytes per value of ``f / t``, 6 kernels. Unfused (torchtitan's Llama
    code in eager mode, pytorch/torchtitan d4c86e3758 ``models/norms.py`` ``RMSNorm``, ``models/llama/model.py``),
    read + written bytes: each RMSNorm is ``x.float()`` (2 + 4), ``pow`` (4 + 4), ``mean`` (4), ``x * rsqrt``
    (4 + 4), ``type_as`` (4 + 2) and ``* weight`` (2 + 2): 36 bytes per value, 8 kernels (with ``+ eps`` and
    ``rsqrt``); two residual adds of 6; SwiGLU's ``silu`` (2 + 2) then ``*`` (4 + 2): 10 per value of ``f / t``;
    RoPE per query and key value (``(a + g) d / t``): ``float`` (2 + 4), the complex product (4 + 4), ``type_as``
    (4 + 2): 20 bytes, 6 kernels; where ``g < a`` ``repeat_kv`` copies keys and values to every query head (reads
    ``2 g d``, writes ``2 a d`` each: ``4 (a + g) d / t``, 2 kernels). Sizes: pytorch/torchtitan d4c86e3758
    ``train_configs/llama3_8b.toml`` (``norm_type = "rmsnorm"``, ``compile = false``).

    >>> from fastdist_lab.cost import Transformer
    >>> m = Transformer.preset("llama3-8b")
    >>> [float(elementwise_bytes(m, np.float64(4096), 1, fused)[0]) for fused in (True, False)]
    [176128.0, 610304.0]
    """
    a, g, d, f = model.num_attention_heads, model.num_query_groups, model.kv_channels, model.ffn_hidden_size
    if fused:
        return 22.0 * norm_width + (6.0 if model.swiglu else 4.0) * f / t, 6
    heads = (a + g) * d / t
    repeat = 4.0 * heads if g < a else 0.0
    moved = (2 * 36.0 + 2 * 6.0) * norm_width + (10.0 if model.swiglu else 4.0) * f / t + 20.0 * heads + repeat
    return moved, 2 * 8 + 2 + (2 if model.swiglu else 1) + 6 + (2 if g < a else 0)


def second_mm_seconds(setups: Setups, hw: Hardware, eff: Efficiency) -> np.ndarray:
    """Seconds of every second ``mm`` of one layer's forward on a rank, in the order torchtitan's Llama block calls
    them (``wq``, ``wk``, ``wv``, ``wo``, then ``w1``, ``w3`` (SwiGLU only) and ``w2``): what its ``op`` selective
    recompute runs again (``EngineTraits.recompute_every_second_mm``). For Llama 3.1 8B that is ``wk``, ``wo`` and
    ``w3``, 36% of the block's linear FLOPs."""
    model = setups.model
    h, a, g, d, f = (model.hidden_size, model.num_attention_heads, model.num_query_groups, model.kv_channels,
                     model.ffn_hidden_size)  # fmt: skip
    t = setups.tensor_parallel
    tokens = setups.tokens * setups.micro_batch_size
    mlp = [(f // t, h)] * (2 if model.swiglu else 1) + [(h, f // t)]
    mms = [(a * d // t, h), (g * d // t, h), (g * d // t, h), (h, a * d // t), *mlp]
    return sum(gemm(tokens, n, k, hw, eff) for n, k in mms[1::2])


def layer_times(setups: Setups, hw: Hardware, eff: Efficiency) -> dict[str, np.ndarray]:
    """One layer, one micro-batch, per set-up: compute and exposed communication of each pass (seconds)."""
    model = setups.model
    h, a, g, d, f = (model.hidden_size, model.num_attention_heads, model.num_query_groups, model.kv_channels,
                     model.ffn_hidden_size)  # fmt: skip
    t, sp = setups.tensor_parallel, setups.sequence_parallel
    s, s_local = model.seq_length, setups.tokens
    tokens = s_local * setups.micro_batch_size
    up = (2 if model.swiglu else 1) * f // t
    shapes = (((a + 2 * g) * d // t, h), (h, a * d // t), (up, h), (h, f // t))  # QKV, output, up (and gate), down
    linear = sum(gemm(tokens, n, k, hw, eff) for n, k in shapes)
    heads = setups.micro_batch_size * (a // t)
    flash_flops = 4.0 * heads * s_local * s * d / 2
    attention = hw.peak_tflops * 1e12 * hw.tensor_core_sustained
    flash_fwd = flash_flops / (attention * hw.attention_efficiency[0]) + eff.kernel_overhead_s
    flash_bwd = 2.5 * flash_flops / (attention * hw.attention_efficiency[1]) + eff.kernel_overhead_s
    scores = heads * s_local * s
    batched = gemm(s_local, s, d, hw, eff, heads) + gemm(s_local, d, s, hw, eff, heads)
    core_fwd = np.where(setups.flash_attention, flash_fwd, batched + streamed(9.0 * scores, 2, hw, eff))
    core_bwd = np.where(setups.flash_attention, flash_bwd, 2 * batched + streamed(11.0 * scores, 2, hw, eff))
    norm_width = np.where(sp, h / t, h)
    traits = setups.engine_spec.traits
    fused = traits.fused_elementwise or setups.torch_compile  # the engine's (cost.engines), or Inductor's fusion
    moved, kernels = elementwise_bytes(model, norm_width, t, fused)
    elementwise = streamed(tokens * moved, kernels, hw, eff)
    compute_fwd = linear + core_fwd + elementwise
    compute_bwd = 2 * linear + core_bwd + 2 * elementwise

    tensor = setups.placement["tensor"]
    message = ACTIVATION_BYTES * tokens * h
    reduce = collective_seconds("all_reduce", message, tensor.per_node, tensor.nodes, hw, eff)
    gather = collective_seconds("all_gather", message, tensor.per_node, tensor.nodes, hw, eff)
    scatter = collective_seconds("reduce_scatter", message, tensor.per_node, tensor.nodes, hw, eff)
    comm_fwd = comm_bwd = np.where(sp, 2 * gather + 2 * scatter, 2 * reduce)  # comm_bwd: what the GEMMs can hide
    regather = np.where(sp, 2 * gather, 0.0)  # the inputs gathered again before the weight gradients
    overlap = setups.overlap_tensor_parallel
    tensor_fwd = np.where(overlap, np.maximum(comm_fwd - linear, 0.0), comm_fwd)
    hides = overlap | traits.tensor_backward_hidden  # the engine's (cost.engines, issue 27)
    tensor_bwd = np.where(hides, np.maximum(comm_bwd - linear, 0.0), comm_bwd) + np.where(
        overlap, np.maximum(regather - linear, 0.0), regather)  # fmt: skip
    tensor_input = comm_bwd + regather  # zero bubble: the weight GEMMs that would hide them run later

    context = setups.placement["sequence_data"]
    kv = ACTIVATION_BYTES * 2 * s * setups.micro_batch_size * g * d / t
    sdp_fwd = collective_seconds("all_gather", kv, context.per_node, context.nodes, hw, eff)
    sdp_bwd = collective_seconds("reduce_scatter", kv, context.per_node, context.nodes, hw, eff)

    full, selective = setups.recompute == 2, setups.recompute == 1
    recompute = np.where(full, compute_fwd, np.where(selective & ~setups.flash_attention, core_fwd, 0.0))
    if traits.recompute_every_second_mm:  # torchtitan's op policy saves no element-wise output, nor every second mm
        recompute = recompute + np.where(selective, elementwise + second_mm_seconds(setups, hw, eff), 0.0)
    return {
        "forward": compute_fwd,
        "backward": compute_bwd,
        "weight": linear,
        "recompute": recompute,
        "tensor_forward": tensor_fwd,
        "tensor_backward": tensor_bwd + np.where(full, tensor_fwd, 0.0),
        "tensor_input": tensor_input + np.where(full, tensor_fwd, 0.0),
        "sequence_forward": sdp_fwd,
        "sequence_backward": sdp_bwd + np.where(full, sdp_fwd, 0.0),
    }


def moe_times(setups: Setups, hw: Hardware, eff: Efficiency) -> dict[str, np.ndarray]:
    """One mixture-of-experts layer, one micro-batch, per set-up: what it adds to ``layer_times``' dense layer (its
    MLP replaced by router, permutation, shared and routed experts, ``cost.moe``) and its expert communication
    (two all-to-alls and, with ETP > 1, a gather and a reduce-scatter over the expert-tensor group, each way)."""
    model = setups.model
    h, f, fe, up = model.hidden_size, model.ffn_hidden_size, model.moe_ffn_hidden_size, 2 if model.swiglu else 1
    t, ep, etp = setups.tensor_parallel, setups.expert_parallel, setups.expert_tensor_parallel
    tokens = setups.tokens * setups.micro_batch_size
    mine = tokens / t  # the MoE block splits the micro-batch's tokens over the tensor ranks
    sent = mine * model.experts_per_token * setups.expert_load_imbalance  # the busiest rank's routed copies
    routed = sent * etp  # what its expert GEMMs run on, gathered over the expert-tensor group
    local = model.num_experts // ep
    each = routed / local
    experts = gemm(each, up * fe // etp, h, hw, eff, local) + gemm(each, h, fe // etp, hw, eff, local)
    width = model.shared_experts * fe
    shared = gemm(tokens, up * width // t, h, hw, eff) + gemm(tokens, h, width // t, hw, eff) if width else 0.0
    dense = gemm(tokens, up * f // t, h, hw, eff) + gemm(tokens, h, f // t, hw, eff)
    linear = experts + shared + gemm(mine, model.num_experts, h, hw, eff) - dense
    per_value = 6.0 if model.swiglu else 4.0
    elementwise = (
        streamed(per_value * (routed * fe / etp + tokens * width / t) + 4.0 * ACTIVATION_BYTES * sent * h, 4, hw, eff)
        - streamed(per_value * tokens * f / t, 0, hw, eff)
    )  # the experts' activation functions, the permutation and its inverse, less the dense MLP's activation
    spread = setups.expert_placement
    expert, tensor = spread["expert"], spread["expert_tensor"]
    a2a = all_to_all_seconds(ACTIVATION_BYTES * sent * h, expert.per_node, expert.nodes, hw, eff)
    gathered = ACTIVATION_BYTES * routed * h
    gather = collective_seconds("all_gather", gathered, tensor.per_node, tensor.nodes, hw, eff)
    scatter = collective_seconds("reduce_scatter", gathered, tensor.per_node, tensor.nodes, hw, eff)
    communication = 2 * a2a + gather + scatter
    return {
        "forward": linear + elementwise,
        "backward": 2 * linear + 2 * elementwise,
        "weight": linear,
        "expert_forward": communication,
        "expert_backward": communication,
    }


def end_times(setups: Setups, hw: Hardware, eff: Efficiency) -> dict[str, np.ndarray]:
    """The embedding (stage 0) and the output layer with the loss (last stage): forward and backward compute and
    exposed tensor communication, per set-up."""
    model = setups.model
    h, t, sp = model.hidden_size, setups.tensor_parallel, setups.sequence_parallel
    tokens = setups.tokens * setups.micro_batch_size
    vocab = model.padded_vocab_size(t)
    tensor = setups.placement["tensor"]
    message = ACTIVATION_BYTES * tokens * h
    reduce = collective_seconds("all_reduce", message, tensor.per_node, tensor.nodes, hw, eff)
    gather = collective_seconds("all_gather", message, tensor.per_node, tensor.nodes, hw, eff)
    scatter = collective_seconds("reduce_scatter", message, tensor.per_node, tensor.nodes, hw, eff)
    norm_width = np.where(sp, h / t, h)
    logits = gemm(tokens, vocab // t, h, hw, eff)
    loss = streamed(20.0 * tokens * vocab / t, 4, hw, eff)
    return {
        "embedding_forward": streamed(4.0 * tokens * h, 1, hw, eff),
        "embedding_backward": streamed(10.0 * tokens * h, 1, hw, eff),
        "embedding_tensor_forward": np.where(sp, scatter, reduce),
        "embedding_tensor_backward": np.where(sp, gather, 0.0),
        "output_forward": logits + streamed(4.0 * tokens * norm_width, 1, hw, eff) + loss * 0.6,
        "output_backward": 2 * logits + streamed(8.0 * tokens * norm_width, 1, hw, eff) + loss * 0.4,
        "output_tensor_forward": np.where(sp, gather, 0.0),
        "output_tensor_backward": np.where(sp, scatter, reduce),
    }


def chunk_parameters(setups: Setups) -> np.ndarray:
    """Parameters per GPU of each stage (set-ups x stages): layers, norms, embedding on the first, output (or the
    tied copy) on the last."""
    model, tp = setups.model, setups.tensor_parallel[:, None]
    layer = (model.attention_parameters + model.mlp_parameters) // tp + model.layer_norm_parameters
    params = setups.chunk_layers[None, :] * layer
    embedding = model.hidden_size * model.padded_vocab_size(tp) // tp
    params[:, :1] += embedding
    params[:, -1:] += model.final_norm_parameters
    if not model.tied_embeddings or setups.num_stages > 1:
        params[:, -1:] += embedding
    if model.is_moe:
        experts = expert_parameters_per_gpu(model, setups.expert_parallel, setups.expert_tensor_parallel)[:, None]
        moe = moe_dense_parameters(model, tp) - model.mlp_parameters // tp + experts
        params = params + setups.chunk_moe_layers[None, :] * moe
    return params


def accumulation_seconds(setups: Setups, hw: Hardware, eff: Efficiency) -> np.ndarray:
    """Seconds per micro-batch of each stage (set-ups x stages) adding the micro-batch's weight gradients into the
    accumulated ones, where the engine does it in a pass of its own (``EngineTraits.fused_accumulation`` false) and
    ZeRO is 0 or 1: one element-wise kernel per parameter tensor (``overlap.block_tensors`` a layer), reading the new
    gradient (``bytes_per_weight``) and the accumulator (``bytes_per_gradient``) and writing the sum; 0 elsewhere."""
    if setups.engine_spec.traits.fused_accumulation:
        return np.zeros((setups.size, setups.num_stages))
    moved = chunk_parameters(setups) * float(setups.bytes_per_weight + 2 * setups.bytes_per_gradient)
    kernels = setups.chunk_layers[None, :] * block_tensors(setups.model)
    return np.where((setups.zero_stage < 2)[:, None], streamed(moved, kernels, hw, eff), 0.0)


def stage_components(setups: Setups, hw: Hardware, eff: Efficiency) -> np.ndarray:
    """Seconds of one ``F``, ``B``, ``I`` and ``W`` action of each stage, split into ``COMPONENTS``: an array
    ``(set-ups, stages, 4 kinds, components)``; the action's duration is the sum over components."""
    layer, ends = layer_times(setups, hw, eff), end_times(setups, hw, eff)
    n, stages = setups.size, setups.num_stages
    layers = setups.chunk_layers[None, :].astype(np.float64)
    out = np.zeros((n, stages, 4, len(COMPONENTS)))
    col = {name: i for i, name in enumerate(COMPONENTS)}

    def per_stage(values: np.ndarray) -> np.ndarray:
        return layers * values[:, None]

    forward, backward = per_stage(layer["forward"]), per_stage(layer["backward"])
    weight = per_stage(layer["weight"])
    tensor_f = per_stage(layer["tensor_forward"])
    tensor_b, tensor_i = per_stage(layer["tensor_backward"]), per_stage(layer["tensor_input"])
    for array, name in ((forward, "forward"), (backward, "backward"), (tensor_f, "tensor_forward"),
                        (tensor_b, "tensor_backward"), (tensor_i, "tensor_backward")):  # fmt: skip
        array[:, 0] += ends[f"embedding_{name}"]
        array[:, -1] += ends[f"output_{name}"]
    recompute = per_stage(layer["recompute"])
    sequence_f, sequence_b = per_stage(layer["sequence_forward"]), per_stage(layer["sequence_backward"])
    expert_f = expert_b = np.zeros_like(forward)
    if setups.model.is_moe:
        moe, times = setups.chunk_moe_layers[None, :].astype(np.float64), moe_times(setups, hw, eff)
        full = (setups.recompute == 2)[:, None]
        forward = forward + moe * times["forward"][:, None]
        backward = backward + moe * times["backward"][:, None]
        weight = weight + moe * times["weight"][:, None]
        recompute = recompute + np.where(full, moe * times["forward"][:, None], 0.0)
        expert_f = moe * times["expert_forward"][:, None]
        expert_b = moe * times["expert_backward"][:, None] + np.where(full, expert_f, 0.0)

    accumulate = accumulation_seconds(setups, hw, eff)  # with the weight gradients (a zero-bubble ``W``)
    backward, weight = backward + accumulate, weight + accumulate
    data_f, data_b = _zero_exposure(setups, hw, eff, forward, backward + recompute)
    for kind, comp in ((0, forward), (1, backward), (2, backward - weight), (3, weight)):
        out[:, :, kind, col["forward" if kind == 0 else "backward"]] = comp
    out[:, :, 1, col["recompute"]] = out[:, :, 2, col["recompute"]] = recompute
    exposed = {"tensor": (tensor_f, tensor_b, tensor_i), "sequence_data": (sequence_f, sequence_b, sequence_b),
               "expert": (expert_f, expert_b, expert_b), "data": (data_f, data_b, data_b)}  # of F, B and I
    for name, by_kind in exposed.items():
        for kind, values in enumerate(by_kind):
            out[:, :, kind, col[name]] = values
    return out


def _zero_exposure(
    setups: Setups, hw: Hardware, eff: Efficiency, forward: np.ndarray, backward: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Exposed per-micro-batch data-parallel seconds of ZeRO 2 and 3 on each stage (forward, backward)."""
    data = setups.placement["data"]
    params = chunk_parameters(setups).astype(np.float64)
    per_node, nodes = data.per_node[:, None], data.nodes[:, None]
    zero = setups.zero_stage[:, None]
    # ZeRO 3 gathers and reduce-scatters one layer at a time (torch FSDP2's fully_shard per transformer block as
    # torchtitan applies it; DeepSpeed's per-module fetch): each layer's collective pays its own latency, which
    # grows with the group (issue 27). ZeRO 2 reduce-scatters the stage's gradients in large buckets: one call.
    units = np.where(zero == 3, np.maximum(setups.chunk_layers[None, :], 1), 1).astype(np.float64)
    shard = params / units
    gather = units * collective_seconds("all_gather", shard * setups.bytes_per_weight, per_node, nodes, hw, eff)
    scatter = units * collective_seconds("reduce_scatter", shard * setups.bytes_per_gradient, per_node, nodes, hw, eff)
    if setups.engine_spec.traits.per_block:  # the engine's block-by-block bound (cost.overlap, issue 27)
        return zero_action_exposure(setups, params, gather, scatter, forward, backward, eff.kernel_overhead_s)
    forward_exposed = np.where(zero == 3, np.maximum(gather - forward, 0.0), 0.0)
    backward_exposed = np.where(zero == 3, np.maximum(gather + scatter - backward, 0.0),
                                np.where(zero == 2, np.maximum(scatter - backward, 0.0), 0.0))  # fmt: skip
    return forward_exposed, backward_exposed
