"""TensorRT-LLM cache layout (PyTorch backend, 1.x, as read in late 2025).

Rules, with where TensorRT-LLM implements them:
- Paged KV in blocks of ``tokens_per_block`` = 32 tokens (``KvCacheConfig`` default), K and V
  per layer of ``num_kv_heads / tp`` heads (``_get_cache_size_per_token``: 2 x layers x
  head_dim x kv_heads/tp x bytes; MLA: ``kv_lora_rank + qk_rope_head_dim``, one copy).
- Sliding windows: a per-window pool that keeps the window's tokens in whole blocks
  (``windowSizeShare`` in ``kvCacheManager.cpp``) - modelled as the last W - 1 tokens.
- ``kv_cache_config.dtype``: auto (model dtype), fp8, nvfp4 (Blackwell); one value for K and V.
- Recurrent states (Nemotron-H and other Mamba-2 hybrids) in the model dtype.
"""

from __future__ import annotations

from .base import EngineLayout, parse_version

DEFAULT_VERSION = "1.1"


def trtllm_layout(version: str | None = None) -> EngineLayout:
    version = parse_version(version, DEFAULT_VERSION, "trtllm", allow_main=True)
    return EngineLayout(
        name="trtllm", version=version, default_version=DEFAULT_VERSION, paged=True,
        default_block_size_tokens=32, sliding_policy="window", chunked_policy="chunk",
        mla_latent_model_types=None, conv_state_columns_dropped=1, fp32_runs_as="bf16",
        kv_formats=frozenset({"bf16", "fp16", "fp8_e4m3", "nvfp4"}), separate_kv_formats=False,
        state_kinds=frozenset({"mamba", "linear_attention"}),
        unserved_model_types={t: "kvplan models TensorRT-LLM 1.1 as read in late 2025; its layout "
                                 "for this architecture was not read"
                              for t in ("deepseek_v32", "glm_moe_dsa", "deepseek_v4", "gemma4_text",
                                        "gemma3n_text", "mimo_v2_flash", "qwen3_5_text",
                                        "qwen3_5_moe_text", "kimi_linear", "lfm2", "lfm2_moe",
                                        "minimax_m1", "minimax_text_01", "minimax",
                                        "nemotron-nas", "step3_text", "step3p5",
                                        "bailing_hybrid")},
    )
