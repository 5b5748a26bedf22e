"""``kvplan fit``: does a model fit on a GPU at a context, with how many sequences, and what
should the engine be told. Pure: composes the footprint (``kvplan.planning.footprint``), the weight
bytes (``kvplan.core.weights``), the engine's memory budget (``kvplan.engines.*_memory``) and the
paged pool arithmetic (``kvplan.engines.kvpool``).

Per pipeline stage the engine sizes its own pool from that stage's weights and layers; vLLM
then gives every stage the smallest block count, so the busiest GPU is the stage with the
fewest blocks (and the per-sequence bytes are that stage's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

from ..core.budget import Budget, BudgetInputs
from ..core.errors import InputError, ParallelismError
from ..core.gpu import GpuSpec
from ..core.model import Model
from ..core.parallel import pp_stages
from ..core.units import cdiv, ceil_bytes
from ..core.weights import WeightFormat, Weights, weight_bytes
from ..engines import EngineLayout, get_engine
from ..engines.costs import LayerCost
from ..engines.kvpool import (
    PoolGroups,
    PoolLayer,
    vllm_groups,
    vllm_hybrid_block_size,
    vllm_max_concurrency,
    vllm_num_blocks,
    vllm_pool_tokens,
)
from .footprint import Footprint, kv_footprint, resolve_formats


@dataclass(frozen=True)
class Draft:
    """A speculative-decoding draft model: its own KV layers join the pool (last stage)."""

    model: Model
    weights: Weights | None
    weight_format: WeightFormat
    num_speculative_tokens: int


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    model: Model
    weights: Weights | None  # None: --weight-memory must be given
    weight_format: WeightFormat
    gpu: GpuSpec
    engine: str = "vllm"
    tp: int = 1
    pp: int = 1
    kv_dtype: str = "auto"
    context_tokens: int = 8192
    max_model_len: int | None = None
    utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size_tokens: int | None = None
    shared_prefix_tokens: int = 0
    draft: Draft | None = None
    concurrency: int | None = None
    kv_cache_memory_bytes: int | None = None
    weight_memory_bytes: int | None = None
    activation_memory_bytes: int | None = None
    overhead_memory_bytes: int | None = None
    total_memory_bytes: int | None = None
    allow_emulated: bool = False
    search: bool = True
    checkpoint: dict | None = None  # safetensors summary of a Hub model (params/bytes by dtype)


@dataclass(frozen=True)
class StagePlan:
    stage: int
    layers: int
    budget: Budget
    pool_layers: tuple[PoolLayer, ...]
    num_blocks: int | None  # paged engines with vLLM grouping
    pool_groups: PoolGroups | None = None  # vLLM's KV cache groups of this stage

    @property
    def groups(self) -> int:
        return len(self.pool_groups.groups) if self.pool_groups else 1

    @property
    def padding_layers(self) -> int:
        return self.pool_groups.padding_layers if self.pool_groups else 0


@dataclass(frozen=True)
class FitResult:
    request: FitRequest
    layout: EngineLayout
    footprint: Footprint
    kv_format: str
    block_size_tokens: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    params_total: int | None
    params_active: int | None
    budget: Budget  # the busiest stage's
    stages: tuple[StagePlan, ...]
    kv_pool_tokens: int
    per_sequence_bytes: int
    max_concurrency: int
    engine_max_concurrency: float
    fits: bool
    verdict: str
    notes: tuple[str, ...] = ()
    suggestion: tuple[int, int] | None = None
    suggestion_concurrency: int | None = None
    launch: dict[str, str] = field(default_factory=dict)
    draft_footprint: Footprint | None = None  # the draft model's cache layers (last stage)


def _pool_kind(cost: LayerCost) -> str:
    if cost.state_bytes_per_rank:
        return "state"
    return {"window": "sliding", "window_page": "sliding", "chunk": "chunked"}.get(cost.policy, "full")


def _pool_layers(costs: list[LayerCost], block: int, state_page: int | None,
                 max_model_len: int) -> list[PoolLayer]:
    out = []
    for c in costs:
        kind = _pool_kind(c)
        if kind == "state":
            page = state_page if state_page is not None else c.state_bytes_per_rank
            out.append(PoolLayer(("state", c.kind, page), "state", page, max_model_len))
        else:
            page = ceil_bytes(c.rank_bytes_for_tokens(block))
            out.append(PoolLayer((c.kind, page, c.window_tokens if kind != "full" else None), kind,
                                 page, block, c.window_tokens if kind != "full" else None))
    return out


def _block_size(req: FitRequest, layout: EngineLayout, model: Model) -> tuple[int, list[str]]:
    """The block size the engine will use: the user's, the engine default, vLLM's MLA
    backend block, or vLLM's hybrid attention/Mamba unification."""
    notes: list[str] = []
    block = req.block_size_tokens
    if layout.name != "vllm":
        return (block or layout.default_block_size_tokens), notes
    from ..engines.vllm_memory import mla_block_size

    kinds = {spec.kind for spec in model.cache_layers}
    if "mla" in kinds and block is None:
        block = mla_block_size(req.gpu.architecture)
        notes.append(f"vLLM forces {block}-token blocks for MLA on {req.gpu.architecture} "
                     f"({'CUTLASS MLA' if block == 128 else 'FlashMLA'} backend)")
    return (block or layout.default_block_size_tokens), notes


