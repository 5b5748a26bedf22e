"""SGLang cache layout (token-to-KV pools of ``python/sglang/srt/mem_cache/memory_pool.py``),
modelled on SGLang main as read in late 2025. The memory budget is versioned in
``kvplan.engines.sglang_memory``: ``sglang`` keeps the late-2025 reading, ``sglang@0.5.23``
0.5.23's (``rules_release``).

Rules, with where SGLang implements them:
- Attention KV per layer: ``k_buffer`` ``[size + page_size, head_num, head_dim]`` and
  ``v_buffer`` ``[size + page_size, head_num, v_head_dim]`` (``MHATokenToKVPool``), with
  ``head_num = max(1, total_kv_heads // tp)`` (``ModelConfig.get_num_kv_heads``). The default
  page size is 1 token (``--page-size``), so a request holds exactly its tokens.
- MLA: one latent buffer ``[size + page_size, 1, kv_lora_rank + qk_rope_head_dim]`` per layer
  (``MLATokenToKVPool``); V is a slice of it; every TP rank holds all of it.
- Sliding windows: hybrid-SWA models get a separate SWA pool (``SWAKVPool``, on unless
  ``--disable-hybrid-swa-memory``); the scheduler frees a request's SWA tokens older than
  ``seq_len - sliding_window - page_size`` (``ScheduleBatch._evict_swa``), so a request holds
  at most ``window + page`` tokens in a sliding layer. (Eviction runs periodically; between
  runs a request can briefly hold more.)
- Chunked local attention (Llama-4): the hybrid pool for chunked layers needed
  ``--hybrid-kvcache-ratio`` (default off), so by default every layer keeps the full context.
- Mamba / gated DeltaNet states (``python/sglang/srt/configs/mamba_utils.py``
  ``Mamba2StateShape.create``): conv ``(conv_dim / tp, conv_kernel - 1)`` in bf16
  (``SGLANG_MAMBA_CONV_DTYPE`` default), temporal ``(heads / tp, head_dim, state_size)`` in
  fp32 unless the config's ``mamba_ssm_dtype`` (or ``SGLANG_MAMBA_SSM_DTYPE``) says otherwise
  (``mamba2_state_dtype``).
- ``--kv-cache-dtype`` (one value for K and V): auto, bf16, fp8_e4m3, fp8_e5m2, and a 4-bit
  pool (``MHATokenToKVPoolFP4``: 4-bit values plus one 8-bit scale per 16, which is ``nvfp4``
  here), spelled ``fp4_e2m1`` in older releases and ``nvfp4`` in 0.5.23 (whose choices are
  auto, bf16, bfloat16, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16). ``auto`` is the
  model dtype; fp32 checkpoints run in fp16, Gemma ones in bf16
  (``ModelConfig._get_and_verify_dtype``, from vLLM 0.6's rule; not re-verified on main).
- Sliding layers' page rounding: the eviction point is rounded down to a page, so with pages
  of P tokens a request can hold up to ``W + 2P - 1`` tokens.
- DSA models (DeepSeek-V3.2, GLM-5.x), from 0.5.23: ``kvplan.engines.sglang_dsa`` (64-token
  pages, the latent format by GPU, indexers only where a layer computes its own top-k).
- Not modelled: the ``page_size`` padding slots (one page per layer, shared by all requests),
  radix-cache sharing, Mamba extra buffers for prefix caching and speculative decoding.
"""

from __future__ import annotations

from .base import EngineLayout, parse_version, version_tuple
from .sglang_dsa import FIRST_READ

DEFAULT_VERSION = "main"
#: the newest release whose source kvplan has read (sdists on PyPI, 2026-12)
NEWEST_READ = "0.5.23"


def sglang_layout(version: str | None = None) -> EngineLayout:
    version = parse_version(version, DEFAULT_VERSION, "sglang", allow_main=True,
                            newest=NEWEST_READ)
    dsa_read = version_tuple(version) >= FIRST_READ  # DSA models (kvplan.engines.sglang_dsa)
    return EngineLayout(
        name="sglang",
        version=version,
        default_version=DEFAULT_VERSION,
        paged=True,
        default_block_size_tokens=1,
        sliding_policy="window_page",
        chunked_policy="all",
        mla_latent_model_types=None,
        conv_state_columns_dropped=1,
        fp32_runs_as="fp16",
        fp32_runs_as_by_prefix=(("gemma", "bf16"),),
        kv_formats=frozenset({"bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "nvfp4", "fp8_ds_mla"}),
        sparse_mla_fp8_format="fp8_ds_mla",  # the DSA pool's scaled fp8 row (sglang_dsa.py)
        # 0.5.23 elides the indexer of layers that reuse a top-k; older releases: not read
        indexer_on_every_layer=not dsa_read,
        separate_kv_formats=False,
        conv_state_dtype="bf16",
        ssm_state_dtype="fp32",
        config_ssm_dtype_keys={"*": "mamba_ssm_dtype"},
        unserved_model_types={
            **{t: "kvplan has not established that SGLang serves MiniMax-Text-01 or MiniMax-M1"
               for t in ("minimax", "minimax_text_01", "minimax_m1")},
            "nemotron-nas": "kvplan has not established whether SGLang's pool spans the "
                            "attention-free DeciLM layers (its code sizes it for every layer)",
            "bailing_hybrid": "kvplan has not read SGLang's Ling-3.0 (bailing_moe_v3.py) KDA "
                              "state layout or the release that first serves it",
            **({} if dsa_read else {
                t: "kvplan has read SGLang's DSA pool from 0.5.23 only (plan with --engine "
                   "sglang@0.5.23 or newer)" for t in ("deepseek_v32", "glm_moe_dsa")})},
        kv_sharing=False,
    )
