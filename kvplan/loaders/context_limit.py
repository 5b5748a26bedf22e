"""The longest context a config lets the engines serve: vLLM's ``_get_and_verify_max_len``
(vllm/config/model.py), which SGLang's ``get_context_length`` (srt/configs/model_config.py)
follows for these keys.

1. The smallest of the length keys the text config sets: ``max_position_embeddings``,
   ``n_positions``, ``max_seq_len``, ``seq_length``, ``model_max_length``,
   ``max_target_positions``, ``max_sequence_length``, ``max_seq_length``, ``seq_len``. vLLM
   reads them from the transformers config object, so a key the file leaves out has the config
   class's default (``transformers_max_len``: falcon 2048, Gemma-3 text 131,072).
2. RoPE scaling (``rope_scaling``, or transformers 5's ``rope_parameters``, one mapping or one
   per layer type): a ``rope_type`` (or ``type``) other than ``su``, ``longrope``, ``llama3``
   multiplies the length by its ``factor``; ``yarn`` starts from its
   ``original_max_position_embeddings``. Not for Gemma-3, whose length is already scaled.
3. A longer request is still accepted up to the config's own ``model_max_length``.
A config with none of the keys (Mamba) declares no limit; vLLM then takes the given length.
Worked example, DeepSeek-V3: yarn, original_max_position_embeddings 4096 x factor 40 = 163,840.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..core.model import ContextLimit
from .fields import Fields

#: vLLM's possible_keys, in its order
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
               "model_max_length", "max_target_positions", "max_sequence_length",
               "max_seq_length", "seq_len")
#: rope types whose factor does not lengthen the declared context (vLLM)
UNSCALED_ROPE = ("su", "longrope", "llama3")
#: a bound on any declared length (2^40 tokens), so that a hostile value is one error line
MAX_LENGTH = 1 << 40


def _length(f: Fields, key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_LENGTH:
        raise f.error(key, f"expected a positive whole number of tokens (at most {MAX_LENGTH:,}), "
                      f"got {value!r}")
    return value


def _factor(f: Fields, key: str, value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
        raise f.error(key, f"expected a positive number, got {value!r}")
    return Fraction(value)


def _rope_sets(f: Fields) -> tuple[str, list[tuple[str, dict]]]:
    """The rope-scaling key and its mapping(s) (one per layer type in transformers 5)."""
    for key in ("rope_scaling", "rope_parameters"):
        value = f.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise f.error(key, f"expected an object, got {type(value).__name__}")
        nested = [isinstance(v, dict) for v in value.values()]
        if value and all(nested):
            return key, [(f"{key}.{k}", v) for k, v in value.items()]
        if any(nested):
            raise f.error(key, "expected one mapping of rope settings, or one mapping per layer "
                          "type, not a mix")
        return key, [(key, value)]
    return "", []


def context_limit(f: Fields, model_type: str) -> ContextLimit | None:
    """The text config's limit (``f``: its fields), or None when it declares none."""
    from .transformers_max_len import DEFAULTS, TRANSFORMERS_VERSION

    found: list[tuple[int, int, str]] = []  # (tokens, 1 for a library default, source)
    for key in LENGTH_KEYS:
        value = f.get(key)
        if value is not None:
            n = _length(f, key, value)
            found.append((n, 0, f"{f.prefix}{key} = {n:,}"))
        elif key in DEFAULTS.get(model_type, {}):
            n = DEFAULTS[model_type][key]
            found.append((n, 1, f"{f.prefix}{key} = {n:,} (the transformers {TRANSFORMERS_VERSION} "
                          f"{model_type} default; config.json leaves it out)"))
    if not found:
        return None
    tokens, _, source = min(found)  # the file's own key wins a tie with a default
    limit = Fraction(tokens)
    rope_key, sets = _rope_sets(f)
    if sets and "gemma3" not in model_type:
        factor, start = Fraction(1), None
        for where, rp in sets:
            rope_type = rp.get("rope_type", rp.get("type"))
            if rope_type in UNSCALED_ROPE:
                continue
            if "factor" in rp:
                factor = _factor(f, f"{where}.factor", rp["factor"])
            if rope_type == "yarn" and rp.get("original_max_position_embeddings") is not None:
                start = (_length(f, f"{where}.original_max_position_embeddings",
                                 rp["original_max_position_embeddings"]), where)
        if start is not None:
            limit = start[0] * factor
            source = (f"{f.prefix}{start[1]} yarn: original_max_position_embeddings "
                      f"{start[0]:,} x factor {float(factor):g}")
        elif factor != 1:
            limit = tokens * factor
            source += f" x {f.prefix}{rope_key} factor {float(factor):g}"
    own = f.config.get("model_max_length")
    if own is not None and (n := _length(f, "model_max_length", own)) > limit:
        limit, source = Fraction(n), f"{f.prefix}model_max_length = {n:,}"
    if limit < 1:
        raise f.error(rope_key or LENGTH_KEYS[0], f"the scaled context limit is {float(limit):g} "
                      "tokens (under one)")
    return ContextLimit(tokens=int(limit), source=source)
