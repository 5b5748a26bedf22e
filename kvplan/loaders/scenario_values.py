"""The values a scenario YAML holds, parsed one by one (pydantic ``BeforeValidator``s of
``kvplan.loaders.scenario_schema``): token counts with ``32k``-style suffixes (k = 1024), sizes
(``512GiB`` / ``4TB``), bandwidths (``25GB/s``), length distributions, search axes, names. Each
raises ``ValueError`` with the message the user sees at that key."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from ..core.suggest import close_matches
from ..core.units import MAX_BYTES, MAX_TOKENS, parse_bytes, parse_tokens
from ..core.workload import KINDS, Dist, fixed, lognormal_from_percentiles


def tokens(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected a token count")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        n = parse_tokens(v)
    else:
        raise ValueError("expected a token count such as 4096 or 32k")
    if n < 0:
        raise ValueError(f"must be >= 0, got {n}")
    if n > MAX_TOKENS:
        raise ValueError(f"is over kvplan's bound of {MAX_TOKENS:,} tokens")
    return n


def positive_tokens(v: Any) -> int:
    n = tokens(v)
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def real(v: Any) -> float:
    """A number (not a YAML boolean such as yes/on/true, which pydantic would take as 1)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number (got {str(v)[:40]!r})")
    if isinstance(v, int) and abs(v) > 10**30:
        raise ValueError("is too large a number")
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number (got {v})")
    return float(v)


def nodes(v: Any) -> int | None:
    if v == "search":
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100_000:
        raise ValueError(f"expected 1 to 100,000 nodes or \"search\" (got {str(v)[:40]!r})")
    return v


