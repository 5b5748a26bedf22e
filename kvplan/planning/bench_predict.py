"""Re-predict measured serving runs with the code ``kvplan plan`` uses: ``plan_fit`` for the
deployment (pool, slots, token budget), ``step_model`` for its per-GPU terms, and the
closed-loop scheduler of ``kvplan.core.serving`` for TTFT, TPOT and throughput.

``row_terms`` does the expensive part once per row (planning is memoised per deployment:
model, GPU, engine, TP, PP, weight and KV dtype); ``predict`` applies an efficiency, so a
calibration fit re-evaluates thousands of rows per second (``stack``: the same on arrays).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..core.benchmark import MeasuredRun, RowProblem
from ..core.errors import KvplanError
from ..core.perf import Efficiency, StepModel, StepTerms, _causal_pairs, step_terms, step_time
from ..core.serving import LoopShape, LoopTimes, loop_shape, loop_times
from .fit_types import FitResult


@dataclass(frozen=True)
class RowTerms:
    run: MeasuredRun
    plan: FitResult
    step: StepModel
    shape: LoopShape
    decode: StepTerms
    mixed: StepTerms
    burst: StepTerms
    capacity: int  # sequences the KV pool holds at this row's context
    #: disaggregated rows: the prefill workers' plan and step model, one chunk's step terms,
    #: the chunks of a prompt, and the KV bytes a decode GPU receives per request
    prefill: tuple[FitResult, StepModel, StepTerms, int] | None = None
    transfer_bytes: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.plan.request.gpu.key, self.run.engine)


#: a release as pip and ``vllm --version`` spell it: v0.19.0, 0.10.1.1, 0.11.0rc1, 0.9.2.post1,
#: 0.11.1rc2.dev160+g9d6964926, and PEP 440 local labels of CUDA / ROCm builds (0.10.1.1+cu126)
_RELEASE = re.compile(r"v?(\d+\.\d+(?:\.\d+){0,2})(?:[.+-]?(?:post|rc|dev)[0-9a-z.+-]*|\+[0-9a-z.]+)?",
                      re.IGNORECASE)


def _release_rules(release: str) -> tuple[str, str | None]:
    """``vllm@X`` for a release, and the assumption when kvplan reads it as another: a fourth
    number (0.9.0.1, 0.10.1.1: patch re-releases) is planned by the three-number release,
    which is as far as kvplan's release rules and ``--engine vllm@X`` go."""
    parts = release.split(".")
    if len(parts) <= 3:
        return f"vllm@{release}", None
    three = ".".join(parts[:3])
    return f"vllm@{three}", (f"vLLM {release} planned by {three}'s rules (kvplan's vLLM "
                             "release rules name three numbers)")


def row_engine(run: MeasuredRun) -> tuple[str, str | None]:
    """The engine a row is re-predicted with, and the assumption that took (None: none).

    A vLLM row is planned by the rules of the release it names (``vllm@0.19.0``: the memory
    budget's utilisation and CUDA-graph terms, the token budget's GPU tiers, block sizes), as a
    user planning that release would; a row naming a nightly build or nothing, by the last
    release out on the day it was measured (``engines.vllm_releases``), else by main. SGLang
    and TensorRT-LLM rows use the engine's default rules: kvplan reads one SGLang release's
    DSA layout (0.5.23) and no TensorRT-LLM release differences that change a plan."""
    if run.engine != "vllm":
        return run.engine, None
    named = _RELEASE.fullmatch(run.engine_version)
    if named:
        return _release_rules(named.group(1))
    from ..engines.vllm_releases import READ_ON, RELEASE_DAYS, release_on

    build = run.engine_version or "with no version"
    release = release_on(run.measured_on) if run.measured_on else None
    if release:
        spec, also = _release_rules(release)
        last = ("the last release out by then" if run.measured_on <= READ_ON else
                f"the newest release kvplan lists (PyPI read on {READ_ON})")
        return spec, (f"vLLM build {build} measured on {run.measured_on}: planned by release "
                      f"{release}'s rules, {last}" + (f"; {also}" if also else ""))
    if run.measured_on:
        first, day = RELEASE_DAYS[0]
        return "vllm", (f"vLLM build {build} measured on {run.measured_on}, before the first "
                        f"release kvplan lists ({first}, {day}): planned by vLLM main's rules")
    return "vllm", f"vLLM build {build} with no measurement day: planned by vLLM main's rules"


