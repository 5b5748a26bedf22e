"""``kvplan fit MODEL --gpu GPU``: budget, KV pool, concurrency, verdict, launch commands."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from typing import Annotated

import typer

from ..core.errors import InputError
from ..core.units import parse_bytes, parse_tokens
from .emit import emit, say
from .options import AllowLong, AssumeStandard, Refresh, Revision, Token

EXAMPLES = """\b
Examples:
  kvplan fit llama-3-70b --gpu h200 --weight-dtype fp8 --kv-dtype fp8 -c 32k
  kvplan fit llama-3.1-8b --gpu h100 -c 16k --gpu-memory-utilization 0.95
  kvplan fit llama-3.1-8b --gpu h100 -c 16k --kv-cache-memory 58.11GiB
  kvplan fit deepseek-v3 --gpu h200 --tp 8 -c 128k --concurrency 32
  kvplan fit deepseek-v3 --gpu h200 --dp 8 --ep 8 -c 32k
  kvplan fit deepseek-v3 --gpu h200 --dp 8 --ep 8 -c 32k --all2all deepep_low_latency --eplb
  kvplan fit qwen3-8b --gpu l40s --engine sglang --json"""


def _parsed(parse, value, flag):
    """``parse(value)`` (None stays None), a ValueError becoming one line naming ``flag``."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as e:
        raise InputError(str(e), field=flag) from None


def _size(value, flag):
    return _parsed(parse_bytes, value, flag)


def _tokens(value, flag):
    return _parsed(parse_tokens, value, flag)


def _positive(value, flag):
    if value is not None and value < 1:
        raise InputError(f"must be a positive integer, got {value}", field=flag)
    return value


def _checkpoint(m, token):
    """Exact parameters by dtype from a Hub model's safetensors headers (None otherwise)."""
    if not m.hub_revision:
        return None
    from ..core.errors import HubError
    from ..loaders.hub import checkpoint_size

    try:
        size = checkpoint_size(m.hub_id, m.hub_revision, token=token)
    except HubError as e:  # the plan does not need the headers: say so and go on
        say(f"kvplan: warning: safetensors headers not read: {e}")
        return None
    if size is None:
        return None
    return {"params_total": size.params_total, "params_by_dtype": size.params_by_dtype,
            "bytes_total": size.bytes_total, "files": size.files}


