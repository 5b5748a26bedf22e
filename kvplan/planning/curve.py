"""Series for ``kvplan curve``: concurrency, throughput, TPOT or cost along context, batch or
position, for one planned deployment. Pure.

- x = ``context``: each point is a sequence length n; the batch is ``min(batch, concurrency
  at n)`` (``batch`` defaults to the engine's ``max_num_seqs``), so past the memory cliff the
  batch shrinks and then nothing fits (y is None).
- x = ``batch``: B sequences at a fixed context; points past the cliff (B > concurrency) have
  no y.
- x = ``position``: the marginal cost (or TPOT, throughput) of generating the token at
  position n: the KV each sequence holds at n limits the batch and lengthens the step. The
  series carries a least-squares ``base + slope x n`` fit of its finite points.

Under attention data parallelism (``dp`` ranks, ``r.request.dp``) the batch and the
concurrency are one DP rank's (each rank runs its own batch from its own KV pool; the step
model's MoE layers see every rank's tokens), while throughput and cost are the whole
deployment's: dp x B / TPOT tokens/s, at the price of all tp x pp x dp GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.perf import StepModel, cost_per_mtok_usd, tokens_per_s, tpot_s
from .fit_pools import concurrency_at
from .fit_types import FitResult

X_AXES = ("context", "batch", "position")
Y_AXES = ("concurrency", "throughput", "tpot", "cost")
Y_UNITS = {"concurrency": "sequences", "throughput": "output tokens/s per replica",
           "tpot": "ms per output token", "cost": "USD per million output tokens"}


@dataclass(frozen=True)
class Point:
    x: int
    y: float | None
    batch: int
    concurrency: int


@dataclass(frozen=True)
class Series:
    label: str
    x: str
    y: str
    points: tuple[Point, ...]
    cliff_one: int | None  # first x where only one sequence fits
    cliff_zero: int | None  # first x where none fits
    fit_base: float | None = None
    fit_slope: float | None = None


def _y(y: str, sm: StepModel, batch: int, n: int, conc: int, price_usd_per_hour: float,
       ranks: int = 1):
    """One point's y: ``batch`` and ``conc`` per DP rank; throughput (and the cost it pays for,
    ``price_usd_per_hour`` being every GPU's) over ``ranks`` DP ranks."""
    if y == "concurrency":
        return float(conc)
    if batch < 1 or batch > conc:
        return None
    if y == "throughput":
        return float(ranks * tokens_per_s(sm, batch, n))
    if y == "tpot":
        return float(tpot_s(sm, batch, n)) * 1000
    return float(cost_per_mtok_usd(price_usd_per_hour, ranks * tokens_per_s(sm, batch, n)))


def linear_fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares (base, slope) of y = base + slope x x."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return my - slope * mx, slope


def series(label: str, r: FitResult, sm: StepModel, *, x: str, y: str, xs: list[int],
           context_tokens: int, batch: int | None, price_usd_per_hour: float) -> Series:
    """``batch`` (and the xs along ``batch``) per DP rank of ``r``; ``price_usd_per_hour`` of
    the whole deployment (tp x pp x dp GPUs)."""
    points = []
    ranks = r.request.dp
    target = batch or r.max_num_seqs
    cache: dict[int, int] = {}

    def conc(n: int) -> int:
        if n not in cache:
            cache[n] = concurrency_at(r, n)
        return cache[n]

    for v in xs:
        if x == "batch":
            n, c = context_tokens, conc(context_tokens)
            b = v
        else:
            n, c = v, conc(v)
            b = min(target, c)
        points.append(Point(v, _y(y, sm, b, n, c, price_usd_per_hour, ranks), b, c))
    one = next((p.x for p in points if p.concurrency <= 1), None) if x != "batch" else None
    zero = next((p.x for p in points if p.concurrency == 0), None) if x != "batch" else None
    base = slope = None
    if x == "position":
        fit = linear_fit([(p.x, p.y) for p in points if p.y is not None])
        if fit:
            base, slope = fit
    return Series(label, x, y, tuple(points), one, zero, base, slope)
