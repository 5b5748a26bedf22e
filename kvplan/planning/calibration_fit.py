"""Fit the performance model's efficiencies on measured serving runs, per (GPU, engine).

Eleven terms, each named in every output that uses them (``kvplan.core.perf.Efficiency``):
HBM efficiency, FLOP efficiency, attention's and the routed experts' factors on them, a fixed
cost per engine step and one per decoder layer per step, one per running sequence per step,
the all-reduce latency per call, the host's TTFT (per request and per prompt token) and the
benchmark's start-up share. The per-layer cost is what a model's depth adds to each step
(kernel launches, the fixed latency of small kernels): with it beside the per-step cost the
held-out half went from TPOT 11.7% / 32.7% (median / p90) to 10.8% / 30.5%, and leaving one
model family out from 19.8% to 18.7% median (``benchmarks/calibration_by_model.py``). The
loss is a robust (Cauchy) mean of the log errors of TPOT and of TTFT,
``s^2 log(1 + (log(pred / meas) / s)^2)`` with ``s = ROBUST_SCALE`` (so +10% and -10% weigh
alike, and a sweep that disagrees with the others - another engine build, an unrecorded
setting - cannot drag the fit: on the held-out half it beats the plain squared error, 13.6%
-> 11.9% median TPOT error); Nelder-Mead (numpy only) from a grid of starts, each term kept in its range by a
transform (efficiencies through a logistic, times through an exponential).

Held-out accuracy: rows are split by measured sweep (``MeasuredRun.group``: one source file,
workflow run or config), never by random rows; the fit sees one half, errors are reported on
the other (``split``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from ..core.perf import Efficiency, StepTerms, step_time
from ..loaders.serving_calibration import TIME_RANGE
from .bench_predict import RowTerms

PARAMS = ("hbm_bandwidth", "flops", "attention", "moe", "step_overhead_s", "layer_overhead_s",
          "sequence_overhead_s", "allreduce_latency_s",
          "host_ttft_s", "host_ttft_per_prompt_token_s", "startup_share")
# efficiencies in (LOW, 1]; times in seconds between these bounds
EFF_LOW = 0.05
# (TIME_RANGE lives with the calibration files, whose reader bounds each term by it)
#: the deepest model's layers over the shallowest's that a fit needs to tell the per-layer cost
#: from the per-step cost (b300 vLLM's rows, all of 60-62 layers, could not: moving its
#: 61 us per layer into the step changed its loss by 0.04%)
DEPTH_SPREAD = 1.25
TTFT_WEIGHT = 0.5
ROBUST_SCALE = 0.25  # log-error scale of the Cauchy loss (about 28%)
#: the fewest timed rows a fit takes: two per fitted term (eleven terms from eight rows would
#: fit anything and predict nothing)
MIN_ROWS = 2 * len(PARAMS)


def held_out(t: RowTerms) -> bool:
    """The split: half the measured sweeps (by a stable hash of the sweep) are held out."""
    import hashlib

    return int(hashlib.sha1(t.run.group.encode()).hexdigest(), 16) % 2 == 1


class _Arrays:
    """The rows' terms as numpy arrays (one entry per row): per step kind (decode, mixed,
    burst) a ``StepTerms`` of arrays, and the hardware figures ``step_time`` reads, so the
    core's own formula evaluates every row at once."""

    def __init__(self, rows: list[RowTerms]):
        from types import SimpleNamespace

        def col(fn):
            return np.array([float(fn(t)) for t in rows])

        def stack(kind: str) -> StepTerms:
            return StepTerms(**{f.name: col(lambda t, n=f.name: getattr(getattr(t, kind), n))
                                for f in fields(StepTerms)})

        self.n = len(rows)
        self.terms = {k: stack(k) for k in ("decode", "mixed", "burst")}
        self.hw = SimpleNamespace(hbm_bytes_per_s=col(lambda t: t.step.hbm_bytes_per_s),
                                  flops_per_s=col(lambda t: t.step.flops_per_s),
                                  link_bytes_per_s=col(lambda t: t.step.link_bytes_per_s))
        self.pp = col(lambda t: t.step.pp)
        self.share = col(lambda t: t.shape.chunk_share)
        self.chunks = col(lambda t: t.shape.chunks)
        self.users = col(lambda t: t.shape.users)
        self.slots = col(lambda t: t.shape.slots)
        self.osl = col(lambda t: t.shape.output_tokens)
        self.isl = col(lambda t: t.run.prompt_tokens)
        self.burst_steps = col(lambda t: t.shape.burst_steps)
        self.known_share = np.array([np.nan if t.shape.startup_share is None
                                     else t.shape.startup_share for t in rows])
        self.tpot = np.array([t.run.tpot_s or np.nan for t in rows])
        self.ttft = np.array([t.run.ttft_s or np.nan for t in rows])

    def step(self, kind: str, e: Efficiency):
        return self.pp * step_time(self.hw, self.terms[kind], e).seconds  # type: ignore[arg-type]

    def times(self, e: Efficiency):
        """(TTFT, TPOT) of every row: ``kvplan.core.serving.loop_times`` on arrays."""
        from ..core.serving import LoopShape, loop_times

        shape = LoopShape(self.users, self.slots, self.isl, self.osl, self.chunks, None, None,
                          self.share, self.burst_steps)
        share = np.where(np.isnan(self.known_share), e.startup_share, self.known_share)
        lt = loop_times(shape, self.step("decode", e), self.step("mixed", e), self.step("burst", e),
                        e.host_ttft_s + e.host_ttft_per_prompt_token_s * self.isl, share)
        return lt.ttft_s, lt.tpot_s


