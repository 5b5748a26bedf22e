"""kvplan against real vLLM 0.19 startup logs (tests/fixtures/vllm_logs.json, collected from
the llm-d-planner accuracy sweep on H100 80GB HBM3; see vllm_logs.md for sources).

1. Given vLLM's own "Available KV cache memory" (via --kv-cache-memory), kvplan must reproduce
   "GPU KV cache size: N tokens" and "Maximum concurrency ... X.XXx" up to the rounding of the
   printed GiB figure (+-0.005 GiB).
2. Predicting the available memory from the GPU, weights and the activation / overhead
   estimates must land within 2% of vLLM's figure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvplan.core.units import GiB
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest

RECORDS = {r["id"]: r for r in json.loads(
    (Path(__file__).parent / "fixtures" / "vllm_logs.json").read_text())["records"]}

#: record id -> (built-in model, --weight-dtype). RedHat's fp8-dynamic checkpoint is
#: compressed-tensors fp8 with per-channel scales; "runtime fp8" is vLLM --quantization fp8.
CASES = {
    "llmd-llama31-8b-h100-tp1-16k": ("llama-3.1-8b", None),
    "llmd-llama31-8b-h100-tp1-runtime-fp8": ("llama-3.1-8b", "fp8"),
    "llmd-gemma2-9b-h100-tp1": ("gemma-2-9b", None),
    "llmd-gemma3-27b-h100-tp1": ("gemma-3-27b-it", None),
    "llmd-qwen15-moe-a27b-h100-tp1": ("qwen1.5-moe-a2.7b", None),
    "llmd-llama33-70b-fp8dyn-h100-tp2": ("llama-3.3-70b-instruct", "fp8_channel"),
    "llmd-gpt-oss-20b-h100-tp2": ("gpt-oss-20b", None),
}


def _gib(line: str) -> float:
    return float(re.search(r"([\d.]+) ?GiB", line).group(1))


def _request(rid: str, **extra) -> FitRequest:
    name, wd = CASES[rid]
    s = RECORDS[rid]["settings"]
    m = load_model(name)
    return FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, wd),
                      gpu=load_gpu("NVIDIA H100 80GB HBM3"), engine="vllm@0.19",
                      tp=s["tensor_parallel_size"], context_tokens=s["max_model_len"],
                      utilization=s["gpu_memory_utilization"], max_num_batched_tokens=8192,
                      max_num_seqs=1024, search=False, **extra)


@pytest.mark.parametrize("rid", list(CASES))
def test_tokens_and_concurrency_from_vllms_available_memory(rid):
    lines = RECORDS[rid]["lines"]
    avail = _gib(lines["available_kv_cache_memory"])
    tokens = int(re.search(r"([\d,]+) tokens", lines["gpu_kv_cache_size"]).group(1).replace(",", ""))
    conc = float(re.search(r"([\d.]+)x", lines["max_concurrency"]).group(1))
    lo = plan_fit(_request(rid, kv_cache_memory_bytes=int((avail - 0.005) * GiB)))
    hi = plan_fit(_request(rid, kv_cache_memory_bytes=int((avail + 0.005) * GiB)))
    assert lo.kv_pool_tokens <= tokens <= hi.kv_pool_tokens
    assert round(lo.engine_max_concurrency, 2) - 0.01 <= conc <= round(hi.engine_max_concurrency, 2) + 0.01


def test_llama_block_count_matches_the_log_exactly():
    # "num_gpu_blocks is: 29751": 58.11 GiB // (16 x 8 x 128 x 2 x 2 B x 32 layers = 2 MiB)
    r = plan_fit(_request("llmd-llama31-8b-h100-tp1-16k", kv_cache_memory_bytes=int(58.11 * GiB)))
    assert r.stages[0].num_blocks == int(58.11 * GiB) // (2 * 1024 * 1024) == 29752
    assert "29751" in RECORDS["llmd-llama31-8b-h100-tp1-16k"]["lines"]["num_gpu_blocks"]
    # the printed 58.11 is rounded; the true pool was a little under 29,752 blocks
    assert r.kv_pool_tokens == 29752 * 16


#: Models whose available memory kvplan predicts within 2% (gemma-3-27b-it, a multimodal
#: model, is checked apart below).
PREDICTED = [rid for rid in CASES if rid != "llmd-gemma3-27b-h100-tp1"]


@pytest.mark.parametrize("rid", PREDICTED)
def test_available_memory_predicted_within_two_percent(rid):
    avail = _gib(RECORDS[rid]["lines"]["available_kv_cache_memory"])
    predicted = plan_fit(_request(rid)).budget.kv_pool_bytes / GiB
    assert abs(predicted - avail) / avail < 0.02, (predicted, avail)


@pytest.mark.parametrize("rid", PREDICTED)
def test_weights_within_two_percent_of_vllms_weights_memory(rid):
    logged = re.search(r"weights memory: ([\d.]+)GiB", RECORDS[rid]["lines"]["memory_profiling"])
    ours = plan_fit(_request(rid)).budget.weights_bytes / GiB
    # gpt-oss: vLLM's mxfp4 MoE kernels keep 0.6 GiB more than the checkpoint bytes (layout)
    tolerance = 0.10 if "gpt-oss" in rid else 0.02
    assert abs(ours - float(logged.group(1))) / float(logged.group(1)) < tolerance


def test_gemma3_with_its_vision_tower():
    """Gemma-3-27B-it: kvplan counts the SigLIP tower and projector (27,432,406,640 parameters,
    the published total), 51.10 GiB in bf16 against vLLM's logged 51.45 GiB of weights; the
    remaining 0.35 GiB (and the multimodal encoder's share of the profiling peak) are not
    modelled, so the available memory comes out 2.6% high - outside the 2% of the others."""
    r = plan_fit(_request("llmd-gemma3-27b-h100-tp1"))
    assert r.params_total == 27_432_406_640
    assert abs(r.budget.weights_bytes / GiB - 51.45) / 51.45 < 0.01
    avail = _gib(RECORDS["llmd-gemma3-27b-h100-tp1"]["lines"]["available_kv_cache_memory"])
    assert abs(r.budget.kv_pool_bytes / GiB - avail) / avail < 0.03
