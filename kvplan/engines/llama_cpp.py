"""llama.cpp cache layout (``src/llama-kv-cache.cpp``, ``llama-kv-cache-iswa.cpp``,
``llama-memory-recurrent.cpp``), modelled on llama.cpp master as read in late 2025.

Rules, with where llama.cpp implements them:
- Per layer, K ``[n_embd_k_gqa, kv_size]`` of ``type_k`` and V ``[n_embd_v_gqa, kv_size]`` of
  ``type_v`` (``-ctk`` / ``-ctv``, default f16, independent of each other), every cell
  allocated and zeroed up front; ``kv_size`` is the context padded to 256 cells
  (``llama-context.cpp``: ``n_ctx = GGML_PAD(n_ctx, 256)``). Row bytes follow ggml's block
  sizes (q8_0 34 B per 32 values, ...), so block formats need rows divisible by 32. A quantised
  V cache needs flash attention (``-fa``).
- Sliding-window layers (iSWA, for the architectures in ``SWA_MODEL_TYPES``: gemma2/3,
  cohere2, gpt-oss, llama4; others run windowed layers as full attention) get their own cache of
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

import re

from ..core.errors import InputError
from .base import EngineLayout

DEFAULT_VERSION = "master"
QUANTISED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
#: Architectures whose sliding windows llama.cpp implements (an iSWA cache); others, such as
#: Mistral-7B-v0.1 under the llama architecture, run every layer as full attention.
SWA_MODEL_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text", "cohere2", "gpt_oss", "llama4",
                             "llama4_text", "gemma3n_text", "gemma4_text", "mimo_v2_flash"})


def llama_cpp_layout(version: str | None = None) -> EngineLayout:
    if version is not None and version != DEFAULT_VERSION and not re.fullmatch(r"b\d+", version):
        raise InputError(f"bad llama.cpp version {version!r}: expected 'master' or a build tag "
                         "such as b6500", field="--engine")
    return EngineLayout(
        name="llama.cpp",
        version=version or DEFAULT_VERSION,
        default_version=DEFAULT_VERSION,
        paged=True,
        default_block_size_tokens=256,
        fixed_block_size=True,
        sliding_policy="fixed",
        chunked_policy="fixed",
        swa_extra_tokens=512,
        windowed_model_types=SWA_MODEL_TYPES,
        mla_latent_model_types=None,
        mla_latent_layout="k_and_v",
        # llama-kv-cache-dsa.cpp: the sparse-attention models keep the latent as K only
        # (has_v = !is_mla) and a separate indexer key cache in the K type
        mla_latent_layout_by_model_type={"deepseek_v32": "one", "glm_moe_dsa": "one"},
        indexer_storage="k_format",
        conv_state_columns_dropped=1,
        auto_kv_dtype_fixed="fp16",
        kv_formats=frozenset({"fp32", "fp16", "bf16", *QUANTISED}),
        separate_kv_formats=True,
        conv_state_dtype="fp32",
        ssm_state_dtype="fp32",
        state_dtype_fixed=True,
        max_tp=1,
        applies_checkpoint_kv_scheme=False,  # GGUF files carry no KV scheme: -ctk/-ctv decide
        v_needs_flash_attention=frozenset(QUANTISED),
        unserved_model_types={t: "kvplan has not read whether llama.cpp converts this "
                                 "architecture, or its cache layout if it does"
                              for t in ("bailing_hybrid", "step3p5")},
    )
