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
