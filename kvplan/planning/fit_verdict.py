"""The conclusion of a plan: the busiest stage, its pool in tokens, the whole sequences it
holds at the planned context (and the engine's own concurrency figure), the verdict line and
the notes that explain it. Pure."""

from __future__ import annotations

from ..core.errors import InputError
from ..core.parallel import pp_stages
from ..engines.base import version_tuple
from ..engines.kvpool import (
    vllm_groups,
    vllm_groups_request_bytes,
    vllm_in_flight_tokens,
    vllm_max_concurrency,
    vllm_pool_tokens,
    vllm_start_shortfall,
    vllm_v2_runner_default,
)
from .fit_pools import scheduler_pool, seq_bytes_on_stage, token_pool, vllm_seq_blocks
from .fit_types import FitResult


def conclude(req, layout, fp, draft_fp, block, mnbt, mns, max_model_len, ctx, plans,
             notes) -> FitResult:
    """The result of one layout from its stage plans (no TP/PP search)."""
    weights = req.weights
    params_total = weights.params_total if weights else None
    params_active = weights.params_active if weights else None
    v4 = plans[0].dsv4 if plans else None
    refused = None  # the engine's start-up check fails
    per_seq = ([p.dsv4.sequence_blocks(ctx) * p.dsv4.block_bytes if p.dsv4 else 0 for p in plans]
               if v4 is not None else
               [seq_bytes_on_stage(fp, draft_fp, p.stage, req.pp) for p in plans])
    if v4 is not None:  # DeepSeek-V4's packed pool (kvplan.planning.fit_dsv4), one stage
        busiest = plans[0]
        conc = min(v4.whole_sequences(ctx, req.shared_prefix_tokens),
                   v4.admitted(ctx, req.shared_prefix_tokens))
        engine_conc = v4.engine_concurrency(max_model_len)
        tokens = v4.engine_tokens(max_model_len)
        if v4.num_blocks > 0:
            from .fit_dsv4 import notes as dsv4_notes

            notes = [*notes, *dsv4_notes(v4, ctx, max_model_len, conc)]
    elif layout.name == "vllm":
        cached = [p for p in plans if p.pool_layers]
        if not cached:
            raise InputError("no pipeline stage holds a cache layer", field="--pp")
        # one pool of nb block ids (the fewest any stage's memory holds); each sequence takes
        # blocks of every KV cache group from it: the stage with the fewest blocks limits
        nb = min(p.num_blocks or 0 for p in cached)
        busiest = min(cached, key=lambda p: (p.num_blocks or 0, -per_seq[p.stage]))
        layers, g = scheduler_pool(plans, layout)
        # what a sliding / chunked layer reserves past its window (0.26+: in-flight batches)
        model = fp.model
        moe = bool(req.weights and req.weights.num_experts)
        hybrid = any(lay.kind == "state" for lay in layers)
        v2 = vllm_v2_runner_default(layout.version, str(model.config.get("model_type")
                                                        or model.model_type), moe, hybrid)
        horizon = vllm_in_flight_tokens(layout.version, mnbt, req.pp, draft_fp is not None, v2)
        windowed = any(lay.kind in ("sliding", "chunked") for lay in layers)
        if windowed and req.pp > 1 and (0, 26, 0) <= version_tuple(layout.version) < (0, 29, 0):
            notes.append(f"vLLM {layout.version} under PP: sliding/chunked layers reserve "
                         f"{horizon // mnbt} in-flight batches of max_num_batched_tokens (the "
                         f"{'V2' if v2 else 'V1'} model runner, vLLM's default for this "
                         f"{'hybrid' if hybrid else 'MoE' if moe else 'dense'} model; "
                         "VLLM_USE_V2_MODEL_RUNNER overrides it)")
        refused = _start_check(layout, cached, layers, g, max_model_len, horizon)
        tokens = vllm_pool_tokens(nb, g, layers)
        engine_conc = vllm_max_concurrency(nb, g, layers, max_model_len, horizon)
        private, shared = vllm_seq_blocks(layers, g, ctx, req.shared_prefix_tokens, layout)
        conc = max((nb - shared) // private if private else 10**9, 0)
        if conc >= 1 and engine_conc < 0.8 * conc and windowed:
            span = ("max_num_batched_tokens" if horizon == mnbt else
                    f"the {horizon:,} in-flight tokens ({horizon // mnbt} batches of "
                    "max_num_batched_tokens)")
            notes.append(f"vLLM's own 'maximum concurrency' ({engine_conc:.2f}x) budgets each "
                         f"sliding/chunked layer for window + {span}; the "
                         f"{conc} whole sequences count the blocks those layers really hold")
        if g.padding_layers:
            notes.append(f"vLLM pads its KV cache groups with {g.padding_layers} layer(s): "
                         f"{len(g.groups)} groups of {g.group_size} layers share each block")
        if len(cached) > 1 and len(g.groups) > 1:
            notes.append(_stage_pool_note(busiest, cached, len(g.groups)))
    else:  # every stage holds every running sequence's cache for its own layers
        ranges = pp_stages(fp.model.num_layers, req.pp)
        pools = {p.stage: token_pool(req, layout, [c for i in ranges[p.stage]
                                                   for c in fp.layer_costs[i]],
                                     p.budget.kv_pool_bytes, per_seq[p.stage], block, ctx,
                                     max_model_len) for p in plans}
        # the stage holding the fewest sequences; among equals the fullest per sequence
        busiest = min(plans, key=lambda p: (pools[p.stage][1], -per_seq[p.stage]
                                            / max(p.budget.kv_pool_bytes, 1)))
        tokens, conc, engine_conc = pools[busiest.stage]
    seq_bytes = per_seq[busiest.stage]
    budget = busiest.budget
    target = req.concurrency or 1
    per_rank, conc = conc, conc * req.dp  # each DP rank holds its own sequences
    fits = budget.kv_pool_bytes > 0 and conc >= target
    over = (_given_pool_overflow(req, [p.budget for p in plans])
            or next((p.budget.overflow for p in plans if p.budget.overflow), None))
    if over:  # the pool cannot be allocated: it holds no sequence
        fits, verdict, per_rank, conc = False, over, 0, 0
    elif v4 is not None and v4.num_blocks > 0 and not v4.starts(max_model_len):
        need = v4.reserved_blocks(max_model_len)
        fits, per_rank, conc = False, 0, 0
        verdict = (f"does not fit: vLLM refuses to start: one {max_model_len:,}-token request "
                   f"reserves {need:,} blocks x {v4.block_bytes:,} B = "
                   f"{need * v4.block_bytes / 2**30:.2f} GiB, the pool less its null block holds "
                   f"{v4.usable_blocks:,} blocks (_check_enough_kv_cache_memory)")
    elif v4 is not None and budget.kv_pool_bytes > 0 and v4.num_blocks <= 0:
        verdict = (f"does not fit: the {budget.kv_pool_bytes:,} B pool holds no whole block "
                   f"({v4.block_bytes:,} B: one {block}-token block id of DeepSeek-V4's packed "
                   "pool)")
    elif refused:
        fits, verdict, per_rank, conc = False, refused, 0, 0
    elif budget.kv_pool_bytes > 0 and layout.name == "vllm" and (busiest.num_blocks or 0) <= 0:
        g0 = busiest.pool_groups or vllm_groups(busiest.pool_layers, layout.version)
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
        verdict = (f"fits: {conc} concurrent {req.context_tokens:,}-token "
                   f"sequence{'' if conc == 1 else 's'}"
                   + (f" ({req.dp} DP ranks x {per_rank})" if req.dp > 1 else "")
                   + (f" (target {req.concurrency})" if req.concurrency else ""))
    if per_rank > mns and not (req.concurrency and req.max_num_seqs is None):
        each = " per DP rank" if req.dp > 1 else ""
        notes.append(f"memory holds {per_rank:,} sequences{each} but max_num_seqs is {mns:,}: "
                     f"the launch lines use {mns:,}; plan with --max-num-seqs {per_rank:,} to see its larger "
                     "sampler warm-up")
    return FitResult(
        request=req, layout=layout, footprint=fp, kv_format=fp.kv_dtype, block_size_tokens=block,
        max_num_batched_tokens=mnbt, max_num_seqs=mns, max_model_len=max_model_len,
        params_total=params_total, params_active=params_active, budget=budget,
        stages=tuple(plans), kv_pool_tokens=tokens, per_sequence_bytes=seq_bytes,
        max_concurrency=conc, engine_max_concurrency=engine_conc, fits=fits, verdict=verdict,
        notes=tuple(dict.fromkeys([*notes, *budget.notes])), draft_footprint=draft_fp)


def _start_check(layout, cached, layers, groups, max_model_len: int, mnbt: int) -> str | None:
    """vLLM's start-up check that one ``max_model_len`` request fits the KV memory
    (``kvpool.vllm_start_shortfall``, by release): the refusal line, or None when it passes.
    ``mnbt``: the tokens a windowed layer reserves past its window (``vllm_in_flight_tokens``).
    0.14.0 - 0.16.x check the whole model's groups (every stage's layers:
    ``_check_enough_kv_cache_memory(min(available_memory), _max_memory_usage_bytes_from_groups(
    global_kv_cache_groups))``) against the smallest stage; other releases each stage's own."""
    v = version_tuple(layout.version)
    where = lambda p: f" of stage {p.stage}" if len(cached) > 1 else ""  # noqa: E731
    if (0, 14, 0) <= v < (0, 17, 0):
        need = vllm_groups_request_bytes(groups, layers, max_model_len, mnbt)
        small = min(cached, key=lambda p: p.budget.kv_pool_bytes)
        if need <= small.budget.kv_pool_bytes:
            return None
        later = not any(_stage_shortfall("0.17.0", p, layers, groups, max_model_len, mnbt)
                        for p in cached)
        every = " (every stage's layers)" if len(cached) > 1 else ""
        return (f"does not fit: vLLM {layout.version} refuses to start: one {max_model_len:,}-"
                f"token request of the whole model's KV cache groups{every} needs "
                f"{need:,} B ({need / 2**30:.2f} GiB), more than the "
                f"{small.budget.kv_pool_bytes:,} B ({small.budget.kv_pool_bytes / 2**30:.2f} GiB) "
                f"KV memory{where(small)} (get_kv_cache_configs checks min(available_memory) "
                "against the whole model): "
                + ("vllm@0.17.0 or later checks each stage's own layers and starts; or "
                   if later and len(cached) > 1 else "")
                + "plan a shorter --max-model-len or more KV memory per GPU")
    for p in cached:
        short = _stage_shortfall(layout.version, p, layers, groups, max_model_len, mnbt)
        if short:
            need, grant = short
            return (f"does not fit: vLLM {layout.version} refuses to start: one "
                    f"{max_model_len:,}-token request needs {need:,} B ({need / 2**30:.2f} GiB) "
                    f"of KV memory{where(p)}, which grants it {max(grant, 0):,} B "
                    f"({max(grant, 0) / 2**30:.2f} GiB) (check_enough_kv_cache_memory): plan a "
                    "shorter --max-model-len or more KV memory per GPU")
    return None


def _stage_shortfall(version: str, p, layers, groups, max_model_len: int, mnbt: int):
    g = p.pool_groups or vllm_groups(p.pool_layers, version)
    return vllm_start_shortfall(version, g, p.pool_layers, groups, layers,
                                p.budget.kv_pool_bytes, max_model_len, mnbt)


def _stage_pool_note(busiest, cached, groups: int) -> str:
    """Which pipeline stage limits a vLLM pool of several KV cache groups: the one whose memory
    holds the fewest blocks; vLLM gives every stage that count, and a sequence takes blocks of
    every group from it (those of groups whose layers live on other stages too)."""
    block = busiest.pool_groups.block_bytes if busiest.pool_groups else 0
    others = [p.num_blocks or 0 for p in cached if p is not busiest]
    span = f"{min(others):,}" if min(others) == max(others) else f"{min(others):,} to {max(others):,}"
    return (f"stage {busiest.stage} limits the pool: its memory holds {busiest.num_blocks:,} "
            f"blocks of {block:,} B (its largest KV cache group's pages there), the other "
            f"stages {span}; vLLM gives every stage that count, and each sequence takes blocks "
            f"of all {groups} groups from it, on every stage, whichever stage holds a group's "
            "layers (get_kv_cache_configs)")


def _given_pool_overflow(req, budgets) -> str | None:
    """A ``--kv-cache-memory`` pool that, with a stage's weights, activation peak and runtime
    overhead, needs more than the GPU's memory: the engine allocates it and runs out. Every
    pipeline stage gets the same pool, beside its own weights (the first holds the embedding,
    the last the LM head and the sampler), so each stage is checked."""
    if req.kv_cache_memory_bytes is None:
        return None
    def need(b) -> int:
        return (b.kv_pool_bytes + b.weights_bytes + b.activation_bytes + b.runtime_overhead_bytes
                + b.ep_buffers_bytes)
    stage, budget = max(enumerate(budgets), key=lambda sb: need(sb[1]) - sb[1].total_bytes)
    total = need(budget)
    if total <= budget.total_bytes:
        return None
    where = f" on stage {stage}" if len(budgets) > 1 else ""
    return (f"does not fit: the given {budget.kv_pool_bytes / 2**30:,.2f} GiB KV pool + "
            f"{budget.weights_bytes / 2**30:,.2f} GiB weights + "
            f"{budget.activation_bytes / 2**30:,.2f} GiB activation peak + "
            f"{budget.runtime_overhead_bytes / 2**30:,.2f} GiB runtime overhead"
            + (f" + {budget.ep_buffers_bytes / 2**30:,.2f} GiB expert-parallel buffers"
               if budget.ep_buffers_bytes else "") + f"{where} = "
            f"{total / 2**30:,.2f} GiB, more than the GPU's {budget.total_bytes / 2**30:,.2f} GiB")
