"""``kvplan plan``: every candidate configuration a scenario leaves open, planned with
``plan_fit``, timed with the roofline, evaluated against the workload, ranked. Sits above the
loaders; the math is in ``kvplan.planning.fit``, ``kvplan.core.perf`` and
``kvplan.planning.scenario_eval``."""

from __future__ import annotations

import itertools
import re
from contextlib import suppress
from dataclasses import dataclass, replace

from ..core.errors import KvplanError
from ..core.gpu import GpuSpec
from ..core.model import Model
from ..core.parallel import layout_words
from ..core.perf import Efficiency, StepModel
from ..core.scenario_spec import Scenario
from ..core.workload import Request, Stats, conversations_for, sample, stats
from .fit import plan_fit
from .fit_types import Draft, FitRequest, FitResult
from .model_limits import check_context, limit_words
from .perf_model import step_model, with_speculation
from .scenario_eval import Evaluation, Fleet, PrefillOption, RequestArrays, evaluate


@dataclass(frozen=True)
class Candidate:
    gpu: GpuSpec
    engine: str
    tp: int
    pp: int
    kv_dtype: str
    dp: int = 1  # attention data-parallel ranks, each with its own sequences and KV pool
    ep: int = 1  # GPUs of a stage the routed experts are spread over
    dcp: int = 1  # decode context parallel: GPUs of tp each sequence's tokens are split over

    @property
    def gpus(self) -> int:
        """GPUs of one replica (the deployment of dp ranks)."""
        return self.tp * self.pp * self.dp

    @property
    def layout(self) -> str:
        """``tp 2 x pp 1``, with ``x dp 8, ep 8`` (and ``dcp``) where they are not 1."""
        return layout_words(self.tp, self.pp, self.dp, self.ep, self.dcp)


@dataclass(frozen=True)
class Outcome:
    candidate: Candidate
    fit: FitResult
    step: StepModel
    efficiency: Efficiency
    evaluation: Evaluation
    price_usd_per_gpu_hour: float
    launch: dict[str, str]  # engine -> command at the planned batch; empty when nothing runs


@dataclass(frozen=True)
class Skipped:
    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class PlanReport:
    scenario: Scenario
    model_name: str
    requests: int
    sample_note: str
    max_model_len: int
    excluded_requests: int
    stats: dict[str, Stats]
    outcomes: tuple[Outcome, ...]  # ranked, best first
    skipped: tuple[Skipped, ...]
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...]
    seed: int = 0  # the seed the lengths (or a trace's reasoning tokens) were drawn with
    samples: int = 0  # conversations sampled (a trace: its lines)
    model_assumptions: tuple[str, ...] = ()  # what the model's config reading assumed
    assumed_standard_attention: bool = False
    simulation: dict | None = None  # --simulate: the best configuration stepped request by request

    @property
    def best(self) -> Outcome | None:
        return self.outcomes[0] if self.outcomes and self.outcomes[0].evaluation.ok else None


#: command-line advice in plan_fit's messages -> the scenario key that does the same
SCENARIO_KEYS = {"--allow-emulated": "serving.allow_emulated: true",
                 "--allow-long-max-model-len": "serving.allow_long_max_model_len: true",
                 "--weight-memory": "a weight "
                 "figure (not available in a scenario)", "--pp": "serving.pp", "--tp": "serving.tp",
                 "--dp": "serving.dp", "--ep": "serving.ep",
                 "--dcp": "serving.dcp", "--eplb": "serving.eplb: true",
                 "--redundant-experts": "serving.redundant_experts",
                 "--all2all": "serving.all2all",
                 "--engine": "serving.engine", "--kv-dtype": "serving.kv_dtype",
                 "--block-size": "serving.block_size", "--max-model-len": "serving.max_model_len",
                 "--max-num-seqs": "serving.max_num_seqs",
                 "--gpu-memory-utilization": "serving.gpu_memory_utilization",
                 "--kv-cache-memory": "serving.kv_cache_memory"}