def _decode(x: np.ndarray, base: Efficiency) -> Efficiency:
    values: dict = {}
    for name, v in zip(PARAMS, np.clip(x, -50.0, 50.0), strict=True):
        if name in TIME_RANGE:
            lo, hi = TIME_RANGE[name]
            values[name] = float(lo * (hi / lo) ** (1 / (1 + np.exp(-v))))
        elif name == "startup_share":
            values[name] = float(1 / (1 + np.exp(-v)))
        else:
            values[name] = float(EFF_LOW + (1 - EFF_LOW) / (1 + np.exp(-v)))
    return replace(base, **values)


def _loss(a: _Arrays, e: Efficiency) -> float:
    ttft, tpot = a.times(e)
    lt = np.log(tpot / a.tpot)
    lf = np.log(ttft / a.ttft)
    lt = lt[np.isfinite(lt)]
    lf = lf[np.isfinite(lf)]

    def robust(x: np.ndarray) -> float:
        s = ROBUST_SCALE
        return float(np.mean(s * s * np.log1p((x / s) ** 2))) if len(x) else 0.0

    return robust(lt) + TTFT_WEIGHT * robust(lf)


def _nelder_mead(f, x0: np.ndarray, step: float = 1.0, iters: int = 600) -> tuple[np.ndarray, float]:
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        refl = centre + (centre - pts[-1])
        fr = f(refl)
        if fr < vals[0]:
            exp = centre + 2 * (centre - pts[-1])
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = centre + 0.5 * (pts[-1] - centre)
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
        if abs(vals[-1] - vals[0]) < 1e-10:
            break
    i = int(np.argmin(vals))
    return pts[i], vals[i]


@dataclass(frozen=True)
class Fitted:
    efficiency: Efficiency
    rows: int
    loss: float


def timed(rows: list[RowTerms]) -> list[RowTerms]:
    """The rows a fit can use: those that measured TTFT or TPOT."""
    return [t for t in rows if t.run.tpot_s or t.run.ttft_s]


def fit(rows: list[RowTerms], source: str) -> Fitted:
    """The efficiency that best predicts ``rows`` (at least ``MIN_ROWS`` timed ones)."""
    rows = timed(rows)
    if len(rows) < MIN_ROWS:
        raise ValueError(f"{len(rows)} rows with TTFT or TPOT; a fit of {len(PARAMS)} terms "
                         f"needs {MIN_ROWS}")
    a = _Arrays(rows)
    base = Efficiency(source=source, calibrated=True)
    # the per-layer cost is told from the per-step cost only by rows of models of unlike
    # depth; without them it is left out (0), or any split of the two would fit alike
    depths = a.terms["decode"].layers
    pin_layers = float(np.max(depths)) < DEPTH_SPREAD * float(np.min(depths))

    def f(x):
        e = _decode(x, base)
        return _loss(a, replace(e, layer_overhead_s=0.0) if pin_layers else e)

    best = None
    for start in (np.zeros(len(PARAMS)),
                  np.array([1.5, 0.0, 0.5, -0.5, 0.0, 0.0, -1.0, 0.0, -1.0, -1.0, -2.0]),
                  np.array([0.5, -1.0, -0.5, -1.5, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5, -1.0])):
        x, v = _nelder_mead(f, start)
        x, v = _nelder_mead(f, x, step=0.3)
        if best is None or v < best[1]:
            best = (x, v)
    assert best is not None
    e = _decode(best[0], base)
    # a term the rows cannot see keeps kvplan's default (its fitted value was arbitrary)
    d = Efficiency()
    if pin_layers:
        e = replace(e, layer_overhead_s=d.layer_overhead_s)
    dec = a.terms["decode"]
    if not (np.any(dec.expert_bytes) or np.any(dec.expert_flops)):
        e = replace(e, moe=d.moe)
    if not np.any(dec.comm_calls):
        e = replace(e, allreduce_latency_s=d.allreduce_latency_s)
    return Fitted(e, len(rows), best[1])


def predicted_times(rows: list[RowTerms], e: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    return _Arrays(rows).times(e)
