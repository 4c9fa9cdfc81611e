"""Memory per rank of each pipeline rank ("stage"): weights, gradients, optimizer states and activations.

Every function takes ``Setups`` (many set-ups as columns) and returns arrays of shape ``(set-ups, pipeline
ranks)``; ``search`` reads every row at once. ``CostReport.memory`` is one set-up: ``estimate`` passes
``as_numbers(setups)``, whose per-set-up values are plain numbers, and the same formulas return one row
(arrays of shape ``(pipeline ranks,)``) without numpy's cost per call on one-entry arrays.

Where the set-up is one Megatron-LM's estimator covers (dense model, sequence-data parallel 1, ZeRO 0 or 1,
sequence tensor parallel with selective recompute or neither, 1F1B or interleaved 1F1B), the first stage's
figures are those of ``compute_weight_and_optimizer_memory`` and ``compute_activation_memory`` /
``compute_activation_memory_without_sp`` (``megatron/training/theoretical_memory_usage.py``), including
their simplifications, reproduced on purpose so the two can be compared: activations ignore
grouped-query attention, ``kv_channels`` and SwiGLU, the formula without sequence parallel keeps the
``24 / t`` term for any ``ffn_hidden_size`` and adds Megatron-LM's 5% allowance "for optimizer and miscellaneous
temporaries", which this model reports as its own column, ``temporaries_bytes``, not as activations (so
``activations_bytes + temporaries_bytes`` is that estimator's activation figure).
That estimator assumes a fused attention kernel (FlashAttention or Transformer Engine's fused attention): no
``s x s`` scores are stored, which is Korthikanti et al. 2022's Table 2 without its ``5 a s / h`` term; so does
``Training(flash_attention=True)``, the default, under which ``recompute="selective"`` stores what ``"none"``
does.

Where this model differs from that estimator on purpose:
- every pipeline rank gets a row (the estimator reports the first); the last holds the final norm and the
  output layer, or, with tied embeddings over several stages, a copy of the word embeddings whose
  gradients it all-reduces with the first stage (as Megatron-LM itself trains);
- the micro-batches each rank holds come from the schedule's own table (``PipelineSchedule.in_flight``):
  ``min(m, pp - r)`` under 1F1B (the estimator's ``min(1, m / pp)``), all ``m`` under GPipe, and under
  interleaved 1F1B the table's warm-up, which for ``m >= 2 pp`` is the estimator's
  ``1 + (pp - 1) / (pp v)`` (Narayanan et al. 2021, Section 2.2.2) and less for fewer micro-batches (the
  embedding's few bytes are spread evenly over rank 0's stages, as that estimator's factor spreads them);
- ``flash_attention=False``: each layer also keeps its attention scores, softmax output and dropout mask,
  ``5 a s^2 b / t`` bytes, unless selective or full recompute drops them (Korthikanti et al. 2022, Table 2);
  sequence-data parallel keeps ``s / sdp`` rows of the full ``s`` columns;
- sequence-data parallel (Fast-LLM at commit 91b28fab): each rank holds ``seq_length / sdp`` tokens of every
  activation, and each layer also keeps the keys and values it gathered from the other ``sdp - 1`` ranks
  for the backward pass; optimizer states are sharded over all ``data`` ranks (``sdp * bdp``), as Fast-LLM's
  ``fsdp.py`` shards over ``DistributedDimNames.data``;
- ZeRO stages 2 and 3 also shard gradients and weights (Rajbhandari et al. 2020, Figure 1);
- ``recompute="full"`` keeps each layer's input (Korthikanti et al. 2022, Table 2, "full activation
  recompute": ``2 s b h`` per layer) plus one layer's working set.

Activations against Korthikanti et al. 2022, Figure 1 (first stage, no recompute, tensor 8): the figure is the
paper's Table 2 formula ``s b h L (10 + 24 / t + 5 a s / (h t))`` times the interleaved factor, nothing else.
``activations_bytes`` adds only what the paper's Section 4.4 names and its figure leaves out: the embedding's
int64 token ids and dropout mask for each micro-batch in flight (``p`` of them on the first stage), and on a
one-stage pipeline the output layer's inputs and logits; +0.4% to +2.4% for its four models. Megatron-LM's 5%
allowance, which made the first stage 5.4-7.5% above the figure when it was counted as activations, is
``temporaries_bytes`` (issue 27), with, under ZeRO 3, the layers gathered unsharded at a time (``gathered_bytes``).

Mixture of experts (``moe``): a MoE layer's router, shared and routed experts replace the MLP (routed experts:
``E / EP`` experts, ``1 / ETP`` of each, their optimizer states, gradients and, under ZeRO 3, weights sharded over
the expert data-parallel group, as Megatron-Core's distributed optimizer shards them); its activations keep the
permuted tokens and the experts' hidden activations of the busiest rank (``Training.expert_load_imbalance``).

Not modelled: linear biases.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ...errors import CostError
from ...setup import ScheduleKind
from .moe import expert_parameters_per_gpu, moe_dense_parameters
from .overlap import engine_buffer_bytes
from .schedules import stage_counts
from .setup_columns import Setups
from .sizes import ACTIVATION_BYTES

MEMORY_COLUMNS: tuple[str, ...] = (
    "parameters", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "temporaries_bytes",
    "total_bytes",
)  # fmt: skip
"""Columns of ``CostReport.memory`` (one row per pipeline stage)."""

SCORE_BYTES = 5
"""Bytes per attention score without a fused kernel: bf16 scores, bf16 softmax output, a one-byte dropout mask
(Korthikanti et al. 2022, Section 4.1: ``2 a s^2 b + 2 a s^2 b + a s^2 b``)."""


def as_numbers(setups: Setups) -> Setups:
    """The one set-up of a one-row ``setups`` with each per-set-up array as a plain number (``chunk_layers``, shared
    by the set-ups, stays an array). The formulas here then run on Python numbers and return one row: ``estimate``
    prices one layout per call, and numpy's overhead on one-entry arrays (a few microseconds per operation, a few
    hundred operations) made 1,000 calls 1.5 times as slow as before ``Setups`` existed (issue 26)."""
    if setups.size != 1:
        raise CostError(f"as_numbers takes one set-up, got {setups.size}")
    return dataclasses.replace(setups, **{name: getattr(setups, name).item() for name in per_setup_fields()})


@functools.cache
def per_setup_fields() -> tuple[str, ...]:
    """The names of ``Setups``' per-set-up arrays (every array field but the shared ``chunk_layers``)."""
    return tuple(
        field.name
        for field in dataclasses.fields(Setups)
        if field.type in ("np.ndarray", np.ndarray) and field.name != "chunk_layers"
    )


