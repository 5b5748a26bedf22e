"""Which attention backend vLLM runs dense MLA (DeepSeek-V2/V3, Kimi-K2) with on a GPU, and the
KV block size that follows when ``--block-size`` is not given. Read from vLLM's source (main of
2026-08, and the history of ``vllm/platforms/cuda.py``):

vLLM >= 0.18 (PR #35122, merged 2026-03-09; 0.18.0 is the first release after it): the backend
is chosen first, by priority per compute capability (``cuda.py`` ``_get_backend_priorities``;
``rocm.py``), then ``Platform.update_block_size_for_backend`` takes 16 when the backend's kernel
accepts it, else its smallest supported size (``get_supported_kernel_block_sizes``); a given
``--block-size`` is never overridden (backends that cannot use it are skipped).

- Hopper (9.x): FLASH_ATTN_MLA (FA3; multiples of 16; bf16/fp16 KV only) -> 16; an fp8 KV cache
  goes to FLASHMLA -> 64.
- Blackwell datacenter (10.x): FLASHINFER_MLA (32 or 64; qk_nope_head_dim 64, 128 or 192) -> 32;
  otherwise CUTLASS_MLA -> 128.
- Ampere (8.0), Ada (8.9), GeForce Blackwell (12.x), AMD (gfx90a, gfx942, gfx950 with
  VLLM_ROCM_USE_AITER off, its default): TRITON_MLA (multiples of 16) -> 16. Triton MLA has no
  fp8 KV cache below SM 8.9.

vLLM >= 0.34 starts from 64 instead of 16 (``CacheConfig.DEFAULT_BLOCK_SIZE``): every backend
above that accepts 64 takes it (CUTLASS MLA stays at 128).

vLLM <= 0.17 forced the block in ``cuda.py`` ``check_and_update_config`` (a given size too):
Hopper 64 (FlashMLA); Blackwell 128 (CUTLASS MLA), or 64 with FlashInfer MLA from 0.15
(PR #32615, 2026-01-19) when qk_nope_head_dim is 128; every other GPU 16 (Triton MLA).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.gpu import sm_major
from ..core.model import Model
from .base import version_tuple


@dataclass(frozen=True)
class MlaBackend:
    backend: str
    block_tokens: int
    forced: bool  # the engine replaces a given --block-size
    rule: str  # which GPUs the rule covers and where it is read
    kernel_tokens: int = 0  # the backend's smallest kernel block (0: block_tokens)

    def __post_init__(self) -> None:
        if not self.kernel_tokens:
            object.__setattr__(self, "kernel_tokens", self.block_tokens)


def mla_backend(capability: str, kv_fp8: bool, version: str, qk_nope_head_dim: int | None
                ) -> MlaBackend:
    """The backend and default block for dense MLA on a GPU of ``capability``."""
    major = sm_major(capability)
    new = version == "main" or version_tuple(version) >= (0, 18, 0)
    if not new:
        if major == 9:
            return MlaBackend("FLASH_ATTN_MLA", 64, True, "vLLM <= 0.17 forces 64-token blocks "
                              "on Hopper (SM 9.x, for FlashMLA; cuda.py check_and_update_config)")
        if major == 10:
            if version_tuple(version) >= (0, 15, 0) and qk_nope_head_dim == 128:
                return MlaBackend("FLASHINFER_MLA", 64, True, "vLLM 0.15-0.17 forces 64-token "
                                  "blocks on Blackwell SM 10.x (FlashInfer MLA, PR #32615)")
            return MlaBackend("CUTLASS_MLA", 128, True, "vLLM <= 0.17 forces 128-token blocks "
                              "on Blackwell SM 10.x (CUTLASS MLA; cuda.py)")
        return MlaBackend("TRITON_MLA", 16, False, "Triton MLA, 16-token blocks, on SM 8.x, "
                          "12.x and AMD (vLLM <= 0.17)")
    b = release_default_block(version)
    if major == 9:
        if kv_fp8:
            return MlaBackend("FLASHMLA", max(64, b), False, "Hopper (SM 9.x) with an fp8 KV "
                              "cache: FlashMLA, 64-token kernel blocks (vLLM >= 0.18, PR #35122)",
                              64)
        return MlaBackend("FLASH_ATTN_MLA", b, False, "Hopper (SM 9.x): FlashAttention-3 MLA, "
                          f"multiples of 16 tokens, {b}-token blocks (vLLM >= 0.18, PR #35122){_from_034(b)}",
                          16)
    if major == 10:
        if qk_nope_head_dim in (64, 128, 192):
            return MlaBackend("FLASHINFER_MLA", max(32, b), False, "Blackwell SM 10.x: FlashInfer "
                              f"MLA (32 or 64), {max(32, b)}-token blocks (vLLM >= 0.18, PR "
                              f"#35122){_from_034(b)}", 32)
        return MlaBackend("CUTLASS_MLA", 128, False, "Blackwell SM 10.x: CUTLASS MLA, 128-token "
                          "blocks (vLLM >= 0.18)")
    return MlaBackend("TRITON_MLA", b, False, f"Triton MLA, {b}-token blocks, on SM 8.x, 12.x "
                      f"and AMD (vLLM >= 0.18; ROCm AITER MLA is off by default){_from_034(b)}", 16)


def release_default_block(version: str) -> int:
    """The block vLLM starts from (``CacheConfig.DEFAULT_BLOCK_SIZE``): 16, and 64 from 0.34.0
    (``vllm/config/cache.py``; 0.33.0 has 16). ``main`` is vLLM main as kvplan read it (2026-08),
    16."""
    return 64 if version != "main" and version_tuple(version) >= (0, 34, 0) else 16


def _from_034(block: int) -> str:
    return "; vLLM >= 0.34 starts from 64-token blocks" if block == 64 else ""


# ---- nvfp4_ds_mla: the 4-bit sparse-MLA latent ---------------------------------------------

#: The first vLLM release with ``--kv-cache-dtype nvfp4_ds_mla``: in the ``CacheDType`` literal
#: of 0.30.0's ``vllm/config/cache.py`` (PyPI sdist, 2026-09-22), absent from 0.29.0's.
NVFP4_DS_MLA_FIRST = "0.30.0"
#: One token's row in one layer (``MLAAttention.get_kv_cache_spec``: state_content_bytes 352).
NVFP4_DS_MLA_ROW_BYTES = 256 + 64 + 32
#: The page of one 64-token block of one layer: 64 x 352 B, no padding (``MLAAttentionSpec``
#: alignment None outside DeepSeek-V4).
NVFP4_DS_MLA_PAGE_BYTES = 64 * NVFP4_DS_MLA_ROW_BYTES


def nvfp4_ds_mla_backend(capability: str | None, version: str) -> MlaBackend:
    """The backend and block vLLM stores ``nvfp4_ds_mla`` with, read in vLLM 0.34.0 (and 0.30.0).

    One latent row per token per layer, 352 B for kv_lora_rank 512 + qk_rope_head_dim 64
    (``vllm/v1/attention/backends/mla/flashmla_sparse.py:118``)::

        bytes = 512 * 4 / 8       (NoPE latent, e2m1, two per byte)       = 256
              + 64 * 1            (RoPE, e4m3, no scale)                  =  64
              + 512 / 16 * 1      (one e4m3 scale per 16 NoPE values)     =  32   -> 352

    against fp8_ds_mla's 512 + 4 x 4 + 64 x 2 = 656 B. DeepSeek-V3.2 (61 layers, each with an
    indexer key of 128 fp8 + 4 B = 132 B, which this format does not change:
    ``DeepseekV32IndexerCache`` is uint8 ``index_head_dim + index_head_dim // 128 * 4`` whatever
    the KV dtype, ``vllm/model_executor/models/deepseek_v2.py:731``): 61 x (352 + 132) = 29,524
    B per token, the same on every GPU at TP 1 and TP 8 (latent and key are replicated), vs
    48,068 B with fp8_ds_mla; an 8k sequence is 128 blocks of 64 tokens, 241,860,608 B per GPU.

    Rules (0.34.0 file:line):
    - Only ``FLASHMLA_SPARSE`` lists it (``flashmla_sparse.py:161``); no dense MLA backend
      (FlashMLA, FlashInfer MLA, CUTLASS MLA, FA3 MLA, Triton MLA, TokenSpeed MLA) does, and
      ``AttentionBackend.validate_configuration`` refuses a sparse backend for a dense model
      (``vllm/v1/attention/backend.py:324``): sparse MLA only (DeepSeek-V3.2, GLM-5).
    - Blackwell datacenter SM 10.x only: ``supports_combination`` refuses it when
      ``device_capability.major != 10`` (``flashmla_sparse.py:257``); SM 12.x runs
      ``FLASHINFER_MLA_SPARSE_SM120``, which takes fp8_ds_mla only; ROCm has no such backend.
    - 64-token kernel blocks: ``get_supported_kernel_block_sizes`` is [64] for a quantized
      cache on SM 10.x (``flashmla_sparse.py:171``; 0.30.0: [64] always).
    - The DS-V3.2 geometry: head size 576 (``flashmla_sparse.py:241-259``: head 512 only
      without it), ``assert kv_dim == 512`` (``vllm/models/deepseek_v32/common/kernels.py:627``).
    - Refused under decode context parallelism (``vllm/config/vllm.py:3556``; 0.30.0 has no
      such check) and for sliding-window MLA (``mla_attention.py:517``).
    """
    from ..core.errors import InputError

    if version != "main" and version_tuple(version) < version_tuple(NVFP4_DS_MLA_FIRST):
        raise InputError(f"vllm@{version} has no nvfp4_ds_mla KV cache (first in vLLM "
                         f"{NVFP4_DS_MLA_FIRST}, vllm/config/cache.py CacheDType)",
                         field="--kv-dtype")
    major = sm_major(capability)
    if capability is not None and major != 10:
        where = f"SM {capability}" if major is not None else (capability or "no compute "
                                                                         "capability")
        raise InputError(f"vLLM runs nvfp4_ds_mla on Blackwell SM 10.x only (FLASHMLA_SPARSE "
                         f"supports_combination: device_capability.major != 10 is refused); "
                         f"this GPU is {where}: use fp8 (fp8_ds_mla) or bf16", field="--kv-dtype")
    return MlaBackend("FLASHMLA_SPARSE", 64, True, "vLLM stores nvfp4_ds_mla with FlashMLA "
                      "sparse on SM 10.x, 64-token kernel blocks (flashmla_sparse.py "
                      "get_supported_kernel_block_sizes)")


def check_nvfp4_ds_mla(model: Model, engine: str, version: str,
                       capability: str | None) -> MlaBackend:
    """Refuse ``nvfp4_ds_mla`` where vLLM does not store it (see ``nvfp4_ds_mla_backend``):
    other engines, releases before 0.30.0, models without sparse MLA, a latent other than
    512 + 64, a GPU that is not SM 10.x (``capability`` None: no GPU planned, not checked)."""
    from ..core.errors import InputError

    if engine != "vllm":
        raise InputError(f"nvfp4_ds_mla is vLLM's FlashMLA-sparse KV layout: not served by this "
                         f"engine ({engine})", field="--kv-dtype")
    mla = [s for s in model.cache_layers if s.kind == "mla"]
    if not mla:
        raise InputError(f"nvfp4_ds_mla stores a sparse-MLA latent; {model.name} has no MLA "
                         "layers", field="--kv-dtype")
    if not model.sparse_mla:
        raise InputError(f"vLLM stores nvfp4_ds_mla on its sparse-MLA backend only "
                         f"(FLASHMLA_SPARSE: DeepSeek-V3.2, GLM-5); the dense MLA backends of "
                         f"{model.name} take auto, bf16 or fp8 (supported_kv_cache_dtypes)",
                         field="--kv-dtype")
    for s in mla:
        rank, rope = getattr(s, "kv_lora_rank", None), getattr(s, "qk_rope_head_dim", None)
        if (rank, rope) != (512, 64):
            raise InputError(f"vLLM's nvfp4_ds_mla row is for kv_lora_rank 512 + "
                             f"qk_rope_head_dim 64 (FlashMLA sparse); {model.name} has "
                             f"{rank} + {rope}", field="--kv-dtype")
    return nvfp4_ds_mla_backend(capability, version)
