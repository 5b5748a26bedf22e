"""``kvplan sweep``: a grid over models x GPUs x TP x PP x DP x EP x KV formats x contexts x
batches, as column arrays per planned configuration (``kvplan.report.sweep_table`` makes the
DataFrame).

Each (model, GPU, TP, PP, DP, EP, KV format) is planned once with ``plan_fit`` (at the grid's
longest context); its concurrency is evaluated per context, and the roofline formulas of
``kvplan.core.perf`` run over the whole context x batch block as numpy arrays (no Python loop per
row).

Under attention data parallelism (``dp`` ranks of tp x pp GPUs) ``batch`` and
``max_concurrency`` are one DP rank's (each rank runs its own batch from its own KV pool) and
``sequences`` = batch x dp the deployment's running sequences; ``gpus`` = tp x pp x dp,
``tokens_per_s`` = dp x batch / TPOT (the deployment), ``tokens_per_s_per_gpu`` that / gpus,
and every cost is at the price of all ``gpus`` (each rank prefills its own prompts: input
tokens/s = dp x context / TTFT; a request pays one rank's share). ``tpot_ms``, ``ttft_ms``,
``kv_read_share`` and ``compute_bound_batch`` are one rank's (its GPUs' step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np

from ..core.errors import InputError, KvplanError
from ..core.perf import compute_bound_batch, cost_per_mtok_usd, decode_step, prefill_s, tpot_s
from .fit_pools import concurrency_at
from .model_limits import ALLOW_FLAG, limit_words

MAX_ROWS = 1_000_000  # without --yes
#: the most rows even with --yes: the table is held in memory (about 500 B a row, 5 GB here)
HARD_MAX_ROWS = 10_000_000


@dataclass(frozen=True)
class Grid:
    models: list[str]
    gpus: list[str]
    tps: list[int]
    pps: list[int]
    kv_dtypes: list[str]
    contexts: list[int]
    batches: list[int]
    engine: str = "vllm"
    weight_dtype: str | None = None
    price: float | None = None
    request: tuple[int, int] | None = None  # (prompt, output) tokens for cost_per_request_usd
    assume_standard_attention: bool = False  # read unknown layouts as standard decoders
    hbm_efficiency: float | None = None
    flops_efficiency: float | None = None
    allow_long_max_model_len: bool = False  # plan contexts past a model's limit (stated)
    #: attention data-parallel ranks (each tp x pp GPUs, its own sequences and KV pool) and
    #: expert-parallel degrees (GPUs of a stage the routed experts are spread over)
    dps: list[int] = field(default_factory=lambda: [1])
    eps: list[int] = field(default_factory=lambda: [1])

    @property
    def configs(self) -> int:
        return (len(self.models) * len(self.gpus) * len(self.tps) * len(self.pps)
                * len(self.dps) * len(self.eps) * len(self.kv_dtypes))

    @property
    def rows(self) -> int:
        return self.configs * len(self.contexts) * len(self.batches)


def _unplanned(base: dict, model, grid: Grid, kv: str, contexts: np.ndarray,
               batches: np.ndarray, error: str, **extra) -> dict:
    """The rows of a configuration that was not planned, with the reason in ``error``."""
    kv_name, wd_name = _names(model, grid, kv)
    batch = np.tile(batches, len(contexts))
    return {**base, "kv_dtype": kv_name, "weight_dtype": wd_name,
            "context_tokens": np.repeat(contexts, len(batches)),
            "batch": batch, "sequences": batch * base["dp"], "fits": False, "error": error,
            **extra}


def with_row_errors(cols: dict, over: np.ndarray, limit_error: str) -> dict:
    """``cols`` with an ``error`` per row: why a row does not fit (past the model's context
    limit, no whole sequence in the pool, a batch over what the pool holds), else empty."""
    reps = len(cols["context_tokens"]) // len(over)
    over_rows = np.repeat(over, reps)
    conc, batch = cols["max_concurrency"], cols["batch"]
    error = np.where(conc <= 0, "no whole sequence of this context fits the KV pool",
                     np.where(batch > conc, np.char.add(np.char.add(
                         "batch exceeds the ", conc.astype(str)), " sequences the pool holds"),
                              ""))
    if over_rows.any():
        error = np.where(over_rows, limit_error, error)
        cols = {k: (np.where(over_rows, np.nan, v) if isinstance(v, np.ndarray)
                    and v.dtype.kind == "f" else v) for k, v in cols.items()}
        cols["fits"] = cols["fits"] & ~over_rows
        cols["max_concurrency"] = np.where(over_rows, 0, conc)
    return {**cols, "error": error.astype(object)}


def check(grid: Grid, yes: bool) -> None:
    if grid.rows == 0:
        raise InputError("the grid is empty", field="sweep")
    if grid.rows > HARD_MAX_ROWS:
        raise InputError(f"the grid has {grid.rows:,} rows, over the {HARD_MAX_ROWS:,} a sweep "
                         "holds in memory (about 500 B a row); split it", field="sweep")
    if grid.rows > MAX_ROWS and not yes:
        raise InputError(f"the grid has {grid.rows:,} rows (over {MAX_ROWS:,}); narrow it or "
                         "pass --yes", field="sweep")
    _check_names(grid)
    if grid.price is not None and not (np.isfinite(grid.price) and grid.price > 0):
        raise InputError(f"must be positive, got {grid.price}", field="--price")
    for values, flag in ((grid.dps, "--dp"), (grid.eps, "--ep")):
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int | np.integer)
               or v < 1]
        if bad:
            raise InputError(f"must be positive integers, got {bad[0]!r}", field=flag)


def block(plan, sm, contexts: np.ndarray, batches: np.ndarray, price_per_hour: float,
          request: tuple[int, int] | None = None) -> dict:
    """The context x batch block of one planned configuration, as column arrays.

    ``ttft_ms`` and ``cost_per_mtok_input_usd`` are for a prompt of ``context_tokens``;
    ``cost_per_request_usd`` (with ``request = (prompt, output)``) is the prompt's prefill
    plus its share of ``output`` decode steps of the batch, at context prompt + output / 2.
    ``batches`` are per DP rank and ``price_per_hour`` is every GPU's (tp x pp x dp): tokens/s
    and costs are the deployment's, dp ranks each running the batch (module docstring)."""
    conc_by_ctx = np.array([concurrency_at(plan, int(n)) for n in contexts], dtype=np.int64)
    n = np.repeat(contexts, len(batches)).astype(np.float64)
    b = np.tile(batches, len(contexts)).astype(np.float64)
    conc = np.repeat(conc_by_ctx, len(batches))
    ranks = plan.request.dp  # DP ranks, each running a batch of b from its own pool
    tpot = tpot_s(sm, b, n)
    tps = ranks * b / tpot  # the deployment's
    fits = (b <= conc) & (conc > 0)
    gpus = plan.request.tp * plan.request.pp * ranks
    nan = np.where(fits, 1.0, np.nan)
    chunk = float(plan.max_num_batched_tokens)
    ttft = prefill_s(sm, n, chunk)
    step = decode_step(sm, b, n)
    per_request = np.full(len(n), np.nan)
    if request is not None:
        prompt, out = request
        mid = prompt + out / 2
        per_request = price_per_hour / ranks / 3600 * (prefill_s(sm, float(prompt), chunk)
                                                       + out * tpot_s(sm, b, mid) / b) * nan
    return {
        "context_tokens": n.astype(np.int64), "batch": b.astype(np.int64),
        "sequences": b.astype(np.int64) * ranks, "fits": fits,
        "max_concurrency": conc, "tpot_ms": tpot * 1000 * nan,
        "ttft_ms": ttft * 1000 * np.where(conc > 0, 1.0, np.nan),
        "tokens_per_s": tps * nan, "tokens_per_s_per_gpu": tps / gpus * nan,
        "cost_per_mtok_usd": cost_per_mtok_usd(price_per_hour, tps) * nan,
        "cost_per_mtok_input_usd": cost_per_mtok_usd(price_per_hour, ranks * n / ttft)
        * np.where(conc > 0, 1.0, np.nan),
        "cost_per_request_usd": per_request,
        "kv_read_share": step.kv_bytes / step.bytes * nan,
        "compute_bound_batch": np.repeat(np.array([compute_bound_batch(sm, int(c))
                                                   for c in contexts]), len(batches)),
    }


