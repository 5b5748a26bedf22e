"""Block counting for full, sliding-window and chunked-local layers, against brute force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.core.tokens import (
    chunked_blocks_at,
    chunked_blocks_peak,
    full_blocks,
    sliding_blocks_at,
    sliding_blocks_peak,
    span_blocks,
)
from kvplan.loaders.hf_config import parse_config
from kvplan.planning.footprint import kv_footprint

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def load(stem: str):
    p = CONFIGS / f"{stem}.json"
    return parse_config(json.loads(p.read_text()), name=stem, source=str(p))


# --- brute-force references (count distinct block indices of the tokens held) ----------------


def brute_blocks(tokens, block):
    return len({t // block for t in tokens})


def brute_sliding_at(m, keep, block):
    return brute_blocks(range(max(0, m - keep), m), block)


def brute_chunked_at(m, chunk, block):
    start = (m // chunk) * chunk
    return brute_blocks(range(start, m), block)


# --- span / full ----------------------------------------------------------------------------


def test_span_blocks_brute():
    for block in range(1, 9):
        for start in range(0, 40):
            for end in range(0, 45):
                assert span_blocks(start, end, block) == brute_blocks(range(start, end), block)


def test_full_blocks():
    assert full_blocks(0, 16) == 0
    assert full_blocks(1, 16) == 1
    assert full_blocks(16, 16) == 1
    assert full_blocks(17, 16) == 2
    assert full_blocks(4096, 16) == 256
    assert full_blocks(4095, 16) == 256
    assert full_blocks(7, 1) == 7
    for block in range(1, 9):
        for n in range(0, 60):
            assert full_blocks(n, block) == brute_blocks(range(n), block)


# --- sliding window -------------------------------------------------------------------------


def test_sliding_at_brute():
    for block in range(1, 9):
        for keep in range(0, 14):
            for m in range(0, 60):
                assert sliding_blocks_at(m, keep, block) == brute_sliding_at(m, keep, block), (
                    m, keep, block)


def test_sliding_peak_is_max_of_at():
    for block in range(1, 9):
        for keep in range(1, 14):  # keep = 0 (window 1): see test_sliding_peak_keep_zero
            best = 0
            for n in range(0, 70):
                best = max(best, brute_sliding_at(n, keep, block))
                assert sliding_blocks_peak(n, keep, block) == best, (n, keep, block)


def test_sliding_peak_larger_values():
    for block in (16, 32):
        for keep in (127, 128, 129, 4095):
            best = 0
            for n in range(0, keep + 3 * block):
                best = max(best, sliding_blocks_at(n, keep, block))
                assert sliding_blocks_peak(n, keep, block) == best


def test_sliding_hand_numbers():
    # Mistral-7B: window 4096 keeps 4095 tokens; block 16.
    # At n = 4095 (aligned start 0): cdiv(4095, 16) = 256 blocks.
    assert sliding_blocks_at(4095, 4095, 16) == 256
    # At n = 4095 + 15 = 4110 the kept range [15, 4110) starts one token before block 1:
    # blocks 0 .. 256 inclusive = 257.
    assert sliding_blocks_at(4110, 4095, 16) == 257
    assert sliding_blocks_peak(4110, 4095, 16) == 257
    assert sliding_blocks_peak(1_000_000, 4095, 16) == 257
    assert sliding_blocks_peak(4109, 4095, 16) == 257  # m=4109: [14, 4109) -> blocks 0..256
    # below that point the window range starts in block 0 so it is just cdiv(n, 16)
    assert sliding_blocks_peak(4096, 4095, 16) == 256
    # block 1: exactly the window - 1 tokens
    assert sliding_blocks_peak(10_000, 4095, 1) == 4095
    assert sliding_blocks_peak(100, 4095, 1) == 100
    # gpt-oss window 128 -> keep 127, block 16: cdiv(127 + 15, 16) = cdiv(142, 16) = 9
    assert sliding_blocks_peak(100_000, 127, 16) == 9


@pytest.mark.parametrize("block", [2, 16])
def test_sliding_peak_keep_zero(block):
    assert max(sliding_blocks_at(m, 0, block) for m in range(101)) == 0
    assert sliding_blocks_peak(100, 0, block) == 0


# --- chunked local --------------------------------------------------------------------------


def test_chunked_at_brute():
    for block in range(1, 9):
        for chunk in range(1, 14):
            for m in range(0, 80):
                assert chunked_blocks_at(m, chunk, block) == brute_chunked_at(m, chunk, block), (
                    m, chunk, block)


def test_chunked_peak_is_max_of_at():
    for block in range(1, 9):
        for chunk in range(1, 14):
            best = 0
            for n in range(0, 120):
                best = max(best, brute_chunked_at(n, chunk, block))
                assert chunked_blocks_peak(n, chunk, block) == best, (n, chunk, block)


def test_chunked_peak_many_chunks_past_block_count():
    # the implementation only inspects the first B chunks and the last; check far beyond
    for block in (3, 5, 7, 16):
        for chunk in (5, 6, 9, 11, 24):
            best = 0
            for n in range(0, chunk * (block + 4) + 1):
                best = max(best, chunked_blocks_at(n, chunk, block))
                assert chunked_blocks_peak(n, chunk, block) == best, (n, chunk, block)


def test_chunked_hand_numbers():
    # Llama-4 Scout: chunk 8192, block 16. Chunks are block aligned (8192 = 512 x 16) and hold
    # at most 8191 tokens: cdiv(8191, 16) = 512 blocks.
    assert chunked_blocks_peak(8192, 8192, 16) == 512
    assert chunked_blocks_peak(8191, 8192, 16) == 512
    assert chunked_blocks_peak(8190, 8192, 16) == 512  # cdiv(8190, 16) = 512
    assert chunked_blocks_peak(8176, 8192, 16) == 511  # 8176 = 511 x 16
    assert chunked_blocks_peak(1_000_000, 8192, 16) == 512
    # at an exact boundary the new chunk is empty
    assert chunked_blocks_at(8192, 8192, 16) == 0
    assert chunked_blocks_at(8193, 8192, 16) == 1
    # chunk 7, block 4: chunk starts 0, 7, 14 have block offsets 0, 3, 2. Chunk 1 holds
    # [7, 13) at m = 13, tokens 7..12 -> blocks 1, 2, 3: 3 blocks; chunk 0 peaks at [0, 6) ->
    # 2 blocks.
    assert chunked_blocks_peak(12, 7, 4) == 2
    assert chunked_blocks_peak(13, 7, 4) == 3
    assert chunked_blocks_at(14, 7, 4) == 0
    assert chunked_blocks_peak(14, 7, 4) == 3


# --- through kv_footprint ---------------------------------------------------------------------


def test_mistral_footprint_window_cap():
    m = load("mistralai__Mistral-7B-v0.1")
    # 32 layers, 8 KV heads x 128 x (K + V) x 2 B = 4096 B per token per layer
    per_token_layer = 8 * 128 * 2 * 2
    fp = kv_footprint(m, contexts=(4095, 8192, 131072), kv_dtype="bf16", engine="vllm")
    at_4095, at_8192, at_128k = fp.sequences
    assert at_4095.per_gpu_bytes == 32 * per_token_layer * 256 * 16
    assert at_8192.per_gpu_bytes == 32 * per_token_layer * 257 * 16
    assert at_128k.per_gpu_bytes == 32 * per_token_layer * 257 * 16
    hf = kv_footprint(m, contexts=(4095, 8192), kv_dtype="bf16", engine="hf")
    assert [s.per_gpu_bytes for s in hf.sequences] == [32 * per_token_layer * 4095] * 2


def test_llama4_footprint_chunk_cap():
    m = load("meta-llama__Llama-4-Scout-17B-16E-Instruct")
    # 36 chunked + 12 full layers, 8 KV heads x 128 x 2 x 2 B = 4096 B per token per layer
    per = 8 * 128 * 2 * 2
    fp = kv_footprint(m, contexts=(16384, 8192 + 100), kv_dtype="bf16", engine="vllm")
    a, b = fp.sequences
    assert a.per_gpu_bytes == per * (36 * 512 * 16 + 12 * 16384)
    # 8292 tokens: full layers cdiv(8292, 16) = 519 blocks; chunked peaked at 512 in chunk 0
    assert b.per_gpu_bytes == per * (36 * 512 * 16 + 12 * 519 * 16)
    # transformers keeps the last chunk - 1 = 8191 tokens like a sliding window
    hf = kv_footprint(m, contexts=(16384, 5000), kv_dtype="bf16", engine="hf")
    assert hf.sequences[0].per_gpu_bytes == per * (36 * 8191 + 12 * 16384)
    assert hf.sequences[1].per_gpu_bytes == per * (36 * 5000 + 12 * 5000)
