"""The guide's capacity examples (docs/guide-capacity.md), derived by hand.

vLLM main rules (kvplan.engines.vllm_memory): pool = int(total x 0.92) - weights - activation
- (non-torch + CUDA graphs), with activation = max(T x (3 x intermediate/tp + 6 x hidden)
x 2, int(15.45 x 1024 x vocab)), T the default token budget (8192; 16384 on a >= 160 GiB GPU
such as the B200 since vLLM 0.28), non-torch 0.25 GiB (2.1 GiB with TP), graphs 768 MiB + 5 MiB
per layer (+ 384 MiB with TP). Driver totals are the hardware_specs YAML values.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvplan.cli.main import run

MiB, GiB = 2**20, 2**30
TOTAL = {"h100": 85_045_477_376, "h200": 150_119_844_413, "b200": 191_501_854_310}

# Llama-3-70B, fp8 weights (vLLM --quantization fp8: per-tensor scales), TP 1:
LINEAR_PER_LAYER = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28672 * 8192  # q, o, k, v, MLP
WEIGHTS_FP8_TP1 = (80 * LINEAR_PER_LAYER + 4 * 7 * 80  # 1 B each + one fp32 scale per Linear
                   + 2 * (2 * 128256 * 8192 + 80 * 2 * 8192 + 8192))  # bf16 embed, head, norms
ACT_TP1 = max(8192 * (3 * 28672 + 6 * 8192) * 2, int(Fraction(1545, 100) * 1024 * 128256))
ACT_TP1_B200 = max(16384 * (3 * 28672 + 6 * 8192) * 2, int(Fraction(1545, 100) * 1024 * 128256))
OVERHEAD_TP1 = GiB // 4 + 768 * MiB + 5 * MiB * 80
FP8_SEQ_PER_TOKEN = 2 * 80 * 8 * 128 * 1  # K and V, 80 layers, 8 KV heads, fp8


def _fit(capsys, *args) -> dict:
    import json

    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_hand_terms():
    assert WEIGHTS_FP8_TP1 == 72_656_373_952
    assert ACT_TP1 == 2_214_592_512  # the forward pass, not the sampler, is the peak here
    assert ACT_TP1_B200 == 2 * ACT_TP1 == 4_429_185_024
    assert OVERHEAD_TP1 == 1_493_172_224


@pytest.mark.parametrize("gpu,context,expected", [
    ("h100", "8k", 1), ("h100", "32k", 0), ("h200", "32k", 11), ("h200", "128k", 2),
    ("b200", "128k", 4)])
def test_llama3_70b_fp8_single_gpu(capsys, gpu, context, expected):
    d = _fit(capsys, "llama-3.1-70b", "--gpu", gpu, "--weight-dtype", "fp8", "--kv-dtype", "fp8",
             "-c", context)
    act = ACT_TP1_B200 if gpu == "b200" else ACT_TP1
    pool = int(TOTAL[gpu] * Fraction(92, 100)) - WEIGHTS_FP8_TP1 - act - OVERHEAD_TP1
    assert d["memory"]["kv_pool_bytes"] == pool
    n = int(context[:-1]) * 1024
    assert d["per_sequence_bytes"] == n * FP8_SEQ_PER_TOKEN
    blocks = pool // (16 * 8 * 128 * 2 * 80)  # one block: 16 tokens x K+V x 80 layers, fp8
    assert d["max_concurrency"] == blocks // (n // 16) == expected
    assert d["fits"] is (expected >= 1)


def test_scenario1_fp8_tp2_and_shared_prefix(capsys):
    args = ["llama-3.3-70b-instruct", "--gpu", "h100", "--tp", "2", "--weight-dtype", "fp8",
            "--kv-dtype", "fp8", "-c", "32k"]
    d = _fit(capsys, *args)
    assert d["per_sequence_bytes"] == 32768 * 2 * 80 * 4 * 128  # 4 KV heads per GPU: 2.5 GiB
    blocks = d["memory"]["kv_pool_bytes"] // (16 * 4 * 128 * 2 * 80)
    assert d["max_concurrency"] == blocks // 2048 == 13
    shared = _fit(capsys, *args, "--shared-prefix", "1k")
    assert shared["max_concurrency"] == (blocks - 64) // (2048 - 64) == 13  # a 3% saving


def test_scenario2_deepseek_v2_lite_vs_llama3_8b(capsys):
    d = _fit(capsys, "deepseek-v2-lite", "--gpu", "h200", "--weight-dtype", "fp8", "-c", "128k")
    assert d["block_size_tokens"] == 16  # FlashAttention-3 MLA on Hopper, bf16 KV (vLLM >= 0.18)
    assert d["per_sequence_bytes"] == 131072 * (512 + 64) * 27 * 2  # 31,104 B per token
    blocks = d["memory"]["kv_pool_bytes"] // (16 * 576 * 2 * 27)
    assert d["max_concurrency"] == blocks // (131072 // 16) == 29
    d8 = _fit(capsys, "llama-3.1-8b", "--gpu", "h200", "--weight-dtype", "fp8", "--kv-dtype", "fp8",
              "-c", "128k")
    assert d8["per_sequence_bytes"] == 131072 * 2 * 32 * 8 * 128 == 8 * GiB
    assert d8["max_concurrency"] == 14


def test_scenario3_one_million_tokens_needs_tp2(capsys):
    d = _fit(capsys, "llama-3.3-70b-instruct", "--gpu", "b200", "--weight-dtype", "fp8",
             "--kv-dtype", "fp8", "-c", "1M", "--allow-long-max-model-len")
    assert d["per_sequence_bytes"] == 2**20 * 2 * 80 * 8 * 128 == 160 * GiB
    assert d["fits"] is False and d["max_concurrency"] == 0
    assert d["suggestion"] == {"tp": 2, "pp": 1, "dp": 1, "ep": 1, "dcp": 1,
                               "max_concurrency": 1}
