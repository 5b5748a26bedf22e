"""Terminal rendering of ``kvplan plan``."""

from __future__ import annotations

from rich import box
from rich.table import Table

from ..planning.scenario import PlanReport
from ..report.plan_report import (
    detail_lines,
    headers,
    headline,
    launch_line,
    rows,
    simulation_lines,
    skipped_line,
    status,
    workload_lines,
)
from .render import console


def render_plan(rep: PlanReport) -> None:
    out = console()
    out.print(f"kvplan plan: {rep.scenario.name}", style="bold")
    for line in workload_lines(rep):
        out.print(line, style="dim")
    t = Table(title="Configurations, best first ($/request and more: --format markdown/json)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    head = headers(rep)
    drop = {"$/request"} | ({"engine"} if len(rep.scenario.serving.engines) == 1 else set())
    keep = [i for i, h in enumerate(head) if h not in drop]
    short = {"TP x PP": "TPxPP", "fits (req)": "fits", "replicas": "repl", "$/hour": "$/h",
             "$/M out tok": "$/Mtok out"}
    for i in keep:
        h = short.get(head[i], head[i])
        t.add_column(h, justify="left" if h in ("GPU", "engine", "KV", "status") else "right",
                     no_wrap=True)
    for o, r in zip(rep.outcomes, rows(rep), strict=True):
        t.add_row(*(r[i] for i in keep), style="green" if o.evaluation.ok else None)
    out.print(t)
    out.print(headline(rep), style="bold")
    if rep.outcomes:
        top = rep.outcomes[0]
        out.print(f"Rank 1 in detail ({status(top)}):")
        for line in detail_lines(top):
            out.print(f"  {line}")
        for reason in top.evaluation.reasons:
            out.print(f"  why not: {reason}")
        out.print(launch_line(top), soft_wrap=True)
    for line in simulation_lines(rep.simulation):
        out.print(line)
    for s in rep.skipped:
        out.print(f"not planned: {skipped_line(s)}", style="dim")
    out.print("Assumptions:")
    for a in rep.assumptions:
        out.print(f"  - {a}", style="dim")
