"""Per-stage pool arithmetic of a plan: which pool each cache layer fills, the bytes (or
blocks, or tokens) one sequence of n tokens takes on a stage, a shared prefix counted once, and
the whole sequences every pool holds. Pure; the rule ``plan_fit`` concludes with and that
``kvplan plan``, ``curve`` and ``sweep`` evaluate at other lengths."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..core.parallel import pp_stages
from ..core.units import cdiv, ceil_bytes
from ..engines.base import version_tuple
from ..engines.costs import LayerCost
from ..engines.kvpool import PoolGroups, PoolLayer, vllm_groups
from .fit_types import FitResult
from .footprint import Footprint


def pool_kind(cost: LayerCost) -> str:
    if cost.state_bytes_per_rank:
        return "state"
    return {"window": "sliding", "window_page": "sliding", "chunk": "chunked"}.get(cost.policy, "full")


def pool_layers(costs: list[LayerCost], block: int, state_page: int | None,
                 max_model_len: int) -> list[PoolLayer]:
    out = []
    for c in costs:
        kind = pool_kind(c)
        if kind == "state":
            page = state_page if state_page is not None else c.state_bytes_per_rank
            out.append(PoolLayer(("state", c.kind, page), "state", page, max_model_len))
        else:
            tokens = block * c.block_multiple
            page = ceil_bytes(c.rank_bytes_for_tokens(tokens))
            out.append(PoolLayer((c.kind, page, c.window_tokens if kind != "full" else None), kind,
                                 page, tokens, c.window_tokens if kind != "full" else None))
    return out


def stage_bytes_fn(fp: Footprint, draft_fp: Footprint | None, stage: int, pp: int):
    """n -> bytes one sequence of n tokens holds on one GPU of ``stage`` (block-rounded, exact
    integer). The stage's layers are grouped once (layers repeat one LayerCost object)."""
    if fp.model.compressed_attention:
        from ..core.layers import CompressedAttention
        from ..engines import vllm_dsv4

        groups = vllm_dsv4.packed_groups([s for (s,) in fp.model.layers
                                          if isinstance(s, CompressedAttention)])
        block = vllm_dsv4.packed_block_bytes(groups)
        return lambda n: vllm_dsv4.packed_blocks(n, groups) * block  # whole block ids
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


def seq_bytes_on_stage(fp: Footprint, draft_fp: Footprint | None, stage: int, pp: int,
                        n: int | None = None) -> int:
    n = fp.sequences[0].context_tokens if n is None else n
    return stage_bytes_fn(fp, draft_fp, stage, pp)(n)


