"""Axis values for curves and sweeps: comma lists and ranges. Pure.

``8k,32k,128k`` (k = 1024 for tokens); ``1k:128k:x2`` (start, stop inclusive, doubling);
``1:256:+8`` or ``2k:200k:+2k`` (start, stop, step). Ranges stop at ``stop``; at most 100,000 values per axis.
"""

from __future__ import annotations

from ..core.errors import InputError
from ..core.units import parse_tokens

MAX_AXIS = 100_000
#: the largest count (batch, TP or PP degree) an axis takes: far past any deployment, and an int64
MAX_COUNT = 1_000_000


def _number(text: str, tokens: bool, flag: str) -> int:
    try:
        if tokens:
            return parse_tokens(text)
        value = int(text.strip().replace("_", ""))
    except ValueError as e:
        raise InputError(str(e) if tokens else f"{text!r} is not a whole number", field=flag) from None
    if value < 1:
        raise InputError(f"{text!r} must be positive", field=flag)
    if not tokens and value > MAX_COUNT:
        raise InputError(f"{text[:40]!r} is over kvplan's bound of {MAX_COUNT:,}", field=flag)
    return value


def parse_axis(text: str, flag: str, *, tokens: bool = True) -> list[int]:
    out: list[int] = []
    for item in filter(None, (p.strip() for p in str(text).split(","))):
        if ":" not in item:
            out.append(_number(item, tokens, flag))
            continue
        parts = item.split(":")
        if len(parts) != 3 or not parts[2] or parts[2][0] not in "x+":
            raise InputError(f"bad range {item!r}: use start:stop:xF (multiply) or "
                             "start:stop:+S (add), e.g. 1k:128k:x2 or 1:256:+8", field=flag)
        start, stop = _number(parts[0], tokens, flag), _number(parts[1], tokens, flag)
        try:
            step = (float(parts[2][1:]) if parts[2][0] == "x" else
                    parse_tokens(parts[2][1:]) if tokens else int(parts[2][1:]))
        except ValueError:
            raise InputError(f"bad step {parts[2]!r} in {item!r}", field=flag) from None
        if (parts[2][0] == "x" and step <= 1) or (parts[2][0] == "+" and step < 1):
            raise InputError(f"step {parts[2]!r} in {item!r} must grow (x > 1 or + >= 1)",
                             field=flag)
        if stop < start:
            raise InputError(f"range {item!r} ends before it starts", field=flag)
        v: float = start
        while v <= stop:
            out.append(int(v))
            if len(out) > MAX_AXIS:
                raise InputError(f"more than {MAX_AXIS:,} values", field=flag)
            v = v * step if parts[2][0] == "x" else v + step
    if not out:
        raise InputError("no values", field=flag)
    return list(dict.fromkeys(out))
