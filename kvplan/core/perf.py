"""Roofline latency and throughput of a planned deployment, per GPU. Pure.

Every formula is written with arithmetic only (no ``max``/``min`` calls on values), so the
same code runs on Python numbers and on numpy arrays (``kvplan.planning.sweep`` evaluates whole grids
with it). Units are in the names: bytes, FLOPs, seconds.

Decode step of a batch of B sequences at context n, on one GPU of one pipeline stage (under pp
the mean stage, whose pp x step is the stages' sum: ``kvplan.planning.perf_model``):
- bytes = non-expert weights (the embedding table is a lookup and is not read; a tied LM head
  is) + expected distinct experts hit x bytes of one expert per MoE layer, where B tokens
  each routing to k of E experts hit ``E x (1 - (1 - k/E)^B)`` distinct ones
  + B x KV bytes each sequence reads (full layers n tokens, sliding layers min(n, W), chunked
  layers up to C - the peak - and MLA its latent; sparse MLA (DeepSeek-V3.2, GLM-5.x) the
  latents of min(n, index_topk) tokens and every token's indexer key) + recurrent states
  read and written;
- FLOPs = B x (2 x active parameters + attention: 2 x heads x (d_k + d_v) per cached token
  per layer; MLA in absorbed form 2 x heads x (latent + kv_lora_rank); sparse MLA that over
  the top-k, plus the indexer's 2 x index_n_heads x index_head_dim over every token);
- time = fixed cost per step + one per decoder layer on the GPU (and one per layer running its
  own lightning indexer) + one per running sequence
  + max(bytes / (HBM bandwidth x efficiency), FLOPs / (peak x efficiency)), the routed
  experts' bytes and FLOPs at a further ``moe`` efficiency
  + tensor-parallel all-reduce: 2 per layer, ring ``2 (tp - 1) / tp x B x hidden x 2 B``
  over the interconnect (x efficiency) + a per-call latency. The fixed costs, the MoE factor,
  the all-reduce latency and the host's TTFT terms are fitted on measured serving runs
  (``calibrations/``); uncalibrated they are 0, 0, 0, 1, 10 us and 0 (the pure roofline);
- TPOT = pp x the stage time (no micro-batch overlap; the pipeline bubble is (pp - 1) / pp of
  each GPU's time); tokens/s per replica = B / TPOT.
Prefill of a prompt of p tokens in chunks of ``max_num_batched_tokens``: FLOPs = 2 x active
parameters x p + attention 2 x heads x (d_k + d_v) x p^2 / 2 per full layer (causal), (p^2 -
max(p - W, 0)^2) / 2 for sliding ones (MLA prefills in decompressed form: d_k = nope + rope, d_v);
after c cached tokens (a prefix-cache hit) the pairs are f(c + p) - f(c) of that f;
time = chunks x fixed cost + max(FLOPs / peak, chunks x weights / bandwidth) + all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any


def _max(a, b):
    return (a + b + abs(a - b)) / 2


def _min(a, b):
    return (a + b - abs(a - b)) / 2


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of datasheet figures. Defaults: decode GEMV/attention kernels reach
    ~80% of HBM bandwidth, large GEMMs ~60% of dense peak, NCCL ring all-reduce ~70% of link
    bandwidth with ~10 us per call. Replaced by a calibrated run's figures when one exists
    for the GPU (``kvplan.loaders.calibration``), or by the user's."""

    hbm_bandwidth: float = 0.80
    flops: float = 0.60
    interconnect: float = 0.70
    allreduce_latency_s: float = 10e-6
    source: str = "kvplan defaults"
    #: fitted on measured serving runs (``kvplan.planning.calibration_fit``); the defaults are
    #: the pure roofline: no fixed cost per step, experts as efficient as dense GEMMs, no host
    #: time in TTFT
    step_overhead_s: float = 0.0  # scheduler, sampling, kernel launches: every step
    sequence_overhead_s: float = 0.0  # per running sequence per step (scheduling, sampling)
    #: per decoder layer per step: each layer's kernel launches and the fixed latency of its
    #: small kernels (norms, rotary, routing), which no byte or FLOP count sees
    layer_overhead_s: float = 0.0
    attention: float = 1.0  # KV reads and attention FLOPs run at this fraction of the above
    moe: float = 1.0  # routed experts' share of a step runs at this fraction of the above
    host_ttft_s: float = 0.0  # API server, tokeniser: once per request
    host_ttft_per_prompt_token_s: float = 0.0  # tokenising and transferring each prompt token
    #: share of a benchmark's requests in its start-up wave, where the result does not say
    #: (users / num_prompts); a property of the benchmark harness the rows came from
    startup_share: float = 0.0
    calibrated: bool = False  # fitted on measured serving runs (source names them)
    #: added latency of each TP all-reduce, and of each attention-DP dispatch / combine, over
    #: more GPUs than one NVLink domain (NIC, switch, the inter-node NCCL protocol); fitted apart
    #: (``calibrations/cross_domain/latency.json``)
    cross_domain_latency_s: float = 0.0
    #: per layer that runs its own lightning indexer (DeepSeek-V3.2, GLM-5.x) per forward pass:
    #: the indexer's chain of small kernels (query and key projections, rotary, fp8 quantisation,
    #: cache store, logits, top-k), fixed whatever the batch; fitted apart
    #: (``calibrations/indexer/overhead.json``)
    indexer_overhead_s: float = 0.0


