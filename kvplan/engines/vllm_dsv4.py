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

vLLM 0.34.0, re-read (``vllm/models/deepseek_v4/attention.py``, ``compressor.py``,
``vllm/v1/attention/backends/mla/sparse_swa.py``, ``vllm/v1/kv_cache_interface.py``,
``vllm/v1/core/kv_cache_planning.py``): the pages are the same (``_apply_alignment_padding``
rounds every DeepSeek-V4 page up to 576 B; the compressed and indexer ``MLAAttentionSpec`` hold
``256 / r`` states of 584 and 132 B; ``DeepseekV4SWACache`` keeps 64-token blocks of 584 B; the
``CompressorStateCache`` blocks of 4 and 8 tokens), and so is a block id's cost for Flash and
Pro (block-outermost BLHNC layout: the widest group's pages, the compressed one). The grouping
is ``_get_packed_kv_cache_groups`` (``packed_groups`` below): layers are bucketed by uniform type
(one bucket of the 256-token compressed and indexer caches, one of the windows, one per
compressor-state block size); a bucket is *balanced* when each of its page sizes has as many
layers; the repeats per group are ``_approximate_gcd`` over the balanced buckets' layer counts,
at least the largest balanced bucket that mixes page sizes (the ratio-4 states: the
compressor's and the indexer's); each balanced bucket is split into ``cdiv(count, repeats)``
groups. Flash: buckets 43 windows, 21 + 21 ratio-4 states, 20 ratio-128 states (balanced) and
21 + 21 + 20 compressed pages (unbalanced): repeats = the d >= 21 padding 43, 21, 20 least =
22, so 2 window groups, as ``per_group_layers`` found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class PackedGroup:
    """One KV-cache group of vLLM 0.34's packed DeepSeek-V4 pool."""

    kind: str  # "compressed" (full attention over compressed entries), "window", "state"
    block_tokens: int  # raw tokens per block of this group
    window_tokens: int | None  # sliding window (None: the compressed caches keep every entry)
    layers: int  # cache layers of the group
    page_bytes: int  # the group's pages of one block id, all its layers


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """vLLM ``_approximate_gcd``: the d in [lower_bound, max(values)] whose round-up of every
    value to a multiple of d pads least (ties: the larger d). Flash: values 43, 21, 20 from 21:
    d = 22 pads 1 + 1 + 2 = 4 (d = 21 pads 20 + 0 + 1)."""
    low, high = max(1, lower_bound), max(values)
    if low > high:
        return low
    return min(range(low, high + 1),
               key=lambda d: (sum((d - x % d) % d for x in values), -d))


def packed_groups(layers: list[CompressedAttention]) -> tuple[PackedGroup, ...]:
    """vLLM 0.34 ``_get_packed_kv_cache_groups`` for DeepSeek-V4 (see the module docstring).

    Per layer: a window cache (64-token blocks); r > 1 adds the compressed cache (256-token
    blocks) and the compressor state (SlidingWindowMLASpec over coff x r tokens in blocks of 4
    or 8); r = 4 adds the indexer key cache (256-token blocks) and its compressor state. The
    buckets (uniform type: one block size, one window) in layer order, each as its page sizes'
    layer counts."""
    buckets: dict[tuple, dict[int, int]] = {}

    def add(key: tuple, page: int) -> None:
        pages = buckets.setdefault(key, {})
        pages[page] = pages.get(page, 0) + 1

    for s in layers:
        p = pages(s)
        add(("window", SWA_BLOCK, s.window_tokens), p["window"])
        r = s.compress_ratio
        if r > 1:
            add(("compressed", FULL_BLOCK, None), p["compressed"])
            add(("state", state_block(r), s.overlap * r), p["state"])
        if s.index_head_dim:
            add(("compressed", FULL_BLOCK, None), p["indexer"])
            add(("state", state_block(r), s.overlap * r), p["indexer_state"])

    def balanced(counts: dict[int, int]) -> bool:
        return len(set(counts.values())) == 1

    mixed = [max(c.values()) for c in buckets.values() if balanced(c) and len(c) > 1]
    floor = max(mixed, default=0)
    repeats = (approximate_gcd([max(c.values()) for c in buckets.values() if balanced(c)],
                               floor) if floor else None)

    def splits(key: tuple, counts: dict[int, int]) -> int:
        return cdiv(max(counts.values()), repeats) if repeats and balanced(counts) else 1

    def is_state(key: tuple) -> bool:  # a sliding bucket with no repeat pattern to follow
        return repeats is None and key[0] != "compressed"

    def widest(counts: dict[int, int], n: int) -> int:
        return sum(cdiv(k, n) * page for page, k in counts.items())

    anchor = max((widest(c, sum(c.values()) if is_state(k) else splits(k, c))
                  for k, c in buckets.items()), default=0)
    out = []
    for key, counts in buckets.items():
        n = splits(key, counts)
        if anchor and is_state(key):  # capped at the states one block already fits
            first = next(iter(counts))
            n = max(n, cdiv(sum(counts.values()), max(anchor // first, 1)))
        total = sum(counts.values())
        for i in range(n):
            # pattern repeats i, i + n, ...: each page size's layers dealt out in turn
            share = {page: len(range(i, k, n)) for page, k in counts.items()}
            out.append(PackedGroup(key[0], key[1], key[2],
                                   total if n == 1 else sum(share.values()),
                                   sum(page * k for page, k in share.items())))
    return tuple(out)


def packed_block_bytes(groups: Sequence[PackedGroup]) -> int:
    """vLLM 0.34 ``_get_kv_cache_bytes_per_block`` (block-outermost): the widest group's pages
    (every DeepSeek-V4 spec's block-stride alignment is 1). Flash: the compressed group,
    21 x (37,440 + 8,640) + 20 x 1,728 = 1,002,240 B."""
    return max(g.page_bytes for g in groups)


def packed_blocks(n: int, groups: Sequence[PackedGroup]) -> int:
    """Block ids an n-token sequence holds: ceil(n / 256) in the compressed group plus, per
    sliding group, the most blocks its window spanned at any length up to n."""
    return sum(cdiv(n, g.block_tokens) if g.window_tokens is None
               else _peak(n, g.block_tokens, g.window_tokens) for g in groups)


def in_flight_tokens(max_num_batched_tokens: int, async_scheduling: bool = True) -> int:
    """vLLM 0.34 ``VllmConfig.max_in_flight_tokens``: ``max_concurrent_batches x
    max_num_batched_tokens``, two batches under async scheduling (on by default for ``vllm
    serve``'s multiprocessing executor, ``VllmConfig.__post_init__``) with no pipeline
    parallelism: 2 x 8,192 = 16,384."""
    return (2 if async_scheduling else 1) * max_num_batched_tokens


def reserved_blocks(n: int, groups: Sequence[PackedGroup], in_flight: int) -> int:
    """Block ids vLLM 0.34 reserves for one request of n tokens: the compressed group's
    ``cdiv(n, 256)`` and, per sliding group, ``SlidingWindowSpec.max_admission_blocks_per_
    request`` = ``cdiv(min(W - 1 + in_flight, n), b) + 1`` (``kv_cache_interface.py``). At
    n = max_model_len their sum is what ``get_max_concurrency_for_kv_cache_config``
    (``kv_cache_utils.py``) divides the pool by for the "Maximum concurrency for N tokens per
    request" line, and the scheduler asks that many free blocks before it admits a request of n
    prompt tokens (``scheduler_reserve_full_isl``, default True). Flash at 131,072 tokens,
    in-flight 16,384: 512 + 2 x (cdiv(16,511, 64) + 1 = 259) + (cdiv(16,391, 4) + 1 = 4,099)
    + (cdiv(16,511, 8) + 1 = 2,065) = 7,194 (an 8,192-token budget; B200's default 16,384
    gives 13,850)."""
    return sum(cdiv(n, g.block_tokens) if g.window_tokens is None
               else cdiv(min(g.window_tokens - 1 + in_flight, n), g.block_tokens) + 1
               for g in groups)


#: ``_VIEW_ALIGNMENT`` of vLLM's workspace manager (``vllm/v1/worker/workspace.py``)
VIEW_ALIGN = 256
#: ``RADIX_TOPK_WORKSPACE_SIZE`` (``vllm/model_executor/layers/indexer_topk.py``)
RADIX_TOPK_BYTES = 1024 * 1024
#: ``DeepseekV4Attention.PREFILL_CHUNK_SIZE``: sequences per bf16 kv-gather chunk
PREFILL_CHUNK = 4


def _aligned(*sizes: int) -> int:
    return sum(cdiv(s, VIEW_ALIGN) * VIEW_ALIGN for s in sizes)


def sparse_workspace_bytes(layers: Sequence[CompressedAttention], max_model_len: int,
                           max_num_batched_tokens: int, index_topk: int) -> tuple[int, str]:
    """The shared workspace vLLM 0.34 reserves in the profiling run (``WorkspaceManager``: one
    buffer, grown to the largest ``get_simultaneous`` request, kept after profiling), as
    (bytes, how). Two requests, the larger wins:

    - FlashMLA's prefill gather (``nvidia/flashmla.py`` dummy run), per compressed layer:
      bf16 ``[4, M, head_dim]`` with M = ceil(max_model_len / r) + window + max_num_batched_
      tokens, int32 ``[max_num_batched_tokens, round_up(index_topk + window, 128)]`` and int32
      ``[max_num_batched_tokens]``; the ratio-4 layers' M is the largest.
    - the indexer's K gather (``sparse_attn_indexer.py``): fp8 ``[T, index_head_dim]``, its
      ``[T, 4]`` scales and the 1 MiB radix top-k buffer, T = max_model_len x (1,152 // 132) x
      factor // 4 (``get_max_prefill_buffer_size``; ``sparse_mla_prefill_workspace_factor`` 5
      up to 256k tokens, else 2).

    Each view is rounded up to 256 B. Flash at 131,072 tokens and 8,192 batched: FlashMLA
    4 x 41,088 x 512 x 2 + 8,192 x 640 x 4 + 8,192 x 4 = 189,300,736 B; indexer T = 1,310,720:
    167,772,160 + 5,242,880 + 1,048,576 = 174,063,616 B; 189,300,736 B reserved."""
    compressed = [s for s in layers if s.compress_ratio > 1]
    if not compressed:
        return 0, "no compressed layer: no sparse workspace"
    window = compressed[0].window_tokens
    head = compressed[0].head_dim
    topk = cdiv(index_topk + window, 128) * 128
    r = min(s.compress_ratio for s in compressed)
    m = cdiv(max_model_len, r) + window + max_num_batched_tokens
    flash = _aligned(PREFILL_CHUNK * m * head * 2, max_num_batched_tokens * topk * 4,
                     max_num_batched_tokens * 4)
    how = (f"FlashMLA prefill gather {PREFILL_CHUNK} x {m:,} x {head} x 2 B + "
           f"{max_num_batched_tokens:,} x {topk} x 4 B + {max_num_batched_tokens:,} x 4 B = "
           f"{flash:,} B")
    index = [s for s in layers if s.index_head_dim]
    if not index:
        return flash, how
    factor = 5 if max_model_len <= 256 * 1024 else 2
    t = max_model_len * (2 * ALIGN // 132) * factor // 4
    idx = _aligned(t * index[0].index_head_dim, t * 4, RADIX_TOPK_BYTES)
    how += (f"; indexer K gather {t:,} x ({index[0].index_head_dim} + 4) B + 1 MiB = {idx:,} B "
            f"(factor {factor})")
    return max(flash, idx), how
