"""``kvplan validate --benchmarks``: every measured serving row re-predicted by the code
``kvplan plan`` uses, with the calibration for its (GPU, engine) when one exists; errors per
row and per group (GPU, engine, model family, TP, concurrency), medians and p90s.

Error = predicted / measured - 1 (negative: kvplan is optimistic about time). A row's
throughput is ``derived`` when the format measured none (AIConfigurator's silicon CSV): then
it is the closed-loop throughput of the measured TTFT and TPOT, and its error follows theirs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..core.benchmark import MeasuredRun, RowProblem
from ..core.perf import Efficiency
from .bench_predict import RowTerms, predict_detail, row_engine, row_terms

METRICS = ("tpot", "ttft", "throughput")


@dataclass(frozen=True)
class RowResult:
    run: MeasuredRun
    calibration: str
    predicted: dict[str, float]
    measured: dict[str, float]
    errors: dict[str, float]
    detail: dict = field(default_factory=dict)  # slots, budget, step times, efficiency terms

    @property
    def ok(self) -> bool | None:
        if self.run.tolerance is None:
            return None
        return all(abs(e) <= self.run.tolerance for e in self.errors.values())


@dataclass(frozen=True)
class Stats:
    rows: int
    median_abs_error: float
    p90_abs_error: float
    signed_median_error: float


def stats(errors: list[float]) -> Stats | None:
    if not errors:
        return None
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, int(0.9 * len(a)))]
    return Stats(len(errors), statistics.median(a), p90, statistics.median(errors))


def layout_label(run) -> str:
    """``tp 8`` for tensor parallelism alone; ``dp 8 x tp 1, ep 8`` with attention DP / EP;
    ``disagg`` for disaggregated rows (their layouts vary within a sweep)."""
    if run.disaggregated:
        return "disagg"
    if run.dp == 1 and run.ep == 1:
        return f"tp {run.tp}"
    return f"dp {run.dp} x tp {run.tp}, ep {run.ep}"


def concurrency_band(c: int | None) -> str:
    for hi, label in ((8, "1-8"), (32, "9-32"), (128, "33-128")):
        if (c or 1) <= hi:
            return label
    return ">128"


GROUPINGS = {"gpu": lambda r: r.run.gpu, "engine": lambda r: r.run.engine,
             "family": lambda r: r.run.family, "tp": lambda r: str(r.run.tp),
             "concurrency": lambda r: concurrency_band(r.run.concurrency),
             "calibration": lambda r: r.calibration, "layout": lambda r: layout_label(r.run)}


@dataclass
class Report:
    results: list[RowResult]
    problems: list[RowProblem]
    files: list[str]
    assumptions: list[str] = field(default_factory=list)

    def overall(self, metric: str, results: list[RowResult] | None = None) -> Stats | None:
        return stats([r.errors[metric] for r in (self.results if results is None else results)
                      if metric in r.errors])

    def by(self, grouping: str) -> dict[str, dict[str, Stats | None]]:
        key = GROUPINGS[grouping]
        groups: dict[str, list[RowResult]] = {}
        for r in self.results:
            groups.setdefault(key(r), []).append(r)
        return {g: {m: self.overall(m, rs) for m in METRICS} for g, rs in sorted(groups.items())}


def efficiency_for_row(t: RowTerms, cache: dict, uncalibrated: bool) -> Efficiency:
    from .deployment import efficiency_for, spec_efficiency

    sparse = t.plan.request.model.lightning_indexers
    key = (*t.key, sparse)
    if key not in cache:
        gpu = t.plan.request.gpu
        cache[key] = spec_efficiency(gpu) if uncalibrated else efficiency_for(
            gpu, None, None, t.run.engine, sparse)
    return cache[key]


def evaluate_rows(terms: list[RowTerms], efficiency=None, uncalibrated: bool = False
                  ) -> list[RowResult]:
    cache: dict = {}
    out = []
    for t in terms:
        e = efficiency(t) if efficiency else efficiency_for_row(t, cache, uncalibrated)
        lt, detail = predict_detail(t, e)
        detail["efficiency"] = {k: v for k, v in e.__dict__.items() if k != "source"}
        pred = {"tpot": float(lt.tpot_s), "ttft": float(lt.ttft_s),
                "throughput": float(lt.output_tokens_per_s)}
        meas = {"tpot": t.run.tpot_s, "ttft": t.run.ttft_s, "throughput": t.run.output_tokens_per_s}
        measured = {k: v for k, v in meas.items() if v}
        errors = {k: pred[k] / v - 1 for k, v in measured.items()}
        label = e.source if e.calibrated or "uncalibrated" in e.source else \
            f"uncalibrated ({e.source})"
        out.append(RowResult(t.run, label, pred, measured, errors, detail))
    return out


def validate_benchmarks(paths: list[Path], meta: dict[str, str] | None = None,
                        uncalibrated: bool = False) -> Report:
    from ..loaders.benchmarks import read_all

    runs, problems = read_all(paths, meta)
    terms, more = row_terms(runs)
    assumptions = sorted({a for r in runs for a in r.assumptions}
                         | {a for r in runs if (a := row_engine(r)[1])})
    results = evaluate_rows(terms, uncalibrated=uncalibrated)
    shares = sorted({(r.run.gpu, r.run.engine, round(r.detail["startup_share"], 3))
                     for r in results if not r.detail["startup_share_recorded"]})
    if shares:
        assumptions.append("num_prompts not recorded: the start-up wave's share of the requests "
                           "is the calibration's fitted startup_share (0 uncalibrated): "
                           + ", ".join(f"{g} {e} {s:g}" for g, e, s in shares))
    saturated = sum(r.detail["prefill_queue_saturated"] for r in results)
    if saturated:
        assumptions.append(f"{saturated:,} rows saturate the prefill queue (utilisation capped "
                           "at 0.95 in the M/D/1 wait): their TTFT is a floor")
    if any(r.run.disaggregated for r in results):
        assumptions.append("disaggregated rows: each prefill DP rank prefills one prompt at a "
                           "time in chunks of its max_num_batched_tokens (an M/D/1 queue at the "
                           "users' rate, and the start-up wave); the decode ranks never prefill")
    return Report(results, problems + more, [str(p) for p in paths], assumptions)
