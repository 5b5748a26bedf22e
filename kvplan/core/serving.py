"""A continuous-batching engine under closed-loop load, in steady state. Pure.

``users`` clients each send a request of ``prompt`` tokens wanting ``output`` tokens, and the
next one as soon as the last ends (``vllm bench serve --max-concurrency``, SGLang
``bench_serving``, genai-perf at fixed concurrency). The engine runs at most ``slots``
sequences (the KV pool's capacity, ``max_num_seqs``); every step decodes one token of each
running sequence and spends what is left of the token budget (``max_num_batched_tokens``) on
prompt chunks (chunked prefill, vLLM V1 / SGLang / TRT-LLM alike).

Mean-value steady state of that scheduler, per request cycle of one slot:
- a prompt takes ``chunks = ceil(prompt / (budget - slots))`` steps, then ``output - 1``
  decode steps (the first token comes with the last chunk);
- sequences decoding on average: ``b = slots x (output - 1) / (output - 1 + chunks)``;
- prompt tokens per step on average: ``slots x prompt / (output - 1 + chunks)``; a step that
  carries a chunk carries ``c = min(prompt, budget - b)`` of them (more when prompts queue), so
  the share of steps with a chunk is ``phi = min(1, tokens per step / c)``;
- TPOT = (1 - phi) x decode step(b) + phi x mixed step(b, c) (what a benchmark's mean TPOT
  measures: the prefills of other requests stretch the steps of every running one);
- TTFT = host time + chunks x mixed step + wait, the wait being half a step (a request arrives
  mid-step) plus the M/D/1 queue behind the other slots' prompts, ``rho / (2 (1 - rho)) x
  chunks x mixed step`` with ``rho = phi x (slots - 1) / slots`` (one user never queues behind
  itself), capped at 0.95 (a saturated prefill queue: ``LoopTimes.saturated`` says so and
  the reports count such rows); users beyond the slots wait ``(users / slots - 1)`` request
  cycles;
- output tokens/s = users x output / (TTFT + (output - 1) x TPOT) (Little's law).

A benchmark starts every user at once: the first wave of ``slots`` prompts (of a run of
``num_prompts``) queues behind itself, prefilled in ``burst_steps = ceil(slots x prompt /
budget)`` full steps, its mean TTFT ``(burst_steps + 1) / 2`` burst steps. The mean TTFT of
the run weighs that wave by ``startup_share = users / num_prompts`` (when a result does not
record ``num_prompts``, the calibration's fitted share stands in, and the report says so).

``shape`` is fixed by the workload and the engine limits; ``times`` needs the two step times,
so a calibration fit evaluates it on arrays of rows at once (arithmetic only, like
``kvplan.core.perf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .perf import _max, _min

RHO_CAP = 0.95  # the M/D/1 wait diverges at rho = 1; a saturated prefill queue is capped here


@dataclass(frozen=True)
class LoopShape:
    users: Any
    slots: Any
    prompt_tokens: Any
    output_tokens: Any
    chunks: Any  # steps one prompt's prefill takes
    decode_batch: Any  # sequences decoding in an average step (b)
    chunk_tokens: Any  # prompt tokens in a step that carries a chunk (c)
    chunk_share: Any  # share of steps carrying a chunk (phi)
    burst_steps: Any = 1  # full steps the start-up wave's prompts take
    burst_tokens: Any = 1  # prompt tokens in one of them
    startup_share: Any = None  # users / num_prompts; None: not recorded


def loop_shape(users: int, slots: int, prompt_tokens: int, output_tokens: int,
               budget_tokens: int, num_prompts: int | None = None) -> LoopShape:
    slots = max(1, min(users, slots))
    room = max(1, budget_tokens - slots)
    chunks = -(-prompt_tokens // room)
    decode_steps = max(output_tokens - 1, 0)
    cycle_steps = decode_steps + chunks
    b = slots * decode_steps / cycle_steps
    per_step = slots * prompt_tokens / cycle_steps
    c = min(prompt_tokens, max(1.0, budget_tokens - b))
    if per_step > c:  # prompts queue: steps fill the whole budget with chunks
        c = min(per_step, max(1.0, budget_tokens - b))
    phi = min(1.0, per_step / c)
    wave = slots * prompt_tokens
    burst_steps = -(-wave // budget_tokens)
    share = None if num_prompts is None else min(1.0, users / num_prompts)
    return LoopShape(users, slots, prompt_tokens, output_tokens, chunks, b, c, phi, burst_steps,
                     min(wave, budget_tokens), share)


@dataclass(frozen=True)
class LoopTimes:
    ttft_s: Any
    tpot_s: Any
    output_tokens_per_s: Any
    queue_s: Any  # waiting part of TTFT (behind other prompts and for a slot)
    saturated: Any = False  # the prefill queue's utilisation reached RHO_CAP


def loop_times(s: LoopShape, decode_s, mixed_s, burst_s, host_s, startup_share) -> LoopTimes:
    """Mean TTFT, TPOT and output throughput from the three step times (seconds), the host's
    TTFT share and the start-up wave's share of the requests (``s.startup_share`` when
    recorded); every argument may be a numpy array over rows."""
    tpot = (1 - s.chunk_share) * decode_s + s.chunk_share * mixed_s
    others = s.chunk_share * (s.slots - 1) / s.slots
    rho = _min(others, RHO_CAP)
    prefill = s.chunks * mixed_s
    wait = 0.5 * tpot + rho / (2 * (1 - rho)) * prefill
    engine_ttft = host_s + prefill + wait
    cycle = engine_ttft + (s.output_tokens - 1) * tpot
    slot_wait = _max(s.users / s.slots - 1, 0) * cycle
    first_wave = host_s + (s.burst_steps + 1) / 2 * burst_s
    ttft = (1 - startup_share) * (engine_ttft + slot_wait) + startup_share * first_wave
    rate = s.users * s.output_tokens / (ttft + (s.output_tokens - 1) * tpot)
    return LoopTimes(ttft, tpot, rate, wait + slot_wait, others >= RHO_CAP)
