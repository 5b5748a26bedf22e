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
from .scenario_eval import prefill_tokens


def _pcts(values: tuple[float, ...]) -> dict | None:
    if not values:
        return None
    v = list(values)
    return {"mean": statistics.fmean(v), "p50": quantile(v, 50), "p90": quantile(v, 90),
            "p99": quantile(v, 99)}


def simulate_outcome(o, requests: list[Request], w: Workload, n: int, seed: int) -> dict:
    """Simulate ``n`` of ``requests`` on one replica of outcome ``o`` (at least one replica's
    planned batch)."""
    r, ev = o.fit, o.evaluation
    block = r.block_size_tokens
    replicas = max(ev.replicas_needed, 1)
    rng = random.Random(seed)
    chosen = requests[:n]
    users = None
    t = 0.0
    reqs = []
    rate = None
    for x in chosen:
        p = prefill_tokens(x, w, block)
        cached = x.context_tokens - p
        if w.request_rate_per_s:
            rate = w.request_rate_per_s / replicas
            t += rng.expovariate(rate)
        reqs.append(SimRequest(t, p, x.output_tokens, cached))
    if not w.request_rate_per_s:
        users = max(1, math.ceil((w.concurrent_requests or 1) / replicas))
    limits = SimLimits(max_num_seqs=max(ev.batch, 1), max_num_batched_tokens=r.max_num_batched_tokens,
                       pool_tokens=r.kv_pool_tokens, block_tokens=block)
    res = simulate(o.step, o.efficiency, limits, reqs, users=users)
    return {
        "configuration": {"gpu": o.candidate.gpu.key, "engine": r.layout.label,
                          "tp": o.candidate.tp, "pp": o.candidate.pp, "kv_dtype": r.kv_format},
        "requests": len(reqs), "seed": seed,
        "arrivals": (f"Poisson at {rate:g} requests/s per replica ({replicas} replicas)"
                     if rate else f"closed loop, {users} users per replica ({replicas} replicas)"),
        "max_num_seqs": limits.max_num_seqs, "max_num_batched_tokens": limits.max_num_batched_tokens,
        "pool_tokens": limits.pool_tokens,
        "ttft_s": _pcts(res.ttft_s), "tpot_s": _pcts(res.tpot_s),
        "output_tokens_per_s": res.output_tokens / res.seconds if res.seconds else None,
        "steps": res.steps, "simulated_s": res.seconds, "unfinished": res.unfinished,
        "efficiency": o.efficiency.source,
    }
