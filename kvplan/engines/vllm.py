"""vLLM (V1 engine) cache layout: vLLM main as read in 2026, and 0.11 and older releases.

Rules, with where vLLM implements them:
- Attention KV per layer is ``[2, num_blocks, block_size, num_kv_heads, head_size]``
  (``vllm/v1/attention/backends/flash_attn.py`` ``get_kv_cache_shape``), page bytes
  ``block_size * num_kv_heads * (head_size + head_size_v) * dtype_size``
  (``vllm/v1/kv_cache_interface.py`` ``FullAttentionSpec``). Default block size 16 tokens
  (``vllm/config/cache.py`` ``CacheConfig.DEFAULT_BLOCK_SIZE``); a request holds whole blocks.
- ``kv_cache_dtype="auto"`` uses the model dtype; an fp32 checkpoint runs in bf16 on GPUs that
  support it (``vllm/config/model.py`` ``_resolve_auto_dtype``: fp32 configs are downcast to
  the platform's preferred dtype).
- Sliding window: the next token needs the last ``sliding_window - 1`` computed tokens
  (``SlidingWindowManager.get_num_skipped_tokens = num_computed - sliding_window + 1``) and
  only whole blocks before them are freed, so a sequence of n tokens holds the blocks spanning
  ``[n - (W - 1), n)``; its worst case over alignments is ``cdiv(W - 1 + B - 1, B)`` blocks
  (vLLM's own bound, ``SlidingWindowSpec.max_memory_usage_bytes``, is
  ``cdiv(W - 1 + max_num_batched_tokens, B) + 1`` blocks).
- Chunked local attention keeps only the tokens of the current chunk
  (``ChunkedLocalAttentionManager.get_num_skipped_tokens = (n // C) * C``), freed in whole
  blocks. In 0.10 and 0.11 the hybrid KV-cache manager is off for chunked models by default
  (``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``), so ``vllm@0.11`` keeps every token.
- ``kv_cache_dtype`` is one value for K and V: auto, bfloat16, float16, fp8 (e4m3), fp8_e5m2;
  main adds nvfp4 and int8 per-token-head (fp32 scales: ``int8:scale=fp32`` here).
- MLA caches the latent, ``kv_lora_rank + qk_rope_head_dim`` elements, one copy
  (``MLAAttentionSpec``: no factor 2), with ``num_kv_heads = 1`` on every TP rank
  (``ModelConfig.get_num_kv_heads``: ``if use_mla: return 1``), i.e. replicated.
- Mamba states (``vllm/model_executor/layers/mamba/mamba_utils.py``
  ``MambaStateShapeCalculator``): conv ``(conv_kernel - 1, conv_dim / tp)``; Mamba-1 temporal
  ``(d_inner / tp, d_state)``; Mamba-2 temporal ``(num_heads / tp, head_dim, d_state)`` with
  groups replicated when ``n_groups % tp != 0`` (``extra_groups_for_head_shards``); gated
  DeltaNet conv over ``2 * k_heads * k_dim + v_heads * v_dim`` and temporal
  ``(v_heads / tp, v_dim, k_dim)``. Dtypes: ``mamba_cache_dtype`` and
  ``mamba_ssm_cache_dtype`` default ``auto`` = the model dtype. NemotronH alone reads the
  config's ``mamba_ssm_cache_dtype`` and otherwise defaults its SSM state to float32 on main
  (``vllm/model_executor/models/config.py`` ``NemotronHForCausalLMConfig``,
  ``DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32"``) and to float16 in the 0.11-era copy read.
- Not modelled here (see ``kvplan fit``): hybrid page-size unification and padding, prefix
  caching modes, speculative-decoding extra state slots, FlashMLA's block size 64.
"""

from __future__ import annotations

from .base import EngineLayout, parse_version, version_tuple
from .vllm_mla import NVFP4_DS_MLA_FIRST, release_default_block

DEFAULT_VERSION = "main"
#: the newest release whose source kvplan has read (sdists on PyPI, 2026-12)
NEWEST_READ = "0.34.0"

