"""The time of one training step: the schedule's table run with each stage's action times, then the data-parallel
tail and the optimizer (docs/step_time.md, section 3, with the model FLOPs behind ``tflops_per_gpu`` and ``mfu``).

``step_columns(setups, hardware, efficiency)`` does it for many set-ups at once (the search); ``StepTime`` is one
set-up's answer (``CostReport.step``). The step of pipeline rank ``r`` ends when its last action ends
(``timeline.run`` over ``schedule``'s table, with ``compute.stage_components`` as durations and one message per
pipeline link crossing) plus its tail: the gradient reduction and parameter gathering the backward and forward
could not hide (all of it without ``Training.overlap_data_parallel``), the tied-embedding all-reduce between the
first and last stage, and the optimizer step; the step is the slowest rank's. Its breakdown is that rank's:
forward, backward and recompute compute, exposed tensor, sequence-data, pipeline and data-parallel
communication, the optimizer, and the pipeline bubble (the rest of its idle time). ``StepTime`` (``cost/step_time.py``)
is that answer as the report shows it, with its error band.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...setup import DEFAULT_EFFICIENCY, Efficiency, Hardware, Transformer
from .compute import COMPONENTS, chunk_parameters, stage_components
from .links import collective_seconds, message_seconds
from .overlap import data_parallel_terms
from .setup_columns import Setups
from .sizes import ACTIVATION_BYTES
from .timeline import Timeline, run, table_graph

BREAKDOWN: tuple[str, ...] = (
    "forward", "backward", "recompute", "pipeline bubble", "tensor communication", "sequence-data communication",
    "expert communication", "pipeline communication", "data-parallel communication", "optimizer step",
)  # fmt: skip
"""Rows of ``StepTime.breakdown`` (what the step's slowest pipeline rank spends its time on; they add up)."""

BREAKDOWN_COLUMNS: tuple[str, ...] = (
    "forward_seconds", "backward_seconds", "recompute_seconds", "bubble_seconds", "tensor_comm_seconds",
    "sequence_data_comm_seconds", "expert_comm_seconds", "pipeline_comm_seconds", "data_comm_seconds",
    "optimizer_seconds",
)  # fmt: skip
"""The ``BREAKDOWN`` rows as column names (in the same order), as ``step_columns`` and ``search`` give them."""

STEP_COLUMNS: tuple[str, ...] = ("seconds", "tokens_per_second", "tflops_per_gpu", "mfu") + BREAKDOWN_COLUMNS
"""Columns of ``step_columns`` and of ``search``'s frame."""


def model_flops(model: Transformer, sequences: Any, tensor_parallel: Any = 1) -> Any:
    """Model FLOPs of ``sequences`` sequences through ``model``, forward and backward (the module docstring)."""
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.num_query_groups, model.kv_channels
    vocab = model.padded_vocab_size(np.asarray(tensor_parallel))
    s, layers = model.seq_length, model.num_layers
    attention = (1 + g / a + s / h) * (a * d / h)
    mlp = (model.ffn_hidden_size / h) * (1.5 if model.swiglu else 1.0)
    if model.is_moe:  # a MoE layer runs its router, experts_per_token experts and the shared ones
        moe, active = model.moe_layers, (model.experts_per_token + model.shared_experts) * model.moe_ffn_hidden_size
        width = (layers - moe) * model.ffn_hidden_size + moe * active
        mlp = width / (layers * h) * (1.5 if model.swiglu else 1.0) + moe * model.num_experts / (2 * layers * h)
    return 12.0 * np.asarray(sequences) * s * layers * h * h * (attention + mlp + vocab / (2 * layers * h))


def link_seconds(setups: Setups, hardware: Hardware, efficiency: Efficiency) -> np.ndarray:
    """Seconds of one activation (or gradient) message over each pipeline link ``(set-ups, pp)``: ``1 / t`` of it
    from each tensor rank, then an all-gather inside the tensor group when sequence parallel is off (Narayanan et
    al. 2021, Section 4.1, the scatter/gather optimisation)."""
    t = setups.tensor_parallel
    message = ACTIVATION_BYTES * setups.tokens * setups.micro_batch_size * setups.model.hidden_size
    tensor = setups.placement["tensor"]
    regather = collective_seconds("all_gather", message, tensor.per_node, tensor.nodes, hardware, efficiency)
    regather = np.where(setups.sequence_parallel, 0.0, regather)
    send = message_seconds((message / t)[:, None], setups.placement["pipeline_links"], hardware, efficiency)
    return send + regather[:, None]


def rank_tails(
    setups: Setups, hardware: Hardware, efficiency: Efficiency, timeline: Timeline | None = None
) -> dict[str, np.ndarray]:
    """Per set-up and pipeline rank, after its last action: exposed ``data`` seconds (gradients, parameters,
    tied embedding) and ``optimizer`` seconds.

    With ``overlap_data_parallel`` each local stage's gradients are reduced from the start of its last backward
    (Megatron-LM reduces buckets as they fill), one stage after the other, and its weights gathered, layer by
    layer, during its first forward, chunk 0's first (``timeline`` gives when; without it, as for
    ``lower_bound``, overlapped communication counts nothing); without, all of it follows the last action.
    """
    pp, v, n = setups.pipeline_parallel, setups.virtual_pipeline_stages, setups.size
    params = chunk_parameters(setups).astype(np.float64).reshape(n, v, pp)  # set-ups, local stage, rank
    data, zero = setups.placement["data"], setups.zero_stage[:, None, None]
    per_node, nodes = data.per_node[:, None, None], data.nodes[:, None, None]
    reduce, gather, overlap, after_step, floor = data_parallel_terms(
        setups, params, lambda kind, size: collective_seconds(kind, size, per_node, nodes, hardware, efficiency)
    )  # Megatron's; other engines' as cost.overlap says (issue 27)
    exposed = np.where(overlap, 0.0, reduce.sum(axis=1) + gather.sum(axis=1)) + after_step
    if timeline is not None:
        graph = timeline.graph
        rank_end = timeline.end[:, np.cumsum(np.bincount(graph.rank, minlength=pp)) - 1]
        ready = timeline.start[:, graph.last_backward.T]  # set-ups, local stage, rank
        needed = timeline.end[:, graph.first_forward.T]
        order = np.argsort(ready, axis=1)
        ready, queued = np.take_along_axis(ready, order, 1), np.take_along_axis(reduce, order, 1)
        done = (ready + np.cumsum(queued[:, ::-1], axis=1)[:, ::-1]).max(axis=1)  # one reduction after another
        late = (np.cumsum(gather, axis=1) - needed).max(axis=1)  # chunk 0 first, layer by layer in its forward
        hidden = np.maximum(done - rank_end, 0.0) + np.maximum(late, 0.0)
        exposed = exposed + np.where(overlap, np.maximum(hidden, floor), 0.0)
    else:
        exposed = exposed + np.where(overlap, floor, 0.0)
    model = setups.model
    if model.tied_embeddings and pp > 1:  # Megatron-LM _allreduce_word_embedding_grads, first and last stage
        t = setups.tensor_parallel
        embedding = model.hidden_size * model.padded_vocab_size(t) / t * setups.bytes_per_gradient
        crosses = setups.placement["pipeline_links"][:, -1]
        tied = collective_seconds("all_reduce", embedding, 1, 2, hardware, efficiency) * crosses
        tied += collective_seconds("all_reduce", embedding, 2, 1, hardware, efficiency) * ~crosses
        exposed[:, 0] += tied
        exposed[:, -1] += tied
    held = params.sum(axis=1) / np.where(zero[:, 0] >= 1, setups.data_parallel[:, None], 1)
    rate = hardware.memory_GBps * 1e9 * efficiency.memory_efficiency
    return {"data": exposed, "optimizer": held * efficiency.optimizer_bytes_per_parameter / rate}


def action_components(setups: Setups, hardware: Hardware, efficiency: Efficiency) -> np.ndarray:
    """``compute.stage_components`` plus, without ``overlap_pipeline_parallel``, the blocking send of each
    forward (to the next stage) and backward (to the previous one) on the sending rank's own time."""
    comp = stage_components(setups, hardware, efficiency)
    blocking = ~setups.overlap_pipeline_parallel | setups.engine_spec.traits.blocking_pipeline
    if setups.num_stages > 1 and blocking.any():
        links = link_seconds(setups, hardware, efficiency) * blocking[:, None]
        stages = np.arange(setups.num_stages)
        pipeline = COMPONENTS.index("pipeline")
        comp[:, :-1, 0, pipeline] += links[:, stages[:-1] % setups.pipeline_parallel]
        for kind in (1, 2):
            comp[:, 1:, kind, pipeline] += links[:, (stages[1:] - 1) % setups.pipeline_parallel]
    return comp


def lower_bound(setups: Setups, hardware: Hardware, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> np.ndarray:
    """A lower bound of ``step_columns``' seconds without running the schedule: the busiest pipeline rank's
    compute and exposed communication plus its tail (a rank runs its actions one after the other, so its step
    ends no earlier). The search simulates set-ups in the order of this bound and stops where it exceeds the
    slowest of the best rows it keeps."""
    hardware.require("peak_tflops", "memory_GBps")
    comp = action_components(setups, hardware, efficiency)
    n, pp, v = setups.size, setups.pipeline_parallel, setups.virtual_pipeline_stages
    kinds = [0, 2, 3] if setups.schedule_spec.split_backward else [0, 1]
    busy = comp[:, :, kinds, :].sum(axis=(2, 3)).reshape(n, v, pp).sum(axis=1) * setups.microbatches
    tails = rank_tails(setups, hardware, efficiency)
    return (busy + tails["data"] + tails["optimizer"]).max(axis=1)


def step_columns(
    setups: Setups, hardware: Hardware, efficiency: Efficiency = DEFAULT_EFFICIENCY
) -> tuple[dict[str, np.ndarray], Timeline]:
    """``STEP_COLUMNS`` for every set-up (arrays), plus ``critical_rank``, ``global_batch_size`` and
    ``model_flops``, and the ``Timeline`` of the schedule's table (the module docstring)."""
    hardware.require("peak_tflops", "memory_GBps")
    comp = action_components(setups, hardware, efficiency)
    n, pp, v, m = setups.size, setups.pipeline_parallel, setups.virtual_pipeline_stages, setups.microbatches
    graph = table_graph(setups.schedule_spec, pp, m, v)
    timeline = run(graph, comp.sum(axis=-1), link_seconds(setups, hardware, efficiency))
    last = np.cumsum(np.bincount(graph.rank, minlength=pp)) - 1  # each rank's last action
    rank_end = timeline.end[:, last]
    tails = rank_tails(setups, hardware, efficiency, timeline)
    finish = rank_end + tails["data"] + tails["optimizer"]
    critical = np.argmax(finish, axis=1)
    rows = np.arange(n)
    seconds = finish[rows, critical]

    kinds = [0, 2, 3] if setups.schedule_spec.split_backward else [0, 1]  # F and B, or F, I and W
    per_rank = comp[:, :, kinds, :].sum(axis=2).reshape(n, v, pp, len(COMPONENTS)).sum(axis=1) * m
    mine = dict(zip(COMPONENTS, per_rank[rows, critical].T))  # the critical rank's seconds per component
    busy = timeline.busy[rows, critical]
    idle = np.maximum(rank_end[rows, critical] - busy, 0.0)
    pipeline = np.minimum(timeline.link_into[rows, last[critical]], idle)
    parts = (mine["forward"], mine["backward"], mine["recompute"], idle - pipeline, mine["tensor"],
             mine["sequence_data"], mine["expert"], pipeline + mine["pipeline"],
             mine["data"] + tails["data"][rows, critical], tails["optimizer"][rows, critical])  # fmt: skip
    columns = dict(zip(BREAKDOWN_COLUMNS, parts))
    sequences = setups.data_parallel // setups.sequence_data_parallel * m * setups.micro_batch_size
    world = setups.tensor_parallel * pp * setups.data_parallel
    flops = model_flops(setups.model, sequences, setups.tensor_parallel)
    tflops = flops / seconds / world / 1e12
    columns.update(
        seconds=seconds,
        tokens_per_second=sequences * setups.model.seq_length / seconds,
        tflops_per_gpu=tflops,
        mfu=tflops / hardware.peak_tflops,
        critical_rank=critical,
        global_batch_size=sequences,
        model_flops=flops,
    )
    return columns, timeline
