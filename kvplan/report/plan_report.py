"""PlanReport -> the rows and sections every format shares, and the markdown and HTML reports.
Pure string building; the HTML is one self-contained file with inline SVG charts drawn by
matplotlib (``kvplan.report.plan_plots``; tables of the same numbers without the plot extra),
no scripts and no external assets."""

from __future__ import annotations

import html

from ..core.parallel import layout_words
from ..core.text import printable
from ..core.units import GiB
from ..planning.scenario import Outcome, PlanReport

HEADERS = ("#", "GPU", "engine", "layout", "KV", "status", "fits (req)", "batch", "replicas",
           "GPUs", "TTFT p{q}", "TPOT p{q}", "$/hour", "$/M out tok", "$/request", "headroom")


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _times(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def _unit(v: float | None, fmt: str, unit: str) -> str:
    return "-" if v is None else format(v, fmt) + unit


def status(o: Outcome) -> str:
    e = o.evaluation
    if e.ok:
        return "ok"
    if not e.fits:
        return "does not fit"
    if not e.meets_slo or not e.batch:
        return "misses SLO"
    return "short of the rate"


def headers(rep: PlanReport) -> list[str]:
    q = f"{rep.scenario.slo.percentile:g}"
    return [h.replace("{q}", q) for h in HEADERS]


def row(o: Outcome, rank: int) -> list[str]:
    c, e = o.candidate, o.evaluation
    return [str(rank), c.gpu.key, o.fit.layout.label, c.layout.removeprefix("tp ").replace(
                " x pp ", " x "), o.fit.kv_format,
            status(o), f"{e.memory_concurrency:,}", f"{e.batch:,}",
            f"{e.replicas_needed:,}" if e.batch else "-", f"{e.gpus:,}",
            _unit(e.ttft_s, ".3f", " s"), _unit(_times(e.tpot_s, 1e3), ".1f", " ms"),
            f"{e.usd_per_hour:,.2f}", _num(e.usd_per_million_output_tokens, ",.3f"),
            _num(e.usd_per_request, ".5f"), _unit(_times(e.headroom, 100), ".0f", "%")]


def rows(rep: PlanReport) -> list[list[str]]:
    return [row(o, i + 1) for i, o in enumerate(rep.outcomes)]


def headline(rep: PlanReport) -> str:
    b = rep.best
    if b is None:
        return "No configuration meets the workload and its SLOs."
    c, e = b.candidate, b.evaluation
    return (f"Best: {e.replicas_needed} x ({c.gpu.key}, {b.fit.layout.label}, {c.layout}, "
            f"KV {b.fit.kv_format})"
            + (f" + {e.prefill_instances_needed} prefill instance(s)" if e.prefill_instances_needed else "")
            + f" = {e.gpus_needed} GPU{'s' if e.gpus_needed > 1 else ''} "
            f"({e.gpus} billed in {e.nodes} node{'s' if e.nodes > 1 else ''})"
            + (f": {e.batch} requests per DP rank ({e.batch * c.dp} per replica), "
               if c.dp > 1 else f": {e.batch} requests per replica, ")
            + f"${e.usd_per_hour:,.2f}/hour, "
            + (f"${e.usd_per_million_output_tokens:,.3f} per million output tokens, "
               if e.usd_per_million_output_tokens is not None else "")
            + (f"headroom {e.headroom:.0%}" if e.headroom is not None else ""))


def workload_lines(rep: PlanReport) -> list[str]:
    sc, w = rep.scenario, rep.scenario.workload
    demand = (f"{w.request_rate_per_s:g} requests/s" if w.request_rate_per_s is not None
              else f"{w.concurrent_requests:,} concurrent requests")
    src = (f"trace {w.trace_name}" if w.trace is not None else
           f"prompt {w.prompt.describe()}, output {w.output.describe()} tokens")  # type: ignore[union-attr]
    out = [f"Model {rep.model_name}; demand {demand}; {src}.", f"Samples: {rep.sample_note}."]
    labels = {"prompt_tokens": "new prompt tokens per request", "context_tokens": "tokens before "
              "decode", "output_tokens": "generated tokens", "final_tokens": "tokens at the end"}
    for k, s in rep.stats.items():
        out.append(f"{labels.get(k, k)}: mean {s.mean:,.1f}, p50 {s.p50:,}, "
                   f"p{s.q:g} {s.pq:,}, max {s.max:,}")
    if w.shared_prefix_tokens:
        out.append(f"Shared prefix: {w.shared_prefix_tokens:,} tokens.")
    slo = sc.slo
    parts = []
    if slo.ttft_s is not None:
        parts.append(f"TTFT <= {slo.ttft_s * 1e3:g} ms")
    if slo.tpot_s is not None:
        parts.append(f"TPOT <= {slo.tpot_s * 1e3:g} ms")
    out.append(f"SLO at p{slo.percentile:g}: " + (", ".join(parts) if parts else "none"))
    out.append(f"max_model_len {rep.max_model_len:,} tokens")
    return out


def simulation_lines(sim: dict | None) -> list[str]:
    """The --simulate result: percentiles of TTFT and TPOT over the simulated requests."""
    if not sim:
        return []
    c = sim["configuration"]

    def pct(d: dict | None) -> str:
        if not d:
            return "none"
        return (f"mean {d['mean'] * 1e3:.1f} ms, p50 {d['p50'] * 1e3:.1f}, p90 {d['p90'] * 1e3:.1f}, "
                f"p99 {d['p99'] * 1e3:.1f} ms")

    lines = [f"Simulated {sim['requests']:,} requests on one replica of rank 1 ({c['gpu']} "
             f"tp {c['tp']} x pp {c['pp']}, {c['kv_dtype']}): {sim['arrivals']}; "
             f"max_num_seqs {sim['max_num_seqs']:,}, token budget "
             f"{sim['max_num_batched_tokens']:,} per step, {sim['steps']:,} steps (at the load "
             "the replica carries; the table's TPOT is at the planned batch cap)",
             f"TTFT {pct(sim['ttft_s'])}", f"TPOT {pct(sim['tpot_s'])}"]
    if sim["output_tokens_per_s"]:
        lines.append(f"{sim['output_tokens_per_s']:,.0f} output tokens/s over "
                     f"{sim['simulated_s']:.1f} simulated s ({sim['efficiency']})")
    if sim["unfinished"] and not sim.get("stalled"):
        lines.append(f"{sim['unfinished']:,} requests unfinished at the step limit")
    lines += [f"note: {x}" for x in sim.get("notes", [])]
    return lines


def detail_lines(o: Outcome) -> list[str]:
    """The chosen configuration: memory, time, cost, offload / preemption / disaggregation."""
    r, e = o.fit, o.evaluation
    b = r.budget
    q = o.evaluation.slo_final_tokens
    out = [f"Per GPU: total {b.total_bytes / GiB:.2f} GiB, usable {b.usable_bytes / GiB:.2f} GiB, "
           f"weights {b.weights_bytes / GiB:.2f} GiB, activations {b.activation_bytes / GiB:.2f} GiB, "
           f"runtime {b.runtime_overhead_bytes / GiB:.2f} GiB, KV pool {b.kv_pool_bytes / GiB:.2f} GiB "
           + (f"({r.kv_pool_tokens:,} tokens of the sequences, {r.kv_pool_tokens // r.request.dcp:,} "
              f"on each GPU; blocks of {r.block_size_tokens} x dcp {r.request.dcp} tokens)"
              if r.request.dcp > 1 else
              f"({r.kv_pool_tokens:,} tokens, {r.block_size_tokens}-token blocks)"),
           f"KV per request (per GPU, at its peak): mean {e.kv_bytes_per_request_mean / GiB:.3f} GiB, "
           f"{e.kv_bytes_per_request_at_percentile / GiB:.3f} GiB at the SLO percentile ({q:,} tokens)",
           f"Pool holds {e.memory_concurrency:,} requests of this mix; batch {e.batch:,} "
           f"(max_num_seqs {r.max_num_seqs:,}, TPOT SLO)"
           + (f", per DP rank: {o.candidate.dp} ranks per replica" if o.candidate.dp > 1 else "")]
    if e.batch:
        out.append(f"Per replica: {e.requests_per_s_per_replica:.3f} requests/s, "
                   f"{e.output_tokens_per_s_per_replica:,.0f} output tokens/s; mean prefill "
                   f"{e.mean_prefill_s:.3f} s ("
                   + ("on the prefill instances" if e.disaggregated else
                      f"{e.prefill_share:.0%} of the replica's time") + "); TPOT "
                   f"{e.tpot_mean_s * 1e3:.1f} ms at the mean decode context "  # type: ignore[operator]
                   f"({e.decode_context_tokens:,.0f} tokens)")
    if e.headroom is not None:
        out.append(f"Headroom: {e.headroom:.0%} on the {e.replicas_needed} replica(s) needed; "
                   f"{e.fleet_headroom:.0%} with every GPU of the billed nodes serving")
        if e.headroom < 0.2:
            out.append("Busy: queueing is not modelled, and at this utilisation requests wait "
                       "for prefill; TTFT will exceed the figure above")
    if e.time_to_first_answer_token_s is not None:
        out.append(f"Reasoning: first answer token after {e.time_to_first_answer_token_s:.2f} s at "
                   "the percentile (TTFT + reasoning x TPOT)" + (
                       f"; ${e.usd_per_million_answer_tokens:,.3f} per million answer tokens"
                       if e.usd_per_million_answer_tokens is not None else ""))
    for name, t in e.offload.items():
        out.append(f"Offload {name}: {t['bytes'] / GiB:,.0f} GiB at "
                   f"{t['bandwidth_bytes_per_s'] / 1e9:g} GB/s "
                   f"holds {t['requests_held']:,} requests; swap-in {t['swap_in_s_mean'] * 1e3:.1f} ms "
                   f"mean, {t['swap_in_s_at_percentile'] * 1e3:.1f} ms at the percentile")
    p = e.preemption
    if p:
        out.append(f"Preemption ({p['mode']}): one evicted request of {p['evicted_tokens_mean']:,} "
                   f"tokens costs {p['recompute_s_mean']:.3f} s to recompute or "
                   f"{p['swap_in_s_mean'] * 1e3:.1f} ms to swap back at "
                   f"{p['swap_bandwidth_bytes_per_s'] / 1e9:g} GB/s; {p['cheaper']} is cheaper")
    d = e.disaggregated
    if d:
        out.append(f"Disaggregated: KV transfer {d['kv_transfer_s_mean'] * 1e3:.1f} ms per request "
                   f"(mean; {d['kv_transfer_s_at_percentile'] * 1e3:.1f} ms at the percentile) at "
                   f"{d['link_bandwidth_bytes_per_s'] / 1e9:g} GB/s; {d['prefill_instances_needed']} "
                   f"prefill instance(s) needed, {d['decode_replicas']} decode replica(s)"
                   + (f"; prefill layout {_role_words(d['prefill_layout'])} "
                      f"({d['prefill_layout']['mean_prefill_s']:.3f} s mean prefill, "
                      f"{d['prefill_gpus']} prefill + {d['decode_gpus']} decode GPUs)"
                      if d.get("prefill_layout") else ""))
        for name, cmd in (d.get("prefill_launch") or {}).items():
            if name == o.fit.layout.name:
                out.append(f"Prefill instances: {cmd}")
    out += [f"Note: {n}" for n in r.notes]
    return out


def _role_words(x: dict) -> str:
    return layout_words(x["tp"], x["pp"], x["dp"], x["ep"])


def launch_line(o: Outcome) -> str:
    return o.launch.get(o.fit.layout.name, "") or "# no launch command: this configuration does not run"


def skipped_line(s) -> str:
    c = s.candidate
    return f"{c.gpu.key} {c.engine} {c.layout} {c.kv_dtype}: {s.reason}"


def _md_table(head: list[str], body: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")
    out = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(map(cell, r)) + " |" for r in body]
    return out


def markdown(rep: PlanReport) -> str:
    out = [f"# kvplan plan: {rep.scenario.name}", "", headline(rep), "", "## Workload", ""]
    out += [f"- {x}" for x in workload_lines(rep)]
    out += ["", "## Configurations, best first", ""] + _md_table(headers(rep), rows(rep))
    top = rep.outcomes[0] if rep.outcomes else None
    if top is not None:
        out += ["", f"## Rank 1 in detail ({status(top)})", ""]
        out += [f"- {x}" for x in detail_lines(top)]
        if top.evaluation.reasons:
            out += [f"- Why not: {x}" for x in top.evaluation.reasons]
        out += ["", "```sh", launch_line(top), "```"]
    if rep.simulation:
        out += ["", "## Simulated (kvplan/core/scheduler_sim.py)", ""]
        out += [f"- {x}" for x in simulation_lines(rep.simulation)]
    out += _tail_md(rep)
    return "\n".join(_md_safe(out)) + "\n"


def _md_safe(lines: list[str]) -> list[str]:
    """Each line one line, its control characters escaped and ``<``, ``>`` and ``&`` as
    entities (a scenario or model name cannot add a heading or raw HTML); code blocks as
    they are but for the control characters."""
    from ..core.text import printable

    out, code = [], False
    for line in lines:
        if line.startswith("```"):
            code = not code
            out.append(line)
            continue
        text = printable(line, newlines=False)
        if not code:
            text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out.append(text)
    return out


def _tail_md(rep: PlanReport) -> list[str]:
    out = []
    if rep.skipped:
        out += ["", "## Not planned", ""]
        out += [f"- {skipped_line(s)}" for s in rep.skipped]
    out += ["", "## Assumptions", ""] + [f"- {a}" for a in rep.assumptions]
    if rep.warnings:
        out += ["", "## Warnings", ""] + [f"- {w}" for w in rep.warnings]
    return out


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right}th{background:#f3f3f3}td:nth-child(2),td:nth-child(3),td:nth-child(6){text-align:left}
tr.ok td{background:#eefaee}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}
.plots{display:flex;flex-wrap:wrap;gap:16px}"""


def html_report(rep: PlanReport) -> str:
    from .plan_plots import plots_html

    def e(text: str) -> str:  # HTML-escaped, control characters shown as \xNN
        return html.escape(printable(str(text)))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>kvplan plan: "
             f"{e(rep.scenario.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>kvplan plan: {e(rep.scenario.name)}</h1>", f"<p><b>{e(headline(rep))}</b></p>",
             "<h2>Workload</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in workload_lines(rep)) + "</ul>",
             "<h2>Configurations, best first</h2><table><tr>"
             + "".join(f"<th>{e(h)}</th>" for h in headers(rep)) + "</tr>"]
    for o, r in zip(rep.outcomes, rows(rep), strict=True):
        cls = " class='ok'" if o.evaluation.ok else ""
        parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>")
    parts.append("</table>")
    fitting = [o for o in rep.outcomes if o.evaluation.fits][:3]
    if fitting:
        parts.append("<h2>Plots (the best configurations that fit)</h2><div class='plots'>")
        parts += plots_html(fitting, rep.max_model_len, rep.scenario.workload.shared_prefix_tokens)
        parts.append("</div>")
    top = rep.outcomes[0] if rep.outcomes else None
    if top is not None:
        parts.append(f"<h2>Rank 1 in detail ({e(status(top))})</h2><ul>"
                     + "".join(f"<li>{e(x)}</li>" for x in detail_lines(top))
                     + "".join(f"<li>Why not: {e(x)}</li>" for x in top.evaluation.reasons)
                     + f"</ul><pre>{e(launch_line(top))}</pre>")
    if rep.skipped:
        parts.append("<h2>Not planned</h2><ul>" + "".join(
            f"<li>{e(skipped_line(s))}</li>" for s in rep.skipped) + "</ul>")
    parts.append("<h2>Assumptions</h2><ul>" + "".join(f"<li>{e(a)}</li>" for a in rep.assumptions)
                 + "</ul>")
    if rep.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{e(w)}</li>" for w in rep.warnings)
                     + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