def choose(condition: Any, yes: Any, no: Any) -> Any:
    """``np.where(condition, yes, no)`` for arrays of set-ups; ``yes if condition else no`` for one set-up given as
    numbers (``as_numbers``)."""
    if isinstance(condition, np.ndarray):
        return np.where(condition, yes, no)
    return yes if condition else no


def column(values: Any) -> Any:
    """Per-set-up ``values`` as a column against per-rank columns (``values[:, None]``); a number stays a number."""
    return values[:, None] if isinstance(values, np.ndarray) else values


def stage_parameters(setups: Setups) -> dict[str, np.ndarray]:
    """Per pipeline rank and per GPU: ``parameters`` and ``replicated`` (the norms, not split by tensor).

    Tensor-parallel layers hold ``1 / tp`` of the attention, MLP and (vocabulary-parallel) embedding
    matrices and a whole copy of each norm (Megatron-LM's ``tp_sharded`` / ``replicated`` split).
    """
    model, tp = setups.model, column(setups.tensor_parallel)
    layers = setups.rank_layers()
    embedding = model.hidden_size * column(model.padded_vocab_size(setups.tensor_parallel)) // tp
    replicated = layers * model.layer_norm_parameters + np.zeros_like(tp)  # (set-ups, ranks), or (ranks,)
    replicated[..., -1] += model.final_norm_parameters
    parameters = layers * ((model.attention_parameters + model.mlp_parameters) // tp) + replicated
    parameters[..., :1] += embedding
    if not model.tied_embeddings or setups.pipeline_parallel > 1:  # the output layer, or the tied copy
        parameters[..., -1:] += embedding
    experts = np.zeros_like(parameters)
    if model.is_moe:  # a MoE layer's MLP is its router (whole on every rank), shared and routed experts
        moe = setups.rank_moe_layers()
        experts = moe * column(expert_parameters_per_gpu(model, setups.expert_parallel, setups.expert_tensor_parallel))
        replicated = replicated + moe * model.router_parameters
        parameters = parameters + moe * (moe_dense_parameters(model, tp) - model.mlp_parameters // tp) + experts
    return {"parameters": parameters, "replicated": replicated, "expert_parameters": experts}


def state_bytes(
    parameters: np.ndarray, setups: Setups, expert_parameters: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer bytes per GPU for ``parameters`` per GPU (set-ups x ranks), of which
    ``expert_parameters`` are routed experts, sharded over the expert data-parallel group instead of the data one.

    ZeRO stage ``z`` divides the optimizer (z >= 1), gradients (z >= 2) and weights (z == 3) by the
    data-parallel size (Rajbhandari et al. 2020, Figure 1); at stage 1 with the default bytes this is
    Megatron-LM's ``6 + 12 / dp`` bytes per parameter, at stage 0 its 18.
    """
    zero, dp = column(setups.zero_stage), column(setups.data_parallel)
    if not setups.model.is_moe:

        def shard(size: int, stage: int) -> np.ndarray:
            return -(-(parameters * size) // choose(zero >= stage, dp, 1))

    else:  # routed experts are sharded over the expert data-parallel group: the stage's ranks / (ETP x EP)
        edp = column(setups.tensor_parallel * setups.data_parallel // (
            setups.expert_tensor_parallel * setups.expert_parallel))  # fmt: skip

        def shard(size: int, stage: int) -> np.ndarray:
            dense = -(-((parameters - expert_parameters) * size) // choose(zero >= stage, dp, 1))
            return dense + -(-(expert_parameters * size) // choose(zero >= stage, edp, 1))

    return {
        "weights_bytes": shard(setups.bytes_per_weight, 3),
        "gradients_bytes": shard(setups.bytes_per_gradient, 2),
        "optimizer_bytes": shard(setups.bytes_per_optimizer_state, 1),
    }


def activation_terms(setups: Setups) -> dict[str, np.ndarray]:
    """Bytes per micro-batch on one GPU, per set-up: ``stored`` per layer, one layer's ``working`` set,
    ``embedding``, ``output``, and the ``overhead`` factor (see the module docstring for the sources)."""
    model = setups.model
    s, b, h = setups.tokens, setups.micro_batch_size, model.hidden_size
    t, f = setups.tensor_parallel, model.ffn_hidden_size
    vocab = model.padded_vocab_size(t)
    sbh, sp = s * b * h, setups.sequence_parallel
    # compute_activation_memory: Korthikanti et al. 2022, Table 2, "tensor + sequence parallel +
    # selective recompute" 34 s b h / t, with the MLP's 16 generalised to 4 f / h; everything / t.
    # compute_activation_memory_without_sp: Table 2, "tensor parallel" s b h (10 + 24 / t) without the
    # attention-score term; logits / t; 5% for temporaries (``temporaries_bytes``, not activations).
    layer = choose(sp, sbh * (18 + 4 * f / h) / t, sbh * (10 + 24 / t))
    embedding = choose(sp, (8 * s * b + sbh) / t, 8 * s * b + sbh)  # token ids (int64), embedding dropout mask
    output = choose(sp, 4 * sbh * (1 + vocab / h) / t, 2 * (s * b * vocab / t + sbh))  # final norm, fp32 logits
    layer_input = choose(sp, 2 * sbh / t, 2 * sbh)
    overhead = choose(sp, 1.0, 1.05)
    # Sequence-data parallel: the keys and values gathered from the other ranks (Fast-LLM attention.py
    # gather_op over sequence_data) are inputs of the fused attention, saved for its backward.
    gathered = ACTIVATION_BYTES * 2 * (model.seq_length - s) * b * model.num_query_groups * model.kv_channels / t
    scores = choose(setups.flash_attention, 0.0, SCORE_BYTES * model.num_attention_heads * s * model.seq_length * b / t)
    full = setups.recompute == 2
    stored = choose(full, layer_input, layer + gathered + choose(setups.recompute == 0, scores, 0.0))
    # A MoE layer's MLP keeps, instead of the dense MLP's 4 f / h (in s b h / t), the permuted copy of its routed
    # tokens and each expert's hidden activations for k tokens (the busiest rank's load), plus the shared experts'.
    moe = 0.0
    if model.is_moe:
        routed = model.experts_per_token * setups.expert_load_imbalance
        f_moe = model.moe_ffn_hidden_size / h
        moe = sbh / t * (routed * (2 + 4 * f_moe) + model.shared_experts * 4 * f_moe - 4 * f / h)
    working = choose(full, layer + gathered + scores + np.maximum(moe, 0.0), 0.0)  # a MoE layer's working set
    return {"stored": stored, "working": working, "embedding": embedding, "output": output, "overhead": overhead,
            "moe": choose(full, 0.0, moe)}  # fmt: skip


@functools.lru_cache(maxsize=4096)
def rank_peaks(schedule: str | ScheduleKind, pipeline_parallel: int, microbatches: int) -> np.ndarray:
    """With one stage per rank: the most micro-batches each pipeline rank holds under ``schedule`` (cached and
    read-only; ``estimate`` calls this for every layout, and a reduction per rank per call cost more than all of
    its memory formulas, issue 26)."""
    peaks = np.array([counts.max() for counts in stage_counts(schedule, pipeline_parallel, microbatches, 1)])
    peaks.setflags(write=False)
    return peaks


@functools.lru_cache(maxsize=4096)
def peak_candidates(
    schedule: str | ScheduleKind, pipeline_parallel: int, microbatches: int, virtual: int
) -> tuple[np.ndarray, ...]:
    """Per rank, the rows of ``stage_counts`` that can hold its peak: distinct, and none with every local stage's
    count at most another row's (the bytes per micro-batch of a stage are never negative, so such a row is never
    above that one). Cached and read-only: the search prices thousands of set-ups per schedule table."""
    kept = []
    for counts in stage_counts(schedule, pipeline_parallel, microbatches, virtual):
        rows = np.unique(np.asarray(counts), axis=0)
        below = (rows[:, None, :] <= rows[None, :, :]).all(axis=2) & ~np.eye(len(rows), dtype=bool)
        rows = rows[~below.any(axis=1)].astype(np.float64)
        rows.setflags(write=False)
        kept.append(rows)
    return tuple(kept)


def activation_bytes(setups: Setups) -> tuple[np.ndarray, np.ndarray]:
    """Activation bytes per GPU of each pipeline rank at its peak under the set-ups' schedule, and the temporaries
    Megatron-LM's estimator allows on top of them (5% of the activations without sequence parallel, else none).

    Each stage (model chunk) holds, per micro-batch in flight, its layers' stored bytes (plus the embedding's,
    spread over rank 0's stages, and the output layer's on the last); the table gives how many micro-batches
    each stage holds after each action (``schedules.stage_counts``) and a rank's peak is the largest sum over
    its stages.
    """
    terms = activation_terms(setups)
    pp, v = setups.pipeline_parallel, setups.virtual_pipeline_stages
    # (set-ups, stages), or (stages,) for numbers; floats even where one set-up's stored bytes are an int
    chunk = setups.chunk_layers.astype(np.float64) * column(terms["stored"])
    chunk[..., 0 : pp * v : pp] += column(terms["embedding"]) / v  # Megatron-LM's estimator: rank 0's stages evenly
    chunk[..., -1] += terms["output"]
    if setups.model.is_moe:
        chunk = chunk + setups.chunk_moe_layers * column(terms["moe"])
    if v == 1:  # one stage per rank: its most micro-batches held (one product, not one per rank: issue 26)
        peak = rank_peaks(setups.schedule_spec, pp, setups.microbatches) * chunk
    else:
        peak = np.zeros(chunk.shape[:-1] + (pp,))
        for rank, counts in enumerate(peak_candidates(setups.schedule_spec, pp, setups.microbatches, v)):
            peak[..., rank] = (counts @ chunk[..., rank::pp].T).max(axis=0)  # (rows, set-ups) -> set-ups
    peak += column(terms["working"])
    activations = np.ceil(peak).astype(np.int64)
    return activations, np.ceil(peak * column(terms["overhead"])).astype(np.int64) - activations


def gathered_bytes(setups: Setups) -> Any:
    """Per set-up, the buffers ZeRO 3 holds unsharded on top of its shards: the gathered weights of the layer being
    computed and of the next one, prefetched (torch FSDP2 gathers the next block while the current one computes;
    DeepSpeed's prefetch bucket likewise), and one layer's unsharded gradients before their reduce-scatter. 0 under
    ZeRO 0-2."""
    model = setups.model
    layer = (model.attention_parameters + model.mlp_parameters) // setups.tensor_parallel + model.layer_norm_parameters
    per_layer = layer * (2 * setups.bytes_per_weight + setups.bytes_per_gradient)
    return choose(setups.zero_stage == 3, per_layer, 0)


def stage_memory(setups: Setups) -> dict[str, np.ndarray]:
    """Every ``MEMORY_COLUMNS`` column plus ``replicated`` and ``expert_parameters`` (set-ups x pipeline ranks),
    ``layers`` and ``moe_layers`` (ranks)."""
    columns = stage_parameters(setups)
    columns.update(state_bytes(columns["parameters"], setups, columns["expert_parameters"]))
    columns["activations_bytes"], temporaries = activation_bytes(setups)
    columns["temporaries_bytes"] = (
        temporaries + column(gathered_bytes(setups)) + engine_buffer_bytes(setups, columns["parameters"])
    )
    columns["total_bytes"] = sum(columns[name] for name in MEMORY_COLUMNS[1:-1])  # weights, ..., temporaries
    columns["layers"] = setups.rank_layers()
    columns["moe_layers"] = setups.rank_moe_layers()
    return columns
