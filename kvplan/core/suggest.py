"""Close-name suggestions for error messages (difflib is imported only when one is needed)."""

from __future__ import annotations

from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.5) -> list[str]:
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=cutoff)


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.5) -> str:
    """`` (did you mean a, b?)`` or an empty string."""
    close = close_matches(word, candidates, n, cutoff)
    return f" (did you mean {', '.join(close)}?)" if close else ""
