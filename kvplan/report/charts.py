"""Charts drawn with matplotlib (the optional ``plot`` extra): line charts over token axes and
stacked memory bars, as SVG text for the HTML report or image bytes for ``curve --plot``.

What every chart does: token axes read 1k, 32k, 1M (powers of 1024), never 2^10; the last
tick is inside the axes; lines that coincide stay visible (each series its own dash pattern and
marker, drawn thinner on top); labels of vertical markers are staggered so they do not overlap;
bars have a GiB axis. ``available()`` says whether matplotlib can be imported; callers fall back
to tables without it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"),
          ((0, (1, 1)), "x"))


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def token_label(v: float) -> str:
    """1024 -> 1k, 131072 -> 128k, 1048576 -> 1M; other values as they are."""
    n = int(round(v))
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}k"
    return f"{v:g}"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG (searchable, small)
    matplotlib.rcParams["svg.hashsalt"] = "kvplan"  # the same report, byte for byte, each run
    import matplotlib.pyplot as plt

    return plt


def line_figure(title: str, xlabel: str, ylabel: str,
                series: Sequence[tuple[str, Sequence[tuple[float, float]]]], *,
                token_x: bool = True, logy: bool = False,
                markers: Sequence[tuple[float, str]] = (), hline: tuple[float, str] | None = None):
    """A figure of lines; ``markers`` are vertical lines with labels (cliffs), ``hline`` one
    horizontal line with a label (a cap)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    xs_all = sorted({x for _, pts in series for x, _ in pts} | {m for m, _ in markers})
    for i, (label, pts) in enumerate(series):
        if not pts:
            continue
        dash, marker = STYLES[i % len(STYLES)]
        ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle=dash, marker=marker,
                markersize=5 + 1.5 * (len(series) - 1 - i), linewidth=2.2 - 0.4 * min(i, 3),
                label=label, zorder=3 + i, markerfacecolor="none" if i else None)
    if xs_all and max(xs_all) / max(min(xs_all), 1) >= 16:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
    if xs_all:  # ticks at the data's x (at most about 9), written 1k / 1M or as numbers
        data_xs = sorted({x for _, pts in series for x, _ in pts}) or xs_all
        ticks = data_xs if len(data_xs) <= 9 else data_xs[:: -(-len(data_xs) // 8)] + [data_xs[-1]]
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(ticks))))
        ax.xaxis.set_major_formatter(FuncFormatter(
            (lambda v, _: token_label(v)) if token_x else (lambda v, _: f"{v:g}")))
    if xs_all:  # room either side, so the first and last ticks are inside the axes
        lo, hi = min(xs_all), max(xs_all)
        if ax.get_xscale() == "log":
            ax.set_xlim(lo / 1.25, hi * 1.25)
        else:
            pad = (hi - lo) * 0.04 or 1
            ax.set_xlim(lo - pad, hi + pad)
    if logy:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle="--", linewidth=1, zorder=1)
        ax.annotate(hline[1], (ax.get_xlim()[0], hline[0]), xytext=(4, 3),
                    textcoords="offset points", fontsize=8, color="grey")
    top = ax.get_ylim()[1]
    for k, (x, text) in enumerate(sorted(markers)):
        ax.axvline(x, color="red" if "nothing" in text else "grey", linestyle=":", linewidth=1)
        # staggered heights: two labels at nearby x do not sit on each other
        ax.annotate(text, (x, top), xytext=(-3, -6 - 42 * (k % 3)), textcoords="offset points",
                    rotation=90, va="top", ha="right", fontsize=7.5,
                    color="red" if "nothing" in text else "dimgrey")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, wrap=True)
    ax.grid(True, alpha=0.3)
    if any(pts for _, pts in series):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def bars_figure(title: str, bars: Sequence[tuple[str, Sequence[tuple[str, float]]]],
                unit: str = "GiB"):
    """Stacked horizontal bars, one per row, with a ``unit`` axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 1.2 + 0.55 * len(bars)))
    names = [n for n, _ in bars]
    parts = list(dict.fromkeys(p for _, segs in bars for p, _ in segs))
    left = [0.0] * len(bars)
    for p in parts:
        widths = [dict(segs).get(p, 0.0) for _, segs in bars]
        ax.barh(names, widths, left=left, label=p, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel(unit)
    ax.set_xlim(0, max(left) * 1.02 if left and max(left) > 0 else 1)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside, clear of the axis
    fig.tight_layout()
    return fig


def svg_text(fig) -> str:
    """The figure as inline SVG (no XML prolog), and closed."""
    plt = _pyplot()
    buf = io.StringIO()
    try:
        fig.savefig(buf, format="svg", bbox_inches="tight")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def image_bytes(fig, fmt: str) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()