def fit(
    model: Annotated[str, typer.Argument(help="Built-in name, a path to a config.json, or a "
                                         "Hub id org/name[@revision].")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU key or alias (see `kvplan gpus`), or a "
                                     "YAML file.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel degree.")] = 1,
    dp: Annotated[int, typer.Option("--dp", help="Attention data-parallel ranks (each --tp "
                                    "GPUs, its own sequences and KV pool).")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel degree: GPUs of a stage the "
                                    "routed experts are spread over (vLLM: 1 or tp x dp).")] = 1,
    dcp: Annotated[int, typer.Option("--dcp", help="Decode context parallel (vLLM "
                                     "--decode-context-parallel-size): each sequence's tokens "
                                     "split over this many of the --tp GPUs.")] = 1,
    eplb: Annotated[bool, typer.Option("--eplb", help="Expert-parallel load balancing (vLLM "
                                       "--enable-eplb, SGLang --enable-eplb): redundant expert "
                                       "slots and vLLM's staging copy of one layer.")] = False,
    redundant_experts: Annotated[int | None, typer.Option(
        "--redundant-experts", help="EPLB's extra expert slots per MoE layer (default: vLLM "
        "0.34 the fewest that divide by --ep; SGLang 0).")] = None,
    all2all: Annotated[str, typer.Option(
        "--all2all", help="MoE all-to-all backend: default, deepep_high_throughput, "
        "deepep_low_latency, deepep_auto (SGLang); its buffers join the budget.")] = "default",
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV format: auto, bf16, fp8, "
                                          "nvfp4, ... (see `kvplan formats`).")] = "auto",
    weight_dtype: Annotated[str | None, typer.Option(
        "--weight-dtype", help="Weights: bf16, fp16, fp8, fp8_block, awq, gptq, int4, mxfp4, "
        "nf4, int8. Default: the config's quantization_config, else its dtype.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm (default; vllm@0.19 for older "
                                        "rules), sglang, trtllm or llama.cpp.")] = "vllm",
    context: Annotated[str, typer.Option("--context", "-c", help="Tokens per sequence "
                                         "(4k = 4096).")] = "8k",
    max_model_len: Annotated[str | None, typer.Option(
        "--max-model-len", help="The engine's max model length (default: the context).")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(
        "--gpu-memory-utilization", help="vLLM gpu_memory_utilization / SGLang "
        "mem_fraction_static / TRT-LLM free_gpu_memory_fraction, in (0, 1].")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        "--max-num-batched-tokens", help="Profiling batch (vLLM default 16384 on >= 160 GiB "
        "GPUs from 0.28, 8192 on other >= 70 GiB GPUs, else 2048).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(
        "--max-num-seqs", help="Sampler warm-up rows (vLLM default 1024 / 256).")] = None,
    block_size: Annotated[int | None, typer.Option("--block-size", help="KV block size in "
                                                   "tokens.")] = None,
    shared_prefix: Annotated[str | None, typer.Option(
        "--shared-prefix", help="Tokens of a prefix every request shares (counted once, "
        "whole blocks).")] = None,
    draft_model: Annotated[str | None, typer.Option(
        "--draft-model", help="Speculative-decoding draft model (its KV joins the pool).")] = None,
    num_speculative_tokens: Annotated[int, typer.Option(
        "--num-speculative-tokens", help="Lookahead tokens per sequence with --draft-model.")] = 0,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help="Target concurrent sequences; also searches the smallest TP/PP "
        "that reaches it.")] = None,
    kv_cache_memory: Annotated[str | None, typer.Option(
        "--kv-cache-memory", help="Plan a KV pool of exactly this size per GPU (e.g. 54.84GiB), "
        "as vLLM's --kv-cache-memory-bytes.")] = None,
    weight_memory: Annotated[str | None, typer.Option(
        "--weight-memory", help="Override the weights per GPU (e.g. 14.99GiB).")] = None,
    activation_memory: Annotated[str | None, typer.Option(
        "--activation-memory", help="Override the activation peak per GPU.")] = None,
    overhead_memory: Annotated[str | None, typer.Option(
        "--overhead-memory", help="Override non-torch + CUDA graph memory per GPU.")] = None,
    total_memory: Annotated[str | None, typer.Option(
        "--total-memory", help="Override the GPU's driver-reported total memory.")] = None,
    allow_emulated: Annotated[bool, typer.Option(
        "--allow-emulated", help="Plan a KV format the GPU cannot run natively.")] = False,
    allow_long_max_model_len: AllowLong = False,
    require_fit: Annotated[bool, typer.Option(
        "--require-fit", help="Exit 1 when the plan does not fit (default: exit 0 with the "
        "verdict).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column of the budget table, "
                                       "however wide.")] = False,
    revision: Revision = None,
    token: Token = None,
    refresh: Refresh = False,
    assume_standard_attention: AssumeStandard = False,
) -> None:
    """Does MODEL fit on GPU at this context, with how many concurrent sequences, and how to
    launch it."""
    from ..loaders.hardware import load_gpu
    from ..loaders.hf_params import weight_inventory
    from ..loaders.quant_config import weight_format
    from ..loaders.resolve import load_model
    from ..planning.fit import plan_fit
    from ..planning.fit_types import Draft, FitRequest
    from ..report.fit_record import fit_record

    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise InputError(f"must be in (0, 1], got {gpu_memory_utilization}",
                         field="--gpu-memory-utilization")
    for value, flag in ((tp, "--tp"), (pp, "--pp"), (dp, "--dp"), (ep, "--ep"), (dcp, "--dcp"),
                        (concurrency, "--concurrency"),
                        (max_num_batched_tokens, "--max-num-batched-tokens"),
                        (max_num_seqs, "--max-num-seqs"), (block_size, "--block-size")):
        _positive(value, flag)
    if num_speculative_tokens < 0:
        raise InputError("must be >= 0", field="--num-speculative-tokens")
    if num_speculative_tokens and not draft_model:
        raise InputError("needs --draft-model", field="--num-speculative-tokens")
    if draft_model and num_speculative_tokens < 1:
        raise InputError("--draft-model needs --num-speculative-tokens K (K >= 1)",
                         field="--num-speculative-tokens")
    spec = load_gpu(gpu)
    m = load_model(model, revision=revision, token=token, refresh=refresh,
                   assume_standard_attention=assume_standard_attention)

    def inventory(mm):
        from ..core.errors import ConfigError
        try:
            return weight_inventory(mm)
        except ConfigError:
            if weight_memory is None:
                raise
            return None

    draft = None
    if draft_model:
        dm = load_model(draft_model, token=token,
                        assume_standard_attention=assume_standard_attention)
        draft = Draft(dm, inventory(dm), weight_format(dm, weight_dtype), num_speculative_tokens)
    req = FitRequest(
        model=m, weights=inventory(m), weight_format=weight_format(m, weight_dtype), gpu=spec,
        engine=engine, tp=tp, pp=pp, dp=dp, ep=ep, dcp=dcp, eplb=eplb,
        redundant_experts=redundant_experts, all2all=all2all, kv_dtype=kv_dtype,
        context_tokens=_tokens(context, "--context"),
        max_model_len=_tokens(max_model_len, "--max-model-len"),
        utilization=gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, block_size_tokens=block_size,
        shared_prefix_tokens=_tokens(shared_prefix, "--shared-prefix") or 0, draft=draft,
        concurrency=concurrency, kv_cache_memory_bytes=_size(kv_cache_memory, "--kv-cache-memory"),
        weight_memory_bytes=_size(weight_memory, "--weight-memory"),
        activation_memory_bytes=_size(activation_memory, "--activation-memory"),
        overhead_memory_bytes=_size(overhead_memory, "--overhead-memory"),
        total_memory_bytes=_size(total_memory, "--total-memory"), allow_emulated=allow_emulated,
        allow_long_max_model_len=allow_long_max_model_len, checkpoint=_checkpoint(m, token))
    result = plan_fit(req)

    def render() -> None:
        from .render_fit import render_fit

        render_fit(result, wide)

    emit(m.warnings, as_json, lambda: fit_record(result), render)
    if require_fit and not result.fits:
        raise typer.Exit(1)
