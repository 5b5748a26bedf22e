"""Bandwidth cases: the device's copy ceiling and the achieved bandwidth of a paged
decode-attention step (gather K/V blocks by a block table, then attention of one query token
per sequence), timed after warm-up as the median of repeats (CUDA events on GPUs, a monotonic
clock on CPUs), with random inputs several times larger than the last-level cache."""

from __future__ import annotations

import statistics
import time


def _timer(device: str):
    import torch

    if device.startswith("cuda"):
        def run(fn, repeats: int) -> float:
            times = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1000)
            return statistics.median(times)
        return run

    def run_cpu(fn, repeats: int) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)
    return run_cpu


def copy_ceiling(device: str, mib: int, repeats: int = 5) -> dict:
    import torch

    n = mib * 2**20 // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    seconds = _timer(device)(lambda: dst.copy_(src), repeats)
    moved = 2 * n * 4  # read + written
    return {"kind": "bandwidth", "id": f"copy-{mib}MiB", "inputs": {"mib": mib},
            "bytes": moved, "seconds": seconds, "bytes_per_s": moved / seconds,
            "tolerance": None}


def paged_attention(device: str, *, batch: int, context: int, heads: int = 8, head_dim: int = 128,
                    block: int = 16, dtype: str = "bfloat16", repeats: int = 5) -> dict:
    """Decode attention over a paged cache: one query per sequence, ``context`` cached tokens."""
    import torch
    import torch.nn.functional as F

    dt = getattr(torch, dtype)
    blocks_per_seq = -(-context // block)
    num_blocks = batch * blocks_per_seq
    k_cache = torch.rand(num_blocks, block, heads, head_dim, device=device).to(dt)
    v_cache = torch.rand(num_blocks, block, heads, head_dim, device=device).to(dt)
    table = torch.randperm(num_blocks, device=device).view(batch, blocks_per_seq)
    q = torch.rand(batch, heads, 1, head_dim, device=device).to(dt)

    def step():
        k = k_cache[table].reshape(batch, -1, heads, head_dim)[:, :context].transpose(1, 2)
        v = v_cache[table].reshape(batch, -1, heads, head_dim)[:, :context].transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v)

    step()  # warm-up
    seconds = _timer(device)(step, repeats)
    read = 2 * batch * context * heads * head_dim * k_cache.element_size()
    return {"kind": "bandwidth", "id": f"paged-attention-b{batch}-n{context}-{dtype}",
            "inputs": {"batch": batch, "context": context, "heads": heads, "head_dim": head_dim,
                       "block": block, "dtype": dtype, "kernel": "torch SDPA after a block gather"},
            "bytes": read, "seconds": seconds, "bytes_per_s": read / seconds, "tolerance": None}