@dataclass(frozen=True)
class KvRead:
    """Bytes one sequence reads per step from one group of layers on one GPU:
    ``bytes_per_token x min(n, cap_tokens)`` (cap None: every token)."""

    bytes_per_token: float
    cap_tokens: int | None = None


@dataclass(frozen=True)
class StepModel:
    """One deployment's per-GPU terms of one pipeline stage (under pp the mean stage: each
    additive term summed over the stages / pp, so that pp x its step is the sum of theirs),
    built by ``kvplan.planning.perf_model``."""

    weight_bytes: float  # non-expert weights read by every step (embedding lookup excluded)
    expert_bytes: float  # one routed expert of one MoE layer on this GPU
    moe_layers: float  # on the stage (the mean stage's: fractional under pp)
    num_experts: int
    top_k: int
    kv_reads: tuple[KvRead, ...]
    state_bytes: float  # recurrent state per sequence, read and written each step
    flops_per_token: float  # 2 x active parameters on this GPU
    attn_flops: tuple[KvRead, ...]  # attention FLOPs per cached token (same caps)
    hidden_size: int
    layers: float  # decoder layers on the stage (the mean stage's: fractional under pp)
    tp: int
    pp: int
    hbm_bytes_per_s: float  # datasheet
    flops_per_s: float  # datasheet, dense, for the weights' compute dtype
    link_bytes_per_s: float  # per direction
    efficiency: Efficiency
    activation_bytes_per_element: int = 2
    prefill_attn_flops: tuple[KvRead, ...] | None = None  # None: as decode (MLA differs)
    expert_flops_per_token: float = 0.0  # the routed experts' part of flops_per_token
    #: speculative decoding: K draft tokens per step, verified in one target pass, emitting
    #: ``acceptance_length`` tokens per sequence on average (1 <= tau <= K + 1); the draft's own
    #: step model (None with K = 0)
    speculative_tokens: int = 0
    acceptance_length: float = 1.0
    draft: StepModel | None = None
    #: MoE under attention data parallelism: ``dp`` ranks step together, so every MoE layer
    #: sees ``dp`` x a rank's tokens; a GPU holds 1/``ep`` of the routed experts
    dp: int = 1
    ep: int = 1
    #: decode context parallelism (vLLM's ag_rs backend): per attention layer 3 collectives
    #: (query all-gather, LSE all-gather, output reduce-scatter) over the dcp GPUs moving
    #: ``dcp_bytes_per_token`` (all the stage's layers) per token of the step
    dcp_layers: float = 0
    dcp_bytes_per_token: float = 0.0
    #: GPUs one NVLink domain joins (0: no limit stated) and the per-GPU link between domains:
    #: a collective over more GPUs than a domain crosses it (``cross_domain_factor``)
    domain_gpus: int = 0
    scale_out_bytes_per_s: float = 0.0
    #: of ``layers``, those that compute their own top-k with a lightning indexer (each costs
    #: ``Efficiency.indexer_overhead_s`` per forward pass)
    indexer_layers: float = 0


def cross_domain_factor(m: StepModel, group: int, all_to_all: bool) -> float:
    """How much longer a collective's bytes take over ``group`` GPUs than a ring over NVLink
    alone would (1 within one domain of D GPUs). An all-reduce (TP) over N = group / D domains
    runs hierarchically (NCCL): 2 (D - 1) / D of the message over NVLink and 2 (N - 1) / N of
    a 1/D share over each GPU's NIC, against the flat ring's 2 (G - 1) / G over NVLink. An
    all-to-all (MoE dispatch / combine) sends (G - D) / G of a GPU's bytes to other domains
    over its NIC, the rest over NVLink. H200 (450 GB/s NVLink, 50 GB/s NIC), G = 16: the
    all-reduce (1.75 / 450 + 0.125 / 50) / (1.875 / 450) = 1.53; the all-to-all 1/2 + 1/2 x 9
    = 5."""
    d = m.domain_gpus
    if not d or group <= d:
        return 1.0
    ratio = m.link_bytes_per_s / m.scale_out_bytes_per_s
    if all_to_all:
        cross = (group - d) / group
        return (1 - cross) + cross * ratio
    n = group / d
    flat = 2 * (group - 1) / group
    return (2 * (d - 1) / d + 2 * (n - 1) / n / d * ratio) / flat


