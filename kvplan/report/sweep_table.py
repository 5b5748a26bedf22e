"""The sweep as a pandas DataFrame with stable ``COLUMNS`` (a public interface: keep the
names), its ``--where`` filters and ``--objective`` ranking. ``batch`` and
``max_concurrency`` are per DP rank, ``sequences`` (batch x dp), ``gpus`` (tp x pp x dp),
tokens/s and costs the deployment's (``kvplan.planning.sweep``)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..core.errors import InputError
from ..planning.sweep import Grid, sweep_columns

COLUMNS = ["model", "gpu", "tp", "pp", "dp", "ep", "gpus", "engine", "kv_dtype",
           "weight_dtype", "context_tokens", "batch", "sequences", "fits", "max_concurrency",
           "kv_pool_bytes", "tpot_ms", "ttft_ms", "tokens_per_s", "tokens_per_s_per_gpu", "cost_per_mtok_usd",
           "cost_per_mtok_input_usd", "cost_per_request_usd", "kv_read_share",
           "compute_bound_batch", "price_usd_per_hour", "error"]
NUMERIC = [c for c in COLUMNS if c not in ("model", "gpu", "engine", "kv_dtype",
                                           "weight_dtype", "error")]
OBJECTIVES = {"cost_per_mtok": ("cost_per_mtok_usd", True), "throughput": ("tokens_per_s", False),
              "throughput_per_gpu": ("tokens_per_s_per_gpu", False), "gpus": ("gpus", True),
              "tpot": ("tpot_ms", True), "ttft": ("ttft_ms", True)}
WHERE = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|==|!=|<|>)\s*(true|false|[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?)\s*$",
                   re.IGNORECASE)



def sweep(grid: Grid, progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """The whole grid as a DataFrame with ``COLUMNS`` (``kvplan.planning.sweep.sweep_columns``
    joined)."""
    frames = [pd.DataFrame(cols) for cols in sweep_columns(grid, progress)]
    df = pd.concat(frames, ignore_index=True)
    return df.reindex(columns=COLUMNS)


def parse_where(expr: str) -> tuple[str, str, float]:
    m = WHERE.match(expr)
    if not m or m.group(1) not in NUMERIC:
        raise InputError(f"not a simple comparison on a known column: {expr!r}; use "
                         f"COLUMN OP NUMBER with OP one of <, <=, >, >=, ==, != and COLUMN one "
                         f"of {', '.join(NUMERIC)}", field="--where")
    value = m.group(3).lower()
    return m.group(1), m.group(2), 1.0 if value == "true" else 0.0 if value == "false" else float(value)


def apply_where(df: pd.DataFrame, expressions: list[str]) -> pd.DataFrame:
    ops = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}
    mask = np.ones(len(df), dtype=bool)
    for expr in expressions:
        col, op, value = parse_where(expr)
        values = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
        mask &= ops[op](values, value) & ~np.isnan(values)
    return df[mask]


def rank(df: pd.DataFrame, objective: str | None, top: int | None) -> pd.DataFrame:
    if objective:
        if objective not in OBJECTIVES:
            raise InputError(f"unknown objective {objective!r}; use {', '.join(OBJECTIVES)}",
                             field="--objective")
        col, ascending = OBJECTIVES[objective]
        df = df[df["fits"]].sort_values([col, "gpus"], ascending=[ascending, True], kind="stable")
    return df.head(top) if top else df
