"""Property (issue 15): for built-in models x GPUs, the vLLM line ``kvplan fit`` prints, read
back flag by flag into a new plan, gives the same KV pool (bytes and tokens). What the line
leaves out must be what the engine (and kvplan) default to."""

from __future__ import annotations

import shlex

import pytest

from kvplan.core.errors import KvplanError
from kvplan.loaders import builtins
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.launch import launch_plan

GPUS = ("h100", "b200", "mi300x", "l40s")
KV_BACK = {"auto": "auto", "fp8": "fp8", "fp8_e5m2": "fp8_e5m2", "nvfp4": "nvfp4"}


def request(model, gpu, search: bool = False, **kw) -> FitRequest:
    wd = kw.pop("weight_dtype", None)
    return FitRequest(model=model, weights=weight_inventory(model),
                      weight_format=weight_format(model, wd), gpu=gpu, search=search, **kw)


def replan(line: str, model, gpu):
    words = shlex.split(line, comments=True)
    env = {}
    while "=" in words[0]:
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[:2] == ["vllm", "serve"]
    flags: dict[str, str | bool] = {}
    i = 3
    while i < len(words):
        w = words[i]
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[w] = words[i + 1]
            i += 2
        else:
            flags[w] = True
            i += 1
    known = {"--tensor-parallel-size", "--pipeline-parallel-size", "--max-model-len",
             "--kv-cache-dtype", "--gpu-memory-utilization", "--max-num-seqs", "--quantization",
             "--block-size", "--kv-cache-memory-bytes", "--data-parallel-size",
             "--enable-expert-parallel", "--max-num-batched-tokens", "--dtype",
             "--no-enable-prefix-caching"}
    assert set(flags) <= known, set(flags) - known
    n = int(flags["--max-model-len"])
    return plan_fit(request(
        model, gpu, engine="vllm", tp=int(flags["--tensor-parallel-size"]),
        pp=int(flags["--pipeline-parallel-size"]), context_tokens=n,
        kv_dtype=KV_BACK[str(flags["--kv-cache-dtype"])],
        utilization=float(flags["--gpu-memory-utilization"]),
        max_num_seqs=int(flags["--max-num-seqs"]) if "--max-num-seqs" in flags else None,
        block_size_tokens=int(flags["--block-size"]) if "--block-size" in flags else None,
        weight_dtype="fp8" if flags.get("--quantization") == "fp8" else None,
        allow_long_max_model_len="VLLM_ALLOW_LONG_MAX_MODEL_LEN" in env))


CASES = [(name, gpu) for name in sorted({builtins._load(p)["name"]
                                         for p in builtins.index().values()})
         for gpu in GPUS]


@pytest.mark.parametrize("name,gpu_key", CASES)
def test_the_vllm_line_replans_to_the_same_pool(name, gpu_key):
    model, gpu = load_model(name), load_gpu(gpu_key)
    try:
        ctx = min(8192, model.context_limit.tokens) if model.context_limit else 8192
        # with the TP x PP search: a layout that does not fit launches the one that does
        r = plan_fit(request(model, gpu, search=True, engine="vllm", context_tokens=ctx))
    except KvplanError as e:  # a model the rules refuse (no inventory, DeepSeek-V4 fit, ...)
        pytest.skip(e.detail[:80])
    target, lines = launch_plan(r)
    if target is None or lines["vllm"].startswith("#"):
        pytest.skip("nothing to launch on vLLM")
    line = lines["vllm"]
    if line.split()[2].startswith("./"):
        pytest.skip("a quantised checkpoint kvplan names but cannot read")
    again = replan(line, model, gpu)
    assert again.budget.kv_pool_bytes == target.budget.kv_pool_bytes
    assert again.kv_pool_tokens == target.kv_pool_tokens
    assert again.block_size_tokens == target.block_size_tokens