def _hybrid_unify(fp_costs, layout, block, user_block) -> tuple[int, int | None, list[str]]:
    """vLLM: raise the attention block until one attention page covers a Mamba page."""
    costs = [c for layer in fp_costs for c in layer]
    states = [c for c in costs if c.state_bytes_per_rank]
    attn = [c for c in costs if not c.state_bytes_per_rank]
    if layout.name != "vllm" or not states or not attn:
        return block, None, []
    per_token = ceil_bytes(attn[0].rank_bytes_for_tokens(1))
    state_page = max(c.state_bytes_per_rank for c in states)
    new_block = vllm_hybrid_block_size(per_token, state_page, user_block)
    padded = new_block * per_token
    pct = 100 * (padded - state_page) / state_page
    return new_block, padded, [
        f"vLLM sets the attention block to {new_block:,} tokens so an attention page "
        f"({padded:,} B) covers a Mamba page ({state_page:,} B, padded by {pct:.2f}%)"]


def _budget(layout: EngineLayout, inputs: BudgetInputs, last_stage: bool) -> Budget:
    from ..engines import vllm_memory

    if layout.name == "vllm":
        return vllm_memory.vllm_budget(inputs, layout.version, last_stage=last_stage)
    activation = vllm_memory.activation_estimate(inputs, "main", last_stage)
    if layout.name == "sglang":
        from ..engines.sglang_memory import sglang_budget
        return sglang_budget(inputs, layout.version, activation)
    if layout.name == "trtllm":
        from ..engines.trtllm_memory import trtllm_budget
        return trtllm_budget(inputs, layout.version, activation)
    if layout.name == "llama.cpp":
        from ..engines.llama_cpp_memory import llama_cpp_budget
        return llama_cpp_budget(inputs, layout.version)
    raise InputError(f"{layout.name} has no memory budget model; use vllm, sglang, trtllm or "
                     "llama.cpp", field="--engine")


def _intermediate_per_rank(model: Model, weights: Weights | None, tp: int) -> int:
    if weights is None:
        return 4 * model.hidden_size // tp
    widest = 0
    for t in weights.tensors:
        if t.linear and t.name.endswith(("up_proj.weight", "gate_proj.weight")):
            widest = max(widest, t.rows * (weights.experts_per_token if t.expert else 1))
    return cdiv(widest or 4 * model.hidden_size, tp)


def _check_native(req: FitRequest, fp: Footprint) -> None:
    for fmt in {fp.formats.k, fp.formats.v}:
        if not req.gpu.runs_natively(fmt) and not req.allow_emulated:
            raise InputError(f"{req.gpu.name} ({req.gpu.architecture}) cannot run KV format "
                             f"{fmt.name} natively (it runs {', '.join(req.gpu.native_kv_formats)}); "
                             "pass --allow-emulated to plan it anyway", field="--kv-dtype")


