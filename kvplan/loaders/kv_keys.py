"""Which config keys bear on the KV cache, so a key that no rule interpreted is an error, never
a silent guess.

A key is KV-relevant when its name says it shapes a cache: head counts and widths, latent
ranks, windows and chunks, per-layer patterns and lists, indexers, compression, KV sharing,
recurrent-state (Mamba, SSM, conv, linear-attention) settings. ``NOT_KV`` lists the names that
match those words but do not shape a cache (checked against vLLM's readers of the same keys:
rope settings, MoE layout, dropout, biases, kernels, multipliers). After an adapter has parsed
a config, ``uninterpreted`` gives the KV-relevant keys with a value that no rule looked at.
"""

from __future__ import annotations

import re

from .fields import Fields

KV_WORDS = re.compile(
    r"head|key_value|kv|lora_rank|window|chunk|swa|layer_types|block_type|pattern|"
    r"block_configs|_layers$|_layers_|layer_idx|layer_ind|layer_period|layer_offset|interval|"
    r"^index_|indexer|compress|shared_layers|share_kv|shared_kv|kv_shar|mamba|ssm|conv|"
    r"state_size|d_state|linear_|kda|deltanet|lightning|recurrent|global_|local_attn|"
    r"full_attn|full_attention|attn_layer|attention_layer|attn_idx|attention_type|attn_type|"
    r"attn_cfg|attn_config|attention_groups|no_rope|nope_layer|n_group|num_group|"
    r"^hidden_size|^d_model|^n_embd|dtype|model_type|multi_query|decoder_architecture|k_eq_v|llm_config|text_config|"
    r"layer_group|cla_|use_cla|query_groups|expand_v"
)