def kv_read_bytes(m: StepModel, n):
    total = 0.0
    for r in m.kv_reads:
        total = total + r.bytes_per_token * (n if r.cap_tokens is None else _min(n, r.cap_tokens))
    return total + m.state_bytes


def attention_flops(m: StepModel, n):
    total = 0.0
    for r in m.attn_flops:
        total = total + r.bytes_per_token * (n if r.cap_tokens is None else _min(n, r.cap_tokens))
    return total


def distinct_experts(m: StepModel, batch):
    """Expected distinct experts B tokens hit in one MoE layer (k of E each, uniform)."""
    if not m.num_experts:
        return 0.0
    return m.num_experts * (1 - (1 - m.top_k / m.num_experts) ** batch)


def allreduce_s(m: StepModel, tokens):
    """Two ring all-reduces per layer of ``tokens x hidden`` activations (0 without TP)."""
    if m.tp == 1:
        return 0.0 * tokens
    message = tokens * m.hidden_size * m.activation_bytes_per_element
    bw = m.link_bytes_per_s * m.efficiency.interconnect
    per_call = m.efficiency.allreduce_latency_s + 2 * (m.tp - 1) / m.tp * message / bw \
        * cross_domain_factor(m, m.tp, False)
    if m.domain_gpus and m.tp > m.domain_gpus:
        per_call = per_call + m.efficiency.cross_domain_latency_s
    return 2 * m.layers * per_call


def busiest_ep_rank(m: StepModel, tokens):
    """(distinct experts hit, token-expert pairs) on the busiest GPU of one MoE layer when
    ``tokens`` tokens each route to k of E experts, E / ep experts per GPU. Without EP
    (ep = 1) every GPU holds a slice of every expert: all distinct experts hit, all pairs.
    With EP the stated imbalance is that of uniform routing: each GPU's count is about
    normal, and the busiest of ep is its mean + z_ep standard deviations, z_ep the expected
    maximum of ep standard normals (Blom: Phi^-1((ep - 0.375) / (ep + 0.25)); 1.43 for 8).
    DeepSeek-V3, ep 8, 8 tokens: p = 1 - (1 - 8/256)^8 = 0.224 of 32 local experts,
    7.2 +- 2.36 -> 10.5 on the busiest (x 1.47 the mean); real routing is more skewed."""
    if not m.num_experts:
        return 0.0 * tokens, 0.0 * tokens
    pairs = tokens * m.top_k
    if m.ep == 1:
        return distinct_experts(m, tokens), pairs
    p = distinct_experts(m, tokens) / m.num_experts  # each expert hit with this probability
    z = NormalDist().inv_cdf((m.ep - 0.375) / (m.ep + 0.25))
    local = m.num_experts / m.ep
    hit = local * p + z * (local * p * (1 - p)) ** 0.5
    share = pairs / m.ep + z * (pairs / m.ep * (1 - 1 / m.ep)) ** 0.5
    return _min(hit, local), share


@dataclass(frozen=True)
class Step:
    seconds: Any  # the stage's step time (float or numpy array)
    memory_s: Any
    compute_s: Any
    comm_s: Any
    bytes: Any
    kv_bytes: Any
    flops: Any


@dataclass(frozen=True)
class StepTerms:
    """One engine step's work on the busiest GPU, before any efficiency: bytes read (dense
    weights, routed experts hit, KV and state), FLOPs (dense with attention, routed experts) and
    tensor-parallel all-reduces (calls, and the ring bytes each GPU sends over all of them)."""

    dense_bytes: Any
    expert_bytes: Any
    kv_bytes: Any
    dense_flops: Any
    expert_flops: Any
    comm_calls: Any
    comm_bytes: Any
    sequences: Any = 0.0  # sequences decoding in the step
    attn_flops: Any = 0.0  # attention's FLOPs (decode and prompt), apart from the GEMMs'
    cross_calls: Any = 0.0  # of comm_calls, those over more GPUs than one domain
    layers: Any = 0.0  # decoder layers the step runs on this GPU (each costs layer_overhead_s)
    indexer_layers: Any = 0.0  # of them, those running their own indexer (indexer_overhead_s)


