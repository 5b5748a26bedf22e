"""The model's context limit as the engines enforce it (``Model.context_limit``, derived by
``kvplan.loaders.context_limit``): a longer ``--max-model-len`` is refused unless the caller
opts in, as vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` and SGLang's
``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` do. Pure."""

from __future__ import annotations

from ..core.errors import InputError
from ..core.model import Model

#: the opt-in, on every command that plans a context
ALLOW_FLAG = "--allow-long-max-model-len"
#: engine -> the environment variable that lifts its check (the launch lines set it)
ENGINE_OVERRIDES = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
                    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}


def over_limit(model: Model, tokens: int) -> bool:
    lim = model.context_limit
    return lim is not None and tokens > lim.tokens


def limit_words(model: Model) -> str:
    lim = model.context_limit
    assert lim is not None
    return f"{model.name}'s limit of {lim.tokens:,} tokens ({lim.source})"


def check_context(model: Model, tokens: int, allowed: bool, field: str = "--context",
                  flag: str = ALLOW_FLAG, source: str | None = None) -> str | None:
    """None when ``tokens`` is within the limit; the stated assumption when it is past it and
    ``allowed``; else one error line naming the limit, its source key and the opt-in."""
    if not over_limit(model, tokens):
        return None
    if not allowed:
        raise InputError(f"context {tokens:,} exceeds {limit_words(model)}; vLLM and SGLang "
                         f"refuse it at start-up; pass {flag} to plan it anyway (the launch "
                         "lines then set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)", field=field,
                         source=source)
    return (f"context {tokens:,} exceeds {limit_words(model)}: planned because of {flag}; "
            "the launch lines set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (vLLM) or "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (SGLang); positions past the trained "
            "length give wrong output unless the RoPE scaling is raised too")


def past_limit_note(model: Model, contexts: list[int]) -> str | None:
    """``kvplan size``: the contexts past the limit (their bytes are what the layout would hold;
    the engines refuse such a ``max_model_len`` unless told to allow it), or None."""
    past = [t for t in contexts if over_limit(model, t)]
    if not past:
        return None
    return (f"{', '.join(f'{t:,}' for t in past)} tokens: past {limit_words(model)}; the bytes "
            "are what the layout would hold, but vLLM and SGLang refuse such a max_model_len "
            f"unless {' or '.join(ENGINE_OVERRIDES.values())} (fit and plan take {ALLOW_FLAG})")
