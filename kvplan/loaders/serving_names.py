"""The serving names a plan is asked for (engines, KV formats, a weight dtype), checked before
any work: each unknown one as ``(key, message)``, ``key`` one of ``engine``, ``kv_dtype``,
``weight_dtype``. ``sweep`` raises the first; a scenario reports each at its YAML key."""

from __future__ import annotations

from collections.abc import Iterable

from ..core.errors import KvplanError
from ..core.formats import parse_format
from ..engines import get_engine
from .quant_config import CLI_FORMATS, normalize_weight_dtype


def name_problems(engines: Iterable[str], kv_dtypes: Iterable[str],
                  weight_dtype: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for e in engines:
        try:
            get_engine(e)
        except KvplanError as err:
            out.append(("engine", err.detail))
    for kv in kv_dtypes:
        if kv.strip().lower() != "auto":
            try:
                parse_format(kv)
            except KvplanError as err:
                out.append(("kv_dtype", err.detail))
    if weight_dtype is not None and normalize_weight_dtype(weight_dtype) not in CLI_FORMATS:
        out.append(("weight_dtype", f"unknown weight dtype {weight_dtype!r}; use "
                                    f"{', '.join(CLI_FORMATS)}"))
    return out
