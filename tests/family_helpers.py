"""Shared by the family tests: fixture loading, row lookup, the checks of one row, and the
registry of which fixture config each family test covers (every fixture must be covered)."""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.loaders.hf_config import parse_config

CONFIGS = Path(__file__).parent / "fixtures" / "configs"

BF16 = FP16 = 2
FP32 = 4
FP8 = 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def raw(fname: str) -> dict:
    return json.loads((CONFIGS / fname).read_text())


def load(fname: str, config: dict | None = None):
    path = CONFIGS / fname
    return parse_config(raw(fname) if config is None else config, name=fname, source=str(path))


def kinds(model) -> list[tuple[str, ...]]:
    """Per decoder layer, the kinds of the specs it carries, in order."""
    return [tuple(spec.kind for spec in block) for block in model.layers]


def row(fp, kind: str):
    rows = [r for r in fp.layers if r.kind == kind]
    assert len(rows) == 1, f"expected one {kind} row, got {rows}"
    return rows[0]


SAME = object()


def check_attn(r, *, count, kv_heads, head_dim, window, bytes_per_token, head_dim_v=SAME):
    assert r.count == count
    assert r.kv_heads == kv_heads
    assert r.head_dim_k == head_dim
    assert r.head_dim_v == (head_dim if head_dim_v is SAME else head_dim_v)
    assert r.window_tokens == window
    assert r.bytes_per_token == bytes_per_token
    assert r.state_bytes == 0


def check_state(r, *, count, state_bytes):
    assert r.count == count
    assert r.bytes_per_token == 0
    assert r.state_bytes == state_bytes


COVERED: set[str] = set()


def covers(*fnames: str):
    COVERED.update(fnames)
    return lambda fn: fn
