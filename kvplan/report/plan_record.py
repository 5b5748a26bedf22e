"""PlanReport -> the public JSON of ``kvplan plan --format json``. Pure.

Top level: ``kvplan_plan`` (1, the record version), ``scenario``, ``name``, ``model``,
``seed``, ``requests``, ``sample_note``, ``max_model_len``, ``excluded_requests``,
``workload``, ``slo``, ``best`` (the rank-1 configuration when it meets everything, else
null), ``configurations`` (ranked), ``skipped``, ``assumptions``, ``warnings``. Times are
seconds, money USD, sizes bytes; keep the names stable.
"""

from __future__ import annotations

from ..planning.scenario import Outcome, PlanReport


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def configuration(o: Outcome, rank: int) -> dict:
    c, r, e = o.candidate, o.fit, o.evaluation
    return {
        "rank": rank, "gpu": c.gpu.key, "engine": r.layout.label, "tp": c.tp, "pp": c.pp,
        "dp": c.dp, "ep": c.ep, "dcp": c.dcp, "gpus_per_replica": c.gpus,
        "kv_dtype": r.kv_format, "weight_dtype": r.request.weight_format.name,
        "block_size_tokens": r.block_size_tokens, "max_model_len": r.max_model_len,
        "ok": e.ok, "fits": e.fits, "meets_slo": e.meets_slo, "meets_rate": e.meets_rate,
        "reasons": list(e.reasons),
        "kv_pool_bytes": r.budget.kv_pool_bytes, "kv_pool_tokens": r.kv_pool_tokens,
        "memory_concurrency": e.memory_concurrency, "max_num_seqs": r.max_num_seqs,
        "batch": e.batch,
        "ttft_s": e.ttft_s, "tpot_s": e.tpot_s, "tpot_mean_s": e.tpot_mean_s,
        "mean_prefill_s": e.mean_prefill_s, "prefill_share": e.prefill_share,
        "decode_context_tokens": e.decode_context_tokens,
        "slo_final_tokens": e.slo_final_tokens,
        "requests_per_s_per_replica": e.requests_per_s_per_replica,
        "output_tokens_per_s_per_replica": e.output_tokens_per_s_per_replica,
        "request_rate_per_s": e.request_rate_per_s,
        "replicas_needed": e.replicas_needed, "replicas": e.replicas, "gpus": e.gpus,
        "gpus_needed": e.gpus_needed,
        "nodes": e.nodes, "price_usd_per_gpu_hour": o.price_usd_per_gpu_hour,
        "usd_per_hour": e.usd_per_hour,
        "usd_per_million_output_tokens": e.usd_per_million_output_tokens,
        "usd_per_million_tokens": e.usd_per_million_tokens,
        "usd_per_request": e.usd_per_request, "headroom": e.headroom,
        "fleet_headroom": e.fleet_headroom,
        "time_to_first_answer_token_s": e.time_to_first_answer_token_s,
        "usd_per_million_answer_tokens": e.usd_per_million_answer_tokens,
        "kv_bytes_per_request_mean": e.kv_bytes_per_request_mean,
        "kv_bytes_per_request_at_percentile": e.kv_bytes_per_request_at_percentile,
        "memory": r.budget.memory,
        "budget_terms": [{"key": t.key, "label": t.label.strip(" -=x"), "bytes": t.bytes,
                          "how": t.how} for t in r.budget.terms],
        "efficiency": {"hbm_bandwidth": o.efficiency.hbm_bandwidth, "flops": o.efficiency.flops,
                       "interconnect": o.efficiency.interconnect,
                       "allreduce_latency_s": o.efficiency.allreduce_latency_s,
                       "source": o.efficiency.source},
        "offload": e.offload or None, "preemption": e.preemption or None,
        "disaggregated": e.disaggregated or None,
        "notes": list(r.notes),
        "launch": o.launch,
    }


def plan_record(rep: PlanReport) -> dict:
    sc, w = rep.scenario, rep.scenario.workload
    configs = [configuration(o, i + 1) for i, o in enumerate(rep.outcomes)]
    return {
        "kvplan_plan": 1,
        "scenario": sc.path, "name": sc.name, "model": rep.model_name,
        "seed": rep.seed, "samples": rep.samples, "requests": rep.requests,
        "sample_note": rep.sample_note, "max_model_len": rep.max_model_len,
        "excluded_requests": rep.excluded_requests,
        "workload": {
            "request_rate_per_s": w.request_rate_per_s, "concurrent_requests": w.concurrent_requests,
            "prompt_tokens": w.prompt.describe() if w.prompt else None,
            "output_tokens": w.output.describe() if w.output else None,
            "trace": w.trace_name or None, "shared_prefix_tokens": w.shared_prefix_tokens,
            "prefix_cache_hit_rate": w.prefix_cache_hit_rate, "turns": w.turns,
            "thinking_tokens": w.thinking.describe() if w.thinking else None,
            "images_per_request": w.images_per_request, "tokens_per_image": w.tokens_per_image,
            "stats": {k: s.record() for k, s in rep.stats.items()},
        },
        "slo": {"ttft_ms": _ms(sc.slo.ttft_s), "tpot_ms": _ms(sc.slo.tpot_s),
                "percentile": sc.slo.percentile},
        "best": configs[0] if rep.best is not None else None,
        "configurations": configs,
        "skipped": [{"gpu": s.candidate.gpu.key, "engine": s.candidate.engine, "tp": s.candidate.tp,
                     "pp": s.candidate.pp, "dp": s.candidate.dp, "ep": s.candidate.ep,
                     "dcp": s.candidate.dcp,
                     "kv_dtype": s.candidate.kv_dtype, "reason": s.reason}
                    for s in rep.skipped],
        "assumptions": list(rep.assumptions),
        "model_assumptions": list(rep.model_assumptions),
        "assumed_standard_attention": rep.assumed_standard_attention,
        "warnings": list(rep.warnings),
        "simulation": rep.simulation,
    }
