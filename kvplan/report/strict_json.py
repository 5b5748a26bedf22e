"""Every JSON kvplan prints or writes is strict JSON (RFC 8259): a non-finite number (NaN,
Infinity: "no value" or "unbounded" in a record) becomes null, numpy scalars become Python
numbers, and ``json.dumps`` runs with ``allow_nan=False`` so nothing else can slip through."""

from __future__ import annotations

import json
import math
from typing import Any


def _clean(x: Any) -> Any:
    if isinstance(x, bool) or x is None or isinstance(x, (str, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    item = getattr(x, "item", None)  # numpy scalars
    if callable(item):
        return _clean(item())
    return x


def dumps(obj: Any, **kwargs: Any) -> str:
    return json.dumps(_clean(obj), allow_nan=False, **kwargs)