def _deployment(run: MeasuredRun) -> tuple:
    """What one plan serves: the rows of a sweep on the same deployment share it."""
    return (run.model, run.gpu, row_engine(run)[0], run.tp, run.pp, run.dp, run.ep,
            run.weight_dtype, run.kv_dtype)


def _capacity(r: FitResult, context: int) -> int:
    """Sequences of ``context`` tokens the planned pool holds: ``plan_fit``'s own rule
    (``concurrency_at``: pools per stage, sliding windows, hybrid groups)."""
    from .fit_pools import concurrency_at

    return concurrency_at(r, context)


def _prefill_attn_per_token(m: StepModel, prompt: int) -> float:
    reads = m.prefill_attn_flops if m.prefill_attn_flops is not None else m.attn_flops
    return sum(r.bytes_per_token * _causal_pairs(prompt, r.cap_tokens) for r in reads) / prompt


class _Planner:
    def __init__(self):
        self.models: dict = {}
        self.plans: dict = {}

    def model(self, name: str):
        from ..loaders.hf_params import weight_inventory
        from ..loaders.resolve import load_model

        if name not in self.models:
            try:
                m = load_model(name)
                self.models[name] = (m, weight_inventory(m))
            except KvplanError as e:  # remembered: one failed lookup per model, not per row
                self.models[name] = e
        got = self.models[name]
        if isinstance(got, KvplanError):
            raise got
        return got

    def plan(self, run: MeasuredRun, context: int) -> tuple[FitResult, StepModel]:
        from ..loaders.hardware import load_gpu
        from ..loaders.quant_config import weight_format
        from .fit import plan_fit
        from .fit_types import FitRequest
        from .perf_model import step_model

        engine = row_engine(run)[0]
        key = (*_deployment(run), context)
        if key not in self.plans:
            m, w = self.model(run.model)
            req = FitRequest(model=m, weights=w, weight_format=weight_format(m, run.weight_dtype),
                             gpu=load_gpu(run.gpu), engine=engine, tp=run.tp, pp=run.pp,
                             dp=run.dp, ep=run.ep, kv_dtype=run.kv_dtype, context_tokens=context,
                             search=False)
            try:
                r = plan_fit(req)
                self.plans[key] = (r, step_model(r))
            except KvplanError as e:
                self.plans[key] = e
        got = self.plans[key]
        if isinstance(got, KvplanError):
            raise got
        return got


