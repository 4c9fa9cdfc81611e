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

NORMALIZATIONS: tuple[str, ...] = ("LayerNorm", "RMSNorm")
"""Supported norms: LayerNorm has a weight and a bias per channel, RMSNorm only a weight."""

VOCAB_PADDING = 128
"""The vocabulary is padded to a multiple of ``VOCAB_PADDING * tensor_parallel`` (Megatron-LM's default
``make_vocab_size_divisible_by``; ``megatron/training/vocab_utils.py`` ``calculate_padded_vocab_size``)."""

GPT2_VOCAB_SIZE = 50257
"""GPT-2's byte-level BPE vocabulary, which GPT-3 reuses (Radford et al. 2019, Section 2.2)."""

PRESETS: dict[str, dict[str, Any]] = {
    # GPT-3 XL (1.3B): Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (n_layers 24,
    # d_model 2048) and Section 2.1 (n_ctx 2048, d_ff = 4 d_model, GPT-2's tied embeddings and LayerNorm).
    # Heads: 32 of 64 channels, as Megatron-LM's GPT-3 1.3B scripts
    # (examples/academic_paper_scripts/detxoify_lm/*-1.3b.sh); Table 2.1's 24 heads of 128 channels would make
    # the attention 3072 wide and the model 1.5B, not the 1.3B the same table gives.
    "gpt3-1.3b": dict(
        hidden_size=2048, num_layers=24, num_attention_heads=32, vocab_size=GPT2_VOCAB_SIZE, seq_length=2048,
    ),
    # Brown et al. 2020, Table 2.1 (GPT-3 175B: n_layers 96, d_model 12288, n_heads 96, d_head 128), n_ctx 2048.
    "gpt3-175b": dict(
        hidden_size=12288, num_layers=96, num_attention_heads=96, vocab_size=GPT2_VOCAB_SIZE, seq_length=2048,
    ),
    # Touvron et al. 2023, "Llama 2", Table 1 (context 4k; GQA only for 34B/70B) and the released
    # meta-llama/Llama-2-7b-hf config.json: hidden_size 4096, intermediate_size 11008, 32 heads, 32 layers,
    # 32 key/value heads, vocab_size 32000, RMSNorm, SwiGLU, tie_word_embeddings false.
    "llama2-7b": dict(
        hidden_size=4096, num_layers=32, num_attention_heads=32, ffn_hidden_size=11008, vocab_size=32000,
        seq_length=4096, swiglu=True, tied_embeddings=False, normalization="RMSNorm",
    ),
    # meta-llama/Llama-2-70b-hf config.json: hidden_size 8192, intermediate_size 28672, 64 heads, 80 layers,
    # 8 key/value heads, vocab_size 32000; context 4k (Touvron et al. 2023, Table 1).
    "llama2-70b": dict(
        hidden_size=8192, num_layers=80, num_attention_heads=64, num_query_groups=8, ffn_hidden_size=28672,
        vocab_size=32000, seq_length=4096, swiglu=True, tied_embeddings=False, normalization="RMSNorm",
    ),
    # Jiang et al. 2023, "Mistral 7B", Table 1: dim 4096, n_layers 32, head_dim 128, hidden_dim 14336,
    # n_heads 32, n_kv_heads 8, context_len 8192, vocab_size 32000 (the 4096-token sliding window does not
    # change the counts here).
    "mistral-7b": dict(
        hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8, kv_channels=128,
        ffn_hidden_size=14336, vocab_size=32000, seq_length=8192, swiglu=True, tied_embeddings=False,
        normalization="RMSNorm",
    ),
    # The released meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336,
    # 32 heads, 32 layers, 8 key/value heads, vocab_size 128256, max_position_embeddings 8192.
    "llama3-8b": dict(
        hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
        vocab_size=128256, seq_length=8192, swiglu=True, tied_embeddings=False, normalization="RMSNorm",
    ),
    # Mixtral 8x7B: Jiang et al. 2024, "Mixtral of Experts", Table 1 (dim 4096, n_layers 32, head_dim 128,
    # hidden_dim 14336, n_heads 32, n_kv_heads 8, vocab 32000, num_experts 8, top_k_experts 2) and the released
    # mistralai/Mixtral-8x7B-v0.1 config.json; sequence 4096 as Megatron-LM's Mixtral example trains it
    # (examples/mixtral); 46.7B parameters, 12.9B active.
    "mixtral-8x7b": dict(
        hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8, kv_channels=128,
        ffn_hidden_size=14336, vocab_size=32000, seq_length=4096, swiglu=True, tied_embeddings=False,
        normalization="RMSNorm", num_experts=8, experts_per_token=2, moe_ffn_hidden_size=14336,
    ),
    # The released Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, 48 layers, 32 heads of head_dim 128, 4 key/value
    # heads, moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8, vocab_size 151936, every layer MoE
    # (decoder_sparse_step 1), untied; Qwen3's per-head query/key RMSNorm (256 parameters a layer) is not counted.
    "qwen3-30b-a3b": dict(
        hidden_size=2048, num_layers=48, num_attention_heads=32, num_query_groups=4, kv_channels=128,
        ffn_hidden_size=6144, vocab_size=151936, seq_length=4096, swiglu=True, tied_embeddings=False,
        normalization="RMSNorm", num_experts=128, experts_per_token=8, moe_ffn_hidden_size=768,
    ),
    # The released Qwen/Qwen3-235B-A22B config.json: hidden_size 4096, 94 layers, 64 heads of head_dim 128, 4
    # key/value heads, moe_intermediate_size 1536, num_experts 128, num_experts_per_tok 8, vocab_size 151936, untied:
    # 235B parameters, 22B active (the query/key norms not counted, as for Qwen3-30B-A3B).
    "qwen3-235b-a22b": dict(
        hidden_size=4096, num_layers=94, num_attention_heads=64, num_query_groups=4, kv_channels=128,
        ffn_hidden_size=12288, vocab_size=151936, seq_length=4096, swiglu=True, tied_embeddings=False,
        normalization="RMSNorm", num_experts=128, experts_per_token=8, moe_ffn_hidden_size=1536,
    ),
}  # fmt: skip
"""Published configurations by name; each entry cites where its numbers come from."""


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
            check_int(name, getattr(self, name), minimum=1, error=CostError)
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
            object.__setattr__(self, name, check_int(name, value, minimum=1, error=CostError))
        if heads % self.num_query_groups:
            raise CostError(f"num_query_groups={self.num_query_groups} must divide num_attention_heads={heads}")
        check_flag("swiglu", self.swiglu, error=CostError)
        check_flag("tied_embeddings", self.tied_embeddings, error=CostError)
        check_choice("normalization", self.normalization, NORMALIZATIONS, error=CostError)
        check_int("num_experts", self.num_experts, minimum=0, error=CostError)
        check_int("shared_experts", self.shared_experts, minimum=0, error=CostError)
        check_int("moe_layer_frequency", self.moe_layer_frequency, minimum=1, error=CostError)
        width = self.ffn_hidden_size if self.moe_ffn_hidden_size is None else self.moe_ffn_hidden_size
        width = check_int("moe_ffn_hidden_size", width, minimum=1, error=CostError)
        object.__setattr__(self, "moe_ffn_hidden_size", width)
        top_k = check_int("experts_per_token", self.experts_per_token, minimum=1, error=CostError)
        if self.num_experts and top_k > self.num_experts:
            raise CostError(f"experts_per_token={top_k} is more than num_experts={self.num_experts}")

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
