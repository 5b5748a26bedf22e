"""Measured rows re-predicted two ways: the closed-loop steady-state model that `kvplan
validate --benchmarks` and the fits use (kvplan/core/serving.py), and the step simulator of
`kvplan plan --simulate` (kvplan/core/scheduler_sim.py), both with the shipped calibrations,
on the held-out half of AIConfigurator's silicon CSV (a seeded sample of it: the simulator
steps every request, about 0.15 s a row).

    python benchmarks/simulator_accuracy.py [--rows 150] [--prompts-per-user 3]
"""

import argparse
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvplan.core.scheduler_sim import SimLimits, SimRequest, simulate  # noqa: E402
from kvplan.loaders.benchmarks import read_all  # noqa: E402
from kvplan.planning.bench_predict import predict, row_terms  # noqa: E402
from kvplan.planning.bench_validate import efficiency_for_row  # noqa: E402
from kvplan.planning.calibration_fit import held_out  # noqa: E402

DATA = Path(__file__).parent / "data" / "aiconfigurator_silicon_sample.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--prompts-per-user", type=int, default=3)
    args = ap.parse_args()
    runs, _ = read_all([DATA])  # repeated measurements counted once
    terms, _ = row_terms(runs)
    terms = [t for t in terms if held_out(t) and t.run.concurrency <= 256]
    random.Random(0).shuffle(terms)
    terms = terms[:args.rows]
    cache: dict = {}
    err = {k: [] for k in ("tpot model", "tpot sim", "ttft model", "ttft sim")}
    t0 = time.perf_counter()
    for t in terms:
        e = efficiency_for_row(t, cache, False)
        r = t.run
        lt = predict(t, e)
        reqs = [SimRequest(0.0, r.prompt_tokens, r.output_tokens)] * (args.prompts_per_user * r.concurrency)
        lim = SimLimits(t.plan.max_num_seqs, t.plan.max_num_batched_tokens, t.plan.kv_pool_tokens,
                        t.plan.block_size_tokens)
        s = simulate(t.step, e, lim, reqs, users=r.concurrency)
        err["tpot model"].append(lt.tpot_s / r.tpot_s - 1)
        err["ttft model"].append(lt.ttft_s / r.ttft_s - 1)
        if s.tpot_s:
            err["tpot sim"].append(statistics.fmean(s.tpot_s) / r.tpot_s - 1)
        err["ttft sim"].append(statistics.fmean(s.ttft_s) / r.ttft_s - 1)
    print(f"{len(terms)} held-out rows, {time.perf_counter() - t0:.1f} s")
    for k, v in err.items():
        a = sorted(abs(x) for x in v)
        print(f"{k:11s} median |error| {statistics.median(a):.1%}  p90 {a[int(0.9 * len(a))]:.1%}  "
              f"signed median {statistics.median(v):+.1%}")


if __name__ == "__main__":
    main()
