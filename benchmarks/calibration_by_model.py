"""A stricter held-out check of the calibration fit: leave one model family out. For each
(GPU, engine) and each family measured there, fit on the other families' rows only and judge
the left-out family (a new model on known hardware and engine). Families with no other family
on their (GPU, engine) are skipped.

    python benchmarks/calibration_by_model.py
"""

import collections
import os
import statistics
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvplan.loaders.benchmarks import read_all  # noqa: E402
from kvplan.planning.bench_predict import row_terms  # noqa: E402
from kvplan.planning.calibration_fit import MIN_ROWS, fit, predicted_times  # noqa: E402

DATA = Path(__file__).parent / "data" / "aiconfigurator_silicon_sample.csv"


def main() -> None:
    runs, _ = read_all([DATA])  # repeated measurements counted once
    terms, _ = row_terms(runs)
    groups = collections.defaultdict(list)
    for t in terms:
        groups[t.key].append(t)
    tpot, ttft, by_family = [], [], collections.defaultdict(list)
    for _key, rows in sorted(groups.items()):
        for fam in sorted({t.run.family for t in rows}):
            train = [t for t in rows if t.run.family != fam]
            test = [t for t in rows if t.run.family == fam]
            if len(train) < MIN_ROWS:
                continue
            f = fit(train, "leave-one-family-out")
            a, b = predicted_times(test, f.efficiency)
            e_tpot = [float(p / t.run.tpot_s - 1) for p, t in zip(b, test, strict=True)]
            tpot += e_tpot
            ttft += [float(p / t.run.ttft_s - 1) for p, t in zip(a, test, strict=True)]
            by_family[fam] += e_tpot
    def line(name, v):
        a = sorted(abs(x) for x in v)
        return (f"{name}: {len(v)} rows, median |error| {statistics.median(a):.1%}, p90 "
                f"{a[int(0.9 * len(a))]:.1%}, signed median {statistics.median(v):+.1%}")
    print(line("TPOT", tpot))
    print(line("TTFT", ttft))
    for fam, v in sorted(by_family.items()):
        print("  " + line(f"TPOT {fam}", v))


if __name__ == "__main__":
    main()
