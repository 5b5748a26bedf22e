"""Which pipeline ranks vLLM builds the embedding, the final norm and the LM head on.

vLLM's default (llama.py 0.34.0 ``LlamaModel`` :377-397, ``LlamaForCausalLM`` :502-517; also
qwen2.py, qwen3.py, qwen3_vl.py, nemotron_nas.py, mimo_v2.py, the transformers backend that
serves Gemma and GPT-NeoX in 0.34, transformers/base.py :428-451 and causal.py :47-66) builds
``embed_tokens`` on the first rank and, tied, on the last (``is_first_rank or
(tie_word_embeddings and is_last_rank)``, else ``PPMissingLayer``), the final norm and the LM
head on the last. DeepSeek-V2/V3/V3.2, GLM-4.x, GLM-5, MiniMax-M2, Falcon-H1 and Kimi-Linear /
K3 build the embedding on the first rank only (deepseek_v2.py :1459-1467; a tied last rank
builds its own ParallelLMHead, the same bytes as the copy kvplan counts). That is the
``weight_bytes`` placement without ``every_stage``.

The model classes below have no rank test for some of these tensors: every pipeline rank
allocates them (``Tensor.every_stage``; ``weight_bytes(every_stage=True)``, the vLLM planner's
call). Multimodal towers are wrapped in ``_mark_tower_model`` (interfaces.py 0.34.0 :347-395:
a ``StageMissingLayer`` on every rank after the first), so they stay on the first stage.
Not here, as vLLM refuses pp > 1 for them (no ``SupportsPP``): gemma3n, zamba2, MiniMax-M1.
"""

from __future__ import annotations

#: model type -> the tensors its vLLM 0.34.0 model class builds on every pipeline rank:
#: "embed" (embed_tokens), "norm" (the final norm, weight and bias), "head" (an untied
#: lm_head; a tied one shares the embedding's weight, ``tie_weights``)
VLLM_EVERY_STAGE: dict[str, frozenset[str]] = {
    # commandr.py :351 embed_tokens, :363 norm; no lm_head (compute_logits reads embed_tokens)
    **dict.fromkeys(("cohere", "cohere2"), frozenset({"embed", "norm"})),
    # gemma2.py :259 embed_tokens, :270 norm; no lm_head (compute_logits :368 reads embed_tokens)
    "gemma2": frozenset({"embed", "norm"}),
    # gemma3.py :300 embed_tokens, :313 norm, :392 lm_head (gemma3_mm.py :568 wraps
    # Gemma3ForCausalLM)
    **dict.fromkeys(("gemma3", "gemma3_text"), frozenset({"embed", "norm", "head"})),
    # gemma4.py :1029 embed_tokens, :1109 norm, :1469 lm_head
    "gemma4_text": frozenset({"embed", "norm", "head"}),
    # falcon.py :380 word_embeddings, :395 ln_f (LayerNorm, weight and bias), :503 lm_head
    **dict.fromkeys(("falcon", "RefinedWeb", "RefinedWebModel"),
                    frozenset({"embed", "norm", "head"})),
    # mamba.py :116 embeddings, :134 norm_f, :191 lm_head (FalconMamba: the same class)
    **dict.fromkeys(("mamba", "falcon_mamba"), frozenset({"embed", "norm", "head"})),
    # mamba2.py :109 embeddings, :126 norm_f, :232 lm_head
    "mamba2": frozenset({"embed", "norm", "head"}),
    # mixtral.py :316 embed_tokens, :336 norm, :406 lm_head
    "mixtral": frozenset({"embed", "norm", "head"}),
    # qwen2_moe.py :373 embed_tokens, :389 norm, :463 lm_head
    "qwen2_moe": frozenset({"embed", "norm", "head"}),
    # qwen3_moe.py :468 embed_tokens, :479 norm, :580 lm_head
    "qwen3_moe": frozenset({"embed", "norm", "head"}),
    # qwen3_vl_moe.py :93 Qwen3MoeLLMModel(Qwen3MoeModel): qwen3_moe.py :468, :479; :168 lm_head
    "qwen3_vl_moe_text": frozenset({"embed", "norm", "head"}),
    # qwen3_next.py :685 embed_tokens, :876 lm_head; the norm on the last rank only (:709)
    "qwen3_next": frozenset({"embed", "head"}),
    # vllm/models/qwen3_5/nvidia/model.py :495 embed_tokens; norm (:520) and lm_head (:676,
    # tied: the embedding itself) on the last rank only
    **dict.fromkeys(("qwen3_5_text", "qwen3_5_moe_text"), frozenset({"embed"})),
    # gpt_oss.py :486 embedding, :499 norm, :1417 lm_head
    "gpt_oss": frozenset({"embed", "norm", "head"}),
    # jamba.py :313 embed_tokens, :340 final_layernorm, :424 lm_head
    "jamba": frozenset({"embed", "norm", "head"}),
    # granitemoehybrid.py :342 embed_tokens, :367 norm, :666 lm_head
    "granitemoehybrid": frozenset({"embed", "norm", "head"}),
    # nemotron_h.py :584 embed_tokens, :620 norm_f, :842 lm_head
    "nemotron_h": frozenset({"embed", "norm", "head"}),
    # bamba.py of 0.23.0 (the last release that serves Bamba): :283 embed_tokens,
    # :307 final_layernorm, :479 lm_head
    "bamba": frozenset({"embed", "norm", "head"}),
}


def vllm_every_stage(model_type: str) -> frozenset[str]:
    """The tensors (of "embed", "norm", "head") vLLM builds on every pipeline rank for a
    model of this type; empty where its class follows the first / last rank rule."""
    return VLLM_EVERY_STAGE.get(model_type, frozenset())
