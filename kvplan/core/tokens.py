"""How many cached tokens (or whole blocks of them) a layer holds for a sequence. Pure.

``n`` is the sequence's context: tokens already computed and cached, with the next token about
to attend to them. A block is ``block_tokens`` tokens; ``block_tokens = 1`` means no paging.
Functions named ``*_at`` give the blocks held at exactly ``n``; ``*_peak`` give the largest
count over every context up to ``n``, which is what a sequence that reached ``n`` tokens has
needed (chunked-local layers drop back to almost nothing at each chunk boundary).
"""

from __future__ import annotations

from .units import cdiv


def span_blocks(start: int, end: int, block_tokens: int) -> int:
    """Blocks touched by tokens ``[start, end)`` when blocks are only freed whole."""
    if end <= start:
        return 0
    return cdiv(end, block_tokens) - start // block_tokens


def full_blocks(n: int, block_tokens: int) -> int:
    """A full-attention (or MLA) layer holds every token: ``cdiv(n, B)`` blocks."""
    return cdiv(n, block_tokens)


def sliding_blocks_at(n: int, keep_tokens: int, block_tokens: int) -> int:
    """Blocks holding the last ``keep_tokens`` tokens (window - 1) at context ``n``."""
    return span_blocks(max(0, n - keep_tokens), n, block_tokens)


def sliding_blocks_peak(n: int, keep_tokens: int, block_tokens: int) -> int:
    """Worst case of ``sliding_blocks_at`` over contexts up to ``n``.

    Up to ``keep_tokens`` the layer holds every token. Past it, the kept range
    ``[m - keep, m)`` starts at every offset within a block as ``m`` grows, so the worst case
    is reached at ``m = keep + B - 1`` (start one token before a block ends):
    ``cdiv(min(n, keep + B - 1), B)``. Mistral-7B (window 4096, B = 16):
    ``cdiv(4095 + 15, 16) = 257`` blocks, one more than ``cdiv(4095, 16) = 256``. A window of
    one token keeps nothing.
    """
    if keep_tokens == 0:
        return 0
    return cdiv(min(n, keep_tokens + block_tokens - 1), block_tokens)


def chunked_blocks_at(n: int, chunk_tokens: int, block_tokens: int) -> int:
    """Blocks holding the current chunk ``[floor(n / C) * C, n)`` at context ``n``."""
    return span_blocks((n // chunk_tokens) * chunk_tokens, n, block_tokens)


def chunked_blocks_peak(n: int, chunk_tokens: int, block_tokens: int) -> int:
    """Worst case of ``chunked_blocks_at`` over contexts up to ``n``.

    Within chunk k (start ``s = k * C``) the count grows with m and peaks at
    ``m = min(n, s + C - 1)``. Chunk starts repeat their offset within a block every
    ``B / gcd(C, B)`` chunks, so only the first ``B`` chunks and the last one need checking.
    Llama-4 (C = 8192, B = 16): 512 blocks.
    """
    last = n // chunk_tokens
    if n % chunk_tokens == 0 and last > 0:
        last -= 1  # at an exact boundary the new chunk is empty
    best = 0
    for k in [*range(min(last, block_tokens) + 1), last]:
        start = k * chunk_tokens
        end = min(n, start + chunk_tokens - 1)
        best = max(best, span_blocks(start, end, block_tokens))
    return best


def window_page_blocks(n: int, window_tokens: int, block_tokens: int) -> int:
    """SGLang: a sliding layer keeps the tokens from the eviction point
    ``floor((m - W - P) / P) * P`` to ``m`` (``ScheduleBatch._evict_swa``: tokens older than
    ``seq_len - sliding_window - page_size``, rounded down to a page), worst case up to ``n``.

    Past ``W + P`` tokens the count repeats every page, so the last ``2 P`` contexts up to
    ``min(n, W + 2P)`` hold the peak. Page 1: ``min(n, W + 1)``.
    """
    page = block_tokens
    hi = min(n, window_tokens + 2 * page)

    def at(m: int) -> int:
        return span_blocks(max(0, (m - window_tokens - page) // page * page), m, page)

    return max(at(m) for m in range(max(1, hi - 2 * page), hi + 1))


def fixed_cache_blocks(n: int, cache_tokens: int, block_tokens: int) -> int:
    """llama.cpp iSWA: the sliding cache has ``pad(min(kv_size, n_swa + n_ubatch))`` cells,
    allocated up front, where ``kv_size = pad(n)``; padding is ``block_tokens`` (256)."""
    return min(full_blocks(n, block_tokens), cdiv(cache_tokens, block_tokens))
