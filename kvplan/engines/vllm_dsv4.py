"""vLLM's DeepSeek-V4 cache (vLLM 0.27 - 0.33, the default FlashMLA sparse path; read from the
released wheels' ``vllm/models/deepseek_v4/`` and ``vllm/v1/core/kv_cache_planning.py``).

Caches of one layer, each in pages padded to a multiple of 576 B (FlashMLA alignment):
- window: the last 128 raw tokens, 64-token blocks of 584-B fp8_ds_mla rows (37,440 B pages);
- r = 4 and r = 128 layers: compressed entries in 256-token blocks (64 or 2 entries:
  37,440 or 1,728 B pages); r = 4 adds the indexer key, 64 x 132 B -> 8,640 B pages;
- compressor states, fp32 rows of 2 x overlap x head_dim per raw token over a window of
  overlap x r tokens, in blocks of 4 (r = 4) or 8 (r = 128) tokens: 32,832 B pages; the r = 4
  indexer's own state (2 x 2 x 128 fp32) in 8,640 B pages.
Nothing is split by tensor parallelism: every rank holds it all.

The groups (compressed caches in one; the windows in ``cdiv(window layers, T)``, with T the
per-group layer count vLLM's ``_approximate_gcd`` picks, modelled as the count >= the most
layers of one compressed kind that pads least; the r = 4 states; the r = 128 states) share one
pool of block ids, and a block costs the widest group's pages, the compressed group's:
n4 x (37,440 + 8,640) + n128 x 1,728 B (DeepSeek-V4-Flash: 1,002,240 B). A sequence of n
tokens holds ceil(n / 256) compressed blocks plus, per sliding group, the blocks spanning its
window: ceil(n / b) - floor(max(0, n - W) / b) at length n, and kvplan counts the most any
length up to n needed (DeepSeek-V4-Flash at 4k: 16 + 2 x 3 + 3 + 17 = 42 blocks; 38 at
exactly 4,096 tokens, where every window ends on a block boundary).
"""

from __future__ import annotations

from ..core.errors import InputError
from ..core.layers import CompressedAttention
from ..core.units import cdiv

ALIGN = 576
FULL_BLOCK = 256
SWA_BLOCK = 64


def entry_bytes(spec: CompressedAttention) -> int:
    """fp8_ds_mla (DeepSeek-V4): NoPE dims in fp8, RoPE dims in bf16, one UE8M0 scale per 64
    NoPE values and one pad byte: 448 + 128 + 7 + 1 = 584 B for head_dim 512, rope 64."""
    nope = spec.head_dim - spec.rope_dim
    return nope + 2 * spec.rope_dim + nope // 64 + 1


def _pad(n: int) -> int:
    return cdiv(n, ALIGN) * ALIGN


def pages(spec: CompressedAttention) -> dict[str, int]:
    """Padded page bytes of each cache of one layer."""
    out = {"window": _pad(SWA_BLOCK * entry_bytes(spec))}
    r = spec.compress_ratio
    if r > 1:
        out["compressed"] = _pad(FULL_BLOCK // r * entry_bytes(spec))
        out["state"] = _pad(state_block(r) * 2 * spec.overlap * spec.head_dim * 4)
    if spec.index_head_dim:
        out["indexer"] = _pad(FULL_BLOCK // r * (spec.index_head_dim + spec.index_head_dim // 128 * 4))
        out["indexer_state"] = _pad(state_block(r) * 2 * spec.overlap * spec.index_head_dim * 4)
    return out


def state_block(ratio: int) -> int:
    return 4 if ratio == 4 else 8


def _held(n: int, block: int, window: int) -> int:
    """Blocks a sliding group holds when the sequence has n tokens (the window's blocks)."""
    return cdiv(n, block) - max(0, n - window) // block


def _peak(n: int, block: int, window: int) -> int:
    """The most blocks the group held at any length up to n (kvplan's worst case up to n):
    past the window the count repeats with the block period, so lengths up to window + block
    cover every case."""
    return max(_held(m, block, window) for m in range(1, min(n, window + block) + 1))


def check(layers: list[CompressedAttention]) -> None:
    for s in layers:
        if (s.head_dim, s.rope_dim) != (512, 64) or s.compress_ratio not in (1, 4, 128) \
                or (s.index_head_dim not in (0, 128)) or (s.compress_ratio == 4) != bool(s.index_head_dim):
            raise InputError("kvplan models vLLM's DeepSeek-V4 cache for head_dim 512, RoPE 64, "
                             "compress ratios 0 / 4 / 128 with the indexer on ratio-4 layers only",
                             field="MODEL")


def per_group_layers(layers: list[CompressedAttention]) -> int:
    """T: the layers of one page size a group holds (vLLM ``_approximate_gcd``): the count, at
    least the most layers of one compressed kind, that pads the kinds' counts least."""
    n4 = sum(s.compress_ratio == 4 for s in layers)
    n128 = sum(s.compress_ratio == 128 for s in layers)
    counts = [c for c in (n4, len(layers), n4, n128) if c]
    low = max(n4, n128, 1)
    return min(range(low, low + max(counts) + 1),
               key=lambda t: (sum(cdiv(c, t) * t - c for c in counts), t))


def block_bytes(layers: list[CompressedAttention]) -> int:
    """Bytes of one block id: the compressed group's pages (the widest group)."""
    return sum(p for s in layers for k, p in pages(s).items() if k in ("compressed", "indexer"))


def blocks(n: int, layers: list[CompressedAttention]) -> int:
    """Block ids one n-token sequence holds across the groups."""
    window = layers[0].window_tokens
    swa_groups = cdiv(len(layers), per_group_layers(layers))
    total = swa_groups * _peak(n, SWA_BLOCK, window)
    if any(s.compress_ratio > 1 for s in layers):
        total += cdiv(n, FULL_BLOCK)
    if any(s.compress_ratio == 4 for s in layers):
        total += _peak(n, state_block(4), 2 * 4)
    if any(s.compress_ratio == 128 for s in layers):
        total += _peak(n, state_block(128), 128)
    return total


def sequence_bytes(n: int, layers: list[CompressedAttention]) -> int:
    return blocks(n, layers) * block_bytes(layers)


def payload_bytes(n: int, spec: CompressedAttention) -> int:
    """The bytes one layer's caches really hold for n tokens (no page or block rounding)."""
    e, r = entry_bytes(spec), spec.compress_ratio
    total = min(n, spec.window_tokens) * e
    if r > 1:
        total += n // r * e + min(n, spec.overlap * r) * 2 * spec.overlap * spec.head_dim * 4
    if spec.index_head_dim:
        d = spec.index_head_dim
        total += n // r * (d + d // 128 * 4) + min(n, spec.overlap * r) * 2 * spec.overlap * d * 4
    return total
