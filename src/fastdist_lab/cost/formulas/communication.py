"""The collectives of one training step: one row per (dim, collective), what one rank sends, on which groups.

Each row is what one rank of the busiest pipeline stage issues: ``calls_per_step`` calls of
``bytes_per_call`` bytes on every group of ``dim`` at once (``groups``). ``bytes_per_call`` is nccl-tests'
"size": the all-reduce buffer, the gathered all-gather output, the reduce-scatter input, the message sent.
Bus bytes follow nccl-tests (doc/PERFORMANCE.md): all-reduce ``2 (n - 1) / n``, all-gather and
reduce-scatter ``(n - 1) / n``, send/recv 1, times the bytes. ``m`` is micro-batches per step, ``L_i`` the
layers of stage ``i``, activations are bf16 of ``s / sdp`` tokens, gradients reduced in fp32.

- tensor, no sequence tensor parallel: per layer 2 all-reduces forward and 2 backward of ``s b h``
  (Shoeybi et al. 2019, Figure 3, operators f and g), 2 more forward under full recompute; the
  vocabulary-parallel embedding's forward all-reduce and the output layer's input-gradient all-reduce.
- tensor, sequence tensor parallel: per layer 4 all-gathers and 4 reduce-scatters of ``s b h``
  (Korthikanti et al. 2022, Section 4.2.2, operators g and g-bar), 2 more of each under full recompute,
  one of each for the embedding and for the output layer; the norms' gradients, whose copies differ
  under sequence parallel, are all-reduced over the tensor group (Fast-LLM ``fsdp.py`` ``reduce_gradients``,
  Megatron-LM ``_allreduce_non_tensor_model_parallel_grads``). The vocabulary-parallel cross-entropy's
  three all-reduces of ``s b`` floats are left out (``2 / h`` of one activation message).
- sequence_data: every layer needs the keys and values of the whole sequence, so each rank gathers the
  ``sdp - 1`` other chunks of K and V (``2 s b g d / t`` values) in forward (again under full recompute) and
  reduce-scatters their gradients in backward (Fast-LLM ``attention.py``, ``gather_op`` /
  ``reduce_scatter_op`` over the ``sequence_data`` group). A ring (Liu et al. 2023, Ring Attention;
  Megatron-LM's context parallel) passes the same chunks around ``sdp - 1`` send/recv steps: the same bus
  bytes. Causal load balancing and sliding windows, which would skip some chunks, are not modelled.
- pipeline: each micro-batch's activations forward and their gradients backward between neighbouring
  stages (``s b h``, ``/ t`` under sequence tensor parallel; Narayanan et al. 2021, Section 2.2); a middle
  stage sends ``2 m`` messages, the ends ``m``. With tied embeddings over several stages the first and last
  stage all-reduce the embedding's gradient (Megatron-LM ``_allreduce_word_embedding_grads``): that row's
  groups are the two ends of each pipeline group.
- data: the stage's gradients, all-reduced once per step (ZeRO 0) or reduce-scattered with the updated
  weights all-gathered (ZeRO 1; Rajbhandari et al. 2020, Section 7.2.1); under ZeRO 2 and 3 the
  gradients are reduce-scattered every micro-batch and under ZeRO 3 the weights are gathered before each
  micro-batch's forward and backward (torchtitan's FSDP2 beside a pipeline, ``Engine.gathers_once``: one
  gather and one reduce-scatter per step; DeepSpeed's ZeRO 1 beside a pipeline all-reduces). Over ``data`` =
  sequence-data x batch-data: both hold replicas of the
  model shard (Fast-LLM ``fsdp.py`` reduces over ``DistributedDimNames.data``). Fast-LLM itself always
  shards the optimizer (ZeRO 1 at least); ZeRO 0 is the plain data-parallel all-reduce. A mixture of experts'
  routed experts are replicated over the expert data-parallel group instead: their rows are ``expert_data``'s.
- expert (a mixture of experts, ``cost.moe``): per MoE layer and micro-batch, an all-to-all dispatching the rank's
  routed token copies (``k s b h / t`` values, times ``Training.expert_load_imbalance``) and one combining them,
  forward and backward (2 more forward under full recompute); with expert tensor parallel, the routed tokens are
  all-gathered and the outputs reduce-scattered over the ``expert_tensor`` group each way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import DistributedDimNames
from ...layout import nodes_spanned
from ...setup import Training, Transformer
from .setup_columns import layout_expert_sizes
from .sizes import ACTIVATION_BYTES, Sizes

COMMUNICATION_COLUMNS: tuple[str, ...] = (
    "dim", "collective", "calls_per_step", "bytes_per_call", "bytes_per_step", "group_size", "nodes_spanned",
    "inter_node", "bus_bytes_per_step",
)  # fmt: skip
"""Columns of ``CostReport.communication``."""

COLLECTIVES: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "send_recv", "all_to_all")
"""The collectives a row may name."""


def bus_factor(collective: str, group_size: int | np.ndarray) -> float | np.ndarray:
    """nccl-tests' bus-bandwidth factor: all-reduce ``2(n-1)/n``, all-gather / reduce-scatter / all-to-all
    ``(n-1)/n``, else 1."""
    n = group_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0 + 0 * n


def largest(value: Any) -> int:
    """The largest entry of an array, or a number itself, as an int (``np.max`` of a plain number converts it to an
    array first: a third of ``step_rows``' time, issue 26; a few entries, one per pipeline rank, are quicker read as
    Python numbers than reduced by numpy)."""
    if isinstance(value, np.ndarray):
        return int(max(value.tolist())) if value.size <= 64 else int(value.max())
    return int(value)


@dataclass(frozen=True)
class CollectiveRow:
    """One (dim, collective): calls per step and bytes per call of one rank, and the groups it runs on."""

    dim: str
    collective: str
    calls_per_step: int
    bytes_per_call: int
    groups: np.ndarray


def step_rows(
    layout: Any, model: Transformer, training: Training, sizes: Sizes, stages: dict[str, np.ndarray]
) -> list[CollectiveRow]:
    """The rows of one step (see the module docstring), tensor first, then sequence_data, pipeline, data."""
    tp, pp, dp, sdp = sizes.tensor_parallel, sizes.pipeline_parallel, sizes.data_parallel, sizes.sequence_data_parallel
    m, full = sizes.microbatches, int(training.recompute == "full")
    layers = stages["layers"]
    ends = np.bincount([0, pp - 1], minlength=pp)  # one embedding (first stage) and one output-layer collective (last)
    activation = ACTIVATION_BYTES * sizes.tokens * training.micro_batch_size * model.hidden_size
    engine = training.engine_spec
    once = engine.gathers_once(pp) and training.zero_stage >= 2  # torchtitan's FSDP2 with PP
    grad_calls = m if training.zero_stage >= 2 and not once else 1
    rows: list[CollectiveRow] = []
    dim_groups = functools.cache(layout.groups)  # each dim's groups read once

    def add(dim: str, collective: str, calls: Any, size: Any, groups: np.ndarray | None = None) -> None:
        calls, size = largest(calls), largest(size)
        if calls > 0 and size > 0:
            rows.append(CollectiveRow(dim, collective, calls, size, dim_groups(dim) if groups is None else groups))

    if tp > 1:
        tensor = DistributedDimNames.tensor
        # Shoeybi et al. 2019, Figure 3 / Korthikanti et al. 2022, Section 4.2.2: 4 per layer, 2 more if recomputed.
        calls = m * (layers * (4 + 2 * full) + ends)
        if sizes.sequence_parallel:
            add(tensor, "all_gather", calls, activation)
            add(tensor, "reduce_scatter", calls, activation)
            # Norm gradients: Fast-LLM fsdp.py reduce_gradients, all_reduce over the tensor group.
            add(tensor, "all_reduce", grad_calls, stages["replicated"] * training.bytes_per_gradient)
        else:
            add(tensor, "all_reduce", calls, activation)
    if sdp > 1:
        sequence = DistributedDimNames.sequence_data
        # Fast-LLM attention.py: gather_op of key_value (forward), reduce_scatter_op of its gradient (backward).
        kv = ACTIVATION_BYTES * 2 * model.seq_length * training.micro_batch_size
        kv = kv * model.num_query_groups * model.kv_channels // tp
        add(sequence, "all_gather", m * layers * (1 + full), kv)
        add(sequence, "reduce_scatter", m * layers, kv)
    if pp > 1:
        pipeline = DistributedDimNames.pipeline
        # Narayanan et al. 2021, Section 2.2: one activation forward, one gradient backward per micro-batch.
        message = activation // tp if sizes.sequence_parallel else activation
        add(pipeline, "send_recv", m * (2 if pp > 2 else 1), message)
        if model.tied_embeddings:
            # Megatron-LM finalize_model_grads.py _allreduce_word_embedding_grads: first and last stage only.
            embedding = model.embedding_parameters(tp) // tp * training.bytes_per_gradient
            add(pipeline, "all_reduce", grad_calls, embedding, dim_groups(pipeline)[:, [0, -1]])
    ep, etp = layout_expert_sizes(layout)
    edp = tp * dp // (ep * etp)
    experts = stages["expert_parameters"]
    for dim, size, parameters in (
        (DistributedDimNames.data, dp, stages["parameters"] - experts),
        ("expert_data", edp, experts),
    ):
        if size > 1:
            # Rajbhandari et al. 2020, Section 7.2.1 (all-reduce = reduce-scatter + all-gather); Fast-LLM fsdp.py.
            if training.zero_stage == 0:
                add(dim, "all_reduce", 1, parameters * training.bytes_per_gradient)
            else:
                # DeepSpeed's BF16_Optimizer beside a pipeline all-reduces (engines.py)
                whole = training.zero_stage == 1 and engine.all_reduces_whole_gradients(pp, training.bytes_per_gradient)
                kind = "all_reduce" if whole else "reduce_scatter"
                add(dim, kind, grad_calls, parameters * training.bytes_per_gradient)
                gathers = 2 * m if training.zero_stage == 3 and not once else 1
                add(dim, "all_gather", gathers, parameters * training.bytes_per_weight)
    if model.is_moe:
        moe = stages["moe_layers"]
        sent = ACTIVATION_BYTES * sizes.tokens * training.micro_batch_size // tp * model.experts_per_token
        sent = int(sent * training.expert_load_imbalance) * model.hidden_size
        if ep > 1:
            add("expert", "all_to_all", m * moe * (4 + 2 * full), sent)
        if etp > 1:
            add("expert_tensor", "all_gather", m * moe * (2 + full), sent * etp)
            add("expert_tensor", "reduce_scatter", m * moe * (2 + full), sent * etp)
    return rows


def row_columns(rows: list[CollectiveRow], local_world_size: int) -> dict[str, np.ndarray]:
    """The ``COMMUNICATION_COLUMNS`` of ``rows`` as numpy arrays."""
    calls = np.array([r.calls_per_step for r in rows], dtype=np.int64)
    size = np.array([r.bytes_per_call for r in rows], dtype=np.int64)
    group_size = np.array([r.groups.shape[1] for r in rows], dtype=np.int64)
    spanned = np.array([nodes_spanned(r.groups, local_world_size) for r in rows], dtype=np.int64)
    factor = np.array([bus_factor(r.collective, int(n)) for r, n in zip(rows, group_size)], dtype=np.float64)
    return {
        "dim": np.array([r.dim for r in rows], dtype=object),
        "collective": np.array([r.collective for r in rows], dtype=object),
        "calls_per_step": calls,
        "bytes_per_call": size,
        "bytes_per_step": calls * size,
        "group_size": group_size,
        "nodes_spanned": spanned,
        "inter_node": spanned > 1,
        "bus_bytes_per_step": calls * size * factor,
    }