#: Names that match ``KV_WORDS`` but shape no cache (weights, MoE routing, rope, kernels).
NOT_KV = frozenset({
    # MoE layout and routing
    "first_k_dense_replace", "moe_layer_freq", "mlp_only_layers", "decoder_sparse_step",
    "n_group", "topk_group", "num_expert_group", "moe_intermediate_size",
    "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
    "n_shared_experts", "num_shared_experts", "moe_layer_start_index", "moe_layer_end_index",
    "moe_layer_interval", "moe_layers_enum",  # Step-3 / 3.5: the MoE layers, vLLM step3_text.py
    # projections, norms, biases, dropout, multipliers (weights or compute only)
    "q_lora_rank", "head_bias", "lm_head_bias", "conv_bias", "mamba_conv_bias",
    "mamba_proj_bias", "use_conv_bias", "use_mamba_kernels", "mamba_rms_norm",
    "mamba_norm_before_gate", "ssm_multipliers", "ssm_in_multiplier", "ssm_out_multiplier",
    "mamba_chunk_size", "chunk_size", "chunk_size_feed_forward", "linear_bias",
    "attn_logit_softcapping", "final_logit_softcapping", "lm_head_multiplier",
    "mamba_dt_rank", "linear_attn_output_gate", "mamba_inner_layernorms", "mamba_hidden_act",
    "mamba_use_mlp", "expert_layer_offset", "expert_layer_period",
    # rope per layer kind (positions, not cache bytes)
    "rope_local_base_freq", "local_rope_theta", "global_rope_theta", "swa_rope_theta",
    "rope_theta_global", "rope_theta_local",
    # tokenizer / multimodal indices
    "image_token_index", "video_token_index", "audio_token_index",
    # model-card style metadata; transformers' generic PretrainedConfig attributes
    "num_nextn_predict_layers_loss_weight", "pruned_heads", "activation_situ_linear_beta",
    "mlp_layer_types", "moe_router_dtype", "router_dtype",
})
#: KV-relevant names some kvplan rule interprets (every one that the fixture configs' parses
#: read; ``tests/test_config_reading_audit.py`` keeps it complete). An adapter that stops at an
#: error has not reached all of its keys yet: the error names only the keys outside this set,
#: those no rule could have read (a renamed or new key), not the ones the adapter would read next.
RULE_KEYS = frozenset({
    "_sliding_window_pattern", "add_full_attention_sink_bias", "add_swa_attention_sink_bias",
    "attention_chunk_size", "attention_head_dim", "attention_k_eq_v", "attention_window",
    "attn_cfg", "attn_layer_idx", "attn_layer_indices", "attn_layer_offset",
    "attn_layer_period", "attn_type_list", "block_configs", "compress_ratios",
    "compress_rope_theta", "conv_L_cache", "conv_dim", "conv_dim_out", "conv_kernel",
    "conv_use_xavier_init", "d_conv", "d_model", "d_state", "dtype", "expert_dtype",
    "full_attention_interval", "full_attn_idxs", "full_attn_layers", "global_head_dim",
    "head_dim", "headdim", "hidden_size", "hidden_size_per_layer_input", "hybrid_layer_pattern",
    "hybrid_override_pattern", "index_head_dim", "index_n_heads",
    "index_share_for_mtp_iteration", "index_skip_topk_offset", "index_topk", "index_topk_freq",
    "index_topk_pattern", "indexer_rope_interleave", "indexer_types", "kda_layers",
    "kda_lower_bound", "kda_safe_gate", "kv_channels", "kv_lora_rank", "layer_group_size",
    "layer_types", "layers_block_type", "linear_attn_config", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_silu",
    "linear_value_head_dim", "mamba_d_conv", "mamba_d_head", "mamba_d_ssm", "mamba_d_state",
    "mamba_expand", "mamba_head_dim", "mamba_headdim", "mamba_n_groups", "mamba_n_heads",
    "mamba_ngroups", "mamba_num_heads", "mamba_ssm_cache_dtype", "mamba_ssm_dtype",
    "max_window_layers", "model_type", "mtp_layer_types", "mtp_num_hidden_layers",
    "mtp_transformer_layers", "mtp_use_kda", "multi_query", "multi_query_group_num", "n_embd",
    "n_groups", "n_head", "n_head_kv", "n_heads", "n_heads_in_group", "n_mamba_heads",
    "new_decoder_architecture", "nheads", "no_kda_lora", "no_rope_layer_interval",
    "no_rope_layers", "num_attention_groups", "num_attention_heads", "num_dense_layers",
    "num_global_key_value_heads", "num_hash_layers", "num_heads", "num_hidden_layers",
    "num_key_value_heads", "num_kv_heads", "num_kv_heads_for_linear_attn",
    "num_kv_shared_layers", "num_layers", "num_nextn_predict_layers",
    "num_sliding_attention_heads", "o_lora_rank", "qk_head_dim", "qk_nope_head_dim",
    "qk_rope_head_dim", "short_conv_kernel_size", "sliding_window", "sliding_window_pattern",
    "sliding_window_size", "ssm_cfg", "ssm_state_size", "state_size", "swa_head_dim",
    "swa_num_attention_heads", "swa_num_key_value_heads", "swa_v_head_dim", "torch_dtype",
    "use_head_wise_attn_gate", "use_kda_lora", "use_prefill_window_in_sink_attention",
    "use_qkv_bias", "use_sliding_window", "v_head_dim", "window_length",
})
#: Prefixes of names that shape no cache (norm and activation constants, routing).
NOT_KV_PREFIXES = ("layernorm_", "router_", "activation_")


def is_kv_relevant(key: str, family_words: frozenset[str] = frozenset()) -> bool:
    """``family_words``: words that shape the cache of one family only (Mamba-1's
    ``intermediate_size`` is its d_inner, a plain MLP width elsewhere)."""
    if key in NOT_KV or key.startswith(NOT_KV_PREFIXES):
        return False
    low = key.lower()
    return KV_WORDS.search(low) is not None or any(w in low for w in family_words)


def uninterpreted(f: Fields) -> list[str]:
    """Dotted names (with ``f``'s prefix) of KV-relevant keys holding a value that no rule
    read, in ``f`` and the nested mappings read through ``Fields.sub``."""
    out = []
    for fields in f.all_fields():
        for key, value in fields.config.items():
            if value is None or key in fields.read or not is_kv_relevant(key, fields.kv_words):
                continue
            out.append(f"{fields.prefix}{key}")
    return out
