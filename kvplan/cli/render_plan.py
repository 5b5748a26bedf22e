"""Terminal rendering of ``kvplan plan``."""

from __future__ import annotations

from rich import box

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
from .tables import Col, print_table


def render_plan(rep: PlanReport, wide: bool = False) -> None:
    out = console()
    out.print(f"kvplan plan: {rep.scenario.name}", style="bold")
    for line in workload_lines(rep):
        out.print(line, style="dim")
    head = headers(rep)
    drop = {"$/request"} | ({"engine"} if len(rep.scenario.serving.engines) == 1 else set())
    keep = [i for i, h in enumerate(head) if h not in drop]
    short = {"TP x PP": "TPxPP", "fits (req)": "fits", "replicas": "repl", "$/hour": "$/h",
             "$/M out tok": "$/Mtok out"}
    # dropped first when the terminal is narrow (lowest rank first); the rest always show
    optional = {"$/h": 0, "headroom": 1, "repl": 2, "fits": 3, "batch": 4}
    cols = []
    for i in keep:
        h = short.get(head[i], head[i])
        role = "key" if h in ("GPU", "engine", "KV") else "num"
        cols.append(Col(h, role, "left" if h in ("GPU", "engine", "KV", "status") else "right",
                        h in optional, optional.get(h, 0)))
    body = [[r[i] for i in keep] for r in rows(rep)]
    shown = print_table(out, cols, body, wide=wide, box=box.SIMPLE_HEAD,
                        title="Configurations, best first ($/request and more: --format "
                        "markdown/json)",
                        row_styles=["green" if o.evaluation.ok else None for o in rep.outcomes])
    if len(shown) < len(cols):
        out.print("more columns: --wide (or a wider terminal)", style="dim")
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