def row_terms(runs: list[MeasuredRun]) -> tuple[list[RowTerms], list[RowProblem]]:
    """Plan every row's deployment; a row kvplan cannot plan (unknown model or GPU, does not
    fit) is a problem naming it, and the others go on."""
    planner = _Planner()
    longest: dict[tuple, int] = {}
    for run in runs:
        k = _deployment(run)
        longest[k] = max(longest.get(k, 0), run.prompt_tokens + run.output_tokens)
    out: list[RowTerms] = []
    problems: list[RowProblem] = []
    capacity: dict[tuple, int] = {}
    for run in runs:
        k = _deployment(run)
        context = run.prompt_tokens + run.output_tokens
        try:
            try:
                r, sm = planner.plan(run, longest[k])
                ok = r.max_concurrency >= 1
            except KvplanError:
                if longest[k] == context:
                    raise
                ok = False
            if not ok and longest[k] != context:  # a longer row of the group does not fit
                r, sm = planner.plan(run, context)
        except KvplanError as e:
            problems.append(RowProblem(run.source, e.field or "model", e.detail))
            continue
        except ValueError as e:  # no parameter inventory
            problems.append(RowProblem(run.source, "model", str(e)))
            continue
        if r.max_concurrency < 1:
            problems.append(RowProblem(run.source, "deployment", f"{r.verdict} (kvplan's plan "
                                       "of this deployment holds no sequence; the run did)"))
            continue
        if run.prefill is not None:
            try:
                pre = _prefill_terms(planner, run, longest[k])
            except KvplanError as e:
                problems.append(RowProblem(run.source, "prefill_" + (e.field or "tp_size"),
                                           f"prefill workers: {e.detail}"))
                continue
            out.append(_disagg_terms(run, r, sm, pre))
            continue
        # the pool holds sequences at their mean context: the engine admits a request while
        # blocks are free, and running sequences are on average half-way through their output
        mean_ctx = run.prompt_tokens + (run.output_tokens + 1) // 2
        ck = (id(r), mean_ctx)
        if ck not in capacity:
            capacity[ck] = _capacity(r, mean_ctx)
        cap = capacity[ck]
        users = -(-(run.concurrency or 1) // run.dp)  # each DP rank serves its share
        slots = min(users, cap, r.max_num_seqs)
        shape = loop_shape(users, slots, run.prompt_tokens, run.output_tokens,
                           r.max_num_batched_tokens, run.num_prompts)
        decode_ctx = run.prompt_tokens + run.output_tokens / 2
        dec = step_terms(sm, shape.decode_batch, decode_ctx)
        mix = step_terms(sm, shape.decode_batch, decode_ctx, shape.chunk_tokens,
                         _prefill_attn_per_token(sm, run.prompt_tokens))
        attn = _prefill_attn_per_token(sm, run.prompt_tokens)
        burst = step_terms(sm, 0, 0, shape.burst_tokens, attn)
        out.append(RowTerms(run, r, sm, shape, dec, mix, burst, cap))
    return out, problems


def _prefill_terms(planner: _Planner, run: MeasuredRun, context: int
                   ) -> tuple[FitResult, StepModel, StepTerms, int]:
    """The prefill workers of a disaggregated row: their plan, and one step of a prompt's
    prefill (a chunk of up to max_num_batched_tokens, one prompt per DP rank)."""
    tp, pp, dp, ep = run.prefill  # type: ignore[misc]
    pr, psm = planner.plan(replace(run, tp=tp, pp=pp, dp=dp, ep=ep, prefill=None), context)
    budget = pr.max_num_batched_tokens
    chunk = min(run.prompt_tokens, budget)
    chunks = -(-run.prompt_tokens // budget)
    terms = step_terms(psm, 0, 0, chunk, _prefill_attn_per_token(psm, run.prompt_tokens))
    return pr, psm, terms, chunks


def _disagg_terms(run: MeasuredRun, r: FitResult, sm: StepModel, pre) -> RowTerms:
    from .fit_pools import concurrency_at, stage_bytes_fn

    mean_ctx = run.prompt_tokens + (run.output_tokens + 1) // 2
    cap = concurrency_at(r, mean_ctx)
    users = -(-(run.concurrency or 1) // (run.decode_workers * run.dp))
    slots = min(users, cap, r.max_num_seqs)
    shape = loop_shape(users, slots, run.prompt_tokens, run.output_tokens,
                       r.max_num_batched_tokens, run.num_prompts)
    fp = r.footprint
    kv = max(stage_bytes_fn(fp, None, s, run.pp)(run.prompt_tokens) for s in range(run.pp))
    dec = step_terms(sm, shape.slots, run.prompt_tokens + run.output_tokens / 2)
    return RowTerms(run, r, sm, shape, dec, dec, pre[2], cap, pre, kv)


#: the KV link of a disaggregated row off an NVL72 rack: one 400 Gb/s NIC per GPU
SCALE_OUT_BYTES_PER_S = 50e9
NVL72_GPUS = ("gb200", "gb300")


def _disagg_detail(t: RowTerms, e: Efficiency) -> tuple[LoopTimes, dict]:
    """A disaggregated row: ``prefill_workers`` x prefill DP ranks prefill one prompt at a
    time each (an M/D/1 queue at the rate the users' cycles send), the KV goes to a decode
    GPU over the link (``DISAGG_NOTE``), and each decode DP rank decodes the users it holds:
    users x (output - 1) x TPOT / cycle of them on average (at most its slots); users beyond
    the slots wait for one. Solved by fixed-point iteration on the cycle; the start-up wave
    (every user at once) is weighed in as for an aggregated row."""
    from ..core.serving import RHO_CAP

    run, s = t.run, t.shape
    pr, psm, pterms, chunks = t.prefill  # type: ignore[misc]
    prefill_s = psm.pp * chunks * step_time(psm, pterms, e).seconds
    gpu = t.plan.request.gpu
    link = (gpu.interconnect_bandwidth_bytes_per_s_per_direction if gpu.key in NVL72_GPUS
            else SCALE_OUT_BYTES_PER_S) * e.interconnect
    transfer = t.transfer_bytes / link
    host = e.host_ttft_s + e.host_ttft_per_prompt_token_s * run.prompt_tokens
    users, slots = s.users, s.slots
    ranks_p = run.prefill_workers * pr.request.dp
    decode_ctx = run.prompt_tokens + run.output_tokens / 2
    steps = max(run.output_tokens - 1, 0)
    b = float(slots)
    ttft = host + prefill_s + transfer
    tpot = wait = slot_wait = rho = 0.0
    for _ in range(60):
        tpot = t.step.pp * step_time(t.step, step_terms(t.step, b, decode_ctx), e).seconds
        cycle = ttft + steps * tpot
        rate = (run.concurrency or 1) / cycle  # requests/s of the whole deployment
        rho = min(rate / ranks_p * prefill_s, RHO_CAP)
        wait = rho / (2 * (1 - rho)) * prefill_s
        slot_wait = max(users / slots - 1, 0) * (steps * tpot + prefill_s)
        new_ttft = host + prefill_s + wait + transfer + slot_wait
        b_new = min(float(slots), users * steps * tpot / max(new_ttft + steps * tpot, 1e-12))
        if abs(new_ttft - ttft) < 1e-9 and abs(b_new - b) < 1e-9:
            ttft, b = new_ttft, b_new
            break
        ttft, b = new_ttft, max(b_new, 1.0)
    # every user starts at once: the first wave's prompts queue at the prefill ranks, mean
    # (users / ranks + 1) / 2 prefills, weighed like an aggregated row's (startup_share)
    share = e.startup_share if s.startup_share is None else s.startup_share
    wave = host + ((run.concurrency or 1) / ranks_p + 1) / 2 * prefill_s + transfer
    ttft = (1 - share) * ttft + share * wave
    tokens_s = (run.concurrency or 1) * run.output_tokens / (ttft + steps * tpot)
    lt = LoopTimes(ttft, tpot, tokens_s, wait + slot_wait, rho >= RHO_CAP)
    detail = {"slots": slots, "kv_pool_capacity_sequences": t.capacity,
              "max_num_seqs": t.plan.max_num_seqs, "decode_batch": b,
              "decode_step_s": tpot / t.step.pp, "prefill_s": prefill_s,
              "prefill_chunks": chunks, "prefill_ranks": ranks_p,
              "prefill_utilisation": rho, "kv_transfer_bytes": t.transfer_bytes,
              "kv_transfer_s": transfer, "host_ttft_s": host, "queue_s": wait + slot_wait,
              "startup_share": float(share), "startup_share_recorded": s.startup_share is not None,
              "prefill_queue_saturated": rho >= RHO_CAP}
    return lt, detail


def predict(t: RowTerms, e: Efficiency) -> LoopTimes:
    return predict_detail(t, e)[0]


def predict_detail(t: RowTerms, e: Efficiency) -> tuple[LoopTimes, dict]:
    """The row's times and every intermediate a reader needs to re-derive them."""
    if t.prefill is not None:
        return _disagg_detail(t, e)
    pp = t.step.pp
    decode_s = pp * step_time(t.step, t.decode, e).seconds
    mixed_s = pp * step_time(t.step, t.mixed, e).seconds
    burst_s = pp * step_time(t.step, t.burst, e).seconds
    host = e.host_ttft_s + e.host_ttft_per_prompt_token_s * t.run.prompt_tokens
    share = e.startup_share if t.shape.startup_share is None else t.shape.startup_share
    lt = loop_times(t.shape, decode_s, mixed_s, burst_s, host, share)
    if t.run.dp > 1:  # one rank's loop of `users`; the deployment's output is all users'
        lt = replace(lt, output_tokens_per_s=lt.output_tokens_per_s * (t.run.concurrency or 1)
                     / t.shape.users)
    s = t.shape
    detail = {"slots": s.slots, "kv_pool_capacity_sequences": t.capacity,
              "max_num_seqs": t.plan.max_num_seqs,
              "max_num_batched_tokens": t.plan.max_num_batched_tokens,
              "prefill_chunks": s.chunks, "decode_batch": s.decode_batch,
              "chunk_tokens": s.chunk_tokens, "chunk_share": s.chunk_share,
              "decode_step_s": float(decode_s), "mixed_step_s": float(mixed_s),
              "burst_step_s": float(burst_s), "host_ttft_s": float(host),
              "startup_share": float(share), "startup_share_recorded": s.startup_share is not None,
              "queue_s": float(lt.queue_s), "prefill_queue_saturated": bool(lt.saturated)}
    return lt, detail