def prefix_bytes(costs: list[LayerCost], prefix: int, block: int) -> int:
    """Bytes of a shared prefix in the full-attention layers (whole blocks only)."""
    def whole(c: LayerCost) -> int:
        b = block * c.block_multiple
        return (prefix // b) * b

    return ceil_bytes(sum((c.rank_bytes_for_tokens(whole(c)) for c in costs
                           if not c.state_bytes_per_rank and pool_kind(c) == "full"), Fraction(0)))


def scheduler_pool(stages, layout) -> tuple[tuple[PoolLayer, ...], PoolGroups]:
    """The cache layers and KV cache groups vLLM's scheduler allocates blocks for: from 0.11 the
    whole model's (every stage's pool layers in layer order, grouped together:
    ``get_kv_cache_configs``, see ``kvpool.vllm_stage_groups``), before it the first stage's
    own (the scheduler took worker 0's config). Every sequence takes blocks of every group from
    one pool of ``min over stages`` blocks, whichever stage holds the group's layers."""
    cached = [p for p in stages if p.pool_layers]
    if not cached:
        raise ValueError("no cache layers")
    empty = [p.stage for p in stages if not p.pool_layers]
    if empty:
        # a worker with no KV cache spec: >= 0.11 projects every group onto it with no layers
        # (0.11 get_kv_cache_config_from_groups: assert group_size > 0; 0.34
        # _get_kv_cache_bytes_per_block: a 0 B block); 0.10 gives it an attention-free config
        # of 1 block, and unify_kv_cache_configs takes that minimum for the whole pool
        from ..core.errors import ParallelismError

        raise ParallelismError(
            f"vLLM cannot build its KV cache with pipeline stage {empty[0]} holding no cache "
            f"layer (its layers run without attention or state) while other stages hold some: "
            "choose a --pp that gives every stage a cache layer", field="pp")
    if version_tuple(layout.version) < (0, 11, 0):
        first = cached[0]
        return first.pool_layers, first.pool_groups or vllm_groups(first.pool_layers, layout.version)
    every = tuple(lay for p in cached for lay in p.pool_layers)
    return every, vllm_groups(every, layout.version)


def vllm_seq_blocks(layers: tuple[PoolLayer, ...], groups: PoolGroups, n: int, prefix: int,
                    layout) -> tuple[int, int]:
    """(private blocks per sequence, shared prefix blocks) at context n: one count per KV cache
    group of the scheduler's (``scheduler_pool``), all drawn from the one block pool."""
    private = shared = 0
    for grp in groups.groups:
        lay = layers[grp[0]]
        if lay.kind == "state":
            private += 1
            continue
        policy = {"sliding": "window", "chunked": "chunk"}.get(lay.kind, "all")
        b = lay.block_tokens  # the engine's block, or a multiple (vLLM page unification)
        held = layout.held_tokens(policy, lay.window_tokens, n, b) // b
        if lay.kind == "full" and prefix:
            p = prefix // b
            shared += p
            held -= p
        private += held
    return private, shared


def token_pool(req, layout, costs, pool, seq_bytes, block, ctx, max_model_len):
    """(pool tokens, whole sequences at ctx, engine's concurrency figure) for engines that pool
    tokens rather than vLLM blocks (SGLang, TensorRT-LLM, llama.cpp)."""
    attn = [c for c in costs if not c.state_bytes_per_rank]
    cell = ceil_bytes(sum((c.rank_bytes_for_tokens(1) for c in attn), Fraction(0)))
    prefix = prefix_bytes(costs, req.shared_prefix_tokens, block)
    seq = seq_bytes - prefix
    conc = max((pool - prefix) // seq, 0) if seq > 0 else 0
    swa = [c for c in attn if pool_kind(c) == "sliding"]
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
    """Per pool (vLLM's one block pool; each pipeline stage of the token-pool engines, SGLang's
    full and sliding pools) what an ``n``-token
    sequence takes, with ``prefix_tokens`` shared (whole blocks) - the rule of ``plan_fit``."""
    return pool_usage_fn(r, prefix_tokens)(n)


def pool_usage_fn(r: FitResult, prefix_tokens: int = 0):
    """``pool_usage`` as a function of n, with everything that does not depend on n (block
    counts, cell sizes, SGLang's pool split, prefix bytes) worked out once."""
    req = r.request
    block = r.block_size_tokens
    v4 = r.stages[0].dsv4 if r.stages else None
    if v4 is not None:  # DeepSeek-V4's packed pool (kvplan.planning.fit_dsv4): block ids
        shared = v4.shared_blocks(prefix_tokens)
        # the last request admitted needs its full-prompt reservation, not just its blocks
        return lambda n: [PoolUse(v4.usable_blocks - max(v4.reserved_blocks(n) - v4.sequence_blocks(n), 0),
                                  shared, v4.sequence_blocks(n) - shared)]
    if r.layout.name == "vllm":  # one pool of block ids, every stage's memory behind it
        nb = min(p.num_blocks or 0 for p in r.stages if p.pool_layers)
        layers, groups = scheduler_pool(r.stages, r.layout)

        def vllm_at(n: int) -> list[PoolUse]:
            private, shared = vllm_seq_blocks(layers, groups, n, prefix_tokens, r.layout)
            return [PoolUse(nb, shared, private)]
        return vllm_at
    stages = pp_stages(r.footprint.model.num_layers, req.pp)
    parts: list[tuple] = []  # per stage: ("split", full, swa, pre, swa cost) | ("bytes", pool, prefix, fn)
    for p in r.stages:  # the engines that pool tokens
        costs = [c for i in stages[p.stage] for c in r.footprint.layer_costs[i]]
        pool = p.budget.kv_pool_bytes
        attn = [c for c in costs if not c.state_bytes_per_rank]
        swa = [c for c in attn if pool_kind(c) == "sliding"]
        if r.layout.name == "sglang" and swa and len(swa) < len(attn):
            from ..engines.sglang_memory import sglang_pool_tokens

            cell = ceil_bytes(sum((c.rank_bytes_for_tokens(1) for c in attn), Fraction(0)))
            full_tokens, swa_tokens = sglang_pool_tokens(pool, cell, block, len(attn) - len(swa),
                                                         len(swa))
            parts.append(("split", full_tokens, swa_tokens, (prefix_tokens // block) * block, swa[0]))
        else:
            parts.append(("bytes", pool, prefix_bytes(costs, prefix_tokens, block),
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
