"""``kvplan plan SCENARIO.yaml`` and ``kvplan init``: plan a workload from a scenario file;
write a commented starter scenario."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import InputError
from .emit import say

EXAMPLES = """\b
Examples:
  kvplan init my-plan.yaml
  kvplan plan my-plan.yaml
  kvplan plan examples/chat-shared-prompt.yaml --format html -o plan.html
  kvplan plan examples/rag-trace.yaml --format json --require-fit"""

FORMATS = ("terminal", "markdown", "json", "html")


def plan(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (see `kvplan init`).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal (default), markdown, json "
                                     "or html (terminal with --output writes markdown).")] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to FILE "
                                                "(atomically; never over a file without --force).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --output if it exists.")] = False,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed (default: the "
                                             "scenario's seed, else 0).")] = None,
    samples: Annotated[int | None, typer.Option("--samples", help="Requests to sample "
                                                "(default: the scenario's, else 10,000).")] = None,
    simulate: Annotated[int, typer.Option("--simulate", help="Also step the best configuration "
                                          "through N of the sampled requests (continuous "
                                          "batching, chunked prefill) for TTFT/TPOT "
                                          "percentiles.")] = 0,
    require_fit: Annotated[bool, typer.Option(
        "--require-fit", help="Exit 1 when no configuration fits and meets the SLOs and rate.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column of the terminal table, "
                                       "however wide.")] = False,
) -> int:
    """Plan a workload: every candidate configuration ranked, replicas, cost, launch line."""
    from ..loaders.scenario_yaml import load_scenario
    from ..planning.scenario import run_scenario
    from ..report.outfile import refuse_existing, write_atomic

    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}", field="--format")
    if seed is not None and seed < 0:
        raise InputError("must be >= 0", field="--seed")
    from ..loaders.scenario_schema import MAX_SAMPLES

    if samples is not None and not 1 <= samples <= MAX_SAMPLES:
        raise InputError(f"expected 1 to {MAX_SAMPLES:,} requests", field="--samples")
    if not 0 <= simulate <= 100_000:
        raise InputError("expected 0 to 100,000 requests", field="--simulate")
    if output is not None:
        refuse_existing(output, force)
    sc = load_scenario(scenario)
    if sys.stderr.isatty() and fmt == "terminal":  # never in a pipe, a file or --format json
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from .render import console_stderr

        with Progress(TextColumn("planning candidates"), BarColumn(), MofNCompleteColumn(),
                      console=console_stderr(), transient=True) as bar:
            task = bar.add_task("plan", total=None)
            rep = run_scenario(sc, seed=seed, samples=samples, simulate=simulate,
                               progress=lambda done, total: bar.update(task, completed=done,
                                                                       total=total))
    else:
        rep = run_scenario(sc, seed=seed, samples=samples, simulate=simulate)
    # once: on stderr, unless the report printed to stdout carries them (markdown, html, json)
    if fmt == "terminal" or output is not None:
        for w in rep.warnings:
            say(f"kvplan: warning: {w}")
    if fmt == "terminal" and output is None:
        from .render_plan import render_plan

        render_plan(rep, wide)
    else:
        text = _text(rep, fmt)
        if output is None:
            typer.echo(text, nl=False)
        else:
            write_atomic(output, text, force=force)
            say(f"kvplan: wrote {fmt} report to {output}")
    if require_fit and rep.best is None:
        say("kvplan: no configuration meets the scenario (--require-fit)")
        return 1
    return 0


def _text(rep, fmt: str) -> str:
    if fmt == "json":
        from ..report import strict_json
        from ..report.plan_record import plan_record

        return strict_json.dumps(plan_record(rep), indent=2) + "\n"
    if fmt == "html":
        from ..report.plan_report import html_report

        return html_report(rep)
    from ..report.plan_report import markdown

    return markdown(rep)  # markdown, and terminal written to a file


def init(
    path: Annotated[Path, typer.Argument(help="Where to write the starter scenario ('-' for "
                                         "stdout).")] = Path("scenario.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite PATH if it exists.")] = False,
) -> None:
    """Write a commented starter scenario to edit and run with `kvplan plan`."""
    from importlib.resources import files

    from ..report.outfile import write_atomic

    text = files("kvplan.cli").joinpath("starter_scenario.yaml").read_text(encoding="utf-8")
    if str(path) == "-":
        typer.echo(text, nl=False)
        return
    write_atomic(path, text, force=force, flag="PATH")
    say(f"kvplan: wrote {path}; run `kvplan plan {path}`")