def plan_fit(req: FitRequest) -> FitResult:
    """Plan one (model, GPU, engine, parallelism, context)."""
    layout = get_engine(req.engine)
    model = req.model
    max_model_len = req.max_model_len or req.context_tokens
    if req.context_tokens > max_model_len:
        raise InputError(f"context {req.context_tokens:,} exceeds --max-model-len "
                         f"{max_model_len:,}", field="--context")
    if req.shared_prefix_tokens >= req.context_tokens:
        raise InputError(f"the shared prefix ({req.shared_prefix_tokens:,} tokens) must be "
                         f"shorter than the context ({req.context_tokens:,})", field="--shared-prefix")
    if req.draft and req.pp > 1 and layout.name == "vllm":
        raise ParallelismError("vLLM runs speculative decoding without pipeline parallelism; "
                               "use --pp 1", field="pp")
    from ..engines.vllm_memory import serve_defaults

    total = req.total_memory_bytes or req.gpu.memory_driver_total_bytes
    dflt_tokens, dflt_seqs = serve_defaults(total, req.gpu.name)
    mnbt = req.max_num_batched_tokens or dflt_tokens
    mns = req.max_num_seqs or dflt_seqs
    block, notes = _block_size(req, layout, model)
    lookahead = req.draft.num_speculative_tokens if req.draft else 0
    ctx = req.context_tokens + lookahead

    fp = kv_footprint(model, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=req.pp,
                      block_size_tokens=block, engine=layout)
    block2, state_page, hybrid_notes = _hybrid_unify(fp.layer_costs, layout, block,
                                                     req.block_size_tokens)
    if block2 != block:
        block = block2
        fp = kv_footprint(model, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=req.pp,
                          block_size_tokens=block, engine=layout)
    notes += hybrid_notes
    _check_native(req, fp)
    notes += list(fp.notes)

    draft_fp = None
    if req.draft:
        dm = req.draft.model
        if dm.vocab_size != model.vocab_size:
            raise InputError(f"draft model {dm.name} has vocabulary {dm.vocab_size}, the target "
                             f"{model.vocab_size}: speculative decoding needs the same tokenizer",
                             field="--draft-model")
        draft_fp = kv_footprint(dm, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=1,
                                block_size_tokens=block, engine=layout)

    # weights per stage
    if req.weight_memory_bytes is not None:
        stage_weights = [req.weight_memory_bytes] * req.pp
    elif req.weights is None:
        raise InputError(f"parameter count for {model.model_type} is not modelled; pass "
                         "--weight-memory", field="--weight-memory")
    else:
        wb = weight_bytes(req.weights, req.weight_format, tp=req.tp, pp=req.pp)
        stage_weights = list(wb.per_stage_bytes)
        if req.tp > 1:
            notes.append(f"weights under tp {req.tp}: linear layers and the vocabulary split "
                         "across ranks; norms (and routers, MLA's q_a/kv_a projections where "
                         f"present) replicated on every rank ({wb.replicated_bytes:,} B per GPU)")
    if req.draft and req.weight_memory_bytes is None:
        if req.draft.weights is None:
            raise InputError("parameter count of the draft model is not modelled; pass "
                             "--weight-memory for the total", field="--draft-model")
        stage_weights[-1] += weight_bytes(req.draft.weights, req.draft.weight_format,
                                          tp=req.tp).per_gpu_bytes

    stages = pp_stages(model.num_layers, req.pp)
    inter = _intermediate_per_rank(model, req.weights, req.tp)
    plans = []
    for s, rng in enumerate(stages):
        last = s == len(stages) - 1
        inputs = BudgetInputs(
            total_bytes=total, weights_bytes=stage_weights[s], tp=req.tp, pp=req.pp,
            hidden_size=model.hidden_size, intermediate_per_rank=inter,
            vocab_size=model.vocab_size or 0, num_layers=len(rng),
            max_num_batched_tokens=mnbt, max_num_seqs=mns, utilization=req.utilization,
            activation_bytes=req.activation_memory_bytes,
            runtime_overhead_bytes=req.overhead_memory_bytes,
            kv_cache_memory_bytes=req.kv_cache_memory_bytes,
            weights_overridden=req.weight_memory_bytes is not None,
            total_overridden=req.total_memory_bytes is not None,
            smi_total_mib=None if req.total_memory_bytes else req.gpu.memory_smi_total_mib)
        budget = _budget(layout, inputs, last)
        costs = [c for i in rng for c in fp.layer_costs[i]]
        if last and draft_fp is not None:
            costs += [c for layer in draft_fp.layer_costs for c in layer]
        pls = _pool_layers(costs, block, state_page, max_model_len)
        nb, g = None, None
        if layout.name == "vllm" and pls:
            try:
                g = vllm_groups(pls)
            except ValueError as e:
                raise InputError(f"vLLM cannot pool this model's caches: {e}", field="MODEL") from None
            nb = vllm_num_blocks(budget.kv_pool_bytes, g)
        plans.append(StagePlan(s, len(rng), budget, tuple(pls), nb, g))

    return _conclude(req, layout, fp, draft_fp, block, mnbt, mns, max_model_len, ctx, plans, notes)


