"""Parsing of option values shared by commands (one clear error per bad value)."""

from __future__ import annotations

from ..errors import InputError
from ..units import parse_tokens


def parse_contexts(values: list[str] | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """``--context 4k --context 32k,128k`` -> (4096, 32768, 131072); duplicates dropped."""
    if not values:
        return default
    out: list[int] = []
    for value in values:
        for item in value.split(","):
            try:
                n = parse_tokens(item)
            except ValueError as e:
                raise InputError(str(e), field="--context") from None
            if n not in out:
                out.append(n)
    return tuple(out)
