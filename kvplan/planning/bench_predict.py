"""Re-predict measured serving runs with the code ``kvplan plan`` uses: ``plan_fit`` for the
deployment (pool, slots, token budget), ``step_model`` for its per-GPU terms, and the
closed-loop scheduler of ``kvplan.core.serving`` for TTFT, TPOT and throughput.

``row_terms`` does the expensive part once per row (planning is memoised per deployment:
model, GPU, engine, TP, PP, weight and KV dtype); ``predict`` applies an efficiency, so a
calibration fit re-evaluates thousands of rows per second (``stack``: the same on arrays).
"""

from __future__ import annotations

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

    @property
    def key(self) -> tuple[str, str]:
        return (self.plan.request.gpu.key, self.run.engine)


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

        key = (run.model, run.gpu, run.engine, run.tp, run.pp, run.dp, run.ep, run.weight_dtype,
               run.kv_dtype, context)
        if key not in self.plans:
            m, w = self.model(run.model)
            req = FitRequest(model=m, weights=w, weight_format=weight_format(m, run.weight_dtype),
                             gpu=load_gpu(run.gpu), engine=run.engine, tp=run.tp, pp=run.pp,
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
        k = (run.model, run.gpu, run.engine, run.tp, run.pp, run.dp, run.ep, run.weight_dtype,
             run.kv_dtype)
        longest[k] = max(longest.get(k, 0), run.prompt_tokens + run.output_tokens)
    out: list[RowTerms] = []
    problems: list[RowProblem] = []
    capacity: dict[tuple, int] = {}
    for run in runs:
        k = (run.model, run.gpu, run.engine, run.tp, run.pp, run.dp, run.ep, run.weight_dtype,
             run.kv_dtype)
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


def predict(t: RowTerms, e: Efficiency) -> LoopTimes:
    return predict_detail(t, e)[0]


def predict_detail(t: RowTerms, e: Efficiency) -> tuple[LoopTimes, dict]:
    """The row's times and every intermediate a reader needs to re-derive them."""
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
