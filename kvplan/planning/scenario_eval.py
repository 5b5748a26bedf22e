"""One candidate deployment against a workload: the concurrency the workload reaches, the batch
the SLOs allow, replicas, GPUs, cost, headroom, and the offload / preemption / disaggregation
figures. Pure; composes ``kvplan.planning.fit_pools`` (memory) and ``kvplan.core.perf`` (time).

Rules (each is repeated in the report's assumptions):
- Memory: every request is counted at its peak (its last token), block-rounded, with the
  shared prefix's whole blocks counted once; the pool holds ``floor((pool - shared) / mean
  private)`` such requests (the mean over the sampled requests), capped by ``max_num_seqs``.
- SLO batch: the largest batch B whose TPOT at the SLO percentile's final length stays within
  the TPOT limit (TPOT grows with B).
- Throughput: decode runs at the token-weighted mean decode context; a replica serves
  ``1 / (mean prefill time + mean output x TPOT(B) / B)`` requests/s (prefill and decode share
  the GPUs; disaggregated: prefill instances serve ``1 / mean prefill time`` each and decode
  replicas ``B / (mean output x TPOT(B))``).
- TTFT at the percentile is that percentile of the requests' prefill times (no queueing), plus
  the KV transfer when disaggregated.
- The fleet is whole nodes; every GPU of it is billed; cost per token is at the demanded rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from ..core.perf import StepModel, host_ttft_s, prefill_s, tpot_s
from ..core.scenario_spec import Extras, Slo, Tier
from ..core.workload import Request, Workload, quantile
from .fit_pools import pool_usage_fn, stage_bytes_fn
from .fit_types import FitResult


@dataclass(frozen=True)
class Fleet:
    gpus_per_node: int
    nodes: int | None  # None: as many as the workload needs
    price_usd_per_gpu_hour: float


@dataclass(frozen=True)
class PrefillOption:
    """A layout the prefill instances of a disaggregated plan may take (its own plan and step
    model on the same GPU, engine and KV format as the decode replicas)."""

    fit: FitResult
    step: StepModel

    @property
    def gpus(self) -> int:
        return self.fit.request.gpus


@dataclass(frozen=True)
class Evaluation:
    fits: bool
    meets_slo: bool
    meets_rate: bool
    reasons: tuple[str, ...]
    memory_concurrency: int  # requests a pool holds (workload mix), before max_num_seqs
    #: the running batch planned per replica (memory, max_num_seqs and TPOT SLO); under
    #: attention DP, memory_concurrency and batch are per DP rank (each rank has its own pool)
    batch: int
    mean_private_units: tuple[Fraction, ...]
    decode_context_tokens: float
    slo_final_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    tpot_mean_s: float | None
    mean_prefill_s: float
    prefill_share: float  # share of a colocated replica's time spent prefilling
    requests_per_s_per_replica: float
    output_tokens_per_s_per_replica: float
    request_rate_per_s: float
    replicas_needed: int
    replicas: int
    prefill_instances_needed: int
    prefill_instances: int
    gpus: int
    gpus_needed: int  # replicas (and prefill instances) needed x GPUs per replica
    nodes: int
    usd_per_hour: float
    usd_per_million_output_tokens: float | None
    usd_per_million_tokens: float | None
    usd_per_request: float | None
    headroom: float | None  # spare capacity of the replicas needed
    fleet_headroom: float | None  # spare capacity if every replica slot of the billed nodes serves
    kv_bytes_per_request_mean: float  # per GPU of the busiest stage, at the peak
    kv_bytes_per_request_at_percentile: int
    time_to_first_answer_token_s: float | None = None  # reasoning workloads: TTFT + thinking x TPOT
    usd_per_million_answer_tokens: float | None = None  # output without the reasoning tokens
    offload: dict = field(default_factory=dict)
    preemption: dict = field(default_factory=dict)
    disaggregated: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.fits and self.meets_slo and self.meets_rate


def cached_prefix_tokens(shared: int, block: int) -> int:
    """The prefix cache serves whole blocks only."""
    return shared // block * block


def prefill_tokens(req: Request, w: Workload, block: int) -> int:
    """Tokens a request prefills: what the prefix cache does not serve. The cache serves whole
    blocks of the shared prefix and the earlier turns; with a hit rate instead, that share of
    shared + new tokens. At least one token (the engine always computes the last one)."""
    if w.prefix_cache_hit_rate:
        total = req.shared_tokens + req.new_tokens
        return max(total - math.floor(w.prefix_cache_hit_rate * total), 1)
    cached = cached_prefix_tokens(req.shared_tokens + req.cached_history_tokens, block)
    return max(req.context_tokens - cached, 1)


@dataclass(frozen=True, eq=False)
class RequestArrays:
    """The sampled requests as integer arrays (one entry per request), built once per
    workload so that each candidate is evaluated with numpy instead of a loop per request."""

    shared: np.ndarray
    cached_history: np.ndarray
    new: np.ndarray
    context: np.ndarray
    output: np.ndarray
    thinking: np.ndarray
    peak: np.ndarray
    final: np.ndarray
    #: per-length sums shared by candidates that differ only in the GPU (``_length_sums``)
    memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, requests: list[Request]) -> RequestArrays:
        cols = np.array([(x.shared_tokens, x.cached_history_tokens, x.new_tokens,
                          x.context_tokens, x.output_tokens, x.thinking_tokens)
                         for x in requests], dtype=np.int64).reshape(-1, 6)
        shared, hist, new, ctx, out, think = (cols[:, i] for i in range(6))
        return cls(shared, hist, new, ctx, out, think, ctx + out - 1, ctx + out)


def nearest_rank(values: np.ndarray, q: float):
    """``kvplan.core.workload.quantile`` of an array (the same nearest rank), as a Python
    number."""
    k = max(math.ceil(Fraction(str(q)) * len(values) / 100), 1)
    return np.partition(values, k - 1)[k - 1].item()


def prefill_token_array(a: RequestArrays, w: Workload, block: int) -> np.ndarray:
    """``prefill_tokens`` of every request at once."""
    if w.prefix_cache_hit_rate:
        total = a.shared + a.new
        return np.maximum(total - np.floor(w.prefix_cache_hit_rate * total).astype(np.int64), 1)
    cached = (a.shared + a.cached_history) // block * block
    return np.maximum(a.context - cached, 1)


def _length_sums(r: FitResult, a: RequestArrays, peaks: np.ndarray, prefix: int, usage
                 ) -> tuple[np.ndarray, list[int], int]:
    """(distinct block-rounded peak lengths, each pool's private units summed over the
    requests, the per-GPU bytes summed over the requests): one call per distinct length.
    Candidates that differ only in the GPU hold the same per-length amounts (the pool sizes
    differ, not what a sequence takes), so the sums are kept in ``a.memo`` under everything
    they depend on: the engine's rules, block, prefix, pipeline split, layer costs, pool
    layers and groups."""
    fp = r.footprint
    key = (r.layout.label, r.block_size_tokens, prefix, int(peaks[0] - a.peak[0]), r.request.pp,
           tuple(tuple(layer) for layer in fp.layer_costs),
           tuple(tuple(layer) for layer in r.draft_footprint.layer_costs)
           if r.draft_footprint else None,
           tuple((p.pool_layers, p.pool_groups) for p in r.stages))
    hit = a.memo.get(key)
    if hit is not None:
        return hit
    distinct, counts = np.unique(_length_key(r)(peaks), return_counts=True)
    sb = _seq_bytes(r)
    totals = [0] * len(usage(int(distinct[0])))
    bytes_total = 0
    for k, c in zip(distinct.tolist(), counts.tolist(), strict=True):
        for i, u in enumerate(usage(k)):
            totals[i] += u.private * c
        bytes_total += sb[k] * c
    a.memo[key] = out = (distinct, totals, bytes_total)
    return out


def _by_distinct(keys: np.ndarray, fn) -> tuple[np.ndarray, list]:
    """(index of each entry's distinct key, fn of each distinct key): one call per distinct
    length instead of one per request."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    return inverse, [fn(int(k)) for k in distinct]


def _has_windows(r: FitResult) -> bool:
    return any(c.window_tokens is not None and c.policy != "all" and not c.state_bytes_per_rank
               for layer in r.footprint.layer_costs for c in layer)


def _length_key(r: FitResult):
    """n -> the n that holds the same blocks: with full attention only (no windows), every
    length inside one block holds the same, so lengths are rounded up to whole blocks. Takes
    an int or a numpy array of them."""
    block = r.block_size_tokens
    return (lambda n: n) if _has_windows(r) else (lambda n: -(-n // block) * block)


class _ByLength(dict):
    """fn(n), computed once per length that holds distinct blocks (``_length_key``)."""

    def __init__(self, r: FitResult, fn):
        super().__init__()
        self.fn = fn
        self.key = _length_key(r)

    def __missing__(self, n):
        k = self.key(n)
        v = self[n] = self[k] if k != n else self.fn(n)
        return v


def _seq_bytes(r: FitResult):
    """Per-GPU bytes (busiest stage) a sequence of n tokens holds, block-rounded."""
    fns = [stage_bytes_fn(r.footprint, r.draft_footprint, s, r.request.pp) for s in range(r.request.pp)]
    return _ByLength(r, lambda n: max(fn(n) for fn in fns))


def largest_batch(ok, cap: int) -> int:
    """The largest B <= cap with ok(B) (ok holds for small B and fails from some B on);
    0 when even B = 1 fails."""
    if cap < 1 or not ok(1):
        return 0
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _closed_loop(users: float, prefill_s_mean: float, out_mean: float, step_s: float,
                 disaggregated: bool) -> tuple[float, float]:
    """(prefill share x, requests/s) of a replica whose ``users`` each send their next request
    when the last one ends: colocated, r = users / (prefill + out x step / (1 - x)) with
    x = r x prefill, solved by bisection on x in [0, 1); disaggregated, the prefill runs
    elsewhere: r = users / (prefill + out x step), x = 0."""
    if disaggregated or prefill_s_mean <= 0:
        return 0.0, users / (prefill_s_mean + out_mean * step_s)
    lo, hi = 0.0, 1.0
    for _ in range(80):
        x = (lo + hi) / 2
        r = users / (prefill_s_mean + out_mean * step_s / (1 - x))
        if r * prefill_s_mean > x:
            lo = x
        else:
            hi = x
    x = (lo + hi) / 2
    return x, x / prefill_s_mean


def _slots(gpus_per_node: int, nodes: int, per_replica: int) -> int:
    """Replicas a fleet of whole nodes holds: within a node when one fits in it (TP stays on
    NVLink), else across nodes (pipeline stages span them)."""
    if per_replica <= gpus_per_node:
        return nodes * (gpus_per_node // per_replica)
    return nodes * gpus_per_node // per_replica


def _nodes_for(count: int, size: int, gpus_per_node: int) -> int:
    """Whole nodes ``count`` instances of ``size`` GPUs take on nodes of their own."""
    if size <= gpus_per_node:
        return math.ceil(count / (gpus_per_node // size))
    return math.ceil(count * size / gpus_per_node)


def _pick_prefill(options: list[PrefillOption], a: RequestArrays, w: Workload, q: float,
                  slo: Slo, extra_arr) -> tuple[PrefillOption, np.ndarray, list[dict]]:
    """The prefill layout of a disaggregated plan: among the options that fit, the fewest
    GPU-seconds per request (mean prefill x GPUs / DP ranks) whose TTFT at the percentile
    (with the transfer and host time ``extra_arr``) meets the SLO; else the fastest TTFT."""
    rows = []
    for o in options:
        pr = o.fit
        p_tok = prefill_token_array(a, w, pr.block_size_tokens)
        arr = np.asarray(prefill_s(o.step, p_tok, pr.max_num_batched_tokens, a.context - p_tok),
                         dtype=np.float64)
        ttft = nearest_rank(arr + extra_arr, q)
        mean = float(arr.mean())
        rows.append((o, arr, {
            "tp": pr.request.tp, "pp": pr.request.pp, "dp": pr.request.dp, "ep": pr.request.ep,
            "gpus_per_instance": o.gpus, "mean_prefill_s": mean, "ttft_s": ttft,
            "gpu_seconds_per_request": mean * o.gpus / pr.request.dp,
            "meets_ttft": slo.ttft_s is None or ttft <= slo.ttft_s}))
    best = min(rows, key=lambda x: (not x[2]["meets_ttft"],
                                    x[2]["gpu_seconds_per_request"] if x[2]["meets_ttft"]
                                    else x[2]["ttft_s"]))
    return best[0], best[1], [x[2] for x in rows]


def evaluate(r: FitResult, sm: StepModel, requests: list[Request], w: Workload, slo: Slo,
             fleet: Fleet, extras: Extras, lookahead: int = 0,
             arrays: RequestArrays | None = None,
             prefill: list[PrefillOption] | None = None) -> Evaluation:
    """``arrays``: ``RequestArrays.of(requests)``, passed in when many candidates share the
    workload (each then costs numpy passes over the requests and one call per distinct length).
    ``prefill``: a disaggregated plan's prefill layouts (``_pick_prefill`` chooses; None: the
    decode replicas' own layout)."""
    a = arrays if arrays is not None else RequestArrays.of(requests)
    block, q = r.block_size_tokens, slo.percentile
    reasons: list[str] = []
    prefix = w.shared_prefix_tokens
    usage = pool_usage_fn(r, prefix)
    peaks = a.peak + lookahead
    distinct, totals, bytes_total = _length_sums(r, a, peaks, prefix, usage)
    pools = usage(int(distinct[0]))
    means = tuple(Fraction(t, len(peaks)) for t in totals)
    conc = min((math.floor((p.capacity - p.shared) / m) if m > 0 else 10**9)
               for p, m in zip(pools, means, strict=True))
    conc = max(conc, 0)
    # the engine refuses to start unless one max_model_len sequence fits (plan_fit's verdict)
    fits = r.fits and conc >= 1
    b = r.budget
    free = b.total_bytes - b.weights_bytes - b.activation_bytes - b.runtime_overhead_bytes
    if r.request.kv_cache_memory_bytes is not None and b.kv_pool_bytes > free:
        fits = False
        reasons.append(f"kv_cache_memory {b.kv_pool_bytes / 2**30:.2f} GiB exceeds the "
                       f"{free / 2**30:.2f} GiB a GPU has after weights and overheads")
    if not r.fits:
        reasons.append(r.verdict)
    elif conc < 1:
        reasons.append("the pool holds no request of this mix")
    cap = min(conc, r.max_num_seqs)

    out_total = int(a.output.sum())
    mean_out = out_total / len(requests)
    # sum of out x (ctx + (out - 1) / 2), exactly: every term is a multiple of 1/2
    decode_ctx = int((a.output * (2 * a.context + a.output - 1)).sum()) / 2 / out_total
    n_q = nearest_rank(a.final, q)

    chunk = r.max_num_batched_tokens
    p_tokens = prefill_token_array(a, w, block)
    pre_arr = np.asarray(prefill_s(sm, p_tokens, chunk, a.context - p_tokens), dtype=np.float64)
    pre_times = pre_arr.tolist()
    mean_pre = sum(pre_times) / len(pre_times)
    disagg = extras.disagg_link_bytes_per_s

    ranks = r.request.dp  # a replica's attention DP ranks, each running its own batch

    def rps_at(b: int) -> float:
        """Requests/s of one DP rank running b requests (decode only when disaggregated)."""
        t = float(tpot_s(sm, b, decode_ctx))
        return b / (mean_out * t) if disagg else 1 / (mean_pre + mean_out * t / b)

    def prefill_share(b: int) -> float:
        """Share of a colocated replica's time spent prefilling at saturation: every decode
        step of the running batch waits for it, so tokens come 1 / (1 - share) slower."""
        return 0.0 if disagg else rps_at(b) * mean_pre

    def tpot_at(b: int, n) -> float:
        return float(tpot_s(sm, b, n)) / (1 - prefill_share(b))

    batch = 0
    if fits:
        limit = slo.tpot_s
        batch = largest_batch(lambda b: limit is None or tpot_at(b, n_q) <= limit, cap)
        if batch == 0:
            reasons.append(f"TPOT at batch 1 is {tpot_at(1, n_q) * 1e3:.1f} ms at the p{q:g} "
                           f"length ({n_q:,} tokens), over the {limit * 1e3:g} ms limit")  # type: ignore[operator]

    sb = _seq_bytes(r)
    transfer = None
    extra_arr = np.zeros(len(a.context))
    if disagg:
        inverse, values = _by_distinct(a.context, lambda n: sb[n])
        transfer_arr = np.array(values, dtype=np.float64)[inverse] / disagg
        transfer = transfer_arr.tolist()
        extra_arr = extra_arr + transfer_arr
    if sm.efficiency.host_ttft_s or sm.efficiency.host_ttft_per_prompt_token_s:
        # the host's share (API server, tokeniser; calibrated) is not GPU time: TTFT only
        extra_arr = extra_arr + np.asarray(host_ttft_s(sm, a.new), dtype=np.float64)
    role: PrefillOption | None = None
    role_rows: list[dict] = []
    usable = [o for o in prefill or () if o.fit.fits]
    if disagg and prefill is not None and not usable:
        reasons.append("no prefill layout fits one max_model_len prompt")
        fits = False
        batch = 0
    elif disagg and usable:
        role, pre_arr, role_rows = _pick_prefill(usable, a, w, q, slo, extra_arr)
        mean_pre = float(pre_arr.mean())
    ttft_arr = pre_arr + extra_arr
    ttft = nearest_rank(ttft_arr, q)
    if slo.ttft_s is not None and ttft > slo.ttft_s:
        reasons.append(f"TTFT p{q:g} {ttft:.3f} s over the {slo.ttft_s:g} s limit")

    tp_pp = r.request.gpus  # GPUs of a replica: tp x pp per rank, dp ranks
    tpot_q = tpot_mean = None
    rps = out_rps = share = 0.0
    if batch:
        tpot_q = tpot_at(batch, n_q)
        tpot_mean = tpot_at(batch, decode_ctx)
        rps = rps_at(batch) * ranks
        share = prefill_share(batch)
        out_rps = rps * mean_out
    if w.concurrent_requests is not None:
        need = math.ceil(w.concurrent_requests / (batch * ranks)) if batch else 0
        rate = 0.0
        if batch:  # time and money at the load each rank carries, not at the cap
            users = w.concurrent_requests / (need * ranks)
            step_mean = float(tpot_s(sm, users, decode_ctx))
            x, r_rep = _closed_loop(users, mean_pre, mean_out, step_mean, bool(disagg))
            rate = r_rep * need * ranks
            tpot_q = float(tpot_s(sm, users, n_q)) / (1 - x)
            tpot_mean = step_mean / (1 - x)
            share = x
    else:
        rate = w.request_rate_per_s or 0.0
        need = math.ceil(rate / rps - 1e-12) if rps else 0
    need = max(need, 1) if batch else 0
    # a prefill instance has the replica's layout (or the prefill role's): each of its dp
    # ranks prefills one prompt at a time
    pre_ranks = role.fit.request.dp if role else ranks
    pre_gpus = role.gpus if role else tp_pp
    pre_need = max(math.ceil(rate * mean_pre / pre_ranks - 1e-12), 1) if disagg and batch else 0

    meets_rate = bool(batch)
    if r.request.tp > fleet.gpus_per_node:
        reasons.append(f"tp {r.request.tp} spans nodes of {fleet.gpus_per_node} GPUs")
        meets_rate = False

    want_gpus = need * tp_pp + pre_need * pre_gpus
    if role:  # each role on nodes of its own
        nodes_needed = _nodes_for(need, tp_pp, fleet.gpus_per_node) + _nodes_for(
            pre_need, pre_gpus, fleet.gpus_per_node)
        nodes = fleet.nodes if fleet.nodes is not None else max(nodes_needed, 1)
        if batch and nodes_needed > nodes:
            reasons.append(f"needs {want_gpus} GPUs ({need} x {tp_pp} decode + {pre_need} x "
                           f"{pre_gpus} prefill) on {nodes_needed} nodes, the fleet has {nodes}")
            meets_rate = False
        slots = need + pre_need
    elif fleet.nodes is not None:
        nodes = fleet.nodes
    else:
        nodes = max(_nodes_for(need + pre_need, tp_pp, fleet.gpus_per_node), 1)
    gpus = nodes * fleet.gpus_per_node
    if not role:
        slots = _slots(fleet.gpus_per_node, nodes, tp_pp)
    if batch and not role and slots < need + pre_need:
        reasons.append(f"needs {want_gpus} GPUs ({need + pre_need} x {tp_pp}), the fleet has {gpus}")
        meets_rate = False
    replicas = min(need, slots) if disagg else slots
    pre_inst = max(slots - replicas, 0) if disagg else 0
    headroom = fleet_headroom = None
    if batch and meets_rate:
        if w.concurrent_requests is not None:
            headroom = 1 - w.concurrent_requests / (need * batch * ranks)
            fleet_headroom = 1 - w.concurrent_requests / (replicas * batch * ranks)
        else:
            headroom = 1 - rate / (need * rps)
            fleet_headroom = 1 - rate / (replicas * rps)
        if disagg and mean_pre > 0:
            headroom = min(headroom, 1 - rate * mean_pre / (pre_need * pre_ranks))
            fleet_headroom = min(fleet_headroom,
                                 1 - rate * mean_pre / (max(pre_inst, 1) * pre_ranks))
    hourly = gpus * fleet.price_usd_per_gpu_hour
    mean_in = int(a.context.sum()) / len(requests)
    usd_out = usd_all = usd_req = None
    if rate > 0 and meets_rate:
        usd_req = hourly / 3600 / rate
        usd_out = usd_req / mean_out * 1e6
        usd_all = usd_req / (mean_in + mean_out) * 1e6
    bytes_mean = bytes_total / len(peaks)
    ev = Evaluation(
        fits=fits, meets_slo=fits and batch >= 1 and (slo.ttft_s is None or ttft <= slo.ttft_s),
        meets_rate=meets_rate, reasons=tuple(reasons), memory_concurrency=conc, batch=batch,
        mean_private_units=means, decode_context_tokens=decode_ctx, slo_final_tokens=n_q,
        ttft_s=ttft, tpot_s=tpot_q, tpot_mean_s=tpot_mean, mean_prefill_s=mean_pre,
        prefill_share=share, requests_per_s_per_replica=rps, output_tokens_per_s_per_replica=out_rps,
        request_rate_per_s=rate, replicas_needed=need, replicas=replicas,
        prefill_instances_needed=pre_need, prefill_instances=pre_inst, gpus=gpus,
        gpus_needed=want_gpus, nodes=nodes, usd_per_hour=hourly, usd_per_million_output_tokens=usd_out,
        usd_per_million_tokens=usd_all, usd_per_request=usd_req, headroom=headroom,
        fleet_headroom=fleet_headroom, kv_bytes_per_request_mean=bytes_mean,
        kv_bytes_per_request_at_percentile=sb[nearest_rank(peaks, q)])
    thinking = int(a.thinking.sum())
    if thinking and batch:
        answer = (out_total - thinking) / len(requests)
        ev = replace(ev, time_to_first_answer_token_s=nearest_rank(
            ttft_arr + a.thinking * tpot_mean, q),
            usd_per_million_answer_tokens=usd_req / answer * 1e6 if usd_req and answer else None)
    ev = _with_extras(ev, r, sm, requests, extras, sb, q, decode_ctx, transfer)
    if role is not None:
        chosen = next(x for x in role_rows if (x["tp"], x["pp"], x["dp"], x["ep"]) == (
            role.fit.request.tp, role.fit.request.pp, role.fit.request.dp, role.fit.request.ep))
        ev = replace(ev, disaggregated={**ev.disaggregated, "prefill_layout": chosen,
                                        "prefill_options": role_rows,
                                        "prefill_gpus": pre_need * pre_gpus,
                                        "decode_gpus": need * tp_pp})
    return ev


def _tier(t: Tier, mean_bytes: float, at_pct_bytes: int) -> dict:
    return {"bytes": t.bytes, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
            "requests_held": int(t.bytes // mean_bytes) if mean_bytes else 0,
            "swap_in_s_mean": mean_bytes / t.bandwidth_bytes_per_s,
            "swap_in_s_at_percentile": at_pct_bytes / t.bandwidth_bytes_per_s}


def _with_extras(ev: Evaluation, r: FitResult, sm: StepModel, requests: list[Request],
                 extras: Extras, sb, q: float, decode_ctx: float, transfer) -> Evaluation:
    offload = {}
    mean_b, pct_b = ev.kv_bytes_per_request_mean, ev.kv_bytes_per_request_at_percentile
    for name, tier in (("cpu", extras.cpu), ("nvme", extras.nvme)):
        if tier:
            offload[name] = _tier(tier, mean_b, pct_b)
    preempt = {}
    if extras.preemption:
        # a CPU tier's bandwidth as the scenario gives it; else the GPU's datasheet PCIe x the
        # link efficiency of the performance model
        bw = extras.cpu.bandwidth_bytes_per_s if extras.cpu else float(
            r.request.gpu.pcie_bandwidth_bytes_per_s_per_direction) * sm.efficiency.interconnect
        n_mean = round(decode_ctx)
        mids = [x.context_tokens + x.output_tokens // 2 for x in requests]
        n_q = quantile(mids, q)
        chunk = r.max_num_batched_tokens
        preempt = {"mode": extras.preemption, "swap_bandwidth_bytes_per_s": bw,
                   "evicted_tokens_mean": n_mean, "evicted_tokens_at_percentile": n_q,
                   "recompute_s_mean": float(prefill_s(sm, n_mean, chunk)),
                   "recompute_s_at_percentile": float(prefill_s(sm, n_q, chunk)),
                   "swap_in_s_mean": sb[n_mean] / bw, "swap_in_s_at_percentile": sb[n_q] / bw}
        preempt["cheaper"] = ("swap" if preempt["swap_in_s_mean"] < preempt["recompute_s_mean"]
                              else "recompute")
    disagg = {}
    if extras.disagg_link_bytes_per_s:
        disagg = {"link_bandwidth_bytes_per_s": extras.disagg_link_bytes_per_s,
                  "kv_transfer_s_mean": sum(transfer) / len(transfer),
                  "kv_transfer_s_at_percentile": quantile(transfer, q),
                  "prefill_instances": ev.prefill_instances,
                  "prefill_instances_needed": ev.prefill_instances_needed,
                  "decode_replicas": ev.replicas}
    return replace(ev, offload=offload, preemption=preempt, disaggregated=disagg)
