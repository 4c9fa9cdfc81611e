"""Memory per rank of each pipeline stage: weights, gradients, optimizer states and activations.

Every column is a numpy array with one entry per stage, computed for all stages at once.

Where the set-up is one Megatron-LM's estimator covers (dense model, sequence-data parallel 1, ZeRO 0 or 1,
sequence tensor parallel with selective recompute or neither), the first stage's figures are those of
``compute_weight_and_optimizer_memory`` and ``compute_activation_memory`` /
``compute_activation_memory_without_sp`` (``megatron/training/theoretical_memory_usage.py``), including
their simplifications, reproduced on purpose so the two can be compared: activations ignore
grouped-query attention, ``kv_channels`` and SwiGLU, the formula without sequence parallel keeps the
``24 / t`` term for any ``ffn_hidden_size`` and adds Megatron-LM's 5% allowance for temporaries.
Attention is assumed fused (flash attention stores no ``s x s`` scores), as that estimator does, so
``recompute="selective"`` stores what ``"none"`` does.

Where this model differs from that estimator on purpose:
- every stage gets a row (the estimator reports the first); the last stage holds the final norm and the
  output layer, or, with tied embeddings over several stages, a copy of the word embeddings whose
  gradients it all-reduces with the first stage (as Megatron-LM itself trains);
- sequence-data parallel (Fast-LLM at commit 91b28fab): each rank holds ``seq_length / sdp`` tokens of every
  activation, and each layer also keeps the keys and values it gathered from the other ``sdp - 1`` ranks
  for the backward pass; optimizer states are sharded over all ``data`` ranks (``sdp * bdp``), as Fast-LLM's
  ``fsdp.py`` shards over ``DistributedDimNames.data``;
- ZeRO stages 2 and 3 also shard gradients and weights (Rajbhandari et al. 2020, Figure 1);
- ``recompute="full"`` keeps each layer's input (Korthikanti et al. 2022, Table 2, "full activation
  recompute": ``2 s b h`` per layer) plus one layer's working set.

Not modelled: interleaved (virtual-stage) pipeline schedules, mixture-of-experts, linear biases.
"""

from __future__ import annotations

import numpy as np

from .model import Transformer
from .sizes import ACTIVATION_BYTES, Sizes
from .training import Training

MEMORY_COLUMNS: tuple[str, ...] = (
    "parameters",
    "weights_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "total_bytes",
)
"""Columns of ``CostReport.memory`` (one row per pipeline stage)."""


def stage_parameters(model: Transformer, sizes: Sizes) -> dict[str, np.ndarray]:
    """Per stage and per rank: ``layers``, ``parameters`` and ``replicated`` (the norms, not split by tensor).

    Tensor-parallel layers hold ``1 / tp`` of the attention, MLP and (vocabulary-parallel) embedding
    matrices and a whole copy of each norm (Megatron-LM's ``tp_sharded`` / ``replicated`` split).
    """
    tp, pp = sizes.tensor_parallel, sizes.pipeline_parallel
    layers = sizes.layers_per_stage(model.num_layers)
    sharded_layer = (model.attention_parameters + model.mlp_parameters) // tp
    embedding = model.embedding_parameters(tp) // tp
    replicated = layers * model.layer_norm_parameters
    replicated[-1] += model.final_norm_parameters
    parameters = layers * sharded_layer + replicated
    parameters[0] += embedding
    if not model.tied_embeddings or pp > 1:  # the output layer, or the tied copy on the last stage
        parameters[-1] += embedding
    return {"layers": layers, "parameters": parameters, "replicated": replicated}


