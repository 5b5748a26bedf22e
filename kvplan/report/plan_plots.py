"""The HTML report's charts for the best configurations: requests the pool holds by context
(capped at max_num_seqs, as the engine caps them), the cost of the token at position n
(``kvplan.planning.curve``), and each GPU's memory budget as stacked bars with a GiB axis.
Drawn with matplotlib (``kvplan.report.charts``) when the plot extra is installed, else the
same numbers as tables."""

from __future__ import annotations

from html import escape

from ..core.units import GiB, format_tokens
from ..planning.curve import series
from ..planning.fit_pools import pool_usage_fn, sequences_fitting
from ..planning.scenario import Outcome
from . import charts


def contexts(max_len: int) -> list[int]:
    """1k, 2k, 4k, ... up to and including ``max_len``."""
    xs, n = [], 1024
    while n < max_len:
        xs.append(n)
        n *= 2
    return xs + [max_len]


def _label(o: Outcome) -> str:
    c = o.candidate
    return f"{c.gpu.key} {o.fit.layout.label} tp{c.tp}xpp{c.pp} KV {o.fit.kv_format}"


def _about(outcomes: list[Outcome], max_len: int) -> str:
    """What every chart's title names: the GPUs, the weights and KV dtypes, the context."""
    gpus = ", ".join(dict.fromkeys(o.candidate.gpu.key for o in outcomes))
    kv = ", ".join(dict.fromkeys(o.fit.kv_format for o in outcomes))
    w = ", ".join(dict.fromkeys(o.fit.request.weight_format.name for o in outcomes))
    return f"{gpus}; weights {w}; KV {kv}; max_model_len {format_tokens(max_len)}"


def concurrency_data(outcomes: list[Outcome], max_len: int, prefix_tokens: int = 0):
    """(label, [(context, requests)]) per outcome: the whole requests the pool holds at each
    context (with the scenario's shared prefix), capped at the engine's max_num_seqs."""
    out = []
    for o in outcomes:
        use = pool_usage_fn(o.fit, prefix_tokens)
        cap = o.fit.max_num_seqs
        out.append((_label(o), [(float(n), float(min(sequences_fitting(use(n)), cap)))
                                for n in contexts(max_len) if n > prefix_tokens]))
    return out


def cost_data(outcomes: list[Outcome], max_len: int):
    out = []
    for o in outcomes:
        r = o.fit
        hourly = o.price_usd_per_gpu_hour * r.request.tp * r.request.pp
        s = series(_label(o), r, o.step, x="position", y="cost", xs=contexts(max_len),
                   context_tokens=max_len, batch=max(o.evaluation.batch, 1),
                   price_usd_per_hour=hourly)
        out.append((s.label, [(float(p.x), float(p.y)) for p in s.points if p.y is not None]))
    return out


def budget_data(outcomes: list[Outcome]):
    bars = []
    for o in outcomes:
        b = o.fit.budget
        reserved = b.total_bytes - b.usable_bytes
        kv_rest = b.usable_bytes - b.weights_bytes - b.activation_bytes - b.runtime_overhead_bytes \
            - b.kv_pool_bytes
        bars.append((_label(o), [("weights", b.weights_bytes / GiB),
                                 ("activations", b.activation_bytes / GiB),
                                 ("runtime", b.runtime_overhead_bytes / GiB),
                                 ("KV pool", b.kv_pool_bytes / GiB),
                                 ("unused", max(kv_rest, 0) / GiB),
                                 ("held back", max(reserved, 0) / GiB)]))
    return bars


def _table(title: str, head: list[str], rows: list[list[str]]) -> str:
    return (f"<table><caption>{escape(title)}</caption><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>")


def _series_table(title: str, xname: str, data, fmt) -> str:
    xs = sorted({x for _, pts in data for x, _ in pts})
    rows = [[charts.token_label(x)] + [fmt(dict(pts).get(x)) for _, pts in data] for x in xs]
    return _table(title, [xname] + [label for label, _ in data], rows)


def plots_html(outcomes: list[Outcome], max_len: int, prefix_tokens: int = 0) -> list[str]:
    """The three charts as inline SVG, or as tables when matplotlib is not installed."""
    about = _about(outcomes, max_len)
    conc = concurrency_data(outcomes, max_len, prefix_tokens)
    cost = cost_data(outcomes, max_len)
    bars = budget_data(outcomes)
    caps = sorted({o.fit.max_num_seqs for o in outcomes})
    t1 = f"Requests the KV pool holds, by context (capped at max_num_seqs)\n{about}"
    t2 = f"Cost of the token at position n\n{about}"
    t3 = f"Memory per GPU\n{about}"
    if not charts.available():
        def num(v):
            return "" if v is None else f"{v:,.4g}"
        return ["<p>(charts need the plot extra: pip install 'kvplan[plot]'; the numbers:)</p>",
                _series_table(t1, "context", conc, num), _series_table(t2, "position", cost, num),
                _table(t3 + " (GiB)", ["configuration"] + [p for p, _ in bars[0][1]],
                       [[label] + [f"{v:.2f}" for _, v in segs] for label, segs in bars])]
    cap_line = (float(caps[0]), f"max_num_seqs {caps[0]:,}") if len(caps) == 1 else None
    return [charts.svg_text(charts.line_figure(t1, "context (tokens)",
                                               "concurrent requests per replica", conc,
                                               logy=True, hline=cap_line)),
            charts.svg_text(charts.line_figure(t2, "position (tokens)",
                                               "USD per million output tokens", cost)),
            charts.svg_text(charts.bars_figure(t3, bars, "GiB"))]
