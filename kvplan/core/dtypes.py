"""Model and state dtype names. Pure."""

from __future__ import annotations

#: Canonical short names for the dtypes configs and engines name, with their sizes in bytes.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}

_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "torch.float32": "fp32",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "fp8": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def canonical_dtype(name: str) -> str | None:
    """``"bfloat16"`` -> ``"bf16"``; None for names that are not a known dtype."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in DTYPE_BYTES else None


#: Dtypes a recurrent (Mamba / linear-attention) state may be kept in (vLLM's ``MambaDType``).
STATE_DTYPES = ("fp32", "bf16", "fp16")


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[name]
