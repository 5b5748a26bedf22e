"""A request trace: JSON Lines, one request per line with its prompt and output token counts
(the shape of vLLM's custom benchmark datasets and of ShareGPT-style exports once tokenised).
kvplan never tokenises text, so every line must carry the counts. Blank lines are ignored;
every other bad line is reported with its line number (all of them, nothing skipped).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import InputError, ScenarioError
from .files import read_text

PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt_len", "input_len", "num_prompt_tokens",
               "prompt_length", "input_length")
OUTPUT_KEYS = ("output_tokens", "output_len", "completion_tokens", "num_output_tokens",
               "output_length", "max_tokens")


def _count(row: dict, keys: tuple[str, ...], what: str, where: str, problems: list[str]) -> int | None:
    for k in keys:
        if k in row:
            v = row[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                problems.append(f"{where}: {k}: {what} token count must be a positive integer "
                                f"(got {v!r})")
                return None
            return v
    problems.append(f"{where}: no {what} token count (expected one of {', '.join(keys)})")
    return None


def read_trace(path: Path) -> tuple[tuple[int, int], ...]:
    """(prompt tokens, output tokens) per request; ScenarioError listing every bad line."""
    text = read_text(path, InputError)
    rows: list[tuple[int, int]] = []
    problems: list[str] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: malformed JSON ({e.msg})")
            continue
        except (ValueError, RecursionError) as e:  # integers over 4,300 digits, deep nesting
            problems.append(f"{where}: unreadable JSON ({type(e).__name__})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object per line")
            continue
        p = _count(row, PROMPT_KEYS, "prompt", where, problems)
        o = _count(row, OUTPUT_KEYS, "output", where, problems)
        if p is not None and o is not None:
            rows.append((p, o))
    if problems:
        raise ScenarioError(problems)
    if not rows:
        raise ScenarioError([f"{path}: the trace holds no requests"])
    return tuple(rows)