def _scenario_words(message: str) -> str:
    for flag, key in SCENARIO_KEYS.items():
        message = re.sub(rf"{re.escape(flag)}\b", key, message)
    return message


def _rank_key(o: Outcome):
    e = o.evaluation
    tier = 0 if e.ok else 1 if e.fits else 2
    ok = tier == 0
    return (tier, e.usd_per_hour if ok else 0.0,
            (e.usd_per_million_output_tokens or 0.0) if ok else 0.0, e.gpus_needed if ok else 0,
            -(e.headroom or 0.0), -e.output_tokens_per_s_per_replica)


def run_scenario(sc: Scenario, *, seed: int | None = None, samples: int | None = None,
                 simulate: int = 0, progress=None) -> PlanReport:
    """Plan every candidate of the scenario; ``progress(done, total)`` is called after each
    (the CLI draws a bar on a terminal)."""
    from ..loaders.hf_params import weight_inventory
    from ..loaders.quant_config import weight_format
    from ..loaders.resolve import load_model
    from .deployment import efficiency_for
    from .launch import launch_commands

    seed = sc.seed if seed is None else seed
    samples = sc.samples if samples is None else samples
    w = sc.workload
    model = load_model(sc.model, assume_standard_attention=sc.assume_standard_attention)
    weights = weight_inventory(model)
    wfmt = weight_format(model, sc.serving.weight_dtype)
    draft = None
    if sc.draft_model:
        dm = load_model(sc.draft_model, assume_standard_attention=sc.assume_standard_attention)
        draft = Draft(dm, weight_inventory(dm), weight_format(dm, sc.serving.weight_dtype),
                      sc.speculative_tokens)
    warnings = list(model.warnings)

    conversations = conversations_for(samples, w.turns)  # ``samples`` counts requests
    requests: list[Request] = sample(w, conversations, seed)
    if w.trace is not None:
        note = f"{len(requests):,} requests from the trace {w.trace_name} (every line)"
    else:
        conv = f"{conversations:,} conversations x {w.turns} turns = " if w.turns > 1 else ""
        note = f"{conv}{len(requests):,} requests sampled with seed {seed}"
        dists = [w.prompt, w.output, w.thinking, w.tokens_per_turn]
        if all(d is None or d.kind == "fixed" for d in dists):
            note += " (every length is fixed: one request shape)"
    longest = max(x.final_tokens for x in requests)
    max_len = sc.serving.max_model_len or longest
    limit = model.context_limit
    if sc.serving.max_model_len:  # a length the file asks for: past the limit is refused
        check_context(model, max_len, sc.serving.allow_long_max_model_len,
                      "serving.max_model_len", "serving.allow_long_max_model_len: true", sc.path)
    elif limit and max_len > limit.tokens and not sc.serving.allow_long_max_model_len:
        max_len = limit.tokens  # the engine's own max_model_len: longer requests are rejected
    kept = [x for x in requests if x.final_tokens <= max_len]
    excluded = len(requests) - len(kept)
    if excluded:
        why = (f"{limit_words(model)}, the max_model_len the engine takes"
               if not sc.serving.max_model_len and limit and max_len == limit.tokens
               else f"max_model_len {max_len:,} tokens")
        warnings.append(f"{excluded:,} of {len(requests):,} requests are longer than {why} (the "
                        f"longest has {longest:,}); the engine rejects them and they are left out "
                        "of every figure")
    if not kept and not sc.serving.max_model_len and limit and max_len == limit.tokens:
        raise KvplanError(f"no request fits {limit_words(model)} (the shortest has "
                          f"{min(x.final_tokens for x in requests):,} tokens); set "
                          "serving.allow_long_max_model_len: true to plan past it", source=sc.path,
                          field="workload")
    if not kept:
        raise KvplanError(f"no request fits max_model_len {max_len:,} (the shortest has "
                          f"{min(x.final_tokens for x in requests):,} tokens)", source=sc.path,
                          field="serving.max_model_len")
    q = sc.slo.percentile
    st = {"prompt_tokens": stats([x.new_tokens for x in kept], q),
          "context_tokens": stats([x.context_tokens for x in kept], q),
          "output_tokens": stats([x.output_tokens for x in kept], q),
          "final_tokens": stats([x.final_tokens for x in kept], q)}

    from ..loaders.hardware import load_gpu

    gpus = [load_gpu(g) for g in sc.hardware.gpus]
    arrays = RequestArrays.of(kept)  # once: every candidate reads the same requests
    outcomes: list[Outcome] = []
    skipped: list[Skipped] = []
    s = sc.serving
    role_cache: dict[tuple, PrefillOption | str] = {}
    moe = bool(weights and weights.num_experts)
    grid = candidates(s, gpus, moe)
    for done, cand in enumerate(grid):
        gpu, engine, tp, pp, kv = cand.gpu, cand.engine, cand.tp, cand.pp, cand.kv_dtype
        if progress:
            progress(done, len(grid))
        fleet_gpus = sc.hardware.nodes * sc.hardware.gpus_per_node if sc.hardware.nodes else None
        if fleet_gpus is not None and cand.gpus > fleet_gpus:
            what = "tp x pp x dp" if cand.dp > 1 else "tp x pp"
            skipped.append(Skipped(cand, f"{what} = {cand.gpus} exceeds the fleet's "
                                         f"{fleet_gpus} GPUs"))
            continue
        if moe and cand.dp > 1 and tp * cand.dp > sc.hardware.gpus_per_node:
            skipped.append(Skipped(cand, f"the MoE layers' tp x dp = {tp * cand.dp} GPUs span "
                                         f"nodes of {sc.hardware.gpus_per_node} GPUs; a plan "
                                         "keeps each MoE group within one node"))
            continue
        req = FitRequest(model=model, weights=weights, weight_format=wfmt, gpu=gpu, engine=engine,
                         tp=tp, pp=pp, dp=cand.dp, ep=cand.ep, dcp=cand.dcp, eplb=s.eplb,
                         redundant_experts=s.redundant_experts, all2all=s.all2all, kv_dtype=kv,
                         context_tokens=max_len, max_model_len=max_len,
                         utilization=s.utilization, max_num_batched_tokens=s.max_num_batched_tokens,
                         max_num_seqs=s.max_num_seqs, block_size_tokens=s.block_size_tokens,
                         kv_cache_memory_bytes=s.kv_cache_memory_bytes, allow_emulated=s.allow_emulated,
                         allow_long_max_model_len=s.allow_long_max_model_len,
                         shared_prefix_tokens=min(w.shared_prefix_tokens, max_len - 1), draft=draft,
                         search=False)
        try:
            r = plan_fit(req)
        except KvplanError as e:
            skipped.append(Skipped(cand, _scenario_words(e.detail)))
            continue
        eff = efficiency_for(gpu, None, None, engine, r.request.model.lightning_indexers)
        sm = step_model(r, eff)
        if draft and sc.acceptance_length:
            sm = with_speculation(r, sm, sc.acceptance_length)
        price = (sc.hardware.prices_usd_per_gpu_hour.get(gpu.key) or sc.hardware.price_usd_per_gpu_hour
                 or gpu.price_usd_per_gpu_hour)
        fleet = Fleet(sc.hardware.gpus_per_node, sc.hardware.nodes, price)
        roles: list[PrefillOption] | None = None
        refused: list[str] = []
        if sc.extras.prefill_layouts and sc.extras.disagg_link_bytes_per_s:
            roles, refused = _prefill_options(sc, cand, req, moe, role_cache, eff)
        ev = evaluate(r, sm, kept, w, sc.slo, fleet, sc.extras, lookahead=sc.speculative_tokens,
                      arrays=arrays, prefill=roles)
        notes = [_scenario_words(n) for n in r.notes] + refused
        launch_r = r
        if ev.batch and s.max_num_seqs is None and ev.batch < r.max_num_seqs \
                and r.layout.name in ("vllm", "trtllm"):
            # the lines cap the engine at the SLO batch: plan that launch as the engine sees it
            # (vLLM's and TensorRT-LLM's pools depend on the cap through the sampler warm-up;
            # SGLang's fraction and llama.cpp's slots do not)
            with suppress(KvplanError):  # a failed re-plan keeps the planned lines
                launch_r = plan_fit(replace(req, max_num_seqs=ev.batch))
            if launch_r.budget.kv_pool_bytes != r.budget.kv_pool_bytes:
                notes.append(_capped_note(r, launch_r, ev.batch, cand.dp))
        chosen = ev.disaggregated.get("prefill_layout")
        if chosen:  # the prefill instances' own lines
            opt = role_cache[(gpu.key, engine, kv, chosen["tp"], chosen["pp"], chosen["dp"],
                              chosen["ep"])]
            assert isinstance(opt, PrefillOption)
            ev = replace(ev, disaggregated={**ev.disaggregated,
                                            "prefill_launch": launch_commands(opt.fit)})
        r = replace(r, notes=tuple(notes))
        # the lines' sequence count is the deployment's: each DP rank runs the planned batch
        launch = launch_commands(launch_r, ev.batch * cand.dp) if ev.batch else {}
        outcomes.append(Outcome(cand, r, sm, eff, ev, price, launch))
    outcomes.sort(key=_rank_key)
    simulation = None
    if simulate and outcomes and outcomes[0].evaluation.ok:
        from .simulate_plan import simulate_outcome

        simulation = simulate_outcome(outcomes[0], kept, w, simulate, seed,
                                      bool(sc.extras.disagg_link_bytes_per_s))
    elif simulate:
        warnings.append("--simulate: no configuration meets the scenario, so none was simulated")
    return PlanReport(sc, model.name, len(kept), note, max_len, excluded, st, tuple(outcomes),
                      tuple(skipped), tuple(assumptions(sc, outcomes, model)), tuple(warnings), seed,
                      len(w.trace) if w.trace is not None else samples, model.assumptions,
                      model.standard_attention_assumed, simulation)


