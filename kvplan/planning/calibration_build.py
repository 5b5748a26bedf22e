"""``kvplan calibrate --from-benchmarks``: fit one calibration per (GPU, engine) on half the
measured sweeps, judge it on the other half, and return the calibration documents (the CLI
writes them) with the held-out errors, before and after, per group.

The shipped ``calibrations/`` were made by this on AIConfigurator's silicon CSV
(docs/calibration.md has the report); the held-out half was never seen by the fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.benchmark import RowProblem
from .bench_predict import RowTerms, row_terms
from .bench_validate import METRICS, RowResult, Stats, evaluate_rows, stats
from .calibration_fit import MIN_ROWS, Fitted, fit, held_out, timed


@dataclass(frozen=True)
class GroupFit:
    gpu: str
    engine: str
    fitted: Fitted | None  # None: too few fit rows
    rows_fit: int
    rows_held_out: int
    before: dict[str, Stats | None]  # held-out errors uncalibrated
    after: dict[str, Stats | None]  # held-out errors with this calibration
    versions: tuple[str, ...]


@dataclass(frozen=True)
class CalibrationOutcome:
    groups: tuple[GroupFit, ...]
    documents: dict[str, str]  # file name -> JSON text
    held_out_before: list[RowResult]
    held_out_after: list[RowResult]
    problems: list[RowProblem]
    rows: int  # rows read as runs
    read_problems: int  # rows the readers could not take


def _stats(results: list[RowResult]) -> dict[str, Stats | None]:
    return {m: stats([r.errors[m] for r in results if m in r.errors]) for m in METRICS}


def _doc(g: GroupFit, source: str, date: str) -> str:
    from ..loaders.serving_calibration import FIELDS, OPTIONAL, SCHEMA, VERSION

    assert g.fitted is not None
    e = g.fitted.efficiency
    after = {m: s for m, s in g.after.items() if s is not None}
    doc = {
        "schema": SCHEMA, "version": VERSION, "gpu": g.gpu, "engine": g.engine,
        "engine_versions": list(g.versions),
        "efficiency": {k: getattr(e, k) for k in (*FIELDS, *OPTIONAL)},
        "provenance": {
            "source": source, "date": date, "rows_fit": g.rows_fit,
            "rows_held_out": g.rows_held_out,
            "split": "by measured sweep (source file, workflow run or config): sha1 parity",
            "fit_loss_robust_log_error": round(g.fitted.loss, 6),
            "held_out": {f"{m}_median_abs_error": round(s.median_abs_error, 4)
                         for m, s in after.items()}
            | {f"{m}_p90_abs_error": round(s.p90_abs_error, 4) for m, s in after.items()},
        },
    }
    return json.dumps(doc, indent=1) + "\n"


def calibrate(paths: list[Path], *, source: str, date: str, meta: dict[str, str] | None = None
              ) -> CalibrationOutcome:
    from ..loaders.benchmarks import read_all

    runs, problems = read_all(paths, meta)
    terms, more = row_terms(runs)
    # rows with attention DP or EP, and disaggregated rows, are never fitted: `kvplan
    # validate --by layout` judges the calibrations on them as rows no fit has seen
    terms = [t for t in terms if t.run.dp == 1 and t.run.ep == 1 and not t.run.disaggregated]
    # a GPU that takes another's calibrations (calibration_from: the same silicon) gets no fit
    # of its own: its rows stay held out, judging the transferred one
    terms = [t for t in terms if not t.plan.request.gpu.calibration_from]
    # rows of models with lightning indexers (GLM-5, DeepSeek-V3.2) are never fitted here: the
    # indexer's fixed cost, which no other row carries, is fitted apart on them
    # (benchmarks/fit_indexer.py), with these calibrations held fixed
    terms = [t for t in terms if not t.plan.request.model.sparse_mla]
    read_problems = len(problems)
    problems += more
    by_key: dict[tuple[str, str], list[RowTerms]] = {}
    for t in terms:
        by_key.setdefault(t.key, []).append(t)
    groups, docs, before_all, after_all = [], {}, [], []
    from ..loaders.serving_calibration import file_name

    for (gpu, engine), rows in sorted(by_key.items()):
        train = [t for t in rows if not held_out(t)]
        test = [t for t in rows if held_out(t)]
        before = evaluate_rows(test, uncalibrated=True)
        fitted = fit(train, f"{source}: {gpu} {engine}") if len(timed(train)) >= MIN_ROWS else None
        after = evaluate_rows(test, efficiency=lambda t, f=fitted: f.efficiency) if fitted else before
        g = GroupFit(gpu, engine, fitted, len(train), len(test), _stats(before), _stats(after),
                     tuple(sorted({t.run.engine_version for t in rows if t.run.engine_version})))
        groups.append(g)
        before_all += before
        after_all += after
        if fitted:
            docs[file_name(gpu, engine)] = _doc(g, source, date)
    return CalibrationOutcome(tuple(groups), docs, before_all, after_all, problems, len(runs),
                              read_problems)
