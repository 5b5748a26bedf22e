"""A step-by-step simulation of a continuous-batching engine (vLLM V1's scheduler, which
SGLang's and TRT-LLM's resemble), stepping the roofline of ``kvplan.core.perf``. Pure.

Every step (vLLM ``Scheduler.schedule``): the running sequences, in admission order, each take
one decode token or the next chunk of their prompt; then waiting requests are admitted first
come, first served, while the step's token budget (``max_num_batched_tokens``),
``max_num_seqs`` and the KV pool allow, each taking as many prompt tokens as the budget has
left (chunked prefill). A request is admitted only when the pool can hold its whole final
length (prompt + output): kvplan does not simulate preemption,
so the pool never over-commits (vLLM admits on current blocks and preempts when it runs out;
under memory pressure it is more optimistic than this). A shared prefix is held once: its
blocks are taken from the pool before the run and not charged to each request; the last
generated token's KV is never written (as in the plan).

The step's time is ``step_time`` of the work it does: every running sequence's KV read at
its own context (sliding layers capped at their window), attention over each prompt chunk's
query-key pairs, GEMMs for every token. A request's first token comes at the end of the step
that finishes its prompt (TTFT from its arrival, plus the calibrated host time); each later
token at the end of a step (its TPOT: (last - first) / (output - 1)).

Arrivals: given times (a Poisson draw or a trace), or closed loop (``users`` clients, each
sending its next request when the last one ends).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .perf import Efficiency, StepModel, StepTerms, _causal_pairs, assemble_step, step_time


@dataclass(frozen=True)
class SimRequest:
    arrival_s: float
    prompt_tokens: int  # to prefill
    output_tokens: int
    cached_tokens: int = 0  # served by the prefix cache: attended to, not computed
    shared_tokens: int = 0  # of the cached tokens, those in blocks held once for all requests


@dataclass(frozen=True)
class SimLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    pool_tokens: int  # tokens the KV pool holds (whole blocks)
    block_tokens: int


@dataclass(frozen=True)
class SimResult:
    ttft_s: tuple[float, ...]  # per finished request, in finishing order
    tpot_s: tuple[float, ...]  # per finished request with more than one output token
    steps: int
    seconds: float  # simulated time until the last request finished
    output_tokens: int
    unfinished: int  # requests left when the run stopped
    stalled: bool = False  # the head request can never be admitted (pool or limits too small)
    ttft_arrival_s: tuple[float, ...] = ()  # each TTFT's request arrival (same order)
    tpot_arrival_s: tuple[float, ...] = ()


class _Seq:
    __slots__ = ("req", "done_prompt", "generated", "first_s", "blocks", "arrival_s")

    def __init__(self, req: SimRequest, block: int, arrival_s: float):
        self.req = req
        self.arrival_s = arrival_s
        self.done_prompt = 0
        self.generated = 0
        self.first_s = 0.0
        private = req.cached_tokens - req.shared_tokens + req.prompt_tokens + req.output_tokens - 1
        self.blocks = -(-max(private, 1) // block)


def _capped_sum(ns: list[int], cap: int | None) -> int:
    return sum(ns) if cap is None else sum(min(n, cap) for n in ns)


def _terms(m: StepModel, decode_ctx: list[int], chunks: list[tuple[int, int]]) -> StepTerms:
    """The step's terms with every running sequence at its own context and every prompt chunk
    at its own offset (``kvplan.core.perf.assemble_step`` does the rest)."""
    b = len(decode_ctx)
    kv = b * m.state_bytes + sum(r.bytes_per_token * _capped_sum(decode_ctx, r.cap_tokens)
                                 for r in m.kv_reads)
    attn = sum(r.bytes_per_token * _capped_sum(decode_ctx, r.cap_tokens) for r in m.attn_flops)
    for r in m.prefill_attn_flops if m.prefill_attn_flops is not None else m.attn_flops:
        for start, n in chunks:
            attn += r.bytes_per_token * (_causal_pairs(start + n, r.cap_tokens)
                                         - _causal_pairs(start, r.cap_tokens))
    return assemble_step(m, b, sum(n for _, n in chunks), kv, attn)


def simulate(m: StepModel, e: Efficiency, limits: SimLimits, requests: list[SimRequest], *,
             users: int | None = None, max_steps: int | None = None) -> SimResult:
    """Run ``requests`` (arrival order; closed loop: the first ``users`` start at 0 and each
    finished request releases the next one at that time) until all finish, or ``max_steps``
    (default: enough for every token to take its own step, so only a stall stops it)."""
    import math

    if any(not math.isfinite(r.arrival_s) or r.arrival_s < 0 for r in requests):
        raise ValueError("arrival times must be finite and non-negative")
    if max_steps is None:
        max_steps = sum(r.prompt_tokens + r.output_tokens for r in requests) + len(requests) + 10
    block = limits.block_tokens
    shared = max((r.shared_tokens for r in requests), default=0)
    free_blocks = limits.pool_tokens // block - -(-shared // block)
    pending = deque(sorted(requests, key=lambda r: r.arrival_s)) if users is None else deque(requests)
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    now = 0.0
    steps = 0
    ttft: list[float] = []
    tpot: list[float] = []
    out_tokens = 0
    ttft_at: list[float] = []
    tpot_at: list[float] = []
    stalled = False

    def release(t: float):
        if pending:
            waiting.append(_Seq(pending.popleft(), block, t))

    if users is not None:
        for _ in range(min(users, len(pending))):
            release(0.0)
    while steps < max_steps:
        if users is None:
            while pending and pending[0].arrival_s <= now:
                r = pending.popleft()
                waiting.append(_Seq(r, block, r.arrival_s))
        if not running and not waiting:
            if users is None and pending:
                now = pending[0].arrival_s
                continue
            break
        budget = limits.max_num_batched_tokens
        decode_ctx: list[int] = []
        decoding: list[_Seq] = []
        chunks: list[tuple[int, int]] = []
        prefilling: list[tuple[_Seq, int]] = []
        for s in running:
            if s.done_prompt == s.req.prompt_tokens:
                if budget > 0:
                    decode_ctx.append(s.req.cached_tokens + s.req.prompt_tokens + s.generated)
                    decoding.append(s)
                    budget -= 1
            elif budget > 0:
                n = min(budget, s.req.prompt_tokens - s.done_prompt)
                chunks.append((s.req.cached_tokens + s.done_prompt, n))
                prefilling.append((s, n))
                budget -= n
        while waiting and budget > 0 and len(running) < limits.max_num_seqs \
                and waiting[0].blocks <= free_blocks:
            s = waiting.popleft()
            free_blocks -= s.blocks
            running.append(s)
            n = min(budget, s.req.prompt_tokens)
            chunks.append((s.req.cached_tokens, n))
            prefilling.append((s, n))
            budget -= n
        if not decode_ctx and not chunks:  # nothing can run: the head request never fits
            stalled = True
            break
        now += m.pp * step_time(m, _terms(m, decode_ctx, chunks), e).seconds
        steps += 1
        finished: list[_Seq] = []
        for s in decoding:
            s.generated += 1
            out_tokens += 1
        for s, n in prefilling:
            s.done_prompt += n
            if s.done_prompt == s.req.prompt_tokens:
                s.generated = 1
                out_tokens += 1
                s.first_s = now
                ttft.append(now - s.arrival_s + e.host_ttft_s
                            + e.host_ttft_per_prompt_token_s * s.req.prompt_tokens)
                ttft_at.append(s.arrival_s)
        for s in running:
            if s.generated >= s.req.output_tokens:
                finished.append(s)
        for s in finished:
            running.remove(s)
            free_blocks += s.blocks
            if s.req.output_tokens > 1:
                tpot.append((now - s.first_s) / (s.req.output_tokens - 1))
                tpot_at.append(s.arrival_s)
            if users is not None:
                release(now)
    unfinished = len(running) + len(waiting) + len(pending)
    return SimResult(tuple(ttft), tuple(tpot), steps, now, out_tokens, unfinished, stalled,
                     tuple(ttft_at), tuple(tpot_at))
