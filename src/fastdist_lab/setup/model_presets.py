"""Published model configurations by name (``Transformer.preset(name)``), each citing where its numbers come from.

*A new model preset* is one more entry here, with its source (a paper's table, a released ``config.json``) and a test
of its parameter count against the published figure.
"""

from __future__ import annotations

from typing import Any

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
