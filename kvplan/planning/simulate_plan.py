"""``kvplan plan --simulate N``: the best configuration's replica, stepped request by request
by ``kvplan.core.scheduler_sim`` with the workload's own lengths and arrivals (Poisson at the
rate each replica carries, or closed-loop users), for TTFT and TPOT percentiles where the plan's
figures are means and single percentiles of a steady state."""

from __future__ import annotations

import math
import random
import statistics

from ..core.scheduler_sim import SimLimits, SimRequest, simulate
from ..core.workload import Request, Workload, quantile
from .scenario_eval import cached_prefix_tokens, prefill_tokens


def _pcts(values: tuple[float, ...]) -> dict | None:
    if not values:
        return None
    v = list(values)
    return {"mean": statistics.fmean(v), "p50": quantile(v, 50), "p90": quantile(v, 90),
            "p99": quantile(v, 99)}


def simulate_outcome(o, requests: list[Request], w: Workload, n: int, seed: int,
                     disaggregated: bool = False) -> dict:
    """Simulate ``n`` of ``requests`` on one replica of outcome ``o`` (at least one replica's
    planned batch); under attention DP on one DP rank, which schedules its own requests (the
    MoE layers' cost of the other ranks' tokens is in the step model, at the same batch)."""
    r, ev = o.fit, o.evaluation
    block = r.block_size_tokens
    dp = o.candidate.dp
    replicas = max(ev.replicas_needed, 1)
    ranks = replicas * dp  # the schedulers the demand is shared among
    rng = random.Random(seed)
    chosen = requests[:n]
    notes = []
    if n > len(requests):
        notes.append(f"{n:,} requests asked, {len(requests):,} sampled: all of them simulated "
                     "(raise --samples for more)")
    users = None
    t = 0.0
    reqs = []
    rate = None
    for x in chosen:
        p = prefill_tokens(x, w, block)
        shared = min(cached_prefix_tokens(x.shared_tokens, block), x.context_tokens - p)
        if w.request_rate_per_s:
            rate = w.request_rate_per_s / ranks
            t += rng.expovariate(rate)
        reqs.append(SimRequest(t, p, x.output_tokens, x.context_tokens - p, shared))
    if not w.request_rate_per_s:
        users = max(1, math.ceil((w.concurrent_requests or 1) / ranks))
        notes.append(f"closed loop: the first {users} requests (every user at once, at t = 0) "
                     "are left out of the percentiles as warm-up")
    if o.step.speculative_tokens:
        notes.append("speculative decoding is not simulated: one token per decode step (the "
                     "table's TPOT divides by the acceptance length)")
    if disaggregated:
        notes.append("simulated colocated: prefills share this replica's steps and no KV "
                     "transfer is timed (the plan's disaggregated figures do not)")
    where = (f"DP rank ({replicas} replicas x {dp} ranks)" if dp > 1
             else f"replica ({replicas} replicas)")
    if r.stages and r.stages[0].dsv4 is not None:
        notes.append("DeepSeek-V4: the simulated pool is vLLM's 'GPU KV cache size' in tokens "
                     f"({r.kv_pool_tokens:,}: the pool over its reservation at max_model_len), "
                     "not the packed block pool the plan's memory figures count; the simulated "
                     "batch can be smaller than the plan's")
    # under DCP a block holds block x dcp of a sequence's tokens (kv_pool_tokens counts them)
    limits = SimLimits(max_num_seqs=max(ev.batch, 1), max_num_batched_tokens=r.max_num_batched_tokens,
                       pool_tokens=r.kv_pool_tokens, block_tokens=block * r.request.dcp)
    res = simulate(o.step, o.efficiency, limits, reqs, users=users)
    ttft, tpot = res.ttft_s, res.tpot_s
    if users is not None:  # drop the start-up wave
        ttft = tuple(v for v, a in zip(ttft, res.ttft_arrival_s, strict=True) if a > 0) or ttft
        tpot = tuple(v for v, a in zip(tpot, res.tpot_arrival_s, strict=True) if a > 0) or tpot
    if res.stalled:
        notes.append(f"{res.unfinished:,} requests never ran: the next one does not fit the pool "
                     "or the limits")
    notes.append("admission reserves each request's whole final length (no preemption); no "
                 "pipeline-stage overlap")
    return {
        "configuration": {"gpu": o.candidate.gpu.key, "engine": r.layout.label,
                          "tp": o.candidate.tp, "pp": o.candidate.pp, "dp": dp,
                          "ep": o.candidate.ep, "dcp": o.candidate.dcp, "kv_dtype": r.kv_format},
        "requests": len(reqs), "seed": seed,
        "arrivals": (f"Poisson at {rate:g} requests/s per {where}" if rate
                     else f"closed loop, {users} users per {where}"),
        "max_num_seqs": limits.max_num_seqs, "max_num_batched_tokens": limits.max_num_batched_tokens,
        "pool_tokens": limits.pool_tokens,
        "ttft_s": _pcts(ttft), "tpot_s": _pcts(tpot),
        "output_tokens_per_s": res.output_tokens / res.seconds if res.seconds else None,
        "steps": res.steps, "simulated_s": res.seconds, "unfinished": res.unfinished,
        "stalled": res.stalled, "notes": notes,
        "efficiency": o.efficiency.source,
    }
