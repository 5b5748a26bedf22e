"""Scenario YAML (``kvplan: 1``) -> ``kvplan.core.scenario_spec.Scenario``.

The schema is ``kvplan.loaders.scenario_schema``, the rules between fields and the names
``kvplan.loaders.scenario_checks``; every problem in the file is reported at once, one
``file:line: field: message`` line each, an unknown key with the closest valid one. Token
counts take ``32k``-style suffixes (k = 1024), sizes ``512GiB`` / ``4TB``, bandwidths
``25GB/s`` (or a number of bytes per second). The trace file is read relative to the scenario.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import InputError, ScenarioError
from ..core.scenario_spec import SEARCH_DP, Extras, Hardware, Scenario, Serving, Slo, Tier
from ..core.workload import Workload
from .scenario_checks import check_names, cross_checks
from .scenario_schema import OffloadIn, ScenarioIn, TierIn, unknown_key_hint
from .trace import read_trace
from .yaml_file import error_lines, read_yaml

VERSION = 1


def load_scenario(path: Path) -> Scenario:
    raw, locate = read_yaml(path, InputError)
    if not isinstance(raw, dict):
        raise ScenarioError([f"{path}: a scenario is a YAML mapping (start with `kvplan: 1`)"])
    if "kvplan" in raw and raw["kvplan"] != VERSION:
        raise ScenarioError([f"{path}:{locate(('kvplan',))}: kvplan: scenario version "
                             f"{raw['kvplan']!r} is not supported; this kvplan reads version {VERSION}"])
    problems = cross_checks(raw, locate, path)
    doc = None
    try:
        doc = ScenarioIn.model_validate(raw)
    except ValidationError as e:
        problems = error_lines(e, path, locate, unknown_key_hint) + problems
    trace = None
    base = path.parent
    tr = (raw.get("workload") or {}).get("trace") if isinstance(raw.get("workload"), dict) else None
    if isinstance(tr, str):
        try:
            trace = read_trace(base / tr)
        except ScenarioError as e:
            problems += e.problems
        except InputError as e:  # an unreadable trace
            problems.append(f"{path}:{locate(('workload', 'trace'))}: workload.trace: {e}")
    names: dict[str, Any] = {}
    if doc is not None:
        problems += check_names(doc, path, locate, names)
    if doc is not None and doc.draft_model and doc.draft_model.acceptance_length is not None:
        k, tau = doc.draft_model.speculative_tokens, doc.draft_model.acceptance_length
        if not 1 <= tau <= k + 1:
            problems.append(f"{path}:{locate(('draft_model', 'acceptance_length'))}: "
                            f"draft_model.acceptance_length: {tau:g} is outside [1, "
                            f"speculative_tokens + 1 = {k + 1}] (tokens emitted per verify step)")
    if problems or doc is None:
        raise ScenarioError(sorted(dict.fromkeys(problems), key=_line_of))  # each problem once
    return _convert(doc, path, trace, names)


def _line_of(problem: str) -> tuple[str, int]:
    m = re.match(r"^(.*?):(\d+): ", problem)
    return (m.group(1), int(m.group(2))) if m else (problem.split(":")[0], 0)


def _convert(d: ScenarioIn, path: Path, trace, names: dict[str, Any]) -> Scenario:
    w = d.workload
    wl = Workload(
        prompt=w.prompt_tokens, output=w.output_tokens, trace=trace,
        trace_name=w.trace or "", shared_prefix_tokens=w.shared_prefix_tokens,
        prefix_cache_hit_rate=w.prefix_cache_hit_rate, turns=w.turns,
        tokens_per_turn=w.tokens_per_turn, thinking=w.thinking_tokens,
        images_per_request=w.images_per_request, tokens_per_image=w.tokens_per_image,
        request_rate_per_s=w.request_rate, concurrent_requests=w.concurrent_requests)
    s = d.serving
    serving = Serving(engines=s.engine, tps=s.tp, pps=s.pp, dps=s.dp or SEARCH_DP, eps=s.ep,
                      dcps=s.dcp, eplb=s.eplb, redundant_experts=s.redundant_experts,
                      all2all=s.all2all,
                      dp_search=s.dp is None, kv_dtypes=s.kv_dtype,
                      weight_dtype=s.weight_dtype, block_size_tokens=s.block_size,
                      utilization=s.gpu_memory_utilization,
                      max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs,
                      max_model_len=s.max_model_len, kv_cache_memory_bytes=s.kv_cache_memory,
                      allow_emulated=s.allow_emulated,
                      allow_long_max_model_len=s.allow_long_max_model_len)
    h = d.hardware
    price = h.price_usd_per_gpu_hour
    hw = Hardware(gpus=names["gpus"], gpus_per_node=h.gpus_per_node, nodes=h.nodes,
                  price_usd_per_gpu_hour=price if not isinstance(price, dict) else None,
                  prices_usd_per_gpu_hour=names.get("prices", {}))
    slo = Slo(ttft_s=d.slo.ttft_ms / 1e3 if d.slo.ttft_ms else None,
              tpot_s=d.slo.tpot_ms / 1e3 if d.slo.tpot_ms else None, percentile=d.slo.percentile)
    off = d.offload or OffloadIn()

    def tier(t: TierIn | None) -> Tier | None:
        return Tier(t.bytes, t.bandwidth) if t else None

    role = d.disaggregated.prefill if d.disaggregated else None
    layouts = None
    if role is not None:
        layouts = tuple(dict.fromkeys(
            (tp, pp, dp, ep) for tp in role.tp or (0,) for pp in role.pp or (0,)
            for dp in role.dp for ep in (role.ep if role.ep is not None else (0,))))
    extras = Extras(cpu=tier(off.cpu), nvme=tier(off.nvme),
                    preemption=d.preemption.mode if d.preemption else None,
                    disagg_link_bytes_per_s=d.disaggregated.link_bandwidth if d.disaggregated else None,
                    prefill_layouts=layouts)
    return Scenario(
        path=str(path), name=d.name or path.stem, model=names["model"], hardware=hw, serving=serving,
        workload=wl, slo=slo, extras=extras,
        draft_model=names.get("draft_model"),
        speculative_tokens=d.draft_model.speculative_tokens if d.draft_model else 0,
        acceptance_length=d.draft_model.acceptance_length if d.draft_model else None,
        samples=d.samples, seed=d.seed, assume_standard_attention=d.assume_standard_attention)
