"""Plots of curve series (matplotlib, the optional ``plot`` extra). Reports layer."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import InputError
from ..planning.curve import Y_UNITS, Series

X_LABELS = {"context": "context (tokens)", "batch": "batch (sequences)",
            "position": "position of the generated token (tokens)"}


def plot_series(series: tuple[Series, ...], path: str, *, title: str, force: bool = False) -> None:
    """Draw the series and write the image atomically (``kvplan.report.outfile``), never over
    an existing file without ``force``."""
    from .outfile import refuse_existing, write_atomic

    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"plot file must end in .png or .svg, got {path!r}", field="--plot")
    refuse_existing(target, force, "--plot")
    from . import charts

    if not charts.available():
        raise InputError("plotting needs matplotlib: pip install 'kvplan[plot]'",
                         field="--plot")
    markers: list[tuple[float, str]] = []
    for s in series:
        if s.x == "batch":  # the batch axis's cliff: the sequences the pool holds
            conc = {p.concurrency for p in s.points}
            if len(conc) == 1 and (c := conc.pop()) >= 1:
                markers.append((float(c), f"{s.label}: the pool holds {c:,}"))
            continue
        if s.cliff_one is not None and s.cliff_one != s.cliff_zero:
            markers.append((float(s.cliff_one), f"{s.label}: one sequence"))
        if s.cliff_zero is not None:
            markers.append((float(s.cliff_zero), f"{s.label}: nothing fits"))
    ys = [p.y for s in series for p in s.points if p.y]
    first = series[0]
    fig = charts.line_figure(
        title, X_LABELS[first.x], f"{first.y} ({Y_UNITS[first.y]})",
        [(s.label, [(float(p.x), float(p.y)) for p in s.points if p.y is not None])
         for s in series],
        token_x=first.x != "batch", logy=bool(ys) and max(ys) / max(min(ys), 1e-12) >= 100,
        markers=markers)
    write_atomic(target, charts.image_bytes(fig, target.suffix.lower()[1:]), force=force,
                 flag="--plot")
