"""Judge a change to the performance model or its fit without looking at the held-out half.

Two numbers per run (medians and p90 of |predicted / measured - 1| over TPOT, TTFT and
throughput, one fit per (GPU, engine) as ``kvplan calibrate`` makes them):

- ``inner``: the fit half alone, split again by measured sweep (a second hash) into two folds;
  each fold's fits judge the other fold, the two averaged. Decide on this one.
- ``outer``: fits on the whole fit half judging the held-out half, the figures
  ``docs/calibration.md`` reports. Look at it once, after deciding.

A change that moves ``inner`` by less than about one point is noise: the 2026-12-04 session
tried a separate MoE FLOP factor, an fp8/fp4 GEMM factor, fp8 KV for the AIConfigurator rows,
a pooled prior over GPUs, an HBM-efficiency cap and other loss weights, and each moved the
held-out TPOT median by under 0.5 point (notes of that session).

    python benchmarks/calibration_protocol.py [inner|outer|both]
"""

import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvplan.loaders.benchmarks import read_all  # noqa: E402
from kvplan.planning.bench_predict import row_terms  # noqa: E402
from kvplan.planning.bench_validate import evaluate_rows  # noqa: E402
from kvplan.planning.calibration_fit import MIN_ROWS, fit, held_out, timed  # noqa: E402

DATA = Path(__file__).parent / "data" / "aiconfigurator_silicon_sample.csv"
METRICS = ("tpot", "ttft", "throughput")


def _fold(t) -> bool:
    return int(hashlib.sha1(("inner:" + t.run.group).encode()).hexdigest(), 16) % 2 == 1


def _judge(train: list, test: list) -> dict[str, list[float]]:
    """|error| of every test row under the fits of its (GPU, engine) on ``train``."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for key in sorted({t.key for t in train}):
        fit_rows = [t for t in train if t.key == key]
        judged = [t for t in test if t.key == key]
        if not judged or len(timed(fit_rows)) < MIN_ROWS:
            continue
        e = fit(fit_rows, "protocol").efficiency
        for r in evaluate_rows(judged, efficiency=lambda _t, e=e: e):
            for m in METRICS:
                if m in r.errors:
                    out[m].append(abs(r.errors[m]))
    return out


def _summary(errors: dict[str, list[float]]) -> str:
    def p90(v: list[float]) -> float:
        return sorted(v)[int(0.9 * (len(v) - 1))]

    return "  ".join(f"{m} {statistics.median(v):.1%} / {p90(v):.1%}" for m, v in errors.items()
                     if v)


def main(mode: str) -> None:
    runs, _ = read_all([DATA])
    terms, _ = row_terms(runs)
    # the rows `kvplan calibrate` fits (calibration_build.calibrate)
    terms = [t for t in terms if t.run.dp == 1 and t.run.ep == 1 and not t.run.disaggregated
             and not t.plan.request.gpu.calibration_from and not t.plan.request.model.sparse_mla]
    fit_half = [t for t in terms if not held_out(t)]
    if mode in ("inner", "both"):
        start = time.perf_counter()
        a = [t for t in fit_half if _fold(t)]
        b = [t for t in fit_half if not _fold(t)]
        one, two = _judge(a, b), _judge(b, a)
        both = {m: one[m] + two[m] for m in METRICS}
        print(f"inner (fit half, 2 folds by sweep): {_summary(both)}  "
              f"[{time.perf_counter() - start:.0f} s]")
    if mode in ("outer", "both"):
        start = time.perf_counter()
        print(f"outer (held-out half):              "
              f"{_summary(_judge(fit_half, [t for t in terms if held_out(t)]))}  "
              f"[{time.perf_counter() - start:.0f} s]")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "both")