def size(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError("expected a size such as 512GiB, 4TB or a byte count")
    return parse_bytes(str(v))


def bandwidth(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a bandwidth such as 25GB/s")
    if isinstance(v, (int, float)):
        if not 0 < v <= MAX_BYTES:  # NaN fails this too
            raise ValueError(f"must be a positive finite number of bytes per second up to "
                             f"{MAX_BYTES:,}, got {str(v)[:40]}")
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if not s.lower().endswith("/s"):
            raise ValueError(f"{v!r}: write a bandwidth with /s, e.g. 25GB/s")
        return float(parse_bytes(s[:-2]))  # at least one byte per second
    raise ValueError("expected a bandwidth such as 25GB/s")


PCT = re.compile(r"^p(\d+(?:\.\d+)?)$")


def length(v: Any) -> Dist:
    """A prompt or output length: every draw at least 1 token."""
    d = dist(v)
    if d.kind in ("fixed", "uniform") and d.a < 1:
        raise ValueError(f"lengths are at least 1 token (got {int(d.a)})")
    if d.hi is not None and d.hi < 1:
        raise ValueError(f"lengths are at least 1 token (max {d.hi})")
    return replace(d, lo=max(d.lo, 1))


def dist(v: Any) -> Dist:
    """4096 | 32k | {fixed: N} | {uniform: {min, max}} | {normal: {mean, std}} |
    {lognormal: {p50: A, p95: B}}, with optional ``min`` / ``max`` clips beside the kind."""
    if v is None:
        raise ValueError("expected a length or a distribution")
    if not isinstance(v, dict):
        return fixed(tokens(v))
    kinds = [k for k in v if k in KINDS]
    extra = [k for k in v if k not in KINDS and k not in ("min", "max")]
    if len(kinds) != 1 or extra:
        bad = f" (unknown key {extra[0]!r}{hint(extra[0], KINDS + ('min', 'max'))})" if extra else ""
        raise ValueError(f"a distribution is one of {', '.join(KINDS)} (with optional min/max)"
                         + bad)
    kind = kinds[0]
    lo = tokens(v["min"]) if "min" in v else 0
    hi = tokens(v["max"]) if "max" in v else None
    if hi is not None and hi < lo:
        raise ValueError(f"max {hi} is below min {lo}")
    body = v[kind]
    if kind == "fixed":
        n = tokens(body)
        return Dist("fixed", n, lo=lo, hi=hi, text=f"{n:,}")
    if not isinstance(body, dict):
        raise ValueError(f"{kind} takes a mapping, e.g. " + {
            "uniform": "{uniform: {min: 100, max: 2000}}", "normal": "{normal: {mean: 800, std: 200}}",
            "lognormal": "{lognormal: {p50: 800, p95: 4000}}"}[kind])
    if kind == "uniform":
        _keys(body, ("min", "max"), kind)
        a, b = tokens(body["min"]), tokens(body["max"])
        if b < a:
            raise ValueError(f"uniform max {b} is below min {a}")
        return Dist("uniform", a, b, lo=lo, hi=hi, text=f"uniform {a:,}..{b:,}")
    if kind == "normal":
        _keys(body, ("mean", "std"), kind)
        mean, std = number(body["mean"], "mean"), number(body["std"], "std")
        if mean <= 0 or std < 0:
            raise ValueError("normal needs mean > 0 and std >= 0")
        return Dist("normal", mean, std, lo=max(lo, 1), hi=hi, text=f"normal mean {mean:g}, std {std:g}")
    pcts = []
    for k, x in body.items():
        m = PCT.match(str(k))
        if not m:
            raise ValueError(f"lognormal takes two percentiles such as p50 and p95, not {k!r}")
        q = float(m.group(1))
        if not 0 < q < 100:
            raise ValueError(f"percentile {k} is outside (0, 100)")
        pcts.append((q, number(x, str(k))))
    if len(pcts) != 2:
        raise ValueError("lognormal takes exactly two percentiles, e.g. {p50: 800, p95: 4000}")
    (q1, x1), (q2, x2) = sorted(pcts)
    if q1 == q2 or not 0 < x1 < x2:
        raise ValueError("lognormal percentiles must rise: the higher percentile needs the "
                         "larger value, both > 0")
    d = lognormal_from_percentiles(q1, x1, q2, x2)
    return Dist("lognormal", d.a, d.b, lo=max(lo, 1), hi=hi,
                text=f"lognormal p{q1:g} {x1:g}, p{q2:g} {x2:g}")


def _keys(body: dict, want: tuple[str, ...], kind: str) -> None:
    for k in body:
        if k not in want:
            raise ValueError(f"{kind}: unknown key {k!r}{hint(str(k), want)}")
    for k in want:
        if k not in body:
            raise ValueError(f"{kind} needs {' and '.join(want)}")


def number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{name} must be a number")
    if isinstance(v, str):
        return float(tokens(v))
    if abs(v) > MAX_TOKENS or not math.isfinite(v):  # a huge int never reaches isfinite
        raise ValueError(f"{name} must be a finite number up to {MAX_TOKENS:,} (got "
                         f"{str(v)[:40]})")
    return float(v)


def hint(word: str, options) -> str:
    options = list(options)
    close = close_matches(word, options, n=1)
    if not close:  # e.g. "prize" -> price_usd_per_gpu_hour: match the first word of a key
        heads = {o.split("_")[0]: o for o in options}
        close = [heads[h] for h in close_matches(word, heads, n=1, cutoff=0.7)]
    return f"; did you mean {close[0]!r}?" if close else ""


def search_ints(default: tuple[int, ...] | None):
    def parse(v: Any) -> tuple[int, ...] | None:
        if v == "search":
            return default
        items = v if isinstance(v, list) else [v]
        out = []
        for x in items:
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ValueError(f"expected a positive integer, a list of them or \"search\" (got {x!r})")
            out.append(x)
        if not out:
            raise ValueError("empty list")
        return tuple(dict.fromkeys(out))  # each value once
    return parse


def names(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, list) else [v]
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ValueError("expected a name or a list of names")
    return tuple(items)
