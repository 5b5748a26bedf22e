"""Rendering of ``kvplan validate --benchmarks`` and ``kvplan calibrate --from-benchmarks``:
tables of errors per group, problem lines, and the JSON / Markdown forms."""

from __future__ import annotations

from collections import Counter

from ..planning.bench_predict import row_engine
from ..planning.bench_validate import GROUPINGS, METRICS, Report, Stats, stats
from ..report import strict_json


def stats_json(s: Stats | None) -> dict | None:
    if s is None:
        return None
    return {"rows": s.rows, "median_abs_error": round(s.median_abs_error, 5),
            "p90_abs_error": round(s.p90_abs_error, 5),
            "signed_median_error": round(s.signed_median_error, 5)}


def problem_lines(problems) -> list[str]:
    """One line per distinct problem (field and message), with its count and first row."""
    seen: dict[tuple[str, str], list] = {}
    for p in problems:
        seen.setdefault((p.field, p.message), []).append(p)
    lines = []
    for (fld, msg), ps in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        more = f" ({len(ps):,} rows; first)" if len(ps) > 1 else ""
        lines.append(f"{ps[0].source}: {fld}: {msg}{more}")
    return lines


def report_json(rep: Report, verdicts: dict[str, bool]) -> str:
    return strict_json.dumps({
        "files": rep.files, "rows": len(rep.results), "rows_not_predicted": len(rep.problems),
        "assumptions": rep.assumptions,
        "calibrations": dict(Counter(r.calibration for r in rep.results)),
        "overall": {m: stats_json(rep.overall(m)) for m in METRICS},
        "by": {g: {k: {m: stats_json(s) for m, s in v.items()} for k, v in rep.by(g).items()}
               for g in GROUPINGS},
        "tolerances": verdicts,
        "problems": [{"source": p.source, "field": p.field, "message": p.message}
                     for p in rep.problems],
        "results": [{"source": r.run.source, "model": r.run.model, "gpu": r.run.gpu,
                     "engine": r.run.engine, "engine_version": r.run.engine_version,
                     "planned_with": row_engine(r.run)[0],  # vllm@X: that release's rules
                     "tp": r.run.tp, "dp": r.run.dp, "ep": r.run.ep,
                     "concurrency": r.run.concurrency,
                     "prompt_tokens": r.run.prompt_tokens, "output_tokens": r.run.output_tokens,
                     "calibration": r.calibration,
                     "predicted": {f"{k}_s" if k != "throughput" else "output_tokens_per_s": v
                                   for k, v in r.predicted.items()},
                     "measured": {f"{k}_s" if k != "throughput" else "output_tokens_per_s": v
                                  for k, v in r.measured.items()},
                     "errors": r.errors, "throughput_derived": r.run.throughput_derived,
                     "detail": r.detail, "assumptions": [*r.run.assumptions, *(
                         [a] if (a := row_engine(r.run)[1]) else [])],
                     "ok": r.ok} for r in rep.results],
    }, indent=1)


def _cell(s: Stats | None) -> str:
    if s is None:
        return ""
    return f"{s.median_abs_error:.1%} / {s.p90_abs_error:.1%} ({s.signed_median_error:+.1%})"


def print_report(rep: Report, groupings: list[str], verdicts: dict[str, bool]) -> None:
    from rich.table import Table

    from .render import console

    out = console()
    out.print(f"{len(rep.results):,} measured rows re-predicted from {len(rep.files)} file(s); "
              f"{len(rep.problems):,} not predicted")
    for line in problem_lines(rep.problems)[:40]:
        out.print(f"  not predicted: {line}")
    for a in rep.assumptions:
        out.print(f"  assumed: {a}")
    for label, n in Counter(r.calibration for r in rep.results).most_common():
        out.print(f"  {n:,} rows with {label}")
    out.print("error = predicted / measured - 1; cells: median |error| / p90 |error| (signed "
              "median)")
    for g in ["overall", *groupings]:
        t = Table(title=f"by {g}" if g != "overall" else "all rows", title_justify="left")
        t.add_column(g)
        t.add_column("rows", justify="right")
        for m in METRICS:
            t.add_column(m, justify="right")
        groups = {"all": {m: rep.overall(m) for m in METRICS}} if g == "overall" else rep.by(g)
        for k, v in groups.items():
            n = max((s.rows for s in v.values() if s), default=0)
            t.add_row(k, f"{n:,}", *(_cell(v[m]) for m in METRICS))
        out.print(t)
    derived = sum(r.run.throughput_derived for r in rep.results)
    if derived:
        out.print(f"{derived:,} rows measured no throughput: theirs is derived from the measured "
                  "TTFT and TPOT (closed loop, Little's law)")
    for name, ok in verdicts.items():
        out.print(f"tolerance {name}: {'ok' if ok else 'FAIL'}")