#: Model types whose architectures vLLM removed, with the last release that served them
#: (``vllm/model_executor/models/registry.py`` ``_PREVIOUSLY_SUPPORTED_MODELS``; PRs #24907,
#: #25866, #45637, #45990, #45993).
REMOVED = {
    "phi3small": "0.9.2",
    "mllama": "0.10.2", "phi4flash": "0.10.2",
    "dots1": "0.23.0", "bamba": "0.23.0",
    "minimax": "0.23.0", "minimax_text_01": "0.23.0", "minimax_m1": "0.23.0",
}
#: Model types whose cache rules kvplan read in 2026 vLLM: first release known or not. Under
#: ``vllm@X`` (not main) they are refused before it, or when the first release is unknown.
FIRST_RELEASE: dict[str, str | None] = {
    "deepseek_v4": "0.20.0",
    # MiniMaxM2ForCausalLM first in the registry of 0.11.1's PyPI sdist (not 0.11.0's), with
    # the plain GQA Attention (KV heads split over TP, replicated below it) it keeps in 0.34
    "minimax_m2": "0.11.1",
    # Ling-3.0's BailingMoeV3ForCausalLM (bailing_moe_v3.py): first in the registry of 0.28.0's
    # sdist, not 0.27.1's; the same KDA / MLA layer rule and default state dtypes through 0.34
    "bailing_hybrid": "0.28.0",
    **dict.fromkeys(("deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "qwen3_5_text",
                     "qwen3_5_moe_text", "kimi_linear", "lfm2", "lfm2_moe", "gemma4_text",
                     "gemma3n_text", "mimo_v2_flash", "nemotron-nas", "step3_text",
                     # step3p5: not in 0.14.1's sdist, in 0.16.0's; 0.15.x has no sdist
                     "step3p5"),
                    None),
}
#: KV formats vLLM refuses on MLA models, from 0.21 (not in 0.20's config/vllm.py)
MLA_REFUSED = {"nvfp4": "the plain nvfp4 layout (head_size / 2 + head_size / 16) does not apply "
                        "to MLA (vllm/config/vllm.py validate_nvfp4_kv_cache_with_mla; use fp8, "
                        "auto, or nvfp4_ds_mla on a sparse-MLA model)"}
#: Model types vLLM has never served (not in any registry read).
#: Ring-linear-2.0's checkpoints (model_type bailing_moe_linear) declare
#: BailingMoeLinearV2ForCausalLM, in no registry read (0.10.2 to 0.34.0). vLLM's
#: bailing_moe_linear.py (from 0.17.0) is a different model: BailingMoeV2_5ForCausalLM (Ling-2.5,
#: model_type bailing_hybrid; MLA where Ring-linear has GQA softmax layers).
UNSERVED = {"bailing_moe_linear": "Ring-linear-2.0's BailingMoeLinearV2ForCausalLM is not in "
                                  "vLLM's registry (its bailing_moe_linear.py serves Ling-2.5's "
                                  "BailingMoeV2_5ForCausalLM, model_type bailing_hybrid); "
                                  "SGLang serves it"}


def vllm_layout(version: str | None = None) -> EngineLayout:
    version = parse_version(version, DEFAULT_VERSION, "vllm", allow_main=True, newest=NEWEST_READ)
    old = version_tuple(version) <= (0, 11, 99)
    formats = {"bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}
    if not old:
        formats |= {"nvfp4", "int8_per_token", "fp8_ds_mla"}  # main's nvfp4, int8_per_token_head;
        # fp8_ds_mla: DeepSeek-V3.2 / GLM-5 on FlashMLA sparse (vllm/v1/attention/backends/mla/
        # flashmla_sparse.py)
    if version_tuple(version) >= version_tuple(NVFP4_DS_MLA_FIRST):
        formats.add("nvfp4_ds_mla")  # its 352 B sparse-MLA row (vllm_mla.nvfp4_ds_mla_backend)
    return EngineLayout(
        name="vllm",
        version=version,
        default_version=DEFAULT_VERSION,
        paged=True,
        default_block_size_tokens=release_default_block(version),
        sliding_policy="window",
        # 0.10 / 0.11 turn the hybrid KV-cache manager off for models with
        # attention_chunk_size (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to
        # False), so chunked layers become full-length FullAttentionSpec layers.
        chunked_policy="all" if old else "chunk",
        mla_latent_model_types=None,
        conv_state_columns_dropped=1,
        fp32_runs_as="bf16",
        kv_formats=frozenset(formats),
        separate_kv_formats=False,
        ssm_dtype_by_model_type={"nemotron_h": "fp16" if old else "fp32"},
        config_ssm_dtype_keys={"nemotron_h": "mamba_ssm_cache_dtype",
                               "qwen3_5_text": "mamba_ssm_dtype", "qwen3_5_moe_text": "mamba_ssm_dtype"},
        ssm_dtype_by_kind={"kda": "fp32"},
        removed_model_types=REMOVED,
        first_release=FIRST_RELEASE,
        unify_page_sizes=True,
        sparse_mla_fp8_format="fp8_ds_mla",
        model_dtype_kv_only={"mimo_v2_flash": "its model file passes no cache config to the "
                             "attention layers, so --kv-cache-dtype does not reach them (as read "
                             "in mimo_v2_flash.py; not measured)"},
        applies_checkpoint_kv_scheme=True,
        unserved_model_types=UNSERVED,
        mla_refused_kv_formats=MLA_REFUSED if version_tuple(version) >= (0, 21) else {},
    )
