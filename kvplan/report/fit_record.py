"""FitResult -> the public JSON of ``kvplan fit --json``. Pure.

The keys named in the issue (model, gpu, engine, tp, pp, kv_dtype, weight_dtype,
context_tokens, params_total, params_active, memory{total_bytes, weights_bytes,
activation_bytes, runtime_overhead_bytes, kv_pool_bytes}, kv_pool_tokens, per_sequence_bytes,
max_concurrency, engine_max_concurrency, fits, launch) are a public interface: keep them.
"""

from __future__ import annotations

from ..core.parallel import experts_on_busiest_rank
from ..planning.fit_types import FitResult
from ..planning.launch import launch_plan, no_launch_reason, sequence_note


def _placement(r: FitResult) -> dict | None:
    """How a stage's GPUs hold the tensors under DP / EP (None: plain TP x PP)."""
    sp, w = r.split, r.request.weights
    if sp is None or (sp.dp == 1 and sp.ep == 1):
        return None
    experts = w.num_experts if w else 0
    return {"attention_tp": sp.tp, "mlp_tp": sp.role_tp("mlp"),
            "shared_expert_tp": sp.role_tp("shared"), "embedding_tp": sp.role_tp("embed"),
            "lm_head_tp": sp.role_tp("head"), "moe_tp": sp.moe_tp, "ep": sp.ep,
            "routed_experts": experts, "redundant_experts": sp.redundant,
            "routed_experts_per_gpu": (experts_on_busiest_rank(experts + sp.redundant, sp.ep)
                                       if experts else 0)}


def _expert_memory(r: FitResult) -> dict | None:
    """EPLB and the all-to-all backend as planned (None: neither asked)."""
    m = r.expert_memory
    if m is None or (not m.eplb and m.all2all == "default" and not m.redundant_experts):
        return None
    return {"eplb": m.eplb, "redundant_experts": m.redundant_experts,
            "physical_experts": m.physical_experts, "all2all": m.all2all,
            "buffer_bytes": m.buffer_bytes, "buffer_in_reserve": m.in_reserve,
            "rebalance_staging_bytes": m.transient_bytes, "how": m.buffer_how}


def fit_record(r: FitResult) -> dict:
    req = r.request
    b = r.budget
    return {
        "model": req.model.name,
        "assumptions": list(req.model.assumptions),
        "assumed_standard_attention": req.model.standard_attention_assumed,
        "gpu": req.gpu.key,
        "engine": r.layout.label,
        "engine_rules": b.rules,
        "tp": req.tp,
        "pp": req.pp,
        "dp": req.dp,
        "ep": req.ep,
        "dcp": req.dcp,
        "gpus": req.gpus,
        "placement": _placement(r),
        "expert_parallel": _expert_memory(r),
        "kv_dtype": r.kv_format,
        "weight_dtype": req.weight_format.name,
        "context_tokens": req.context_tokens,
        "max_model_len": r.max_model_len,
        "block_size_tokens": r.block_size_tokens,
        "max_num_batched_tokens": r.max_num_batched_tokens,
        "max_num_seqs": r.max_num_seqs,
        "params_total": r.params_total,
        "params_active": r.params_active,
        "params_active_without_lookup": (req.weights.params_active_without_lookup if req.weights
                                         else None),
        "params_extra": req.weights.params_extra if req.weights else None,
        "checkpoint": ({**req.checkpoint, "config_params_difference":
                        req.checkpoint["params_total"] - (r.params_total or 0)
                        - (req.weights.params_extra if req.weights else 0)}
                       if req.checkpoint else None),
        "memory": b.memory,
        "budget_terms": [{"key": t.key, "label": t.label.strip(" -=x"), "bytes": t.bytes,
                          "how": t.how, "flag": t.flag, "overridden": t.overridden,
                          "subtracted": t.subtracted} for t in b.terms],
        "kv_pool_blocks": min((s.num_blocks for s in r.stages if s.num_blocks is not None),
                              default=None),
        "kv_pool_tokens": r.kv_pool_tokens,
        "per_sequence_bytes": r.per_sequence_bytes,
        "max_concurrency": r.max_concurrency,
        "max_concurrency_per_dp_rank": r.concurrency_per_rank,
        "engine_max_concurrency": round(r.engine_max_concurrency, 4),
        "fits": r.fits,
        "verdict": r.verdict,
        "busiest_stage": r.busiest_stage,
        "suggestion": ({"tp": r.suggestion[0], "pp": r.suggestion[1], "dp": r.suggestion[2],
                        "ep": r.suggestion[3], "dcp": req.dcp,
                        "max_concurrency": r.suggestion_concurrency}
                       if r.suggestion else None),
        "notes": list(r.notes),
        **_launch(r),
    }


def _launch(r: FitResult) -> dict:
    """``launch``: the commands of the plan that runs (this one, else the suggested layout,
    else none); ``launch_layout`` says which; ``launch_note`` why the sequence cap is set."""
    target, commands = launch_plan(r)
    return {"launch": commands,
            "launch_layout": ({"tp": target.request.tp, "pp": target.request.pp,
                               "dp": target.request.dp, "ep": target.request.ep,
                               "dcp": target.request.dcp,
                               "suggested": target is not r} if target else None),
            "launch_note": sequence_note(target) if target else
            f"no launch line: {no_launch_reason(r)}"}
