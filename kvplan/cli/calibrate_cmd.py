"""``kvplan validate [RUN...]`` and ``kvplan calibrate`` (the torch harness, lazily)."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from pathlib import Path
from typing import Annotated

import typer


def validate(
    runs: Annotated[list[Path] | None, typer.Argument(
        help="Run files (default: every run in calibrate/runs/).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> int:
    """Re-predict every measured case with the current code; exit 1 when any case fails."""
    import json

    from ..core.errors import InputError
    from ..loaders.run_files import default_runs
    from ..planning.validate import validate as run_validate

    paths = list(runs or default_runs())
    if not paths:
        raise InputError("no run files (calibrate/runs/ is empty); pass RUN files",
                         field="RUN")
    verdicts = run_validate(paths)
    failed = [v for v in verdicts if v.ok is False]
    if as_json:
        typer.echo(json.dumps([v.__dict__ for v in verdicts], indent=1))
    else:
        from rich.table import Table

        from .render import console

        t = Table(title=f"{len(paths)} run(s), {len(verdicts)} case(s)", title_justify="left")
        for col in ("run", "case", "predicted", "measured", "error", "tolerance", "verdict"):
            t.add_column(col, justify="right" if col in ("predicted", "measured", "error") else "left")

        def fmt(x, unit):
            if x is None:
                return ""
            if unit == "B":
                return f"{int(x):,} B"
            if unit == "s":
                return f"{x * 1e3:.3f} ms"
            return f"{x / 1e9:,.2f} GB/s"

        for v in verdicts:
            verdict = "informational" if v.ok is None else "ok" if v.ok else "FAIL"
            t.add_row(v.run, v.case, fmt(v.predicted, v.unit), fmt(v.measured, v.unit),
                      "" if v.error is None else f"{v.error:+.2%}",
                      "" if v.tolerance is None else ("exact" if v.tolerance == 0 else f"{v.tolerance:.0%}"),
                      verdict)
        out = console()
        out.print(t)
        out.print(f"{len(failed)} failed" if failed else "all judged cases agree")
    return 1 if failed else 0


def calibrate(
    device: Annotated[str, typer.Option("--device", help="cpu | cuda")] = "cpu",
    models: Annotated[str, typer.Option("--models", help="Extra built-in models, comma list.")] = "",
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes.")] = False,
    distributed: Annotated[int, typer.Option("--distributed", help="Also run N local "
                                             "processes (gloo on CPU).")] = 0,
) -> int:
    """Run the torch calibration harness (needs the calibrate extra) and write a run file."""
    from ..core.errors import InputError

    try:
        from calibrate.harness import main
    except ImportError as e:
        raise InputError(f"the harness needs torch and the repository's calibrate/ package "
                         f"({e.name} missing): pip install 'kvplan[calibrate]'", field="calibrate") from None
    argv = ["--device", device, "--models", models] + (["--quick"] if quick else []) + \
        (["--distributed", str(distributed)] if distributed else [])
    return main(argv)
