"""``kvplan validate [RUN...]`` and ``kvplan calibrate`` (the torch harness, lazily)."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_BY = "gpu,engine,family,tp,concurrency"


def _meta(items: list[str] | None) -> dict[str, str]:
    from ..core.errors import InputError
    from ..loaders.benchmarks import META_KEYS

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or key not in META_KEYS or not value:
            raise InputError(f"expected KEY=VALUE with KEY one of {', '.join(META_KEYS)}, got "
                             f"{item!r}", field="--meta")
        out[key] = value
    return out


def _files(paths: list[Path] | None, flag: str) -> list[Path]:
    from ..core.errors import InputError

    if not paths:
        raise InputError("give one or more benchmark files", field=flag)
    return list(paths)


def _benchmarks(files: list[Path], as_json: bool, meta: list[str] | None, by: str,
                uncalibrated: bool, limits: dict) -> int:
    from ..core.errors import InputError
    from ..planning.bench_validate import GROUPINGS, validate_benchmarks
    from .render_bench import print_report, report_json, tolerance_verdicts

    groupings = [g for g in by.split(",") if g]
    bad = [g for g in groupings if g not in GROUPINGS]
    if bad:
        raise InputError(f"unknown grouping {bad[0]!r}; use {', '.join(GROUPINGS)}", field="--by")
    for name, v in limits.items():
        if v is not None and not 0 < v < 100:
            raise InputError(f"expected a fraction such as 0.1, got {v}", field=f"--{name}-tolerance")
    rep = validate_benchmarks(files, _meta(meta), uncalibrated=uncalibrated)
    if not rep.results:
        from .render_bench import problem_lines

        lines = problem_lines(rep.problems)
        raise InputError(f"no row of {', '.join(map(str, files))} could be re-predicted"
                         + (f" ({len(lines)} reason(s); first: {lines[0]})" if lines else ""),
                         field="--benchmarks")
    verdicts = tolerance_verdicts(rep, limits)
    if as_json:
        typer.echo(report_json(rep, verdicts))
    else:
        print_report(rep, groupings, verdicts)
    return 1 if not all(verdicts.values()) else 0


def validate(
    runs: Annotated[list[Path] | None, typer.Argument(
        help="Run files (default: every run in calibrate/runs/); with --benchmarks, measured "
             "serving results (vllm bench JSON, SGLang JSONL, AIConfigurator silicon CSV, "
             "kvplan CSV).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    benchmarks: Annotated[bool, typer.Option("--benchmarks", help="The files are measured "
                                             "serving benchmarks: re-predict every row.")] = False,
    meta: Annotated[list[str] | None, typer.Option("--meta", help="KEY=VALUE a benchmark file "
                                                   "does not record (gpu, tp, engine, model, ...).")] = None,
    by: Annotated[str, typer.Option("--by", help="Group errors by: gpu, engine, family, tp, "
                                    "concurrency, calibration, layout (comma list).")] = DEFAULT_BY,
    uncalibrated: Annotated[bool, typer.Option("--uncalibrated", help="Ignore calibrations "
                                               "(the pure roofline).")] = False,
    tpot_tolerance: Annotated[float | None, typer.Option("--tpot-tolerance", help="Exit 1 when "
                                                         "the median |TPOT error| is above this.")] = None,
    ttft_tolerance: Annotated[float | None, typer.Option("--ttft-tolerance")] = None,
    throughput_tolerance: Annotated[float | None, typer.Option("--throughput-tolerance")] = None,
) -> int:
    """Re-predict every measured case with the current code; exit 1 when any case fails."""
    from ..report import strict_json

    if benchmarks:
        return _benchmarks(_files(runs, "--benchmarks"), as_json, meta, by, uncalibrated,
                           {"tpot": tpot_tolerance, "ttft": ttft_tolerance,
                            "throughput": throughput_tolerance})

    from ..core.errors import InputError
    from ..loaders.run_files import default_runs
    from ..planning.validate import validate as run_validate

    given = [f for f, v in (("--tpot-tolerance", tpot_tolerance), ("--ttft-tolerance", ttft_tolerance),
                            ("--throughput-tolerance", throughput_tolerance)) if v is not None]
    if by != DEFAULT_BY:
        given.append("--by")
    if given:
        raise InputError("applies to measured serving benchmarks: add --benchmarks FILE",
                         field=given[0])

    paths = list(runs or default_runs())
    if not paths:
        raise InputError("no run files (calibrate/runs/ is empty); pass RUN files",
                         field="RUN")
    verdicts = run_validate(paths)
    failed = [v for v in verdicts if v.ok is False]
    if as_json:
        typer.echo(strict_json.dumps([v.__dict__ for v in verdicts], indent=1))
    else:
        from .render import console
        from .tables import Col, print_table

        def fmt(x, unit):
            if x is None:
                return ""
            if unit == "B":
                return f"{int(x):,} B"
            if unit == "s":
                return f"{x * 1e3:.3f} ms"
            return f"{x / 1e9:,.2f} GB/s"

        cols = [Col("run", "key", "left"), Col("case", "key", "left"), Col("predicted"),
                Col("measured"), Col("error"), Col("tolerance", justify="left", optional=True),
                Col("verdict", justify="left")]
        rows = [[v.run, v.case, fmt(v.predicted, v.unit), fmt(v.measured, v.unit),
                 "" if v.error is None else f"{v.error:+.2%}",
                 "" if v.tolerance is None else ("exact" if v.tolerance == 0 else f"{v.tolerance:.0%}"),
                 "informational" if v.ok is None else "ok" if v.ok else "FAIL"] for v in verdicts]
        out = console()
        print_table(out, cols, rows, title=f"{len(paths)} run(s), {len(verdicts)} case(s)")
        out.print(f"{len(failed)} failed" if failed else "all judged cases agree")
    return 1 if failed else 0


def calibrate(
    files: Annotated[list[Path] | None, typer.Argument(
        help="With --from-benchmarks: measured serving results to fit on.")] = None,
    from_benchmarks: Annotated[bool, typer.Option("--from-benchmarks", help="Fit serving "
                                                  "calibrations on measured benchmark files.")] = False,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for the calibration "
                                                 "files (one per GPU and engine).")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the fit report "
                                                "(Markdown) here.")] = None,
    source: Annotated[str, typer.Option("--source", help="What the files are (provenance).")] = "",
    meta: Annotated[list[str] | None, typer.Option("--meta", help="KEY=VALUE a benchmark file "
                                                   "does not record.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    device: Annotated[str, typer.Option("--device", help="cpu | cuda")] = "cpu",
    models: Annotated[str, typer.Option("--models", help="Extra built-in models, comma list.")] = "",
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes.")] = False,
    distributed: Annotated[int, typer.Option("--distributed", help="Also run N local "
                                             "processes (gloo on CPU).")] = 0,
) -> int:
    """Run the torch calibration harness (needs the calibrate extra) and write a run file; or,
    with --from-benchmarks, fit serving calibrations on measured runs."""
    from ..core.errors import InputError

    if from_benchmarks:
        return _calibrate_benchmarks(_files(files, "--from-benchmarks"), out_dir, report,
                                     source, meta, force)
    if files:
        raise InputError("files are read only with --from-benchmarks", field="FILES")
    if device not in ("cpu", "cuda"):
        raise InputError(f"unknown device {device!r}; use cpu or cuda", field="--device")
    if distributed < 0 or distributed > 64:
        raise InputError(f"expected 0 (off) to 64 processes, got {distributed}",
                         field="--distributed")

    from ..core.errors import KvplanError
    from ..loaders.resolve import load_model

    for name in (m.strip() for m in models.split(",") if m.strip()):
        try:  # before the harness starts its progress bar
            load_model(name)
        except KvplanError as e:
            raise InputError(e.detail, field="--models") from None

    import importlib.util

    try:  # torch first: the harness imports it lazily, after its own start-up
        if importlib.util.find_spec("torch") is None:
            raise ModuleNotFoundError(name="torch")
        from calibrate.harness import main
    except ImportError as e:
        raise InputError(f"the harness needs torch and the repository's calibrate/ package "
                         f"({e.name} missing): pip install 'kvplan[calibrate]'", field="calibrate") from None
    argv = ["--device", device, "--models", models] + (["--quick"] if quick else []) + \
        (["--distributed", str(distributed)] if distributed else [])
    try:
        return main(argv)
    except ImportError as e:  # a torch that is installed but cannot load (CUDA libraries, ...)
        raise InputError(f"torch cannot be imported ({str(e).splitlines()[0][:160]}); install "
                         "the CPU build: pip install torch==2.13.0", field="calibrate") from None


def _calibrate_benchmarks(files: list[Path], out_dir: Path | None, report: Path | None,
                          source: str, meta: list[str] | None, force: bool) -> int:
    import datetime

    from ..core.errors import InputError
    from ..planning.calibration_build import calibrate as fit_all
    from ..planning.calibration_fit import MIN_ROWS
    from ..report.outfile import refuse_existing, write_atomic
    from .render import console
    from .render_bench import calibration_markdown, problem_lines

    if out_dir is None:
        raise InputError("give the folder for the calibration files (point "
                         "KVPLAN_CALIBRATION_PATH at it to use them)", field="--out")
    parent = next((p for p in (out_dir, *out_dir.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        raise InputError(f"{out_dir} is not a folder ({parent} is a file)", field="--out")
    if report is not None:
        refuse_existing(report, force, "--report")
        if report.is_dir() or not report.parent.is_dir():
            raise InputError(f"cannot write {report} (not a file in an existing folder)",
                             field="--report")
    label = source or ", ".join(f.name for f in files)
    date = datetime.date.today().isoformat()
    outcome = fit_all(files, source=label, date=date, meta=_meta(meta))
    if not outcome.documents:
        first = problem_lines(outcome.problems)[:1]
        raise InputError("no (GPU, engine) has enough measured rows to fit "
                         f"({MIN_ROWS} timed rows in the fit half: two per fitted term)"
                         + (f"; {first[0]}" if first else ""), field="--from-benchmarks")
    for name in outcome.documents:
        refuse_existing(out_dir / name, force, "--out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create {out_dir}: {e.strerror}", field="--out") from None
    out = console()
    written: list[Path] = []
    try:  # all or nothing: a failure removes what this run wrote
        if report is not None:
            write_atomic(report, calibration_markdown(outcome, label, date), force=force,
                         flag="--report")
            written.append(report)
        for name, text in outcome.documents.items():
            write_atomic(out_dir / name, text, force=force, flag="--out")
            written.append(out_dir / name)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    for p in written:
        out.print(f"wrote {p}")
    for g in outcome.groups:
        a = g.after["tpot"]
        tail = (f"; not fitted (fewer than {MIN_ROWS} rows with TTFT or TPOT: two per fitted "
                f"term)" if not g.fitted else
                f"; held-out TPOT median |error| {a.median_abs_error:.1%}" if a else
                "; fitted, no held-out rows to judge it (give rows of more than one sweep)")
        out.print(f"{g.gpu} {g.engine}: {g.rows_fit} fit rows, {g.rows_held_out} held out{tail}")
    return 0
