"""Workloads: request-length distributions, the shape of one request (shared prefix, turns,
reasoning tokens, images), seeded sampling and nearest-rank statistics. Pure: sampling uses a
seeded ``random.Random``; a trace arrives as parsed rows (``kvplan.loaders.trace`` reads it).

One sampled *conversation* becomes ``turns`` requests (each turn is one request of the rate):
- turn 1 holds ``shared_prefix + prompt + images x tokens_per_image`` before decode;
- turn k > 1 adds ``tokens_per_turn`` user tokens on top of everything earlier turns left in
  the context: their prompts and visible outputs (reasoning tokens are dropped from the
  history, as chat templates do);
- every turn generates ``thinking + output`` tokens, all held in the KV cache while it runs.
Prefill of a turn covers only its new tokens: the shared prefix comes from the prefix cache
(whole blocks, applied when a block size is known) and earlier turns stay cached - except the
previous answer after reasoning: the cache holds prompt, reasoning, answer, the next prompt
prompt, answer, so the match ends where the reasoning began and the answer is prefilled again.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

KINDS = ("fixed", "uniform", "normal", "lognormal")


@dataclass(frozen=True)
class Dist:
    """A token-count distribution. ``fixed``: a; ``uniform``: integers a..b inclusive;
    ``normal``: mean a, standard deviation b; ``lognormal``: ln X ~ N(a, b). Draws are rounded
    to integers and clipped to [lo, hi]."""

    kind: str
    a: float
    b: float = 0.0
    lo: int = 0
    hi: int | None = None
    text: str = ""  # how the scenario wrote it

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            v = int(self.a)
        elif self.kind == "uniform":
            v = rng.randint(int(self.a), int(self.b))
        elif self.kind == "normal":
            v = round(rng.gauss(self.a, self.b))
        else:
            v = round(rng.lognormvariate(self.a, self.b))
        v = max(v, self.lo)
        return v if self.hi is None else min(v, self.hi)

    def describe(self) -> str:
        return self.text or f"{self.kind} {self.a:g}" + (f", {self.b:g}" if self.b else "")


def fixed(n: int) -> Dist:
    return Dist("fixed", n, text=f"{n:,}")


def lognormal_from_percentiles(q1: float, x1: float, q2: float, x2: float) -> Dist:
    """ln X ~ N(mu, sigma) through two percentiles (q in (0, 100), x > 0, q1 < q2, x1 < x2)."""
    z1 = NormalDist().inv_cdf(q1 / 100)
    z2 = NormalDist().inv_cdf(q2 / 100)
    sigma = (math.log(x2) - math.log(x1)) / (z2 - z1)
    mu = math.log(x1) - sigma * z1
    return Dist("lognormal", mu, sigma)


@dataclass(frozen=True)
class Request:
    """One request as the engine sees it (token counts)."""

    shared_tokens: int  # the shared system prompt (prefix-cached across requests)
    history_tokens: int  # earlier turns of the same conversation (cached)
    new_tokens: int  # this turn's prompt (and images) to prefill
    output_tokens: int  # generated: reasoning + visible output
    turn: int = 1
    thinking_tokens: int = 0  # of output_tokens, the reasoning ones
    reusable_history_tokens: int | None = None  # of history, what the prefix cache can serve

    @property
    def cached_history_tokens(self) -> int:
        return self.history_tokens if self.reusable_history_tokens is None else self.reusable_history_tokens

    @property
    def context_tokens(self) -> int:
        """Tokens in the cache when decoding starts."""
        return self.shared_tokens + self.history_tokens + self.new_tokens

    @property
    def final_tokens(self) -> int:
        """Prompt plus generated tokens: the length max_model_len must admit."""
        return self.context_tokens + self.output_tokens

    @property
    def peak_tokens(self) -> int:
        """Tokens the cache holds at the request's last step: the last generated token is
        never fed back, so its KV is never written."""
        return self.context_tokens + self.output_tokens - 1


@dataclass(frozen=True)
class Workload:
    prompt: Dist | None = None
    output: Dist | None = None
    trace: tuple[tuple[int, int], ...] | None = None  # (prompt, output) per request
    trace_name: str = ""
    shared_prefix_tokens: int = 0
    prefix_cache_hit_rate: float = 0.0
    turns: int = 1
    tokens_per_turn: Dist | None = None
    thinking: Dist | None = None
    images_per_request: int = 0
    tokens_per_image: int = 0
    request_rate_per_s: float | None = None
    concurrent_requests: int | None = None


def _conversation(w: Workload, prompt: int, outputs: list[int], thinking: list[int],
                  added: list[int]) -> list[Request]:
    out = []
    history = 0
    new = prompt + w.images_per_request * w.tokens_per_image
    for k in range(w.turns):
        reusable = history
        if k:
            reusable = history + new  # the cache holds the last prompt, then its reasoning...
            if not thinking[k - 1]:
                reusable += outputs[k - 1]  # ...and the answer, reused only without reasoning
            history += new + outputs[k - 1]
            new = added[k]
        out.append(Request(w.shared_prefix_tokens, history, new, thinking[k] + outputs[k], k + 1,
                           thinking[k], reusable))
    return out


def conversations_for(requests: int, turns: int) -> int:
    """Conversations to sample for about ``requests`` requests (at least one)."""
    return max(-(-requests // turns), 1)


def sample(w: Workload, conversations: int, seed: int) -> list[Request]:
    """Requests of ``conversations`` sampled conversations (or of every trace row)."""
    rng = random.Random(seed)
    zero = fixed(0)
    think = w.thinking or zero
    per_turn = w.tokens_per_turn or zero
    out: list[Request] = []
    if w.trace is not None:
        for p, o in w.trace:
            out += _conversation(w, p, [o], [think.draw(rng)], [0])
        return out
    assert w.prompt is not None and w.output is not None
    for _ in range(conversations):
        p = w.prompt.draw(rng)
        outs = [w.output.draw(rng) for _ in range(w.turns)]
        thinks = [think.draw(rng) for _ in range(w.turns)]
        added = [0] + [per_turn.draw(rng) for _ in range(w.turns - 1)]
        out += _conversation(w, p, outs, thinks, added)
    return out


def quantile(values: list[int] | list[float], q: float):
    """Nearest-rank percentile: the ceil(q/100 x N)-th smallest value (q in (0, 100]),
    computed exactly (99.9 / 100 x 1000 is 999, not 999.0000000000001)."""
    s = sorted(values)
    k = max(math.ceil(Fraction(str(q)) * len(s) / 100), 1)
    return s[k - 1]


@dataclass(frozen=True)
class Stats:
    mean: float
    p50: int | float
    pq: int | float
    max: int | float
    q: float

    def record(self) -> dict:
        return {"mean": self.mean, "p50": self.p50, "percentile": self.q,
                "at_percentile": self.pq, "max": self.max}


def stats(values: list[int] | list[float], q: float) -> Stats:
    return Stats(sum(values) / len(values), quantile(values, 50), quantile(values, q), max(values), q)
