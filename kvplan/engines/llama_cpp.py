"""llama.cpp cache layout (``src/llama-kv-cache.cpp``, ``llama-kv-cache-iswa.cpp``,
``llama-memory-recurrent.cpp``), modelled on llama.cpp master as read in late 2025.

Rules, with where llama.cpp implements them:
- Per layer, K ``[n_embd_k_gqa, kv_size]`` of ``type_k`` and V ``[n_embd_v_gqa, kv_size]`` of
  ``type_v`` (``-ctk`` / ``-ctv``, default f16, independent of each other), every cell
  allocated and zeroed up front; ``kv_size`` is the context padded to 256 cells
  (``llama-context.cpp``: ``n_ctx = GGML_PAD(n_ctx, 256)``). Row bytes follow ggml's block
  sizes (q8_0 34 B per 32 values, ...), so block formats need rows divisible by 32. A quantised
  V cache needs flash attention (``-fa``).
- Sliding-window layers (iSWA) get their own cache of
  ``GGML_PAD(min(kv_size, n_swa + n_ubatch), 256)`` cells (``n_ubatch`` default 512) unless
  ``--swa-full``; Llama-4's chunked layers use the same cache with ``n_swa`` = the chunk.
- MLA (DeepSeek-V2/V3 GGUFs converted with MLA): one KV head, K ``kv_lora_rank +
  qk_rope_head_dim`` wide and a separate V ``kv_lora_rank`` wide (``convert_hf_to_gguf.py``:
  ``key_length = kv_lora_rank + qk_rope_head_dim``, ``value_length = kv_lora_rank``).
- Recurrent state per sequence: ``r`` ``(d_conv - 1) * conv channels`` and ``s``
  ``d_state * d_inner`` (``n_embd_r`` / ``n_embd_s``), always f32.
- Multi-GPU is a layer split (``-sm layer``), which is ``--pp`` here; there is no tensor
  parallelism of the cache.
"""

from __future__ import annotations

from .base import EngineLayout, parse_version

DEFAULT_VERSION = "master"


def llama_cpp_layout(version: str | None = None) -> EngineLayout:
    version = DEFAULT_VERSION if version in (None, "master") else parse_version(
        version, DEFAULT_VERSION, "llama.cpp", allow_main=False)
    return EngineLayout(
        name="llama.cpp",
        version=version,
        default_version=DEFAULT_VERSION,
        paged=True,
        default_block_size_tokens=256,
        sliding_policy="fixed",
        chunked_policy="fixed",
        swa_extra_tokens=512,
        mla_latent_model_types=None,
        mla_separate_v=True,
        conv_state_columns_dropped=1,
        auto_kv_dtype_fixed="fp16",
        conv_state_dtype="fp32",
        ssm_state_dtype="fp32",
        config_ssm_dtype_model_types=frozenset(),
        max_tp=1,
    )