def assemble_step(m: StepModel, batch, prefill_tokens, kv_bytes, attn_flops) -> StepTerms:
    """A step's terms from its token counts and what they read and compute in attention
    (``kv_bytes``: the decoding sequences' KV and state; ``attn_flops``: all attention)."""
    tokens = batch + prefill_tokens
    moe_tokens = tokens * m.dp  # every DP rank's tokens meet in each MoE layer
    calls = 0.0 if m.tp == 1 else 2.0 * m.layers
    cross = calls if m.domain_gpus and m.tp > m.domain_gpus else 0.0
    ring = 0.0 if m.tp == 1 else 2 * (m.tp - 1) / m.tp
    comm_bytes = calls * ring * tokens * m.hidden_size * m.activation_bytes_per_element \
        * cross_domain_factor(m, m.tp, False)
    if m.dp > 1:  # dispatch (all-gather) and combine (reduce-scatter) over the tp x dp GPUs
        group = m.tp * m.dp
        calls = calls + 2.0 * m.moe_layers
        if m.domain_gpus and group > m.domain_gpus:  # over nodes they pay the crossing too
            cross = cross + 2.0 * m.moe_layers
        comm_bytes = comm_bytes + (m.moe_layers * 2 * (group - 1) / group * moe_tokens
                                   * m.hidden_size * m.activation_bytes_per_element
                                   * cross_domain_factor(m, group, True))
    if m.dcp_layers:
        calls = calls + 3.0 * m.dcp_layers
        comm_bytes = comm_bytes + tokens * m.dcp_bytes_per_token
    experts_hit, expert_pairs = busiest_ep_rank(m, moe_tokens)
    return StepTerms(
        dense_bytes=m.weight_bytes + 0.0 * tokens,
        expert_bytes=experts_hit * m.expert_bytes * m.moe_layers,
        kv_bytes=kv_bytes,
        dense_flops=tokens * (m.flops_per_token - m.expert_flops_per_token),
        expert_flops=expert_pairs * m.expert_flops_per_token / _max(m.top_k, 1),
        comm_calls=calls + 0.0 * tokens,
        comm_bytes=comm_bytes,
        sequences=batch + 0.0 * tokens,
        attn_flops=attn_flops,
        cross_calls=cross + 0.0 * tokens,
        layers=m.layers + 0.0 * tokens,
        indexer_layers=m.indexer_layers + 0.0 * tokens)


def step_terms(m: StepModel, batch, context, prefill_tokens=0.0,
               prefill_attn_flops_per_token=0.0) -> StepTerms:
    """A step that decodes ``batch`` sequences at ``context`` and prefills ``prefill_tokens``
    prompt tokens (each with ``prefill_attn_flops_per_token`` of attention) in the same pass."""
    return assemble_step(m, batch, prefill_tokens, batch * kv_read_bytes(m, context),
                         batch * attention_flops(m, context)
                         + prefill_tokens * prefill_attn_flops_per_token)


def step_time(m: StepModel, t: StepTerms, e: Efficiency | None = None) -> Step:
    """Step time = fixed cost + max(memory, compute) + all-reduces, with the routed experts'
    bytes and FLOPs at ``e.moe`` and attention's (KV reads, attention FLOPs) at
    ``e.attention`` of the dense efficiency."""
    e = e or m.efficiency
    hbm = m.hbm_bytes_per_s * e.hbm_bandwidth
    peak = m.flops_per_s * e.flops
    memory_s = t.dense_bytes / hbm + t.kv_bytes / (hbm * e.attention) + t.expert_bytes / (
        hbm * e.moe)
    compute_s = t.dense_flops / peak + t.attn_flops / (peak * e.attention) + t.expert_flops / (
        peak * e.moe)
    comm_s = t.comm_calls * e.allreduce_latency_s + t.comm_bytes / (
        m.link_bytes_per_s * e.interconnect) + t.cross_calls * e.cross_domain_latency_s
    seconds = e.step_overhead_s + e.layer_overhead_s * t.layers \
        + e.indexer_overhead_s * t.indexer_layers \
        + e.sequence_overhead_s * t.sequences + _max(memory_s, compute_s) + comm_s
    return Step(seconds, memory_s, compute_s, comm_s,
                t.dense_bytes + t.expert_bytes + t.kv_bytes, t.kv_bytes,
                t.dense_flops + t.expert_flops + t.attn_flops)


