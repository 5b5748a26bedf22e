"""The HTML report's plots for the best configurations: concurrency vs context, cost vs
position (``kvplan.planning.curve``), and each GPU's memory budget as a stacked bar. Pure."""

from __future__ import annotations

from ..core.units import GiB
from ..planning.curve import series
from ..planning.fit_pools import pool_usage_fn, sequences_fitting
from ..planning.scenario import Outcome
from .svg import line_chart, stacked_bars


def contexts(max_len: int) -> list[int]:
    """1k, 2k, 4k, ... up to and including ``max_len``."""
    xs, n = [], 1024
    while n < max_len:
        xs.append(n)
        n *= 2
    return xs + [max_len]


def _sparse(xs: list[int]) -> list[float]:
    """At most about 7 of the plotted contexts as x ticks."""
    step = max(1, -(-len(xs) // 7))
    return [float(x) for x in xs[::step]]


def _label(o: Outcome) -> str:
    c = o.candidate
    return f"{c.gpu.key} tp{c.tp}x{c.pp} {o.fit.kv_format}"


def concurrency_plot(outcomes: list[Outcome], max_len: int, prefix_tokens: int = 0) -> str:
    xs = contexts(max_len)
    data = []
    for o in outcomes:  # with the scenario's shared prefix, as the table counts them
        use = pool_usage_fn(o.fit, prefix_tokens)
        data.append((_label(o), [(float(n), float(sequences_fitting(use(n)))) for n in xs
                                 if n > prefix_tokens]))
    return line_chart("Requests the KV pool holds, by context", "context (tokens)",
                      "concurrent requests per replica", data, logx=True, logy=True,
                      xticks=_sparse(xs))


def cost_plot(outcomes: list[Outcome], max_len: int) -> str:
    xs = contexts(max_len)
    data = []
    for o in outcomes:
        r = o.fit
        hourly = o.price_usd_per_gpu_hour * r.request.tp * r.request.pp
        s = series(_label(o), r, o.step, x="position", y="cost", xs=xs, context_tokens=max_len,
                   batch=max(o.evaluation.batch, 1), price_usd_per_hour=hourly)
        data.append((s.label, [(float(p.x), p.y) for p in s.points if p.y is not None]))
    return line_chart("Cost of the token at position n", "position (tokens)",
                      "USD per million output tokens", data, logx=True, logy=False,
                      xticks=_sparse(xs))


def budget_bars(outcomes: list[Outcome]) -> str:
    bars = []
    for o in outcomes:
        b = o.fit.budget
        reserved = b.total_bytes - b.usable_bytes
        kv_rest = b.usable_bytes - b.weights_bytes - b.activation_bytes - b.runtime_overhead_bytes \
            - b.kv_pool_bytes
        segs = [("weights", b.weights_bytes / GiB), ("activations", b.activation_bytes / GiB),
                ("runtime", b.runtime_overhead_bytes / GiB), ("KV pool", b.kv_pool_bytes / GiB),
                ("unused", max(kv_rest, 0) / GiB), ("held back", max(reserved, 0) / GiB)]
        bars.append((_label(o), segs))
    return stacked_bars("Memory per GPU (GiB)", bars, "GiB")