def state_bytes(parameters: np.ndarray, training: Training, data_parallel: int) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer bytes per rank for ``parameters`` per rank.

    ZeRO stage ``z`` divides the optimizer (z >= 1), gradients (z >= 2) and weights (z == 3) by the
    data-parallel size (Rajbhandari et al. 2020, Figure 1); at stage 1 with the default bytes this is
    Megatron-LM's ``6 + 12 / dp`` bytes per parameter, at stage 0 its 18.
    """
    z = training.zero_stage

    def shard(count: np.ndarray, size: int, stage: int) -> np.ndarray:
        divisor = data_parallel if z >= stage else 1
        return -(-(count * size) // divisor)

    return {
        "weights_bytes": shard(parameters, training.bytes_per_weight, 3),
        "gradients_bytes": shard(parameters, training.bytes_per_gradient, 2),
        "optimizer_bytes": shard(parameters, training.bytes_per_optimizer_state, 1),
    }


def activation_terms(model: Transformer, training: Training, sizes: Sizes) -> dict[str, float]:
    """Bytes per micro-batch: ``stored`` per layer, one layer's ``working`` set, ``embedding``, ``output``,
    and the ``overhead`` factor, for one rank (see the module docstring for the sources)."""
    s, b, h = sizes.tokens, training.micro_batch_size, model.hidden_size
    t, vocab, f = sizes.tensor_parallel, model.padded_vocab_size(sizes.tensor_parallel), model.ffn_hidden_size
    sbh = s * b * h
    if sizes.sequence_parallel:
        # compute_activation_memory: Korthikanti et al. 2022, Table 2, "tensor + sequence parallel +
        # selective recompute" 34 s b h / t, with the MLP's 16 generalised to 4 f / h; everything / t.
        layer = sbh * (18 + 4 * f / h) / t
        embedding = (8 * s * b + sbh) / t  # token ids (int64) and the embedding dropout mask
        output = 4 * sbh * (1 + vocab / h) / t  # final-norm output and fp32 logits
        layer_input, overhead = 2 * sbh / t, 1.0
    else:
        # compute_activation_memory_without_sp: Korthikanti et al. 2022, Table 2, "tensor parallel"
        # s b h (10 + 24 / t) without the attention-score term; logits / t; 5% for temporaries.
        layer = sbh * (10 + 24 / t)
        embedding = 8 * s * b + sbh
        output = 2 * (s * b * vocab / t + sbh)
        layer_input, overhead = 2 * sbh, 1.05
    # Sequence-data parallel: the keys and values gathered from the other ranks (Fast-LLM attention.py
    # gather_op over sequence_data) are inputs of the fused attention, saved for its backward.
    gathered = ACTIVATION_BYTES * 2 * (model.seq_length - s) * b * model.num_query_groups * model.kv_channels / t
    if training.recompute == "full":  # Korthikanti et al. 2022, Table 2, "full activation recompute": 2 s b h
        stored, working = layer_input, layer + gathered
    else:
        stored, working = layer + gathered, 0.0
    return {"stored": stored, "working": working, "embedding": embedding, "output": output, "overhead": overhead}


def activation_bytes(model: Transformer, training: Training, sizes: Sizes, layers: np.ndarray) -> np.ndarray:
    """Activation bytes per rank of each stage under 1F1B.

    Stage ``i`` holds ``min(m, pp - i)`` micro-batches (Megatron-LM's in-flight factor): the first stage's
    ``L / pp * min(m, pp)`` layers equal the estimator's ``L * min(1, m / pp)``.
    """
    terms = activation_terms(model, training, sizes)
    in_flight = sizes.in_flight()
    total = layers * in_flight * terms["stored"] + terms["working"]
    total[0] += in_flight[0] * terms["embedding"]
    total[-1] += terms["output"]
    return np.ceil(total * terms["overhead"]).astype(np.int64)


def stage_memory(model: Transformer, training: Training, sizes: Sizes) -> dict[str, np.ndarray]:
    """Every ``MEMORY_COLUMNS`` column plus ``layers`` and ``replicated``, one entry per stage."""
    columns = stage_parameters(model, sizes)
    columns.update(state_bytes(columns["parameters"], training, sizes.data_parallel))
    columns["activations_bytes"] = activation_bytes(model, training, sizes, columns["layers"])
    columns["total_bytes"] = (
        columns["weights_bytes"]
        + columns["gradients_bytes"]
        + columns["optimizer_bytes"]
        + columns["activations_bytes"]
    )
    return columns