def decode_step(m: StepModel, batch, context) -> Step:
    return step_time(m, step_terms(m, batch, context))


def speculative_step_s(m: StepModel, batch, context):
    """One speculative step over all pipeline stages: the draft's K decode steps (once), then
    the target verifying K + 1 tokens per sequence in one pass (weights and KV read once, K
    extra tokens of GEMM and attention FLOPs each)."""
    k = m.speculative_tokens
    verify = step_time(m, step_terms(m, batch, context, batch * k, attention_flops(m, context)))
    draft = 0.0 if m.draft is None else k * decode_step(m.draft, batch, context).seconds
    return m.pp * verify.seconds + draft  # the verify pass crosses every stage; the draft
    # runs once, on one GPU group (vLLM refuses pp > 1 with a draft; others run it so)


def tpot_s(m: StepModel, batch, context):
    """Time per output token (inter-token latency) of every sequence in the batch; with
    speculative decoding, a speculative step over the ``acceptance_length`` tokens it emits."""
    if m.speculative_tokens:
        return speculative_step_s(m, batch, context) / m.acceptance_length
    return m.pp * decode_step(m, batch, context).seconds


def tokens_per_s(m: StepModel, batch, context):
    """Output tokens per second of one replica."""
    return batch / tpot_s(m, batch, context)


def _causal_pairs(x, cap):
    """Query-key pairs of the first x positions under causal attention, each position seeing
    at most ``cap`` keys (None: all): (x^2 - max(x - W, 0)^2) / 2."""
    over = 0.0 if cap is None else _max(x - cap, 0)
    return (x * x - over * over) / 2


def prefill_s(m: StepModel, prompt_tokens, chunk_tokens, cached_tokens=0):
    """Time to prefill one prompt (TTFT without queueing), all pipeline stages. The prompt's
    tokens attend to ``cached_tokens`` already in the cache (a prefix-cache hit) as well."""
    attn = 0.0
    for r in m.prefill_attn_flops if m.prefill_attn_flops is not None else m.attn_flops:
        pairs = _causal_pairs(cached_tokens + prompt_tokens, r.cap_tokens) - _causal_pairs(
            cached_tokens, r.cap_tokens)
        attn = attn + r.bytes_per_token * pairs / prompt_tokens
    e = m.efficiency
    dense_flops = prompt_tokens * (m.flops_per_token - m.expert_flops_per_token + attn)
    expert_flops = prompt_tokens * m.expert_flops_per_token / m.ep  # spread over the EP GPUs
    chunks = -(-prompt_tokens // chunk_tokens)
    peak = m.flops_per_s * e.flops
    hbm = m.hbm_bytes_per_s * e.hbm_bandwidth
    compute_s = dense_flops / peak + expert_flops / (peak * e.moe)
    memory_s = chunks * (m.weight_bytes / hbm
                         + m.expert_bytes * m.moe_layers * m.num_experts / m.ep / (hbm * e.moe))
    return m.pp * (chunks * (e.step_overhead_s + e.layer_overhead_s * m.layers
                             + e.indexer_overhead_s * m.indexer_layers)
                   + _max(compute_s, memory_s)
                   + allreduce_s(m, prompt_tokens))


def host_ttft_s(m: StepModel, prompt_tokens):
    """The host's share of TTFT (API server, tokeniser): calibrated, 0 uncalibrated."""
    e = m.efficiency
    return e.host_ttft_s + e.host_ttft_per_prompt_token_s * prompt_tokens


def compute_bound_batch(m: StepModel, context) -> float:
    """The batch at which a decode step's FLOP time reaches its memory time (dense model,
    experts at full coverage); inf when decode never turns compute-bound at this context."""
    per_seq_mem = kv_read_bytes(m, context) / (m.hbm_bytes_per_s * m.efficiency.hbm_bandwidth)
    per_seq_flop = (m.flops_per_token + attention_flops(m, context)) / (
        m.flops_per_s * m.efficiency.flops)
    fixed = (m.weight_bytes + m.expert_bytes * m.moe_layers * m.num_experts / m.ep) / (
        m.hbm_bytes_per_s * m.efficiency.hbm_bandwidth)
    if per_seq_flop <= per_seq_mem:
        return float("inf")
    return fixed / (per_seq_flop - per_seq_mem)


def cost_per_mtok_usd(price_usd_per_hour: float, tokens_per_second):
    """$ per million tokens for a deployment costing ``price_usd_per_hour`` (all its GPUs)."""
    return price_usd_per_hour / 3600 / tokens_per_second * 1e6
