"""The model being trained: a decoder-only ``Transformer`` (dense, or a mixture of experts) and presets from
published configurations.

Parameter counts follow Megatron-LM's ``compute_weight_and_optimizer_memory``
(``megatron/training/theoretical_memory_usage.py``): query, key, value and output projections, the MLP, two
norms per layer, a final norm and the word embeddings; linear biases and learned position embeddings are not
counted, as there (GPT-3 has both: under 0.5% of its parameters). A mixture-of-experts layer (every
``moe_layer_frequency``-th layer from the first, Megatron-Core's integer ``--moe-layer-freq``) replaces the MLP by a
router (``h x E``, not split over tensor ranks), ``num_experts`` expert MLPs of ``moe_ffn_hidden_size`` and
``shared_experts`` always-active MLPs of the same width (Megatron-LM's ``moe_layer_params``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..validation import check_choice, check_flag, check_int
from .model_presets import PRESETS

NORMALIZATIONS: tuple[str, ...] = ("LayerNorm", "RMSNorm")
"""Supported norms: LayerNorm has a weight and a bias per channel, RMSNorm only a weight."""

MAX_LAYERS = 2**14
"""The most layers a model may have (16,384)."""

MAX_SIZES: dict[str, int] = {
    "hidden_size": 2**18, "num_layers": MAX_LAYERS, "num_attention_heads": 2**14, "vocab_size": 2**24,
    "seq_length": 2**22, "ffn_hidden_size": 2**20, "num_query_groups": 2**14, "kv_channels": 2**14,
    "num_experts": 2**14, "shared_experts": 2**10, "moe_layer_frequency": MAX_LAYERS, "moe_ffn_hidden_size": 2**20,
    "experts_per_token": 2**14,
}  # fmt: skip
"""The largest value of each size of a ``Transformer``: far above any published model (a 4M-token sequence, a
262,144-wide hidden state), and small enough that no byte count of a set-up overflows 64 bits."""

VOCAB_PADDING = 128
"""The vocabulary is padded to a multiple of ``VOCAB_PADDING * tensor_parallel`` (Megatron-LM's default
``make_vocab_size_divisible_by``; ``megatron/training/vocab_utils.py`` ``calculate_padded_vocab_size``)."""


@dataclass(frozen=True)
class Transformer:
    """A dense decoder-only transformer: sizes, attention grouping, MLP kind, embedding tying and norm.

    ``ffn_hidden_size`` defaults to ``4 * hidden_size``, ``num_query_groups`` to ``num_attention_heads``
    (no grouped-query attention) and ``kv_channels`` (the size of one head) to
    ``hidden_size // num_attention_heads``; the resolved values are stored. Bad values raise ``CostError``.

    Presets (``Transformer.preset(name, **changes)``; sources of every number in ``PRESETS``):
    ``gpt3-1.3b`` and ``gpt3-175b`` (Brown et al. 2020, Table 2.1; 1.3B's heads as Megatron-LM's scripts),
    ``llama2-7b`` and ``llama2-70b``
    (Touvron et al. 2023, Table 1, and the released config.json files), ``mistral-7b`` (Jiang et al. 2023,
    Table 1) and ``llama3-8b`` (the released config.json); mixtures of experts ``mixtral-8x7b`` (Jiang et al. 2024,
    Table 1), ``qwen3-30b-a3b`` and ``qwen3-235b-a22b`` (the released config.json files).

    Mixture of experts: ``num_experts`` (0: dense, the default), ``experts_per_token`` (top-k, default 2),
    ``moe_ffn_hidden_size`` (one expert's MLP width, default ``ffn_hidden_size``), ``shared_experts`` (MLPs of that
    width every token also runs, default 0) and ``moe_layer_frequency`` (every n-th layer from the first is MoE,
    default 1). The MoE presets' ``ffn_hidden_size`` is the width of a dense MLP of the same model family, used by
    no layer while ``moe_layer_frequency`` is 1.

    Example:
        >>> Transformer.preset("llama2-7b").parameters()
        6738415616
    """

    hidden_size: int
    num_layers: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int
    ffn_hidden_size: int | None = None
    num_query_groups: int | None = None
    kv_channels: int | None = None
    swiglu: bool = False
    tied_embeddings: bool = True
    normalization: str = "LayerNorm"
    num_experts: int = 0
    experts_per_token: int = 2
    moe_ffn_hidden_size: int | None = None
    shared_experts: int = 0
    moe_layer_frequency: int = 1

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_attention_heads", "vocab_size", "seq_length"):
            object.__setattr__(self, name, self._size(name, getattr(self, name)))
        heads = self.num_attention_heads
        resolved = {
            "ffn_hidden_size": 4 * self.hidden_size if self.ffn_hidden_size is None else self.ffn_hidden_size,
            "num_query_groups": heads if self.num_query_groups is None else self.num_query_groups,
        }
        if self.kv_channels is None and self.hidden_size % heads:
            raise CostError(
                f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads={heads}; give kv_channels"
            )
        resolved["kv_channels"] = self.hidden_size // heads if self.kv_channels is None else self.kv_channels
        for name, value in resolved.items():
            object.__setattr__(self, name, self._size(name, value))
        if heads % self.num_query_groups:
            raise CostError(f"num_query_groups={self.num_query_groups} must divide num_attention_heads={heads}")
        check_flag("swiglu", self.swiglu, error=CostError)
        check_flag("tied_embeddings", self.tied_embeddings, error=CostError)
        check_choice("normalization", self.normalization, NORMALIZATIONS, error=CostError)
        for name in ("num_experts", "shared_experts"):
            object.__setattr__(self, name, self._size(name, getattr(self, name), minimum=0))
        object.__setattr__(self, "moe_layer_frequency", self._size("moe_layer_frequency", self.moe_layer_frequency))
        width = self.ffn_hidden_size if self.moe_ffn_hidden_size is None else self.moe_ffn_hidden_size
        object.__setattr__(self, "moe_ffn_hidden_size", self._size("moe_ffn_hidden_size", width))
        top_k = self._size("experts_per_token", self.experts_per_token)
        object.__setattr__(self, "experts_per_token", top_k)
        if self.num_experts and top_k > self.num_experts:
            raise CostError(f"experts_per_token={top_k} is more than num_experts={self.num_experts}")

    @staticmethod
    def _size(name: str, value: Any, minimum: int = 1) -> int:
        return check_int(name, value, minimum=minimum, maximum=MAX_SIZES[name], error=CostError)

    # ------------------------------------------------------------------ presets
    @classmethod
    def preset(cls, name: str, **changes: Any) -> Transformer:
        """The published model ``name`` (one of ``PRESETS``), with ``changes`` applied (e.g. ``seq_length``)."""
        if name not in PRESETS:
            raise CostError(f"model={name!r} is not a preset; use one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **changes})

    def replace(self, **changes: Any) -> Transformer:
        """A copy with ``changes`` (resolved defaults such as ``ffn_hidden_size`` are kept unless changed)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ counts
    @property
    def norm_size(self) -> int:
        """Parameters per channel of one norm: 2 for LayerNorm (weight, bias), 1 for RMSNorm."""
        return 2 if self.normalization == "LayerNorm" else 1

    def padded_vocab_size(self, tensor_parallel: int = 1) -> int:
        """The vocabulary padded to a multiple of ``VOCAB_PADDING * tensor_parallel`` (Megatron-LM's rule)."""
        multiple = VOCAB_PADDING * tensor_parallel
        return -(-self.vocab_size // multiple) * multiple

    @property
    def attention_parameters(self) -> int:
        """Q, K, V and output projections of one layer: ``2 h d (a + g)`` (Megatron-LM's ``self_attn_term``)."""
        return 2 * self.hidden_size * self.kv_channels * (self.num_attention_heads + self.num_query_groups)

    @property
    def mlp_parameters(self) -> int:
        """The MLP of one layer: ``2 h f``, or ``3 h f`` with SwiGLU's gate (Megatron-LM's ``dense_mlp_params``)."""
        return (3 if self.swiglu else 2) * self.hidden_size * self.ffn_hidden_size

    @property
    def layer_norm_parameters(self) -> int:
        """The two norms of one layer (Megatron-LM's ``layernorm_params``)."""
        return 2 * self.norm_size * self.hidden_size

    @property
    def final_norm_parameters(self) -> int:
        """The norm after the last layer (Megatron-LM's ``final_layernorm``)."""
        return self.norm_size * self.hidden_size

    def embedding_parameters(self, tensor_parallel: int = 1) -> int:
        """One word-embedding (or output) matrix: ``h * padded vocabulary``."""
        return self.hidden_size * self.padded_vocab_size(tensor_parallel)

    @property
    def is_moe(self) -> bool:
        """Whether the model has mixture-of-experts layers (``num_experts > 0``)."""
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        """How many layers are mixture-of-experts layers (layers ``0, f, 2f, ...`` for ``moe_layer_frequency`` f)."""
        return -(-self.num_layers // self.moe_layer_frequency) if self.is_moe else 0

    @property
    def expert_parameters(self) -> int:
        """One expert's MLP: ``2 h f_moe``, or ``3 h f_moe`` with SwiGLU."""
        return (3 if self.swiglu else 2) * self.hidden_size * self.moe_ffn_hidden_size

    @property
    def router_parameters(self) -> int:
        """The router of one MoE layer: ``h x num_experts``."""
        return self.hidden_size * self.num_experts

    @property
    def moe_mlp_parameters(self) -> int:
        """What replaces the MLP in one MoE layer: router, experts and shared experts."""
        return self.router_parameters + (self.num_experts + self.shared_experts) * self.expert_parameters

    def _total(self, tensor_parallel: int, moe_mlp: int) -> int:
        layer = self.attention_parameters + self.layer_norm_parameters
        mlps = (self.num_layers - self.moe_layers) * self.mlp_parameters + self.moe_layers * moe_mlp
        embeddings = (1 if self.tied_embeddings else 2) * self.embedding_parameters(tensor_parallel)
        return self.num_layers * layer + mlps + self.final_norm_parameters + embeddings

    def parameters(self, tensor_parallel: int = 1) -> int:
        """All parameters of the model (one copy of each; the vocabulary padded for ``tensor_parallel``)."""
        return self._total(tensor_parallel, self.moe_mlp_parameters)

    def active_parameters(self, tensor_parallel: int = 1) -> int:
        """The parameters one token runs through: a MoE layer's router, ``experts_per_token`` experts and the
        shared ones (``parameters()`` for a dense model)."""
        active = self.router_parameters + (self.experts_per_token + self.shared_experts) * self.expert_parameters
        return self._total(tensor_parallel, active)

    def check_split(
        self, tensor_parallel: int, pipeline_parallel: int, sequence_split: int, expert_parallel: int = 1,
        expert_tensor_parallel: int | None = None,
    ) -> None:  # fmt: skip
        """``CostError`` unless heads, query groups, the MLP, layers and the sequence split over the layout.

        ``sequence_split`` is the number of pieces one sequence is cut into (sequence-data parallel, times
        tensor parallel under sequence tensor parallel); ``expert_parallel`` must divide ``num_experts`` and
        ``expert_tensor_parallel`` (default: the tensor size) the experts' MLP width.
        """
        etp = tensor_parallel if expert_tensor_parallel is None else expert_tensor_parallel
        if expert_parallel > 1 and not self.is_moe:
            raise CostError(f"expert_parallel={expert_parallel} needs a model with experts (num_experts > 0)")
        if self.is_moe and self.num_experts % expert_parallel:
            raise CostError(f"num_experts={self.num_experts} must be a multiple of expert_parallel={expert_parallel}")
        if self.is_moe and self.moe_ffn_hidden_size % etp:
            raise CostError(
                f"moe_ffn_hidden_size={self.moe_ffn_hidden_size} must be a multiple of expert_tensor_parallel={etp}"
            )
        for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size"):
            if getattr(self, name) % tensor_parallel:
                raise CostError(f"{name}={getattr(self, name)} must be a multiple of tensor_parallel={tensor_parallel}")
        if pipeline_parallel > self.num_layers:
            raise CostError(
                f"pipeline_parallel={pipeline_parallel} is more than num_layers={self.num_layers} (empty stage)"
            )
        if self.seq_length % sequence_split:
            raise CostError(
                f"seq_length={self.seq_length} must be a multiple of {sequence_split} "
                "(sequence_data_parallel, times tensor_parallel under sequence tensor parallel)"
            )