def _prefill_options(sc: Scenario, cand: Candidate, req: FitRequest, moe: bool, cache: dict,
                     eff: Efficiency) -> tuple[list[PrefillOption], list[str]]:
    """The disaggregated prefill role's layouts for one decode candidate, each planned on the
    same GPU, engine and KV format (once per layout: ``cache``), and a note per layout the
    engine refuses."""
    out, refused = [], []
    for tp, pp, dp, ep in sc.extras.prefill_layouts or ():
        tp, pp = tp or cand.tp, pp or cand.pp
        for e in dict.fromkeys(((1, tp * dp) if moe else (1,)) if ep == 0 else (ep,)):
            key = (cand.gpu.key, cand.engine, cand.kv_dtype, tp, pp, dp, e)
            if key not in cache:
                if moe and dp > 1 and tp * dp > sc.hardware.gpus_per_node:
                    cache[key] = (f"its MoE layers' tp x dp = {tp * dp} GPUs span nodes of "
                                  f"{sc.hardware.gpus_per_node}")
                else:
                    try:
                        pr = plan_fit(replace(req, tp=tp, pp=pp, dp=dp, ep=e, dcp=1))
                        cache[key] = PrefillOption(pr, step_model(pr, eff))
                    except KvplanError as err:
                        cache[key] = _scenario_words(err.detail)
            v = cache[key]
            if isinstance(v, PrefillOption):
                out.append(v)
            else:
                refused.append(f"prefill layout {layout_words(tp, pp, dp, e)} not planned: {v}")
    return out, refused


