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
    import io

    from .outfile import refuse_existing, write_atomic

    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"plot file must end in .png or .svg, got {path!r}", field="--plot")
    refuse_existing(target, force, "--plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'kvplan[plot]'",
                         field="--plot") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    xs_all = [p.x for s in series for p in s.points]
    ys_all = [p.y for s in series for p in s.points if p.y]
    for s in series:
        pts = [(p.x, p.y) for p in s.points if p.y is not None]
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=s.label)
        if s.cliff_one is not None:
            ax.axvline(s.cliff_one, linestyle=":", linewidth=1, color="grey")
        if s.cliff_zero is not None:
            ax.axvline(s.cliff_zero, linestyle="--", linewidth=1, color="red")
    if xs_all and max(xs_all) / max(min(xs_all), 1) >= 16:
        ax.set_xscale("log", base=2)
    if ys_all and max(ys_all) / max(min(ys_all), 1e-12) >= 100:
        ax.set_yscale("log")
    top = ax.get_ylim()[1]
    for s in series:
        if s.cliff_zero is not None:
            ax.annotate(f"{s.label}: nothing fits", (s.cliff_zero, top), rotation=90, va="top",
                        ha="right", fontsize=8)
        if s.cliff_one is not None and s.cliff_one != s.cliff_zero:
            ax.annotate(f"{s.label}: one sequence", (s.cliff_one, top), rotation=90, va="top",
                        ha="right", fontsize=8, color="grey")
    first = series[0]
    ax.set_xlabel(X_LABELS[first.x])
    ax.set_ylabel(f"{first.y} ({Y_UNITS[first.y]})")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=target.suffix.lower()[1:], bbox_inches="tight")
    finally:
        plt.close(fig)
    write_atomic(target, buf.getvalue(), force=force, flag="--plot")
