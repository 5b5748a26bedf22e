"""Terminal rendering of ``kvplan curve``."""

from __future__ import annotations

from rich.table import Table

from ..core.units import format_tokens
from ..planning.curve import Y_UNITS
from .render import console


def _fmt(v: float | None, y: str) -> str:
    if v is None:
        return "-"
    if y == "concurrency":
        return f"{v:,.0f}"
    return f"{v:,.3g}" if v < 100 else f"{v:,.0f}"


def render_curve(result, plot: str | None) -> None:
    out = console()
    series = result.series
    first = series[0]
    out.print(result.title)
    xlab = {"context": "context (tokens)", "batch": "batch (sequences)",
            "position": "position (tokens)"}[first.x]
    out.print(f"{first.y} ({Y_UNITS[first.y]}) by {xlab}")
    t = Table()
    t.add_column(first.x, justify="right")
    for s in series:
        t.add_column(s.label, justify="right")
        if first.y != "concurrency" and first.x != "batch":
            t.add_column("batch", justify="right", style="dim")
    for i, p in enumerate(first.points):
        cells = [format_tokens(p.x) if first.x != "batch" else str(p.x)]
        for s in series:
            q = s.points[i]
            cells.append(_fmt(q.y, s.y))
            if first.y != "concurrency" and first.x != "batch":
                cells.append(str(q.batch))
        t.add_row(*cells)
    out.print(t)
    shared = len({(e.hbm_bandwidth, e.flops, e.source) for e in result.efficiencies}) == 1
    for s, e in zip(series, result.efficiencies, strict=True):
        notes = []
        if s.cliff_one is not None:
            notes.append(f"one sequence left from {format_tokens(s.cliff_one)}")
        if s.cliff_zero is not None:
            notes.append(f"nothing fits from {format_tokens(s.cliff_zero)}")
        if s.fit_base is not None and s.fit_slope is not None:
            unit = Y_UNITS.get(s.y, "")
            if s.fit_base >= 0:
                notes.append(f"least-squares fit: {s.fit_base:.4g} + {s.fit_slope * 1000:.4g} "
                             f"per 1k tokens of position ({unit})")
            else:  # a negative intercept is a term of the line, not a price
                notes.append(f"least-squares fit: {s.fit_slope * 1000:.4g} {unit} per 1k tokens "
                             f"of position (intercept {s.fit_base:.4g}: a term of the fitted "
                             "line, not a price; the cost is about proportional to position)")
        if not shared:  # one line for every series when they share the efficiency
            notes.append(f"efficiency: HBM {e.hbm_bandwidth:.0%}, FLOP/s {e.flops:.0%} ({e.source})")
        if notes:
            out.print(f"{s.label}: " + "; ".join(notes), style="dim")
    if shared and result.efficiencies:
        e = result.efficiencies[0]
        out.print(f"efficiency (every series): HBM {e.hbm_bandwidth:.0%}, FLOP/s {e.flops:.0%} "
                  f"({e.source})", style="dim")
    for a in result.assumptions:
        out.print(f"note: {a}", style="dim")
    if plot:
        out.print(f"plot written to {plot}")
