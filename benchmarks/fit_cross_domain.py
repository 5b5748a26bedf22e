"""Fit the latency of a TP all-reduce over more GPUs than one NVLink domain (TP 16 / 64 over
2-8 HGX boards), on measured rows no serving calibration was fitted on, and judge it on rows
of other architectures.

The silicon sample's rows wider than a domain (TP 16 / 64 over 2-8 HGX nodes, attention DP over
nodes) run on the GPUs' calibrated in-node figures; what they lack is the per-call latency of
the inter-node NCCL protocol (NIC, switch, proxy thread), which a decode step pays on every
one of its ~120 all-reduces. One number is fitted for every GPU and engine: train on the
DeepSeek-V3 architecture (DeepSeek-V3 and R1 rows), hold out every other architecture
(Qwen3.5-397B, gpt-oss-120b, Kimi-K2.5), minimising the median |log(predicted / measured)| of
TPOT. The MoE dispatch / combine of attention DP over nodes pays the same latency per call:
judged on the held-out rows (2026-12-03, with MiniMax-M2.5's DP 4 x TP 4 rows) it took their
TPOT from 18.6% / 34.5% (-17.2%) to 16.6% / 32.5% (-9.7%); an earlier check on Kimi-K2.5's rows
alone, with older calibrations, had pointed the other way.

    python benchmarks/fit_cross_domain.py            # writes calibrations/cross_domain/latency.json
                                                     # and docs/cross-domain-fit.md
"""

import json
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvplan.loaders.benchmarks import read_all  # noqa: E402
from kvplan.planning.bench_predict import row_terms  # noqa: E402
from kvplan.planning.bench_validate import efficiency_for_row, evaluate_rows  # noqa: E402

ROOT = Path(__file__).parents[1]
DATA = ROOT / "benchmarks" / "data" / "aiconfigurator_silicon_sample.csv"
OUT = ROOT / "calibrations" / "cross_domain" / "latency.json"
REPORT = ROOT / "docs" / "cross-domain-fit.md"
TRAIN_FAMILIES = ("DeepSeek-R1", "DeepSeek-V3")  # one architecture (deepseek_v3)


def wide(t) -> bool:
    domain = t.plan.request.gpu.nvlink_domain_gpus
    return bool(domain) and t.run.tp * t.run.dp > domain


def stats(results, metric: str) -> dict:
    errs = [r.errors[metric] for r in results if metric in r.errors]
    if not errs:
        return {}
    mags = sorted(abs(e) for e in errs)
    return {"rows": len(errs), "median_abs_error": round(statistics.median(mags), 4),
            "p90_abs_error": round(mags[min(len(mags) - 1, int(0.9 * len(mags)))], 4),
            "signed_median": round(statistics.median(errs), 4)}


def main() -> None:
    runs, _ = read_all([DATA])  # repeated measurements counted once
    terms, _ = row_terms(runs)
    cache: dict = {}
    rows = [t for t in terms if wide(t) and efficiency_for_row(t, cache, False).calibrated]
    train = [t for t in rows if t.run.family in TRAIN_FAMILIES]
    test = [t for t in rows if t.run.family not in TRAIN_FAMILIES]
    types = lambda rs: sorted({t.plan.request.model.model_type for t in rs})  # noqa: E731
    assert not set(types(train)) & set(types(test)), "held-out rows share an architecture"

    def run(subset, latency):
        return evaluate_rows(subset, efficiency=lambda t: replace(
            efficiency_for_row(t, cache, False), cross_domain_latency_s=latency))

    def loss(latency) -> float:
        res = run(train, latency)
        return statistics.median(abs(math.log(1 + r.errors["tpot"])) for r in res
                                 if "tpot" in r.errors)

    grid = [i * 10e-6 for i in range(0, 41)]
    best = min(grid, key=loss)
    fine = [max(0.0, best + i * 1e-6) for i in range(-10, 11)]
    best = min(fine, key=loss)
    report = {}
    parts = [("train", train), ("held_out", test)]
    for fam in sorted({t.run.family for t in test}):
        parts.append((f"held_out {fam}", [t for t in test if t.run.family == fam]))
    for name, subset in parts:
        before, after = run(subset, 0.0), run(subset, best)
        report[name] = {m: {"before": stats(before, m), "after": stats(after, m)}
                        for m in ("tpot", "ttft", "throughput")}
    doc = {
        "schema": "kvplan-cross-domain-calibration", "version": 1,
        "cross_domain_latency_s": round(best, 7),
        "provenance": {
            "source": "AIConfigurator silicon_sample.csv (aiconfigurator-core 0.12.0 wheel, "
                      "Apache-2.0): rows wider than one NVLink domain on calibrated GPUs / engines",
            "fit": f"one value for every GPU and engine, for TP all-reduces and attention-DP "
                   f"dispatch / combine wider than a domain; trained on the "
                   f"{' and '.join(TRAIN_FAMILIES)} rows (model type "
                   f"{', '.join(types(train))}), held out the other architectures "
                   f"({', '.join(types(test))}); grid 0-400 us, then 1 us steps; loss the "
                   "median |log(predicted / measured TPOT)|",
            "train_model_types": types(train), "held_out_model_types": types(test),
            "script": "benchmarks/fit_cross_domain.py",
            "rows_fit": len(train), "rows_held_out": len(test),
            "held_out": {"tpot_median_abs_error": report["held_out"]["tpot"]["after"].get(
                "median_abs_error")},
            "report": report,
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["# Cross-domain collective latency: fit and held-out check", "",
             "Written by `python benchmarks/fit_cross_domain.py` "
             f"(`{OUT.relative_to(ROOT)}`). Rows: the silicon sample's rows wider than one "
             "NVLink domain (TP over nodes, attention DP over nodes) whose GPU and engine have a "
             "serving calibration; those rows are never used by the serving calibrations "
             f"themselves. Fitted on the {len(train)} rows of the DeepSeek-V3 architecture "
             f"(V3 and R1); judged on the {len(test)} rows of the other architectures. "
             "`kvplan validate --benchmarks` reports every row with the term, the training "
             "rows included.", "",
             f"Fitted latency per collective wider than the domain: **{best * 1e6:.0f} us**, "
             "for TP all-reduces and for the MoE dispatch / combine of attention DP over "
             "nodes alike (with the dispatch / combine left out, the held-out TPOT was 18.6% / "
             "34.5% (-17.2%) on 2026-12-03).",
             "", "Cells: median / p90 |error| (signed median), error = predicted / measured - 1.",
             "", "| rows | metric | without the term | with it |", "|---|---|---|---|"]
    for name, _ in parts:
        for m in ("tpot", "ttft", "throughput"):
            b, a = report[name][m]["before"], report[name][m]["after"]
            if not b:
                continue
            cell = lambda s: (f"{s['median_abs_error']:.1%} / {s['p90_abs_error']:.1%} "  # noqa: E731
                              f"({s['signed_median']:+.1%})")
            lines.append(f"| {name} ({b['rows']}) | {m} | {cell(b)} | {cell(a)} |")
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
