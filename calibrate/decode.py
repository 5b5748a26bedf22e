"""Decode-step cases: a synthetic stack of a few transformer layers (real head counts and
widths, bf16 weights, random inputs) run for a batch at a context, beside the performance
model's prediction for the same shapes (``kvplan.core.perf.decode_step``) with the measured copy
ceiling as the bandwidth and a measured large-matmul rate as the peak. On CPUs the comparison
is informational (no tolerance): the roofline describes GPUs."""

from __future__ import annotations

from .bandwidth import _timer


def matmul_rate(device: str, n: int = 2048, repeats: int = 5) -> float:
    import torch

    a = torch.rand(n, n, device=device)
    b = torch.rand(n, n, device=device)
    a @ b
    seconds = _timer(device)(lambda: a @ b, repeats)
    return 2 * n**3 / seconds


def predict(inputs: dict) -> float:
    from kvplan.planning.validate import decode_prediction

    return decode_prediction(inputs)


def decode_step_case(device: str, *, layers: int, hidden: int, heads: int, kv_heads: int,
                     intermediate: int, batch: int, context: int, copy_bytes_per_s: float,
                     flops_per_s: float, repeats: int = 5) -> dict:
    import torch
    import torch.nn.functional as F

    dt = torch.float32 if device == "cpu" else torch.bfloat16
    hd = hidden // heads
    w = [dict(qkv=torch.rand(hidden, (heads + 2 * kv_heads) * hd, device=device, dtype=dt),
              o=torch.rand(heads * hd, hidden, device=device, dtype=dt),
              up=torch.rand(hidden, 2 * intermediate, device=device, dtype=dt),
              down=torch.rand(intermediate, hidden, device=device, dtype=dt)) for _ in range(layers)]
    k = [torch.rand(batch, kv_heads, context, hd, device=device, dtype=dt) for _ in range(layers)]
    v = [torch.rand(batch, kv_heads, context, hd, device=device, dtype=dt) for _ in range(layers)]
    x = torch.rand(batch, hidden, device=device, dtype=dt)

    def step():
        h = x
        for i in range(layers):
            qkv = h @ w[i]["qkv"]
            q = qkv[:, :heads * hd].view(batch, heads, 1, hd)
            kk = k[i].repeat_interleave(heads // kv_heads, dim=1)
            vv = v[i].repeat_interleave(heads // kv_heads, dim=1)
            a = F.scaled_dot_product_attention(q, kk, vv).reshape(batch, heads * hd)
            h = h + a @ w[i]["o"]
            g, u = (h @ w[i]["up"]).chunk(2, dim=-1)
            h = h + (F.silu(g) * u) @ w[i]["down"]
        return h

    step()
    seconds = _timer(device)(step, repeats)
    inputs = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
              "intermediate": intermediate, "batch": batch, "context": context,
              "element_bytes": torch.tensor([], dtype=dt).element_size(),
              "copy_bytes_per_s": copy_bytes_per_s, "flops_per_s": flops_per_s}
    predicted = predict(inputs)
    return {"kind": "decode_step", "id": f"decode-l{layers}-h{hidden}-b{batch}-n{context}",
            "inputs": inputs,
            "predicted_seconds": predicted, "measured_seconds": seconds,
            "tolerance": None if device == "cpu" else 0.10}