def tolerance_verdicts(rep: Report, limits: dict[str, float | None]) -> dict[str, bool]:
    out = {}
    for m, limit in limits.items():
        if limit is None:
            continue
        s = rep.overall(m)
        out[f"{m} median |error| <= {limit:.0%}"] = s is not None and s.median_abs_error <= limit
    rows = [r for r in rep.results if r.ok is not None]
    if rows:
        out[f"per-row tolerances of {len(rows):,} rows"] = all(r.ok for r in rows)
    return out


def calibration_markdown(outcome, source: str, date: str) -> str:
    lines = [f"# Serving calibration report ({date})", "",
             f"Source: {source}. {outcome.rows + outcome.read_problems:,} rows in the files, "
             f"{len(outcome.problems):,} not predicted (one line per reason below); of the "
             f"{outcome.rows + outcome.read_problems - len(outcome.problems):,} predicted, "
             f"{len(outcome.held_out_after):,} held out and judged.", "",
             "Split: by measured sweep (one source file, workflow run or deployment config), half "
             "of the sweeps fit each (GPU, engine) calibration, the other half are judged; no "
             "held-out row was seen by the fit. Error = predicted / measured - 1. Cells: median "
             "|error| / p90 |error| (signed median).", "",
             "| GPU | engine | fit rows | held-out rows | TPOT before | TPOT after | TTFT before "
             "| TTFT after | throughput after |", "|---|---|---|---|---|---|---|---|---|"]
    for g in outcome.groups:
        lines.append(f"| {g.gpu} | {g.engine} | {g.rows_fit} | {g.rows_held_out} | "
                     f"{_cell(g.before['tpot'])} | {_cell(g.after['tpot']) if g.fitted else 'no fit'} | "
                     f"{_cell(g.before['ttft'])} | {_cell(g.after['ttft']) if g.fitted else 'no fit'} | "
                     f"{_cell(g.after['throughput']) if g.fitted else ''} |")
    lines += ["", "## All held-out rows", "", "| metric | uncalibrated | calibrated |",
              "|---|---|---|"]
    for m in METRICS:
        b = stats([r.errors[m] for r in outcome.held_out_before if m in r.errors])
        a = stats([r.errors[m] for r in outcome.held_out_after if m in r.errors])
        lines.append(f"| {m} | {_cell(b)} | {_cell(a)} |")
    lines += ["", "## Held-out rows by model family (calibrated)", "",
              "| family | rows | TPOT | TTFT |", "|---|---|---|---|"]
    fams: dict[str, list] = {}
    for r in outcome.held_out_after:
        fams.setdefault(r.run.family, []).append(r)
    for f, rs in sorted(fams.items()):
        lines.append(f"| {f} | {len(rs)} | {_cell(stats([r.errors['tpot'] for r in rs]))} | "
                     f"{_cell(stats([r.errors['ttft'] for r in rs]))} |")
    lines += ["", "## Fitted terms", "", "| GPU | engine | HBM eff | FLOP eff | attention | MoE "
              "factor | step overhead | per layer | per sequence | all-reduce latency | host TTFT | "
              "host per prompt token | start-up share |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in outcome.groups:
        if g.fitted:
            e = g.fitted.efficiency
            lines.append(f"| {g.gpu} | {g.engine} | {e.hbm_bandwidth:.3f} | {e.flops:.3f} | "
                         f"{e.attention:.3f} | {e.moe:.3f} | {e.step_overhead_s * 1e3:.3f} ms | "
                         f"{e.layer_overhead_s * 1e6:.2f} us | {e.sequence_overhead_s * 1e6:.2f} us | "
                         f"{e.allreduce_latency_s * 1e6:.1f} us | {e.host_ttft_s * 1e3:.1f} ms | "
                         f"{e.host_ttft_per_prompt_token_s * 1e6:.2f} us | {e.startup_share:.3f} |")
    lines += ["", "A term the rows cannot see (the MoE factor without MoE models, the all-reduce "
              "latency without TP) keeps kvplan's default. A term at the edge of its range (an "
              "efficiency of 1.000, a time at its bound) says the model's structure, not the "
              "hardware, is being fitted there: read it as a correction, not a measurement.", ""]
    lines += ["", "## Rows not predicted", ""] + [f"- {x}" for x in problem_lines(outcome.problems)]
    return "\n".join(lines) + "\n"
