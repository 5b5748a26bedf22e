"""Ready-to-paste launch commands that realise a ``FitResult``. Pure string building.

Flag names as each engine spells them (docs/budget-research.md section 8, docs/fit.md section
6): ``vllm serve``, ``python -m sglang.launch_server``, ``trtllm-serve`` and ``llama-server``.
Each line carries what the plan assumed: the weights (the checkpoint's own quantisation, an
engine's online ``--quantization fp8``, or a quantised checkpoint folder named as an assumption),
the KV dtype, the context and its model limit override, the parallelism, a fixed KV pool, and
the sequence cap only when one was planned (``--concurrency``, ``--max-num-seqs`` or a scenario).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path, PurePath

from ..core.errors import KvplanError, ParallelismError
from ..core.weights import WeightFormat, expert_width
from ..engines import get_engine
from ..engines.base import STATE_KINDS, version_tuple
from ..engines.expert_buffers import (
    check_all2all,
    redundant_experts,
    sglang_buffers,
    vllm_buffers,
)
from ..engines.parallel_rules import moe_split
from ..engines.vllm_memory import default_utilization
from .fit_dsv4 import UNPLANNED as DSV4_UNPLANNED
from .fit_search import search_words
from .fit_types import FitResult
from .model_limits import ENGINE_OVERRIDES, over_limit

#: kvplan KV format -> each engine's --kv-cache-dtype value (None: the engine has no such mode).
VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2",
           "nvfp4": "nvfp4", "int8_per_token": "int8_per_token_head",
           # sparse MLA: vLLM rewrites fp8 to its fp8_ds_mla layout (DeepseekV32 config hook)
           "fp8_ds_mla": "fp8", "nvfp4_ds_mla": "nvfp4_ds_mla"}
SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
             "nvfp4": "nvfp4"}  # SGLang 0.5.23 --kv-cache-dtype choices (fp4_e2m1 is refused)
TRTLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8", "nvfp4": "nvfp4"}
LLAMA_KV = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "q8_0": "q8_0", "q4_0": "q4_0",
            "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1", "iq4_nl": "iq4_nl"}
#: engines that quantise a 16-bit checkpoint to kvplan's weight scheme as it loads: vLLM's and
#: SGLang's ``--quantization fp8`` (per-tensor fp8 weights, one fp32 scale: kvplan's ``fp8``)
ONLINE = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8"}}
#: a quantised checkpoint folder's suffix, by kvplan weight scheme (named in the assumption)
CHECKPOINT_SUFFIX = {"fp8": "FP8", "fp8_block": "FP8-block", "fp8_channel": "FP8-channel",
                     "fp8_modelopt": "FP8", "mxfp8": "MXFP8", "awq": "AWQ", "gptq": "GPTQ",
                     "int4": "INT4", "mxfp4": "MXFP4", "nvfp4": "NVFP4",
                     "nvfp4_w4a16": "NVFP4-W4A16", "bnb_nf4": "bnb-nf4", "bnb_int8": "bnb-int8"}


def _join(parts: list[str]) -> str:
    return " ".join(shlex.quote(p) if i else p for i, p in enumerate(parts))


def model_ref(r: FitResult) -> str:
    """The model as the engines take it: the Hub id, or the folder holding a local config."""
    m = r.request.model
    if m.hub_id:
        return m.hub_id
    local = _local_config(r)
    return str(local.parent) if local else (m.source or m.name)


def _local_config(r: FitResult) -> Path | None:
    """The local config file the model was read from (None: a Hub id or a built-in)."""
    m = r.request.model
    if not m.hub_id and m.source and Path(m.source).suffix == ".json":
        return Path(m.source).resolve()
    return None


def _folder_note(r: FitResult) -> str:
    """A local config file not named config.json: the engine reads the folder's config.json."""
    local = _local_config(r)
    if local and local.name != "config.json":
        return f"the engine reads {local.parent}/config.json: put {local.name} there as config.json"
    return ""


def _checkpoint_format(r: FitResult) -> WeightFormat | None:
    from ..loaders.quant_config import from_config

    try:
        return from_config(r.request.model)
    except KvplanError:
        return None


def _same_storage(a: WeightFormat, b: WeightFormat) -> bool:
    """Whether two formats store weights alike (the checkpoint already is what was asked)."""
    def key(f: WeightFormat) -> tuple:
        return (f.scheme, f.base_dtype, f.experts_only, f.expert_scheme, f.scale_bytes,
                f.block if f.scheme == "fp8_block" else None,
                f.group_size if f.scheme in ("awq", "gptq", "int4") else None)
    return key(a) == key(b)


