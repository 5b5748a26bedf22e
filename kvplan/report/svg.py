"""Small inline SVG charts for the HTML report: a line chart (log or linear axes) and stacked
horizontal bars. Pure string building; no dependencies, no scripts."""

from __future__ import annotations

import math
from html import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#7f7f7f")
W, H, L, R, T, B = 440, 280, 64, 12, 28, 44
LEGEND_ROW = 14


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10.0**k for k in range(a, b + 1) if lo <= 10.0**k <= hi] or [lo, hi]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-12)))
    while (hi - lo) / step > 6:
        step *= 2
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _label(v: float) -> str:
    if v >= 1024 and v == int(v) and int(v) % 1024 == 0:
        return f"{int(v) // 1024}k"
    return f"{v:g}"


def line_chart(title: str, xlabel: str, ylabel: str, series: list[tuple[str, list[tuple[float, float]]]],
               logx: bool = True, logy: bool = False, xticks: list[float] | None = None) -> str:
    """Lines over shared axes; the legend sits under the plot, one row per series."""
    pts = [p for _, s in series for p in s if p[1] is not None and (not logy or p[1] > 0)]
    if not pts:
        return f"<svg width='{W}' height='{H}'><text x='10' y='20'>{escape(title)}: no data</text></svg>"
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys), max(ys)) if logy else (0.0, max(ys) * 1.05 or 1.0)
    if x0 == x1:
        x1 = x0 * 2
    if y0 == y1:
        y1 = y0 * 2 or 1.0

    def fx(v: float) -> float:
        f = (math.log(v) - math.log(x0)) / (math.log(x1) - math.log(x0)) if logx else (v - x0) / (x1 - x0)
        return L + f * (W - L - R)

    def fy(v: float) -> float:
        f = (math.log(v) - math.log(y0)) / (math.log(y1) - math.log(y0)) if logy else (v - y0) / (y1 - y0)
        return H - B - f * (H - T - B)

    total_h = H + LEGEND_ROW * len(series) + 6
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{total_h}' font-size='11'>",
           f"<text x='{W / 2}' y='16' text-anchor='middle' font-weight='bold'>{escape(title)}</text>",
           f"<line x1='{L}' y1='{H - B}' x2='{W - R}' y2='{H - B}' stroke='#444'/>",
           f"<line x1='{L}' y1='{T}' x2='{L}' y2='{H - B}' stroke='#444'/>"]
    for t in [t for t in (xticks or _ticks(x0, x1, logx)) if x0 <= t <= x1]:
        out.append(f"<text x='{fx(t):.1f}' y='{H - B + 14}' text-anchor='middle'>{_label(t)}</text>")
    for t in _ticks(y0, y1, logy):
        out.append(f"<text x='{L - 4}' y='{fy(t) + 4:.1f}' text-anchor='end'>{t:g}</text>")
        out.append(f"<line x1='{L}' y1='{fy(t):.1f}' x2='{W - R}' y2='{fy(t):.1f}' stroke='#eee'/>")
    out.append(f"<text x='{(L + W - R) / 2}' y='{H - 8}' text-anchor='middle'>{escape(xlabel)}</text>")
    out.append(f"<text x='12' y='{(T + H - B) / 2}' text-anchor='middle' transform='rotate(-90 12 "
               f"{(T + H - B) / 2})'>{escape(ylabel)}</text>")
    for i, (name, s) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        good = [p for p in s if p[1] is not None and (not logy or p[1] > 0)]
        if good:
            path = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in good)
            out.append(f"<polyline fill='none' stroke='{c}' stroke-width='2' points='{path}'/>")
        y = H + LEGEND_ROW * i + 4
        out.append(f"<line x1='{L}' y1='{y - 4}' x2='{L + 18}' y2='{y - 4}' stroke='{c}' stroke-width='2'/>"
                   f"<text x='{L + 24}' y='{y}' fill='#222'>{escape(name)}</text>")
    out.append("</svg>")
    return "".join(out)


def stacked_bars(title: str, bars: list[tuple[str, list[tuple[str, float]]]], unit: str) -> str:
    """One horizontal bar per entry, segments left to right, all on one scale; the legend
    (segments that are non-zero somewhere) in rows under the bars."""
    total = max((sum(v for _, v in segs) for _, segs in bars), default=0) or 1
    names: list[str] = []
    for _, segs in bars:
        names += [n for n, v in segs if v > 0 and n not in names]
    left = 12 + 6.2 * max((len(label) for label, _ in bars), default=0)
    width_all = 640
    width = width_all - left - R
    per_row = 4
    height = T + 30 * len(bars) + 8 + LEGEND_ROW * -(-len(names) // per_row) + 8
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width_all}' height='{height:.0f}' "
           "font-size='11'>",
           f"<text x='{width_all / 2}' y='16' text-anchor='middle' font-weight='bold'>{escape(title)}</text>"]
    for i, (label, segs) in enumerate(bars):
        y = T + 30 * i
        out.append(f"<text x='{left - 4:.0f}' y='{y + 15}' text-anchor='end'>{escape(label)}</text>")
        x = float(left)
        for name, v in segs:
            if v <= 0:
                continue
            w = v / total * width
            c = COLORS[names.index(name) % len(COLORS)]
            out.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='20' fill='{c}'>"
                       f"<title>{escape(label)}: {escape(name)} {v:,.2f} {unit}</title></rect>")
            x += w
    y0 = T + 30 * len(bars) + 8
    for i, n in enumerate(names):
        x, y = left + (i % per_row) * 120, y0 + LEGEND_ROW * (i // per_row)
        out.append(f"<rect x='{x:.0f}' y='{y}' width='10' height='10' fill='{COLORS[i % len(COLORS)]}'/>"
                   f"<text x='{x + 13:.0f}' y='{y + 9}'>{escape(n)}</text>")
    out.append("</svg>")
    return "".join(out)