def candidates(s, gpus: list[GpuSpec], moe: bool) -> list[Candidate]:
    """Every (GPU, engine, tp, pp, dp, ep, KV format) the scenario leaves open. ``ep: search``
    takes 1 and tp x dp (the expert-parallel degrees every engine runs; a dense model: 1);
    ``dp: search`` plans dp 1 only for a dense model, whose DP ranks are independent replicas
    (the replica count already covers them)."""
    out = []
    dps = (1,) if s.dp_search and not moe else s.dps
    for gpu, engine, tp, pp, dp, dcp, kv in itertools.product(gpus, s.engines, s.tps, s.pps, dps,
                                                               s.dcps, s.kv_dtypes):
        eps = s.eps if s.eps is not None else ((1, tp * dp) if moe else (1,))
        for ep in dict.fromkeys(eps):
            out.append(Candidate(gpu, engine, tp, pp, kv, dp, ep, dcp))
    return out


def _capped_note(r: FitResult, capped: FitResult, batch: int, dp: int = 1) -> str:
    """The pool the launch lines give: ``--max-num-seqs`` at the SLO batch shrinks the engine's
    per-sequence warm-up (vLLM's sampler), so its pool is a little larger than the one planned
    with the default cap (which the figures above use)."""
    a, b = r.budget.kv_pool_bytes, capped.budget.kv_pool_bytes
    rank = " per DP rank" if dp > 1 else ""
    return (f"the launch lines cap the engine at the SLO batch of {batch:,} sequences{rank} "
            f"(--max-num-seqs); with that cap its pool is {b:,} B ({b / 2**30:.2f} GiB), "
            f"{b - a:+,} B against the {a:,} B planned with the default cap of "
            f"{r.max_num_seqs:,} (the figures here)")


