"""Footprint -> plain records: the public JSON of ``kvplan size --json``. Pure.

Keys are a public interface (scripts depend on them): change none without a version bump.
Byte counts that are fractions (sub-byte formats) are rounded up to whole bytes here.
"""

from __future__ import annotations

from ..core.units import ceil_bytes
from ..planning.footprint import Footprint
from ..planning.model_limits import over_limit


def size_record(fp: Footprint) -> dict:
    lim = fp.model.context_limit
    layers = []
    for row in fp.layers:
        layers.append({
            "kind": row.kind,
            "count": row.count,
            "kv_heads": row.kv_heads,  # None for state layers
            "head_dim": row.head_dim_k,
            "window_tokens": row.window_tokens,
            "bytes_per_token": ceil_bytes(row.bytes_per_token * row.count),
            "state_bytes": row.state_bytes * row.count,
        })
    return {
        "model": fp.model.name,
        "assumptions": list(fp.model.assumptions),
        "assumed_standard_attention": fp.model.standard_attention_assumed,
        "engine": fp.engine.label,
        "kv_dtype": fp.kv_dtype,
        "tp": fp.tp,
        "pp": fp.pp,
        "block_size": fp.block_size_tokens,
        "layers": layers,
        "bytes_per_token": ceil_bytes(fp.bytes_per_token),
        "state_bytes_per_sequence": fp.state_bytes_per_sequence,
        "context_limit_tokens": lim.tokens if lim else None,
        "context_limit_source": lim.source if lim else None,
        "sequences": [
            {"context_tokens": s.context_tokens, "total_bytes": s.total_bytes,
             "per_gpu_bytes": s.per_gpu_bytes,
             "past_context_limit": over_limit(fp.model, s.context_tokens)}
            for s in fp.sequences
        ],
    }
