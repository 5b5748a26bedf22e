"""Parsing of option values shared by commands (one clear error per bad value)."""

from typing import Annotated

import typer

from ..core.dtypes import STATE_DTYPES, canonical_dtype
from ..core.errors import InputError
from ..core.units import parse_tokens


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


def parse_state_dtype(value: str | None) -> str | None:
    """``--state-dtype float32`` -> ``fp32``; None stays None (the engine's rule applies)."""
    if value is None:
        return None
    resolved = canonical_dtype(value)
    if resolved not in STATE_DTYPES:
        raise InputError(f"unknown dtype {value!r}; use {', '.join(STATE_DTYPES)}",
                         field="--state-dtype")
    return resolved


AllowLong = Annotated[bool, typer.Option(
    "--allow-long-max-model-len", help="Plan a context past the model's limit (max_position_"
    "embeddings, or the RoPE-scaled length the config declares), as vLLM's "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; stated in the output, set in the launch lines.")]

AssumeStandard = Annotated[bool, typer.Option(
    "--assume-standard-attention", help="Read a config whose cache layout kvplan cannot "
    "establish (an unknown model_type, keys no rule interprets) as a standard decoder; the "
    "assumption is printed and recorded in the JSON.")]

# Shared Hub options (size, fit). The token is never echoed anywhere.
Revision = Annotated[str | None, typer.Option(
    "--revision", help="Hub branch, tag or commit (or MODEL@REV).")]
Token = Annotated[str | None, typer.Option(
    "--token", help="Hub access token for gated or private repos (default: HF_TOKEN or your "
    "saved login). Never printed.")]
Refresh = Annotated[bool, typer.Option(
    "--refresh", help="Ask the Hub again instead of using a cached config.json.")]


def comma_list(values: list[str] | None, flag: str) -> list[str]:
    """Repeated or comma-separated option values; given but holding none (``--gpu ,``) is an
    error naming the option."""
    from ..core.errors import InputError

    out = [v.strip() for value in values or [] for v in value.split(",") if v.strip()]
    if values and not out:
        raise InputError("expected one or more values", field=flag)
    return out