def weight_source(r: FitResult, engine: str) -> tuple[str, list[str], str]:
    """(model reference, flags, assumption) realising the planned weights on ``engine``.

    The checkpoint's own quantization_config needs no flag (the engines read it); a 16-bit
    checkpoint planned as fp8 gets ``--quantization fp8`` where the engine quantises online;
    any other planned format needs a checkpoint stored in it, named ``./<repo>-<FORMAT>`` (a
    folder that must exist, so a wrong line fails at start-up instead of loading 16-bit
    weights and running out of memory) and stated as the assumption."""
    fmt = r.request.weight_format
    ref = model_ref(r)
    ckpt = _checkpoint_format(r)
    if (ckpt is not None and _same_storage(ckpt, fmt)) or (ckpt is None and fmt.scheme == "dense"):
        return ref, [], _folder_note(r)
    online = ONLINE.get(engine, {}).get(fmt.scheme)
    if ckpt is None and online:
        return ref, ["--quantization", online], _folder_note(r)
    suffix = CHECKPOINT_SUFFIX.get(fmt.scheme, fmt.base_dtype.upper())
    folder = f"./{PurePath(ref).name}-{suffix}"
    have = ckpt.name if ckpt else r.request.model.dtype
    return folder, [], (f"assumes {folder} holds {ref} quantised as {fmt.name} ({ref} itself is "
                        f"{have}; {engine} reads the format from the folder's quantization config)")


def _dtype_and_revision(r: FitResult, ref: str) -> list[str]:
    """vLLM's and SGLang's shared flags: fp32 weights (``--dtype float32``; the default runs
    16-bit) and the commit a Hub model was read at (``--revision``)."""
    req = r.request
    out = []
    if req.weight_format.scheme == "dense" and req.weight_format.base_dtype == "fp32":
        out += ["--dtype", "float32"]
    if req.model.hub_revision and ref == req.model.hub_id:
        out += ["--revision", req.model.hub_revision]
    return out


def _env(r: FitResult, engine: str) -> list[str]:
    """The environment that lifts the engine's model-length check, when the plan is past it."""
    if over_limit(r.request.model, r.max_model_len) and engine in ENGINE_OVERRIDES:
        return [ENGINE_OVERRIDES[engine]]
    return []


def _line(env: list[str], parts: list[str], comment: str) -> str:
    text = " ".join([*env, _join(parts)])
    return f"{text}  # {comment}" if comment else text