def _names(model, grid: Grid, kv: str) -> tuple[str, str]:
    """The resolved KV and weight format names (as planned rows show them), or the raw ones."""
    from ..loaders.quant_config import weight_format
    from .fit import resolve_kv_format

    try:
        kv = resolve_kv_format(model, grid.engine, kv)
    except KvplanError:
        pass
    try:
        return kv, weight_format(model, grid.weight_dtype).name
    except KvplanError:
        return kv, grid.weight_dtype or ""


def sweep_columns(grid: Grid, progress: Callable[[int], None] | None = None
                  ) -> Iterator[dict[str, Any]]:
    """The grid, one planned configuration at a time: a dict of columns (scalars, or arrays of
    its context x batch rows). A configuration that cannot be planned (a TP degree that does not
    divide the heads, a DP / EP layout the engine does not run, ...) gives rows with ``fits``
    false and the reason in ``error``.
    ``kvplan.report.sweep_table.sweep`` joins them into the DataFrame."""
    from ..loaders.hardware import load_gpu
    from ..loaders.resolve import load_model
    from .deployment import efficiency_for, plan

    contexts = np.array(grid.contexts, dtype=np.int64)
    batches = np.array(grid.batches, dtype=np.int64)
    per_config = len(contexts) * len(batches)
    from ..loaders.hf_params import weight_inventory

    models = [load_model(m, assume_standard_attention=grid.assume_standard_attention)
              for m in grid.models]
    specs = [load_gpu(g) for g in grid.gpus]
    for m in models:
        # contexts past the model's limit: their rows say so; the rest are planned
        over = np.zeros(len(contexts), dtype=bool)
        if not grid.allow_long_max_model_len and m.context_limit is not None:
            over = contexts > m.context_limit.tokens
        limit_error = (f"context exceeds {limit_words(m)}; pass {ALLOW_FLAG} to plan it"
                       if over.any() else "")
        planned = contexts[~over]  # empty only when every row is past the limit (not planned)
        try:
            weights = weight_inventory(m)
        except KvplanError:
            weights = None  # each configuration then reports the reason in its rows
        for spec in specs:
            eff = efficiency_for(spec, grid.hbm_efficiency, grid.flops_efficiency,
                                 grid.engine, m.lightning_indexers)
            for tp, pp, dp, ep in product(grid.tps, grid.pps, grid.dps, grid.eps):
                price = (grid.price if grid.price is not None else
                         spec.price_usd_per_gpu_hour) * tp * pp * dp  # every GPU's
                for kv in grid.kv_dtypes:
                    base = {"model": m.name, "gpu": spec.key, "tp": tp, "pp": pp, "dp": dp,
                            "ep": ep, "gpus": tp * pp * dp, "engine": grid.engine,
                            "price_usd_per_hour": price}
                    if over.all():  # every context is past the model's limit
                        yield _unplanned(base, m, grid, kv, contexts, batches, limit_error,
                                         max_concurrency=0)
                        if progress:
                            progress(per_config)
                        continue
                    try:
                        r, sm = plan(m, spec, kv_dtype=kv, weight_dtype=grid.weight_dtype,
                                     engine=grid.engine, tp=tp, pp=pp, dp=dp, ep=ep,
                                     context_tokens=int(planned.max()), efficiency=eff,
                                     weights=weights,
                                     allow_long_max_model_len=grid.allow_long_max_model_len)
                    except KvplanError as e:
                        yield _unplanned(base, m, grid, kv, contexts, batches, str(e))
                    else:
                        cols = block(r, sm, contexts, batches, price, grid.request)
                        yield {
                            **base, "kv_dtype": r.kv_format,
                            "weight_dtype": r.request.weight_format.name,
                            "kv_pool_bytes": r.budget.kv_pool_bytes,
                            **with_row_errors(cols, over, limit_error)}
                    if progress:
                        progress(per_config)


def _check_names(grid: Grid) -> None:
    """Every engine, KV format, weight dtype and model of the grid, checked before any row is
    computed: a typo is one error line (exit 2), not an ``error`` column on every row."""
    from ..loaders.resolve import load_model
    from ..loaders.serving_names import name_problems

    problems = name_problems([grid.engine], grid.kv_dtypes, grid.weight_dtype)
    if problems:
        key, msg = problems[0]
        raise InputError(msg, field="--" + key.replace("_", "-"))
    for name in grid.models:
        load_model(name, assume_standard_attention=grid.assume_standard_attention)
