"""Which config keys bear on the parameter count, so a key that neither the KV rules nor the
parameter inventory interpreted is an error, never a silently different total.

The same contract as ``kv_keys`` for the cache: a key whose name says it shapes weights
(experts and their layout, MLP widths, vocabulary and embedding tying, projections, norms and
biases, gates, MTP blocks, quantisation) with a value no rule read makes
``weight_inventory`` refuse the config, naming the key. ``NOT_WEIGHTS`` lists the names that
match those words but change no tensor (loss coefficients, routing constants, norm epsilons,
kernel and training switches), as checked against vLLM's model files that read them.
"""

from __future__ import annotations

import re

from .fields import Fields

WEIGHT_WORDS = re.compile(
    r"expert|moe|dense|intermediate|ffn|ff_dim|mlp|vocab|embed|tie_|tied|gate|gating|norm|bias|"
    r"router|routing|routed|quant|compression|lora|proj|nextn|mtp|vision|audio|projector|"
    r"num_hidden_layers|hidden_size|^n_layer|^d_model|qk_norm|lm_head|shared|sparse_step|"
    r"layer_freq|decoder_sparse|attn_res"
)

#: Names that match ``WEIGHT_WORDS`` but change no tensor (read by no weight loader, or only
#: for the computation: routing constants, loss weights, epsilons, kernel switches).
NOT_WEIGHTS = frozenset({
    # routing and load-balancing constants (computation, training)
    "norm_topk_prob", "routed_scaling_factor", "router_aux_loss_coef", "router_z_loss_coef",
    "router_jitter_noise", "output_router_logits", "moe_aux_loss_coeff", "moe_z_loss_coeff",
    "aux_loss_alpha", "seq_aux", "moe_router_topk_scaling_factor", "moe_router_enable_expert_bias",
    "router_dtype", "moe_router_dtype", "moe_renormalize", "moe_norm_min", "moe_gate",
    "moe_capacity", "moe_use_aux_free", "moe_router_score_function", "moe_router_pre_softmax",
    "router_temperature", "router_bias_update_rate", "routed_expert_dropout",
    "num_experts_per_tok_loss", "topk_method", "scoring_func", "moe_loss_weight",
    "moe_router_load_balancing_type", "use_expert_bias_update", "moe_router_activation_func",
    "num_expert_group", "topk_group", "n_group",
    # norm constants and norm kinds computed in place
    "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", "norm_eps",
    "layernorm_epsilon", "rms_norm_epsilon", "use_rms_norm", "use_rmsnorm", "rmsnorm",
    "norm_type", "normalization_function", "residual_in_fp32", "norm_before_residual",
    "apply_residual_connection_post_layernorm", "layernorm_precision",
    # dropout, init, training and kernel switches (mamba_ssm's fused add-norm, fp32 residual)
    "rescale_prenorm_residual", "fused_add_norm", "tie_encoder_decoder",
    "attention_dropout", "hidden_dropout", "mlp_dropout", "embed_dropout", "embd_pdrop",
    "initializer_range", "embedding_multiplier", "embedding_multiplier_scale",
    "output_router_logits_loss", "use_cache", "gradient_checkpointing", "moe_grouped_gemm",
    "moe_token_dispatcher_type", "mlp_bias_dropout", "bias_dropout_fusion",
    "embedding_dropout", "use_mla_kernels", "moe_permute_fusion",
    # tokenizer / multimodal token ids, input positions
    "vision_start_token_id", "vision_end_token_id", "vision_token_id", "image_token_id",
    "video_token_id", "audio_token_id", "vision_feature_layer", "vision_feature_select_strategy",
    "max_position_embeddings", "position_embedding_type", "rotary_embedding_base",
    "original_max_position_embeddings", "rope_embedding_type",
    # metadata
    "transformers_version", "quantization_config_version",
})


def is_weight_relevant(key: str) -> bool:
    if key in NOT_WEIGHTS:
        return False
    return WEIGHT_WORDS.search(key.lower()) is not None


def unread_weight_keys(fields: list[Fields], kv_read: frozenset[str],
                       consumed: frozenset[str] = frozenset()) -> list[str]:
    """Dotted names of weight-relevant keys with a value that no rule read: not the parameter
    inventory's ``fields`` (and their nested mappings), not the KV rules (``kv_read``), not the
    readers named in ``consumed`` (the weight-format reader's ``quantization_config``)."""
    out = []
    for root in fields:
        for fl in root.all_fields():
            for key, value in fl.config.items():
                name = fl.prefix + key
                if (value is None or key in fl.read or name in kv_read or name in consumed
                        or not is_weight_relevant(key)):
                    continue
                out.append(name)
    return out