def planned_sequences(r: FitResult, sequences: int | None = None) -> int | None:
    """Sequences per attention DP rank the lines cap the engine at: ``sequences`` when the
    caller planned them (a workload mix, ``kvplan plan``), else ``--concurrency``, else the
    ``--max-num-seqs`` given; None when nothing was planned (the engine's default, which the
    budget used, stays, so shorter requests can share the pool)."""
    req = r.request
    fit = sequences or req.concurrency
    if fit:
        per_rank = -(-fit // req.dp)  # each attention DP rank schedules its own sequences
        return max(1, min(per_rank, r.max_num_seqs))
    return req.max_num_seqs


def _sequences(r: FitResult, sequences: int | None = None) -> int:
    """Sequences for engines that need a count (llama.cpp slots): the planned cap, else what
    fits at the full context."""
    planned = planned_sequences(r, sequences)
    if planned:
        return planned
    return max(1, min(-(-(r.max_concurrency or 1) // r.request.dp), r.max_num_seqs))


def sequence_note(r: FitResult) -> str:
    """Why the lines set, or leave, the engine's sequence cap."""
    req = r.request
    n = planned_sequences(r)
    rank = " per DP rank" if req.dp > 1 else ""
    if n is not None:
        why = "--concurrency" if req.concurrency else "--max-num-seqs"
        return f"the lines cap the engine at {n:,} running sequences{rank} ({why})"
    return (f"the lines leave the engine's sequence cap at its default ({r.max_num_seqs:,}{rank}, "
            f"as the budget assumed): the pool holds {r.concurrency_per_rank:,} full-length "
            f"{r.max_model_len:,}-token sequence{'s' if r.concurrency_per_rank != 1 else ''}{rank} "
            "and more when requests are shorter; pass --concurrency N to cap it")


def _kv_flag(table: dict[str, str], fmt: str, engine: str) -> str | None:
    base = fmt.split(":", 1)[0]
    return table.get(base)


def _unsupported(engine: str, fmt: str) -> str:
    return f"# {engine} has no {fmt} KV cache; plan it with --engine {engine} and a format it has"


#: vLLM turns prefix caching on by default, for hybrid models too (``ModelConfig.
#: is_prefix_caching_supported``); their Mamba cache then runs in mode "align" or "all"
#: (``MambaModelConfig.verify_and_update_config``, from 0.18), which keeps state checkpoints at
#: block boundaries and sizes blocks to the Mamba chunk. kvplan plans mode "none" (one state
#: slot per sequence), so the line turns prefix caching off: ``--no-enable-prefix-caching`` is
#: argparse's BooleanOptionalAction spelling, kept (hidden) by 0.34's EnableDisableAction.
PREFIX_CACHING_NOTE = ("prefix caching off: the plan is vLLM's one Mamba state slot per "
                       "sequence (mamba_cache_mode none)")


def _vllm_hybrid(r: FitResult) -> bool:
    """Attention and recurrent-state layers together: vLLM's ``is_hybrid``."""
    kinds = {spec.kind for spec in r.request.model.cache_layers}
    return bool(kinds & STATE_KINDS) and bool(kinds - STATE_KINDS)


def vllm_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    kv = _kv_flag(VLLM_KV, r.kv_format, "vllm")
    if kv is None:
        return _unsupported("vllm", r.kv_format)
    planned = r.layout.name == "vllm"
    util = req.utilization if (planned and req.utilization is not None) else float(
        default_utilization(r.layout.version if planned else "main"))
    ref, quant, comment = weight_source(r, "vllm")
    parts = ["vllm", "serve", ref, *quant, "--tensor-parallel-size", str(req.tp),
             "--pipeline-parallel-size", str(req.pp), "--max-model-len", str(r.max_model_len),
             "--kv-cache-dtype", kv, "--gpu-memory-utilization", f"{util:g}",
             *_dtype_and_revision(r, ref)]
    if (n := planned_sequences(r, sequences)) is not None:
        parts += ["--max-num-seqs", str(n)]
    if req.dp > 1:
        parts += ["--data-parallel-size", str(req.dp)]
    if req.ep > 1:
        parts += ["--enable-expert-parallel"]
    if req.dcp > 1:
        parts += ["--decode-context-parallel-size", str(req.dcp)]
    parts += _vllm_expert_flags(r)
    if planned:
        # the block the plan starts from, always: vLLM 0.34 moved its default from 16 to 64,
        # and a hybrid's larger block is vLLM's own rounding of it (not passed)
        parts += ["--block-size", str(r.start_block_size_tokens or r.block_size_tokens)]
        if req.max_num_batched_tokens:
            parts += ["--max-num-batched-tokens", str(r.max_num_batched_tokens)]
        if req.kv_cache_memory_bytes is not None:
            parts += ["--kv-cache-memory-bytes", str(req.kv_cache_memory_bytes)]
    if _vllm_hybrid(r):
        parts += ["--no-enable-prefix-caching"]
        comment = "; ".join(c for c in (comment, PREFIX_CACHING_NOTE) if c)
    if req.draft:
        spec = {"model": req.draft.model.hub_id or req.draft.model.name,
                "num_speculative_tokens": req.draft.num_speculative_tokens}
        parts += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return _line(_env(r, "vllm"), parts, comment)


def _eplb_slots(r: FitResult) -> int | None:
    """EPLB's redundant slots as planned (None: no EPLB)."""
    m = r.expert_memory
    return m.redundant_experts if m is not None and m.eplb else None


def _vllm_expert_flags(r: FitResult) -> list[str]:
    """``--enable-eplb --eplb-config`` (the redundant count always explicit: its default
    moved from 0 to "the fewest that divide" in 0.34) and ``--all2all-backend``."""
    out = []
    if (slots := _eplb_slots(r)) is not None:
        out += ["--enable-eplb", "--eplb-config",
                json.dumps({"num_redundant_experts": slots}, separators=(",", ":"))]
    if r.request.all2all != "default":
        out += ["--all2all-backend", r.request.all2all]
    return out


#: kvplan's all-to-all names -> SGLang's --deepep-mode
SGLANG_DEEPEP_MODE = {"deepep_high_throughput": "normal", "deepep_low_latency": "low_latency",
                      "deepep_auto": "auto"}


def _sglang_expert_flags(r: FitResult) -> list[str]:
    out = []
    if (slots := _eplb_slots(r)) is not None:
        out += ["--enable-eplb"] + (["--ep-num-redundant-experts", str(slots)] if slots else [])
    if r.request.all2all != "default":
        out += ["--moe-a2a-backend", "deepep", "--deepep-mode",
                SGLANG_DEEPEP_MODE[r.request.all2all]]
    return out


def _check_expert_options(name: str, r: FitResult) -> None:
    """The planned EPLB / all-to-all choice under engine ``name``'s rules (raises)."""
    req, m = r.request, r.expert_memory
    if m is None or (not m.eplb and req.all2all == "default"):
        return
    split = r.split
    ep = split.ep if split else req.ep
    layout = r.layout if r.layout.name == name else get_engine(name)
    check_all2all(name, req.all2all, ep, req.gpu.nvlink_domain_gpus)
    if name == "vllm":
        vllm_buffers(layout.version, req.all2all, req.model.hidden_size, m.physical_experts, ep,
                     r.max_num_batched_tokens, req.dp)
    if name == "sglang":
        sglang_buffers(req.all2all, req.model.hidden_size, m.physical_experts, ep,
                       req.tp * req.dp)
    redundant_experts(name, layout.version, req.num_experts, ep, m.eplb,
                      m.redundant_experts if m.eplb else None, req.model.model_type,
                      req.weight_format.scheme)


def _sglang_dsa_kv(r: FitResult) -> str | None:
    """SGLang's --kv-cache-dtype for a DSA model's planned latent (``sglang_dsa``): bf16 is
    spelled bfloat16, because auto means fp8 on Blackwell; an fp8 latent is fp8_e4m3 when
    SGLang's own kernels on this GPU store the planned row (656 B FlashMLA, 576 B TRT-LLM)."""
    from ..core.gpu import sm_major
    from ..engines.sglang_dsa import flashmla

    fmt, major = r.kv_format.split(":", 1)[0], sm_major(r.request.gpu.compute_capability)
    if fmt == "bf16":
        return "bfloat16"
    if major is None or fmt not in ("fp8_ds_mla", "fp8_e4m3"):
        return None
    return "fp8_e4m3" if (fmt == "fp8_ds_mla") == flashmla(major, r.request.model.model_type) \
        else None


def _sglang_dp_flags(r: FitResult, dp_attention: bool) -> list[str]:
    """SGLang's data parallel: replicas (``--dp-size``), or attention DP inside the ``--tp-size``
    group. SGLang 0.5.22 deprecated ``--dp-size D --enable-dp-attention`` for ``--attn-dp-size
    D`` (``server_args.py``: DeprecatedStoreTrueAction, removal after 2026-12-31; 0.5.21 and
    older have only the old spelling)."""
    d = str(r.request.dp)
    if not dp_attention:
        return ["--dp-size", d]
    if r.layout.name == "sglang" and version_tuple(r.layout.version) < (0, 5, 22):
        return ["--dp-size", d, "--enable-dp-attention"]
    return ["--attn-dp-size", d]


def sglang_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    kv = _sglang_dsa_kv(r) if req.model.sparse_mla else _kv_flag(SGLANG_KV, r.kv_format, "sglang")
    if kv is None:
        return _unsupported("sglang", r.kv_format)
    dp_attention = req.dp > 1 and req.num_experts > 0
    world = req.tp * req.dp if dp_attention else req.tp  # SGLang's --tp-size: a stage's GPUs
    ref, quant, comment = weight_source(r, "sglang")
    parts = ["python", "-m", "sglang.launch_server", "--model-path", ref, *quant, "--tp-size",
             str(world), "--pp-size", str(req.pp), "--context-length", str(r.max_model_len),
             "--kv-cache-dtype", kv, *_dtype_and_revision(r, ref)]
    if (n := planned_sequences(r, sequences)) is not None:
        # under DP attention SGLang divides --max-running-requests among the DP ranks
        parts += ["--max-running-requests", str(n * req.dp if dp_attention else n)]
    if req.dp > 1:
        parts += _sglang_dp_flags(r, dp_attention)
    if req.ep > 1:
        parts += ["--ep-size", str(req.ep)]
    parts += _sglang_expert_flags(r)
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
    return _line(_env(r, "sglang"), parts, comment)


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
    ref, _, comment = weight_source(r, "trtllm")
    parts = ["trtllm-serve", ref, "--backend", "pytorch", "--tp_size", str(world),
             "--pp_size", str(req.pp), "--max_seq_len", str(r.max_model_len),
             "--kv_cache_free_gpu_memory_fraction", f"{fraction:g}"]
    if (n := planned_sequences(r, sequences)) is not None:
        parts += ["--max_batch_size", str(n)]
    if req.ep > 1:
        parts += ["--ep_size", str(req.ep)]
    if req.dp > 1 and not attention_dp:  # a dense model: trtllm-serve has no replica mode
        comment = "; ".join(c for c in (comment, f"one of {req.dp} replicas: run one per "
                                        f"{req.tp * req.pp} GPU(s)") if c)
    line = (f"printf '%s\\n' {shlex.quote(json.dumps(options))} > extra.yaml && "
            f"{_join(parts)} --extra_llm_api_options extra.yaml")
    return f"{line}  # {comment}" if comment else line


def llama_cpp_command(r: FitResult, sequences: int | None = None) -> str:
    req = r.request
    k, v = r.footprint.formats.k.name, r.footprint.formats.v.name
    if k not in LLAMA_KV or v not in LLAMA_KV:
        return _unsupported("llama.cpp", r.kv_format)
    fmt = req.weight_format
    if fmt.scheme != "dense":
        return (f"# llama.cpp runs GGUF weights (Q8_0, Q4_K_M, ...), which kvplan does not model; "
                f"this plan assumed {fmt.name}: plan llama.cpp with --weight-dtype bf16 or fp16")
    n = _sequences(r, sequences)
    gguf = f"{req.model.name}-{'F16' if fmt.base_dtype == 'fp16' else fmt.base_dtype.upper()}.gguf"
    parts = ["llama-server", "-m", gguf, "-c", str(req.context_tokens * n),
             "-np", str(n), "-ctk", LLAMA_KV[k], "-ctv", LLAMA_KV[v], "-fa", "on", "-ngl", "999"]
    if req.tp * req.pp > 1:
        parts += ["--split-mode", "layer"]
    return _line([], parts, f"assumes {gguf}: {model_ref(r)} converted to GGUF "
                 f"({fmt.base_dtype} weights); each of the {n} slot(s) holds "
                 f"{req.context_tokens:,} tokens")


def launch_commands(r: FitResult, sequences: int | None = None) -> dict[str, str]:
    """engine -> command, the planned engine first. The other engines get the same
    parallelism, lengths and sequence count with their own defaults for the rest; an engine
    without the planned KV format gets a comment line instead."""
    builders: dict[str, Callable[[FitResult, int | None], str]] = {
        "vllm": vllm_command, "sglang": sglang_command, "trtllm": trtllm_command,
        "llama.cpp": llama_cpp_command}
    out = {}
    v4 = r.request.model.compressed_attention
    for name, build in builders.items():
        if v4 and name != "vllm":  # kvplan.planning.fit_dsv4: vLLM's packed pool only
            out[name] = f"# {DSV4_UNPLANNED[name]}"
            continue
        try:  # an engine that does not serve the model (or whose layout is not established)
            (r.layout if r.layout.name == name else get_engine(name)).check_model(r.request.model)
            req = r.request
            if req.dp > 1 or req.ep > 1:  # each engine's own rule for this DP / EP layout
                moe_split(name, req.tp, req.dp, req.ep, req.num_experts, expert_width(req.weights),
                          redundant=_eplb_slots(r) or 0)
            if req.dcp > 1 and name != "vllm":
                raise ParallelismError(f"decode context parallelism is modelled for vLLM only "
                                       f"({name}'s is not read by kvplan)", field="dcp")
            _check_expert_options(name, r)
        except KvplanError as e:
            out[name] = f"# {e.detail}"
            continue
        out[name] = build(r, sequences)
    first = r.layout.name
    return {first: out[first], **{k: v for k, v in out.items() if k != first}}


def launch_plan(r: FitResult, sequences: int | None = None) -> tuple[FitResult | None, dict[str, str]]:
    """The plan whose lines to print and its commands: ``r`` when it fits, else the suggested
    layout that does (``r.suggested``), else (None, {}): no line for a plan that does not run."""
    target = r if r.fits else r.suggested
    if target is None or not target.fits:
        return None, {}
    return target, launch_commands(target, sequences)


def no_launch_reason(r: FitResult) -> str:
    """Why a plan has no launch line."""
    req = r.request
    return f"this layout does not fit, and none on {req.gpu.name} does: {search_words(req)}"
