"""Ready-to-paste launch commands that realise a ``FitResult``. Pure string building.

Flag names as each engine spells them (docs/budget-research.md section 8): ``vllm serve``,
``python -m sglang.launch_server``, ``trtllm-serve`` and ``llama-server``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

from ..core.errors import KvplanError
from ..core.weights import expert_width
from ..engines import get_engine
from ..engines.parallel_rules import moe_split
from ..engines.vllm_memory import default_utilization
from .fit_types import FitResult

#: kvplan KV format -> each engine's --kv-cache-dtype value (None: the engine has no such mode).
VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2",
           "nvfp4": "nvfp4", "int8_per_token": "int8_per_token_head",
           # sparse MLA: vLLM rewrites fp8 to its fp8_ds_mla layout (DeepseekV32 config hook)
           "fp8_ds_mla": "fp8"}
SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
             "nvfp4": "fp4_e2m1"}
TRTLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8", "nvfp4": "nvfp4"}
LLAMA_KV = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "q8_0": "q8_0", "q4_0": "q4_0",
            "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1", "iq4_nl": "iq4_nl"}


def _join(parts: list[str]) -> str:
    return " ".join(shlex.quote(p) if i else p for i, p in enumerate(parts))


def _model_ref(r: FitResult) -> str:
    m = r.request.model
    return m.hub_id or m.source or m.name


def _sequences(r: FitResult, sequences: int | None = None) -> int:
    """Sequences to launch with: ``sequences`` when the caller planned them (a workload mix,
    ``kvplan plan``), else the target (or what fits at the full context); at most the
    max_num_seqs the budget was planned with."""
    fit = sequences or min(r.request.concurrency or r.max_concurrency, r.max_concurrency or 1)
    per_rank = -(-fit // r.request.dp)  # each attention DP rank schedules its own sequences
    return max(1, min(per_rank, r.max_num_seqs))


def _kv_flag(table: dict[str, str], fmt: str, engine: str) -> str | None:
    base = fmt.split(":", 1)[0]
    return table.get(base)


def _unsupported(engine: str, fmt: str) -> str:
    return f"# {engine} has no {fmt} KV cache; plan it with --engine {engine} and a format it has"


def vllm_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    kv = _kv_flag(VLLM_KV, r.kv_format, "vllm")
    if kv is None:
        return _unsupported("vllm", r.kv_format)
    planned = r.layout.name == "vllm"
    util = req.utilization if (planned and req.utilization is not None) else float(
        default_utilization(r.layout.version if planned else "main"))
    parts = ["vllm", "serve", _model_ref(r), "--tensor-parallel-size", str(req.tp),
             "--pipeline-parallel-size", str(req.pp), "--max-model-len", str(r.max_model_len),
             "--max-num-seqs", str(_sequences(r, sequences)), "--kv-cache-dtype", kv,
             "--gpu-memory-utilization", f"{util:g}"]
    if req.dp > 1:
        parts += ["--data-parallel-size", str(req.dp)]
    if req.ep > 1:
        parts += ["--enable-expert-parallel"]
    if planned:
        parts += ["--block-size", str(r.block_size_tokens)]
        if req.max_num_batched_tokens:
            parts += ["--max-num-batched-tokens", str(r.max_num_batched_tokens)]
        if req.kv_cache_memory_bytes is not None:
            parts += ["--kv-cache-memory-bytes", str(req.kv_cache_memory_bytes)]
    if req.draft:
        spec = {"model": req.draft.model.hub_id or req.draft.model.name,
                "num_speculative_tokens": req.draft.num_speculative_tokens}
        parts += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return _join(parts)


def sglang_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    kv = _kv_flag(SGLANG_KV, r.kv_format, "sglang")
    if kv is None:
        return _unsupported("sglang", r.kv_format)
    n = _sequences(r, sequences)
    dp_attention = req.dp > 1 and req.num_experts > 0
    world = req.tp * req.dp if dp_attention else req.tp  # SGLang's --tp-size: a stage's GPUs
    parts = ["python", "-m", "sglang.launch_server", "--model-path", _model_ref(r), "--tp-size",
             str(world), "--pp-size", str(req.pp), "--context-length", str(r.max_model_len),
             # under DP attention SGLang divides --max-running-requests among the DP ranks
             "--max-running-requests", str(n * req.dp if dp_attention else n),
             "--kv-cache-dtype", kv]
    if req.dp > 1:
        parts += ["--dp-size", str(req.dp)] + (["--enable-dp-attention"] if dp_attention else [])
    if req.ep > 1:
        parts += ["--ep-size", str(req.ep)]
    if r.layout.name == "sglang":
        b = r.budget
        fraction = b.usable_bytes / max(b.total_bytes - b.runtime_overhead_bytes, 1)
        parts += ["--mem-fraction-static", f"{fraction:.3f}", "--page-size", str(r.block_size_tokens)]
        if req.kv_cache_memory_bytes is not None:
            parts += ["--max-total-tokens", str(r.kv_pool_tokens)]
    if req.draft:
        parts += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                  req.draft.model.hub_id or req.draft.model.name, "--speculative-num-draft-tokens",
                  str(req.draft.num_speculative_tokens)]
    return _join(parts)


def trtllm_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    kv = _kv_flag(TRTLLM_KV, r.kv_format, "trtllm")
    if kv is None:
        return _unsupported("trtllm", r.kv_format)
    fraction = req.utilization if (req.utilization and r.layout.name == "trtllm") else 0.9
    options: dict = {"kv_cache_config": {"dtype": kv, "free_gpu_memory_fraction": fraction}}
    if req.kv_cache_memory_bytes is not None and r.layout.name == "trtllm":
        options["kv_cache_config"]["max_tokens"] = r.kv_pool_tokens
    attention_dp = req.dp > 1 and req.num_experts > 0
    if attention_dp:
        options["enable_attention_dp"] = True
    world = req.tp * req.dp if attention_dp else req.tp  # tp_size: a stage's GPUs
    parts = ["trtllm-serve", _model_ref(r), "--backend", "pytorch", "--tp_size", str(world),
             "--pp_size", str(req.pp), "--max_seq_len", str(r.max_model_len), "--max_batch_size",
             str(_sequences(r, sequences)), "--kv_cache_free_gpu_memory_fraction", f"{fraction:g}"]
    if req.ep > 1:
        parts += ["--ep_size", str(req.ep)]
    line = (f"printf '%s\\n' {shlex.quote(json.dumps(options))} > extra.yaml && "
            f"{_join(parts)} --extra_llm_api_options extra.yaml")
    if req.dp > 1 and not attention_dp:  # a dense model: trtllm-serve has no replica mode
        line += f"  # one of {req.dp} replicas: run one per {req.tp * req.pp} GPU(s)"
    return line


def llama_cpp_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    k, v = r.footprint.formats.k.name, r.footprint.formats.v.name
    if k not in LLAMA_KV or v not in LLAMA_KV:
        return _unsupported("llama.cpp", r.kv_format)
    n = _sequences(r, sequences)
    parts = ["llama-server", "-m", f"{req.model.name}.gguf", "-c", str(req.context_tokens * n),
             "-np", str(n), "-ctk", LLAMA_KV[k], "-ctv", LLAMA_KV[v], "-fa", "on", "-ngl", "999"]
    if req.tp * req.pp > 1:
        parts += ["--split-mode", "layer"]
    return _join(parts)


def launch_commands(r: FitResult, sequences: int | None = None) -> dict[str, str]:
    """engine -> command, the planned engine first. The other engines get the same
    parallelism, lengths and sequence count with their own defaults for the rest; an engine
    without the planned KV format gets a comment line instead."""
    builders: dict[str, Callable[[FitResult, int | None], str]] = {
        "vllm": vllm_command, "sglang": sglang_command, "trtllm": trtllm_command,
        "llama.cpp": llama_cpp_command}
    out = {}
    for name, build in builders.items():
        try:  # an engine that does not serve the model (or whose layout is not established)
            (r.layout if r.layout.name == name else get_engine(name)).check_model(r.request.model)
            req = r.request
            if req.dp > 1 or req.ep > 1:  # each engine's own rule for this DP / EP layout
                moe_split(name, req.tp, req.dp, req.ep, req.num_experts, expert_width(req.weights))
        except KvplanError as e:
            out[name] = f"# {e.detail}"
            continue
        out[name] = build(r, sequences)
    first = r.layout.name
    return {first: out[first], **{k: v for k, v in out.items() if k != first}}
