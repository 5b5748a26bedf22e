"""Hugging Face transformers cache layout (``DynamicCache``), by release.

Rules, with where transformers implements them:
- No paging: a layer's K and V are tensors ``[batch, kv_heads, tokens, head_dim]`` grown by
  concatenation (``src/transformers/cache_utils.py`` ``DynamicLayer``).
- Sliding layers keep ``min(n, sliding_window - 1)`` tokens between steps
  (``DynamicSlidingWindowLayer.update``: ``full_key_states[:, :, -self.sliding_window + 1:]``,
  the layered cache of 4.56 and later; older 4.x ``DynamicCache`` kept every token).
  Chunked layers (Llama-4 ``chunked_attention``) use the same layer with
  ``sliding_window = attention_chunk_size``, so they keep the last ``chunk - 1`` tokens rather
  than the current chunk.
- MLA: 4.x releases cache decompressed per-head ``key_states``
  (``num_heads x (qk_nope_head_dim + qk_rope_head_dim)``) and ``value_states``
  (``num_heads x v_head_dim``) (``modeling_deepseek_v3.py``: ``past_key_value.update`` after
  ``kv_b_proj``), as does DeepSeek's hub remote code (``modeling_deepseek.py``), which is what
  ``kimi_k2`` configs load through ``auto_map``. ``DeepseekV3Attention`` caches the latent
  ``kv_lora_rank + qk_rope_head_dim`` since transformers PR #47761 (``k_pass``, 512 wide, as
  the keys and ``k_rot``, 64 wide, as the values) (the 5.x line; the first
  release that shipped it was not pinned down), so ``hf`` (5.x) caches the latent for
  ``deepseek_v3`` only; DeepSeek-V2 was not confirmed to have changed and stays decompressed.
  ``hf@4`` selects the 4.x layout.
- Mamba / hybrid caches keep the full conv kernel: conv ``[batch, conv_dim, d_conv]`` and SSM
  ``[batch, d_inner, d_state]`` (Mamba-1) or ``[batch, heads, head_dim, d_state]``
  (Mamba-2), in the model dtype (``HybridMambaAttentionDynamicCache``, ``MambaCache``).
- Qwen3-Next gated DeltaNet: conv ``[batch, conv_dim, conv_kernel]`` in the model dtype and the
  recurrent state ``[batch, v_heads, k_dim, v_dim]`` in float32 (the torch path casts to
  float32 and returns the final state in it).
- ``torch_dtype`` from the config is used as is (an fp32 checkpoint stays fp32).
- Any storage format may be priced under ``hf``: transformers' quantized caches (quanto, HQQ)
  and custom ``Cache`` classes store what they like, so this is the engine for what-ifs.
"""

from __future__ import annotations

from .base import EngineLayout, parse_version, version_tuple

DEFAULT_VERSION = "5"


def hf_layout(version: str | None = None) -> EngineLayout:
    version = parse_version(version, DEFAULT_VERSION, "hf", allow_main=False)
    latent = frozenset({"deepseek_v3"}) if version_tuple(version) >= (5,) else frozenset()
    return EngineLayout(
        name="hf",
        version=version,
        default_version=DEFAULT_VERSION,
        paged=False,
        default_block_size_tokens=1,
        sliding_policy="window",
        chunked_policy="window",
        mla_latent_model_types=latent,
        mla_latent_layout="split",
        conv_state_columns_dropped=0,
        ssm_dtype_by_model_type={"qwen3_next": "fp32", "qwen3_5_text": "fp32",
                                 "qwen3_5_moe_text": "fp32"},
        state_kinds=frozenset({"mamba", "linear_attention"}),
        indexer_storage="model_dtype",  # modeling_glm_moe_dsa.py: _cached_keys in the model dtype
        unserved_model_types={
            "nemotron-nas": "transformers serves DeciLM only through the checkpoint's remote code",
            "deepseek_v32": "transformers support not established (issue #43037 open in 2026-04)",
            "mimo_v2_flash": "no transformers model for it; its remote code is not read",
            "gemma4_text": "transformers' DynamicCache fails or keeps every token of every layer "
                           "for Gemma-4 depending on the release (layer_types[:-0] is empty)",
        },
    )
