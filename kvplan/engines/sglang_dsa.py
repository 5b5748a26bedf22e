"""SGLang's DSA cache (DeepSeek-V3.2, GLM-5.x: sparse MLA with a lightning indexer), as
SGLang 0.5.23 sizes it on CUDA GPUs by default (no ``--enable-hisparse``, no context
parallelism, ``index_kpool`` 1).

- Pages of 64 tokens, whatever ``--page-size`` says (``model_overrides/deepseek_v2.py``:
  ``page_size = 64 x index_kpool``; overrides are applied last).
- ``--kv-cache-dtype auto`` is fp8_e4m3 on SM >= 10 (Blackwell) and bfloat16 before it, or
  with ``learnable_sink``; only bfloat16 and fp8_e4m3 are accepted
  (``overrides._dsa_kv_cache_dtype_default``).
- The latent row of a layer (``kv_cache_configurator.calculate_mla_kv_cache_dim``): in bf16
  ``kv_lora_rank + qk_rope_head_dim`` values of 2 B (576 x 2 = 1,152 B); in fp8 the row depends
  on the attention backend (``overrides._dsa_split_backend_resolution``): TRT-LLM's kernels
  (the fp8 default on SM >= 10) read the raw row, 576 fp8 bytes; FlashMLA (the fp8 default on
  Hopper, and FlashInfer sparse MLA for GLM on SM 12) reads ``kv_lora_rank`` fp8 values, one
  fp32 scale per 128 and the rope part in bf16: 512 + 16 + 128 = 656 B, kvplan's
  ``fp8_ds_mla``.
- The indexer key: 128 fp8 values + one fp32 scale = 132 B per token on each layer that
  computes its own top-k; layers that reuse the previous layer's top-k (``index_topk_freq``,
  ``index_skip_topk_offset``, ``index_topk_pattern``, ``indexer_types``:
  ``model_config.dsa_layer_skips_topk``, the same rule as vLLM's) get an empty buffer
  (``_should_elide_dsa_index_k``).
- Every attention-TP rank holds the whole latent and indexer (no split by heads).

DeepSeek-V3.2 (61 layers, every one with an indexer) per token: on an H200 in bf16
61 x (1,152 + 132) = 78,324 B; fp8 on an H200 61 x (656 + 132) = 48,068 B; fp8 (auto) on a
B200 61 x (576 + 132) = 43,188 B.
"""

from __future__ import annotations

from ..core.errors import InputError
from ..core.gpu import sm_major
from .base import EngineLayout, version_tuple

PAGE_TOKENS = 64
FIRST_READ = (0, 5, 23)  # the first SGLang release whose DSA pool kvplan has read


def served(layout: EngineLayout) -> bool:
    """Whether kvplan models this SGLang release's DSA pool."""
    return layout.name == "sglang" and version_tuple(layout.version) >= FIRST_READ


def applies(layout: EngineLayout, model) -> bool:
    """Whether this plan is a DSA model under an SGLang release whose DSA pool kvplan models."""
    return served(layout) and model.sparse_mla


def _gpu_major(capability: str | None) -> int | None:
    """The GPU's SM major, or None without a GPU; a GPU SGLang's default DSA path cannot run
    on (AMD: other page sizes, raw rows and Triton kernels; SM < 9: FlashAttention-3 and
    FlashMLA are Hopper kernels) is refused."""
    if capability is None:
        return None
    major = sm_major(capability)
    if major is None:
        raise InputError(f"kvplan models SGLang's DSA pool on NVIDIA GPUs only; on {capability} "
                         "SGLang pages it differently (page 1 without aiter's preshuffle "
                         "kernel) with raw fp8 rows and Triton kernels", field="--gpu")
    if major < 9:
        raise InputError(f"SGLang's default DSA kernels (FlashAttention-3 decode, FlashMLA) need "
                         f"SM 9.0 or newer; this GPU is SM {capability}", field="--gpu")
    return major


def flashmla(major: int, model_type: str) -> bool:
    """Whether an fp8 DSA latent is read by FlashMLA-style kernels with the scaled 656-B row
    (Hopper; FlashInfer sparse MLA for GLM on SM 12) rather than TRT-LLM's raw 576 B."""
    return major < 10 or (major == 12 and model_type == "glm_moe_dsa")


def latent_format(spec: str, capability: str | None, *, model_type: str,
                  learnable_sink: bool) -> str:
    """The KV format SGLang stores a DSA latent in for ``--kv-dtype spec`` (auto, bf16, fp8,
    fp8_e4m3, fp8_ds_mla) on a GPU of compute ``capability`` (None: not known, as in
    ``kvplan size``)."""
    s = spec.strip().lower()
    major = _gpu_major(capability)
    if s not in ("auto", "bf16", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla"):
        raise InputError(f"SGLang's DSA pool stores the latent as bfloat16 or fp8_e4m3, not "
                         f"{spec!r}", field="--kv-dtype")
    if learnable_sink and s not in ("auto", "bf16", "bfloat16"):
        raise InputError("learnable DSA attention sinks need a bfloat16 KV cache in SGLang "
                         "(overrides._dsa_kv_cache_dtype_default)", field="--kv-dtype")
    if s in ("bf16", "bfloat16") or learnable_sink:
        return "bf16"
    if major is None:
        if s == "fp8_ds_mla":
            return "fp8_ds_mla"
        raise InputError(
            f"SGLang's DSA cache under --kv-dtype {spec} depends on the GPU (auto is fp8 on "
            "Blackwell, bf16 before; an fp8 latent row is 576 B under TRT-LLM's kernels on "
            "Blackwell, 656 B under FlashMLA on Hopper): plan it with kvplan fit --gpu, or pass "
            "--kv-dtype bf16 or fp8_ds_mla", field="--kv-dtype")
    if s == "auto" and major < 10:
        return "bf16"
    if s == "fp8_ds_mla" and not flashmla(major, model_type):
        raise InputError(f"on SM {capability} SGLang reads an fp8 DSA latent with TRT-LLM's "
                         "kernels, as the raw 576-byte row: pass --kv-dtype fp8",
                         field="--kv-dtype")
    return "fp8_ds_mla" if flashmla(major, model_type) else "fp8_e4m3"
