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
    "moe_layer_interval",
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