def _price_lines(sc: Scenario, outcomes: list[Outcome]) -> list[str]:
    """Where each GPU's price comes from: the scenario, or the GPU spec's list price with its
    source and date."""
    out, seen = [], set()
    for o in outcomes:
        g = o.candidate.gpu
        if g.key in seen:
            continue
        seen.add(g.key)
        if sc.hardware.prices_usd_per_gpu_hour.get(g.key) or sc.hardware.price_usd_per_gpu_hour:
            out.append(f"Price {g.key}: ${o.price_usd_per_gpu_hour:.2f} per GPU-hour, from the "
                       "scenario.")
        else:
            out.append(f"Price {g.key}: ${o.price_usd_per_gpu_hour:.2f} per GPU-hour, the spec's "
                       f"list price ({g.price_source}, {g.price_as_of}); set "
                       "hardware.price_usd_per_gpu_hour for your own.")
    return out


def assumptions(sc: Scenario, outcomes: list[Outcome], model: Model | None = None) -> list[str]:
    w, q = sc.workload, sc.slo.percentile
    from ..loaders.hf_config import ASSUME_FLAG

    out = [a.replace(ASSUME_FLAG, "assume_standard_attention") for a in
           (model.assumptions if model is not None else ()) if a.startswith(ASSUME_FLAG)] + [
        "Memory: each request counts at its peak (prompt, images, reasoning and output cached; "
        "the last generated token is never written), rounded up to whole KV blocks; the pool holds "
        "floor((pool - shared prefix) / mean per-request blocks) requests, capped by max_num_seqs. "
        "A configuration fits only if one max_model_len request fits too (the engine checks that "
        "at start-up).",
        f"SLO batch: the largest running batch whose TPOT at the p{q:g} final length stays within "
        "the TPOT limit. Colocated, every decode step also waits for the prefills: TPOT = decode "
        "step / (1 - share of the replica's time spent prefilling). TTFT p{q:g} is that "
        "percentile of the requests' prefill times, without queueing.".replace("{q:g}", f"{q:g}"),
        "Decode runs at the token-weighted mean context of the decode steps; a replica serves "
        "1 / (mean prefill time + mean output tokens x decode step / batch) requests per second.",
        "Roofline: decode step = fixed cost per step, per decoder layer and per running "
        "sequence + max(bytes / (HBM x efficiency), FLOPs / "
        "(peak x efficiency)), routed experts at the MoE factor, + tensor-parallel all-reduces "
        "(and with DCP its three exchanges per attention layer; calibrated, each collective that "
        "leaves the NVLink domain adds a fitted latency, docs/cross-domain-fit.md); "
        "prefill in chunks of max_num_batched_tokens, attending to cached tokens too; TTFT adds "
        "the host's time (see docs/perf.md and docs/calibration.md; uncalibrated, the fixed "
        "cost and host time are 0).",
        "The fleet is whole nodes and every GPU in it is billed; $/token is at the demanded rate. "
        "Headroom is the spare capacity of the replicas needed; fleet headroom counts every "
        "replica slot of the billed nodes.",
        *_price_lines(sc, outcomes),
    ]
    if any(o.candidate.dp > 1 or o.candidate.ep > 1 for o in outcomes):
        out.append("Data / expert parallelism: a replica is dp attention ranks of tp x pp GPUs, "
                   "each rank with its own KV pool and running batch (the table's fits and batch "
                   "are per rank); every MoE layer sees all ranks' tokens, with the dispatch and "
                   "combine collectives and the busiest expert-parallel GPU's load (docs/fit.md section 5); "
                   "the MoE group stays within a node.")
    if any(o.candidate.pp > 1 for o in outcomes):
        out.append("Pipeline parallelism: no micro-batch overlap (TPOT = pp x the stage's step), "
                   "so PP > 1 throughput is a lower bound.")
    if sc.extras.cpu or sc.extras.nvme:
        out.append("Offload tiers are per GPU: each GPU swaps its own shard of a request, at the "
                   "bandwidth the scenario gives (give what the link achieves).")
    if w.shared_prefix_tokens:
        out.append(f"The {w.shared_prefix_tokens:,}-token shared prefix is held once (whole blocks) "
                   "and served from the prefix cache: prefill skips its whole blocks.")
    if w.prefix_cache_hit_rate:
        out.append(f"Prefix-cache hit rate {w.prefix_cache_hit_rate:.0%}: that share of each "
                   "prompt skips prefill; memory still counts every request's own blocks.")
    if w.turns > 1:
        out.append("Multi-turn: each turn is one request of the rate; earlier turns stay in the "
                   "context (prompts and visible answers, not reasoning) and in the prefix cache, "
                   "except an answer that followed reasoning, which is prefilled again.")
    if w.thinking is not None:
        out.append("Reasoning tokens are generated and cached like output and priced as output.")
    if w.images_per_request:
        out.append(f"{w.images_per_request} image(s) x {w.tokens_per_image} tokens join the first "
                   "turn's prompt; the vision encoder's time and memory are not modelled.")
    if sc.draft_model and sc.acceptance_length:
        out.append(f"Draft model {sc.draft_model}: its weights and KV (and {sc.speculative_tokens} "
                   "lookahead slots per request) are in the memory plan; speculative decoding "
                   f"emits {sc.acceptance_length:g} tokens per step on average (the given "
                   "acceptance length): TPOT = (the draft's K decode steps + one target pass "
                   "verifying K + 1 tokens per sequence) / acceptance length.")
    elif sc.draft_model:
        out.append(f"Draft model {sc.draft_model}: its weights and KV (and {sc.speculative_tokens} "
                   "lookahead slots per request) are in the memory plan; the speed-up of "
                   "speculative decoding is not modelled (TPOT is without it).")
    if sc.extras.disagg_link_bytes_per_s:
        out.append("Disaggregated: prefill instances send each request's KV (each rank its shard, "
                   "in parallel) over the link; TTFT includes the transfer; decode replicas "
                   "serve batch / (mean output x TPOT) requests per second.")
        if sc.extras.prefill_layouts:
            out.append("Prefill role: the prefill instances take their own layout (the "
                       "disaggregated.prefill candidates, planned on the same GPU, engine and KV "
                       "format; each must hold one max_model_len prompt): the one with the fewest "
                       "GPU-seconds per request (mean prefill x GPUs / DP ranks) whose TTFT meets "
                       "the SLO; each role runs on nodes of its own. The KV transfer time is the "
                       "decode GPU's share of a request over the link.")
    if sc.extras.preemption:
        out.append("Preemption: an evicted request at the mean decode context is rebuilt by a "
                   "prefill of its tokens (recompute) or copied back over PCIe (swap).")
    effs = {o.efficiency.source for o in outcomes}
    out.append("Efficiency: " + "; ".join(sorted(effs)) if effs else "Efficiency: none planned")
    return out