def stage_bytes_fn(fp: Footprint, draft_fp: Footprint | None, stage: int, pp: int):
    """n -> bytes one sequence of n tokens holds on one GPU of ``stage`` (block-rounded, exact
    integer). The stage's layers are grouped once (layers repeat one LayerCost object)."""
    rng = pp_stages(fp.model.num_layers, pp)[stage]
    costs = [c for i in rng for c in fp.layer_costs[i]]
    if draft_fp is not None and stage == pp - 1:
        costs += [c for layer in draft_fp.layer_costs for c in layer]
    same: dict[int, list] = {}
    for c in costs:
        same.setdefault(id(c), [c, 0])[1] += 1
    state = sum(k * c.state_bytes_per_rank for c, k in same.values() if c.state_bytes_per_rank)
    growing = [(c, k) for c, k in same.values() if not c.state_bytes_per_rank]
    block, engine = fp.block_size_tokens, fp.engine
    # bytes linear in the held tokens (no full-precision residual): exact integer numerators
    # over one common denominator, so a length costs a few integer multiplies
    linear, other = [], []
    for c, k in growing:
        f = c.formats
        if f is not None and not f.k.residual_tokens and not f.v.residual_tokens:
            linear.append((c, k * c.rank_bytes_for_tokens(1)))
        else:
            other.append((c, k))
    den = math.lcm(*(coef.denominator for _, coef in linear)) if linear else 1
    terms = [(c, coef.numerator * (den // coef.denominator)) for c, coef in linear]

    def at(n: int) -> int:
        num = state * den
        for c, coef_num in terms:
            num += coef_num * c.held_tokens(n, block, engine)
        total = Fraction(num, den)
        for c, k in other:
            total += k * c.rank_bytes_for_tokens(c.held_tokens(n, block, engine))
        return ceil_bytes(total)
    return at


def _seq_bytes_on_stage(fp: Footprint, draft_fp: Footprint | None, stage: int, pp: int,
                        n: int | None = None) -> int:
    n = fp.sequences[0].context_tokens if n is None else n
    return stage_bytes_fn(fp, draft_fp, stage, pp)(n)


def _prefix_bytes(costs: list[LayerCost], prefix: int, block: int) -> int:
    """Bytes of a shared prefix in the full-attention layers (whole blocks only)."""
    tokens = (prefix // block) * block
    return ceil_bytes(sum((c.rank_bytes_for_tokens(tokens) for c in costs
                           if not c.state_bytes_per_rank and _pool_kind(c) == "full"), Fraction(0)))


def _vllm_seq_blocks(plan: StagePlan, fp_block: int, n: int, prefix: int, layout) -> tuple[int, int]:
    """(private blocks per sequence, shared prefix blocks) at context n for one stage."""
    g = plan.pool_groups or vllm_groups(plan.pool_layers)
    private = shared = 0
    for grp in g.groups:
        lay = plan.pool_layers[grp[0]]
        if lay.kind == "state":
            private += 1
            continue
        policy = {"sliding": "window", "chunked": "chunk"}.get(lay.kind, "all")
        held = layout.held_tokens(policy, lay.window_tokens, n, fp_block) // fp_block
        if lay.kind == "full" and prefix:
            p = prefix // fp_block
            shared += p
            held -= p
        private += held
    return private, shared


def _conclude(req, layout, fp, draft_fp, block, mnbt, mns, max_model_len, ctx, plans, notes):
    weights = req.weights
    params_total = weights.params_total if weights else None
    params_active = weights.params_active if weights else None
    per_seq = [_seq_bytes_on_stage(fp, draft_fp, p.stage, req.pp) for p in plans]
    if layout.name == "vllm":
        cached = [p for p in plans if p.pool_layers]
        if not cached:
            raise InputError("no pipeline stage holds a cache layer", field="--pp")
        nb = min(p.num_blocks or 0 for p in cached)
        busiest = min(cached, key=lambda p: (p.num_blocks or 0, -per_seq[p.stage]))
        g = busiest.pool_groups or vllm_groups(busiest.pool_layers)
        tokens = vllm_pool_tokens(nb, g, busiest.pool_layers)
        engine_conc = vllm_max_concurrency(nb, g, busiest.pool_layers, max_model_len, mnbt)
        conc = 10**9
        for p in cached:
            private, shared = _vllm_seq_blocks(p, block, ctx, req.shared_prefix_tokens, layout)
            conc = min(conc, (nb - shared) // private if private else 10**9)
        conc = max(conc, 0)
        if conc >= 1 and engine_conc < 0.8 * conc and any(
                lay.kind in ("sliding", "chunked") for lay in busiest.pool_layers):
            notes.append(f"vLLM's own 'maximum concurrency' ({engine_conc:.2f}x) budgets each "
                         "sliding/chunked layer for window + max_num_batched_tokens tokens; the "
                         f"{conc} whole sequences count the blocks those layers really hold")
        if busiest.padding_layers:
            notes.append(f"vLLM pads its KV cache groups with {busiest.padding_layers} layer(s): "
                         f"{len(g.groups)} groups of {g.group_size} layers share each block")
    else:
        busiest = max(plans, key=lambda p: per_seq[p.stage] / max(p.budget.kv_pool_bytes, 1))
        rng = pp_stages(fp.model.num_layers, req.pp)[busiest.stage]
        costs = [c for i in rng for c in fp.layer_costs[i]]
        tokens, conc, engine_conc = _token_pool(req, layout, costs, busiest.budget.kv_pool_bytes,
                                                per_seq[busiest.stage], block, ctx, max_model_len)
    seq_bytes = per_seq[busiest.stage]
    budget = busiest.budget
    target = req.concurrency or 1
    fits = budget.kv_pool_bytes > 0 and conc >= target
    if budget.kv_pool_bytes > 0 and layout.name == "vllm" and (busiest.num_blocks or 0) <= 0:
        g0 = busiest.pool_groups or vllm_groups(busiest.pool_layers)
        verdict = (f"does not fit: the {budget.kv_pool_bytes:,} B pool holds no whole block "
                   f"({g0.block_bytes:,} B: one {block}-token page of every layer in a group)")
    elif budget.kv_pool_bytes <= 0 or (layout.name == "vllm" and (busiest.num_blocks or 0) <= 0):
        verdict = (f"does not fit: weights and overheads leave no KV pool on stage {busiest.stage} "
                   f"({(budget.usable_bytes - budget.weights_bytes) / 2**30:.2f} GiB after weights)")
    elif conc < 1:
        verdict = (f"does not fit: one {req.context_tokens:,}-token sequence needs "
                   f"{seq_bytes / 2**30:.2f} GiB per GPU, the pool holds "
                   f"{budget.kv_pool_bytes / 2**30:.2f} GiB")
    elif conc < target:
        verdict = f"does not fit the target: {conc} concurrent sequences, {target} wanted"
    else:
        verdict = (f"fits: {conc} concurrent {req.context_tokens:,}-token sequences"
                   + (f" (target {req.concurrency})" if req.concurrency else ""))
    if conc > mns:
        notes.append(f"memory holds {conc:,} sequences but max_num_seqs is {mns:,}: the launch "
                     f"lines use {mns:,}; plan with --max-num-seqs {conc:,} to see its larger "
                     "sampler warm-up")
    result = FitResult(
        request=req, layout=layout, footprint=fp, kv_format=fp.kv_dtype, block_size_tokens=block,
        max_num_batched_tokens=mnbt, max_num_seqs=mns, max_model_len=max_model_len,
        params_total=params_total, params_active=params_active, budget=budget,
        stages=tuple(plans), kv_pool_tokens=tokens, per_sequence_bytes=seq_bytes,
        max_concurrency=conc, engine_max_concurrency=engine_conc, fits=fits, verdict=verdict,
        notes=tuple(dict.fromkeys([*notes, *budget.notes])), draft_footprint=draft_fp)
    if req.search and (req.concurrency or not fits):
        tp, pp, c = _search(req, target)
        if (tp, pp) != (0, 0):
            result = replace(result, suggestion=(tp, pp), suggestion_concurrency=c)
    from .launch import launch_commands

    return replace(result, launch=launch_commands(result))


def _token_pool(req, layout, costs, pool, seq_bytes, block, ctx, max_model_len):
    """(pool tokens, whole sequences at ctx, engine's concurrency figure) for engines that pool
    tokens rather than vLLM blocks (SGLang, TensorRT-LLM, llama.cpp)."""
    attn = [c for c in costs if not c.state_bytes_per_rank]
    cell = ceil_bytes(sum((c.rank_bytes_for_tokens(1) for c in attn), Fraction(0)))
    prefix = _prefix_bytes(costs, req.shared_prefix_tokens, block)
    seq = seq_bytes - prefix
    conc = max((pool - prefix) // seq, 0) if seq > 0 else 0
    swa = [c for c in attn if _pool_kind(c) == "sliding"]
    if layout.name == "sglang" and swa and len(swa) < len(attn):
        from ..engines.sglang_memory import sglang_pool_tokens

        full_tokens, swa_tokens = sglang_pool_tokens(pool, cell, block, len(attn) - len(swa), len(swa))
        held_full = cdiv(ctx, block) * block
        held_swa = swa[0].held_tokens(ctx, block, layout)
        pre = (req.shared_prefix_tokens // block) * block
        conc = min((full_tokens - pre) // (held_full - pre), swa_tokens // held_swa)
        return full_tokens, max(conc, 0), full_tokens / max_model_len
    tokens = pool // cell // block * block if cell else 0
    return tokens, conc, tokens / max_model_len


@dataclass(frozen=True)
class PoolUse:
    """What one sequence of n tokens takes from one pool the engine fills: ``capacity`` units
    in all, ``shared`` by every sequence (a shared prefix, counted once), ``private`` its own.
    Units are blocks (vLLM), tokens (SGLang's split pools) or bytes (other token pools)."""

    capacity: int
    shared: int
    private: int


def pool_usage(r: FitResult, n: int, prefix_tokens: int = 0) -> list[PoolUse]:
    """Per pool (each pipeline stage; SGLang's full and sliding pools) what an ``n``-token
    sequence takes, with ``prefix_tokens`` shared (whole blocks) - the rule of ``plan_fit``."""
    return pool_usage_fn(r, prefix_tokens)(n)


def pool_usage_fn(r: FitResult, prefix_tokens: int = 0):
    """``pool_usage`` as a function of n, with everything that does not depend on n (block
    counts, cell sizes, SGLang's pool split, prefix bytes) worked out once."""
    req = r.request
    block = r.block_size_tokens
    if r.layout.name == "vllm":
        cached = [p for p in r.stages if p.pool_layers]
        nb = min(p.num_blocks or 0 for p in cached)

        def vllm_at(n: int) -> list[PoolUse]:
            out = []
            for p in cached:
                private, shared = _vllm_seq_blocks(p, block, n, prefix_tokens, r.layout)
                out.append(PoolUse(nb, shared, private))
            return out
        return vllm_at
    stages = pp_stages(r.footprint.model.num_layers, req.pp)
    parts: list[tuple] = []  # per stage: ("split", full, swa, pre, swa cost) | ("bytes", pool, prefix, fn)
    for p in r.stages:  # the engines that pool tokens
        costs = [c for i in stages[p.stage] for c in r.footprint.layer_costs[i]]
        pool = p.budget.kv_pool_bytes
        attn = [c for c in costs if not c.state_bytes_per_rank]
        swa = [c for c in attn if _pool_kind(c) == "sliding"]
        if r.layout.name == "sglang" and swa and len(swa) < len(attn):
            from ..engines.sglang_memory import sglang_pool_tokens

            cell = ceil_bytes(sum((c.rank_bytes_for_tokens(1) for c in attn), Fraction(0)))
            full_tokens, swa_tokens = sglang_pool_tokens(pool, cell, block, len(attn) - len(swa),
                                                         len(swa))
            parts.append(("split", full_tokens, swa_tokens, (prefix_tokens // block) * block, swa[0]))
        else:
            parts.append(("bytes", pool, _prefix_bytes(costs, prefix_tokens, block),
                          stage_bytes_fn(r.footprint, r.draft_footprint, p.stage, req.pp)))

    def tokens_at(n: int) -> list[PoolUse]:
        out = []
        for part in parts:
            if part[0] == "split":
                _, full_tokens, swa_tokens, pre, swa_cost = part
                out.append(PoolUse(full_tokens, pre, cdiv(n, block) * block - pre))
                out.append(PoolUse(swa_tokens, 0, swa_cost.held_tokens(n, block, r.layout)))
            else:
                _, pool, prefix, fn = part
                out.append(PoolUse(pool, prefix, fn(n) - prefix))
        return out
    return tokens_at


def sequences_fitting(uses: list[PoolUse]) -> int:
    """Whole sequences every pool holds (0 when one does not hold a single one)."""
    best = None
    for u in uses:
        c = (u.capacity - u.shared) // u.private if u.private > 0 else 10**9
        best = c if best is None else min(best, c)
    return max(best if best is not None else 0, 0)


def concurrency_at(r: FitResult, n: int) -> int:
    """Whole sequences of ``n`` tokens the planned pool holds (the ``max_concurrency`` rule of
    ``plan_fit`` at another context; no shared prefix). 0 past the memory cliff."""
    return sequences_fitting(pool_usage(r, n))


SEARCH_TP = (1, 2, 4, 8)
SEARCH_PP = (1, 2, 3, 4, 6, 8)


def _search(req: FitRequest, target: int) -> tuple[int, int, int | None]:
    """The smallest TP (then PP) on this GPU whose plan reaches ``target`` sequences."""
    from ..core.errors import KvplanError

    options = sorted(((tp, pp) for tp in SEARCH_TP for pp in SEARCH_PP), key=lambda x: (x[0] * x[1], x[1]))
    if req.weight_memory_bytes is not None:
        return 0, 0, None  # a given per-GPU weight figure says nothing about other layouts
    for tp, pp in options:
        if (tp, pp) == (req.tp, req.pp):
            continue
        try:
            r = plan_fit(replace(req, tp=tp, pp=pp, search=False))
        except KvplanError:
            continue
        if r.fits and r.max_concurrency >= target:
            return tp, pp, r.max_concurrency
    return 0, 0, None


def resolve_kv_format(model: Model, engine: str, kv_dtype: str) -> str:
    return resolve_formats(model, get_engine(engine), kv_dtype).name
