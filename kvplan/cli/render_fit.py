"""Terminal rendering of ``kvplan fit``."""

from __future__ import annotations

from ..core.units import GiB, format_tokens
from ..planning.fit_search import request_layout, search_words
from ..planning.fit_types import FitResult
from ..planning.launch import launch_plan, no_launch_reason, sequence_note
from .render import console
from .tables import Col, print_table


def _gib(n: int) -> str:
    return f"{n / GiB:,.2f} GiB"


def _where(r: FitResult, stage: int) -> str:
    """Where the per-sequence bytes are held: the busiest GPU, or under pipeline parallelism
    the stage whose pool limits (vLLM: with the blocks a sequence takes from that pool, which
    count every KV cache group, also those whose layers are on other stages)."""
    if len(r.stages) == 1:
        return "on the busiest GPU"
    plan = next(p for p in r.stages if p.stage == stage)
    where = f"held by stage {stage}'s layers, the stage that limits the pool"
    if r.layout.name != "vllm" or plan.pool_groups is None or plan.dsv4 is not None:
        return where
    from ..planning.fit_pools import pool_usage

    use = pool_usage(r, r.footprint.sequences[0].context_tokens)[0]
    took = use.private * plan.pool_groups.block_bytes
    return (f"{where}; it takes {use.private:,} blocks x {plan.pool_groups.block_bytes:,} B = "
            f"{took:,} B ({_gib(took)}) of that stage's pool")


def render_fit(r: FitResult, wide: bool = False) -> None:
    out = console()
    req, b = r.request, r.budget
    m = req.model
    par = (f"  dp {req.dp}" if req.dp > 1 else "") + (f"  ep {req.ep}" if req.ep > 1 else "")
    out.print(f"{m.name} on {req.gpu.name}  engine {r.layout.label}  tp {req.tp}  pp {req.pp}{par}  "
              f"KV {r.kv_format}  weights {req.weight_format.name}  context "
              f"{format_tokens(req.context_tokens)} (max_model_len {r.max_model_len:,})")
    if r.params_total is not None:
        mm = req.weights.params_active_without_lookup if req.weights else r.params_active
        active = (f", {r.params_active:,} active per token" if r.params_active != r.params_total
                  else "") + (f" ({mm:,} without the embedding lookup)"
                              if r.params_active != r.params_total and mm != r.params_active
                              else "")
        extra = (f"; + {req.weights.params_extra:,} in the {req.weights.extra_name}"
                 if req.weights and req.weights.params_extra else "")
        out.print(f"parameters: {r.params_total:,}{active}{extra}")
    ck = req.checkpoint
    if ck:
        by = ", ".join(f"{d} {n:,}" for d, n in ck["params_by_dtype"].items())
        counted = (r.params_total or 0) + (req.weights.params_extra if req.weights else 0)
        out.print(f"checkpoint (safetensors headers, {ck['files']} file(s)): {ck['params_total']:,} "
                  f"parameters ({by}) = {ck['bytes_total']:,} B; config count differs by "
                  f"{ck['params_total'] - counted:+,}")
    out.print(b.rules, style="dim")
    stage = r.busiest_stage
    cols = [Col("term", "key", "left"), Col("bytes"), Col("GiB"), Col("how", "prose", "left"),
            Col("override", "key", "left", True, 0)]
    body = [[term.label + (" (given)" if term.overridden else ""), f"{term.bytes:,}",
             _gib(term.bytes).removesuffix(" GiB"), term.how, term.flag] for term in b.terms]
    shown = print_table(out, cols, body, wide=wide, title=f"Memory budget per GPU (stage "
                        f"{stage} of {len(r.stages)}; GiB = 2^30 B)")
    if len(shown) < len(cols):
        out.print("the flag that overrides each term: --wide (or a wider terminal)", style="dim")
    blocks = min((s.num_blocks for s in r.stages if s.num_blocks is not None), default=None)
    pool = f"KV pool: {b.kv_pool_bytes:,} B ({_gib(b.kv_pool_bytes)}) = {r.kv_pool_tokens:,} tokens"
    groups = max((s.groups for s in r.stages), default=1)
    v4 = r.stages[0].dsv4 if r.stages else None
    if v4 is not None:  # DeepSeek-V4's packed pool: one block id across every group
        pool = (f"KV pool: {b.kv_pool_bytes:,} B ({_gib(b.kv_pool_bytes)}) = {v4.num_blocks:,} "
                f"blocks of {r.block_size_tokens} tokens, {v4.block_bytes:,} B each (one block id "
                f"across DeepSeek-V4's {len(v4.groups)} KV-cache groups); vLLM's GPU KV cache "
                f"size: {r.kv_pool_tokens:,} tokens")
    elif blocks is not None and groups > 1:  # vLLM's "GPU KV cache size" is per group
        pool = (f"KV pool: {b.kv_pool_bytes:,} B ({_gib(b.kv_pool_bytes)}) = {blocks:,} blocks "
                f"shared by {groups} KV-cache groups: {r.kv_pool_tokens:,} tokens per group "
                f"({blocks:,} // {groups} x {r.block_size_tokens} tokens per block)")
    elif blocks is not None and req.dcp > 1:  # a block holds block x dcp of a sequence's tokens
        pool += (f" ({blocks:,} blocks of {r.block_size_tokens} x dcp {req.dcp} tokens, "
                 f"{r.block_size_tokens} on each GPU)")
    elif blocks is not None:
        pool += f" ({blocks:,} blocks of {r.block_size_tokens} tokens)"
    out.print(pool)
    held = (f"{v4.sequence_blocks(r.footprint.sequences[0].context_tokens):,} blocks x "
            f"{v4.block_bytes:,} B = " if v4 is not None else "")
    out.print(f"one {req.context_tokens:,}-token sequence: {held}{r.per_sequence_bytes:,} B "
              f"({_gib(r.per_sequence_bytes)}) " + _where(r, stage))
    ranks = (f" ({req.dp} DP ranks x {r.concurrency_per_rank:,}, {req.gpus} GPUs)"
             if req.dp > 1 else "")
    each = " per DP rank" if req.dp > 1 else ""
    whole = f"{r.max_concurrency:,} whole sequence{'' if r.max_concurrency == 1 else 's'}"
    out.print(f"maximum concurrency at {req.context_tokens:,} tokens: {whole}{ranks}; engine's "
              f"figure{each}: maximum concurrency for "
              f"{r.max_model_len:,} tokens per request: {r.engine_max_concurrency:.2f}x")
    out.print(("FITS: " if r.fits else "DOES NOT FIT: ") + r.verdict.split(": ", 1)[-1])
    if r.suggestion and r.suggested is not None:
        out.print(f"smallest layout on {req.gpu.name} reaching {req.concurrency or 1} sequence(s): "
                  f"{request_layout(r.suggested.request)} ({r.suggestion_concurrency:,} sequences)")
    elif req.concurrency or not r.fits:
        out.print(f"no layout on {req.gpu.name} reaches the target ({search_words(req)})")
    for note in r.notes:
        out.print(f"note: {note}", style="dim")
    target, commands = launch_plan(r)
    if target is None:
        out.print("launch: none (" + no_launch_reason(r) + ")")
        return
    if target is not r:
        out.print(f"launch (the suggested {request_layout(target.request)} layout; this one does "
                  "not fit):")
    else:
        out.print("launch:")
    out.print(f"  ({sequence_note(target)})", style="dim")
    for name, cmd in commands.items():
        out.print(f"  {name}: {cmd}", soft_wrap=True)
