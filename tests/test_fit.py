"""``kvplan fit`` (``kvplan.planning.fit.plan_fit``): budgets, pools, blocks and concurrency derived by
hand from the engines' formulas and the real model configs / GPU YAML files.

House rule: every expected number below is derived independently here, with the arithmetic
written out, from ``model_specs/<model>.json`` ("config") and ``hardware_specs/<gpu>.yaml``
(``memory.driver_total_bytes``) - never copied from kvplan's output. Estimated terms
(activation peak, runtime overhead) are pinned with the override fields so the derivation is
exact; where an estimate itself is under test its documented formula is re-derived here.

Formulas (docs/budget-research.md):
- vLLM: usable = int(total x gpu_memory_utilization) (0.9 for vllm@0.19, 0.92 on main);
  pool = usable - weights - activation - overhead (main: overhead = non-torch + CUDA graphs,
  graphs = 768 MiB + 5 MiB x layers (+ 384 MiB with TP); non-torch 0.25 GiB, 2.1 GiB with TP);
  num_blocks = pool // page // layers_in_group; tokens = num_blocks // groups x block;
  Maximum concurrency = num_blocks / blocks per max_model_len request.
- SGLang: pool = int((total - overhead) x mem_fraction_static) - weights; tokens = pool // cell.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from kvplan.core.errors import InputError
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import Draft, FitRequest
from kvplan.planning.launch import launch_commands

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB, GiB = 2**10, 2**20, 2**30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def config(name: str) -> dict:
    """The model's published config.json, as stored in model_specs/."""
    return json.loads((ROOT / "model_specs" / f"{name}.json").read_text())["config"]


def driver_total(gpu: str) -> int:
    """``memory.driver_total_bytes`` read straight from the GPU's YAML file."""
    data = yaml.safe_load((ROOT / "hardware_specs" / f"{gpu}.yaml").read_text())
    return data["memory"]["driver_total_bytes"]


H100 = driver_total("h100-sxm")  # 85_045_477_376 in the YAML (deviceQuery, 79.20 GiB)
H200 = driver_total("h200-sxm")  # 150_119_844_413 in the YAML (139.81 GiB)


def test_driver_totals_are_the_yaml_values():
    assert H100 == 85_045_477_376
    assert H200 == 150_119_844_413


def plan(model: str, gpu: str, *, weight_dtype: str | None = None, draft: str | None = None,
         num_speculative_tokens: int = 0, **kw):
    """plan_fit the way ``kvplan fit`` builds its request."""
    m = load_model(model)
    d = None
    if draft:
        dm = load_model(draft)
        d = Draft(dm, weight_inventory(dm), weight_format(dm, weight_dtype), num_speculative_tokens)
    req = FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, weight_dtype),
                     gpu=load_gpu(gpu), draft=d, **kw)
    return plan_fit(req)


def vllm_usable(total: int, percent: int) -> int:
    """int(total x util) with util = percent / 100, exactly."""
    return total * percent // 100


# ---- dense Llama-style parameter bytes, by hand ---------------------------------------------

def llama_layer_params(c: dict, tp: int) -> int:
    """One decoder layer on one TP rank: q, k, v, o, gate, up, down, two RMSNorms."""
    h, inter = c["hidden_size"], c["intermediate_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or h // heads
    kv_rank = max(1, kv // tp)
    q = heads * hd // tp * h  # column-parallel rows
    k = v = kv_rank * hd * h  # split by KV head
    o = h * (heads * hd // tp)  # row-parallel columns
    mlp = 3 * (inter // tp) * h
    return q + k + v + o + mlp + 2 * h


def llama_vocab_rows(c: dict, tp: int) -> int:
    return cdiv(cdiv(c["vocab_size"], 64) * 64, tp)  # vocab padded to 64, then split


def llama_bf16_stage_bytes(c: dict, tp: int, layers: int, first: bool, last: bool) -> int:
    h = c["hidden_size"]
    b = layers * llama_layer_params(c, tp) * 2
    if first:
        b += llama_vocab_rows(c, tp) * h * 2  # embed_tokens
    if last:
        b += h * 2 + llama_vocab_rows(c, tp) * h * 2  # final norm + untied lm_head
    return b


def llama_page(c: dict, tp: int, block: int = 16, dtype_bytes: int = 2) -> int:
    """One layer's block on one rank: block x kv_heads/rank x head_dim x 2 (K, V) x bytes."""
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return block * max(1, c["num_key_value_heads"] // tp) * hd * 2 * dtype_bytes


def test_llama_3_8b_parameter_count_by_hand():
    c = config("llama-3.1-8b")
    # per layer 4096 x (4096 + 1024 + 1024 + 4096) + 3 x 14336 x 4096 + 2 x 4096 = 218,112,000
    assert llama_layer_params(c, 1) == 218_112_000
    total = 32 * 218_112_000 + 2 * 128_256 * 4096 + 4096
    assert total == 8_030_261_248
    r = plan("llama-3.1-8b", "h100-sxm", activation_memory_bytes=GiB, overhead_memory_bytes=GiB)
    assert r.params_total == r.params_active == total
    assert r.budget.weights_bytes == 2 * total == 16_060_522_496


# ---- 1. dense GQA, vLLM ------------------------------------------------------------------------

def test_llama_3_8b_vllm_0_19_h100():
    c = config("llama-3.1-8b")
    weights = 16_060_522_496  # 8,030,261,248 parameters x 2 B (bf16)
    act, over = 2 * GiB, GiB // 2
    usable = vllm_usable(H100, 90)  # vllm@0.19: gpu_memory_utilization 0.9
    assert usable == 76_540_929_638  # 85,045,477,376 x 0.9 = 76,540,929,638.4
    pool = usable - weights - act - over  # no CUDA-graph term before 0.21
    page = 16 * 8 * 128 * 2 * 2  # 16 tokens x 8 KV heads x 128 x (K, V) x 2 B = 65,536
    assert page == llama_page(c, 1) == 65_536
    nb = pool // page // 32
    r = plan("llama-3.1-8b", "h100-sxm", engine="vllm@0.19", activation_memory_bytes=act,
             overhead_memory_bytes=over)
    m = r.budget
    assert (m.total_bytes, m.usable_bytes, m.weights_bytes) == (H100, usable, weights)
    assert (m.activation_bytes, m.runtime_overhead_bytes, m.kv_pool_bytes) == (act, over, pool)
    assert r.stages[0].num_blocks == nb
    assert r.block_size_tokens == 16
    assert r.kv_pool_tokens == nb * 16
    assert r.per_sequence_bytes == 8192 * 32 * 8 * 128 * 2 * 2  # 1 GiB at 8k
    assert r.max_concurrency == nb // cdiv(8192, 16)
    assert r.engine_max_concurrency == pytest.approx(nb / 512)
    assert r.fits


def test_llama_3_8b_vllm_main_subtracts_cuda_graphs_h100():
    act = 2 * GiB
    weights = 16_060_522_496
    usable = vllm_usable(H100, 92)  # main: 0.92
    non_torch = GiB // 4  # one GPU
    graphs = 768 * MiB + 5 * MiB * 32  # 32 layers, no TP: 928 MiB
    assert graphs == 973_078_528
    overhead = non_torch + graphs
    pool = usable - weights - act - overhead
    nb = pool // 65_536 // 32
    r = plan("llama-3.1-8b", "h100-sxm", activation_memory_bytes=act)
    m = r.budget
    assert m.usable_bytes == usable == 78_241_839_185  # x 0.92 = 78,241,839,185.92
    assert m.runtime_overhead_bytes == overhead
    assert m.kv_pool_bytes == pool
    assert r.stages[0].num_blocks == nb and r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // 512
    assert r.engine_max_concurrency == pytest.approx(nb / 512)
    # the same request under 0.19 rules keeps the graphs in the headroom and uses 0.9
    old = plan("llama-3.1-8b", "h100-sxm", engine="vllm@0.19", activation_memory_bytes=act)
    assert old.budget.runtime_overhead_bytes == non_torch
    assert old.budget.kv_pool_bytes == vllm_usable(H100, 90) - weights - act - non_torch


def test_llama_3_8b_vllm_main_h200_32k():
    act, over = 2 * GiB, GiB
    usable = vllm_usable(H200, 92)  # 150,119,844,413 x 0.92 = 138,110,256,859.96
    assert usable == 138_110_256_859
    pool = usable - 16_060_522_496 - act - over
    nb = pool // 65_536 // 32
    r = plan("llama-3.1-8b", "h200-sxm", context_tokens=32768, activation_memory_bytes=act,
             overhead_memory_bytes=over)
    assert r.budget.kv_pool_bytes == pool
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // cdiv(32768, 16)  # 2048 blocks per sequence
    assert r.engine_max_concurrency == pytest.approx(nb / 2048)
    assert r.per_sequence_bytes == 32768 * 131_072  # 32 layers x 8 x 128 x 2 x 2 B per token


def test_llama_3_70b_fp8_tp2_h200():
    c = config("llama-3.1-70b")
    h = 8192
    # fp8 (per-tensor): every Linear is 1 B per element + one fp32 scale; embed, norms and
    # lm_head stay bf16. Per rank at tp 2:
    q = 64 * 128 // 2 * h + 4  # 4096 x 8192
    k = v = 4 * 128 * h + 4  # 8 KV heads -> 4 per rank
    o = h * (64 * 128 // 2) + 4
    gate = up = (28672 // 2) * h + 4
    down = h * (28672 // 2) + 4
    norms = 2 * h * 2
    layer = q + k + v + o + gate + up + down + norms
    assert layer == 427_851_804
    vocab_rows = 128_256 // 2  # 128,256 is a multiple of 64: no padding
    weights = 80 * layer + vocab_rows * h * 2 + (h * 2 + vocab_rows * h * 2)
    assert weights == 36_329_507_008
    act = 3 * GiB
    non_torch = 21 * GiB // 10  # 2.1 GiB with TP
    graphs = 768 * MiB + 5 * MiB * 80 + 384 * MiB
    pool = vllm_usable(H200, 92) - weights - act - non_torch - graphs
    page = 16 * 4 * 128 * 2 * 2  # 4 KV heads per rank: 32,768
    assert page == llama_page(c, 2)
    nb = pool // page // 80
    r = plan("llama-3.1-70b", "h200-sxm", weight_dtype="fp8", tp=2, context_tokens=32768,
             activation_memory_bytes=act)
    assert r.budget.weights_bytes == weights
    assert r.budget.runtime_overhead_bytes == non_torch + graphs
    assert r.budget.kv_pool_bytes == pool
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // 2048
    assert r.engine_max_concurrency == pytest.approx(nb / 2048)
    assert launch_commands(r)["vllm"].count("--tensor-parallel-size 2") == 1


# ---- 2. MLA MoE -------------------------------------------------------------------------------

def deepseek_v2_lite_bf16_bytes() -> int:
    c = config("deepseek-v2-lite")
    h, heads = c["hidden_size"], c["num_attention_heads"]  # 2048, 16
    r, rope, nope, vd = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
    attn = (heads * (nope + rope) * h  # q_proj (q_lora_rank is null): 3072 x 2048
            + (r + rope) * h  # kv_a_proj_with_mqa: 576 x 2048
            + r  # kv_a_layernorm
            + heads * (nope + vd) * r  # kv_b_proj: 4096 x 512
            + h * heads * vd)  # o_proj: 2048 x 2048
    norms = 2 * h
    dense = 3 * c["intermediate_size"] * h  # layer 0 (first_k_dense_replace = 1)
    e, mi = c["n_routed_experts"], c["moe_intermediate_size"]  # 64 x 1408
    moe = e * h + e * 3 * mi * h + 3 * (c["n_shared_experts"] * mi) * h  # router, experts, shared
    params = (2 * c["vocab_size"] * h + h  # embed + lm_head + final norm
              + 27 * (attn + norms) + dense + 26 * moe)
    assert params == 15_706_484_224  # "15.7B"
    return params * 2


def test_deepseek_v2_lite_mla_h100():
    weights = deepseek_v2_lite_bf16_bytes()
    act, over = 2 * GiB, GiB
    pool = vllm_usable(H100, 92) - weights - act - over
    # MLA caches one latent of kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576 elements per
    # layer per token (no K/V factor 2), bf16; vLLM (>= 0.18) runs FlashAttention-3 MLA on Hopper
    # with a bf16 cache: 16-token blocks (kvplan.engines.vllm_mla).
    page = 16 * 576 * 2
    assert page == 18_432
    nb = pool // page // 27
    r = plan("deepseek-v2-lite", "h100-sxm", context_tokens=32768, activation_memory_bytes=act,
             overhead_memory_bytes=over)
    assert r.block_size_tokens == 16
    assert r.budget.weights_bytes == weights
    assert r.budget.kv_pool_bytes == pool
    assert r.stages[0].num_blocks == nb
    assert r.kv_pool_tokens == nb * 16
    assert r.per_sequence_bytes == 32768 * 27 * 576 * 2
    assert r.max_concurrency == nb // cdiv(32768, 16)  # 2,048 blocks per sequence
    assert r.engine_max_concurrency == pytest.approx(nb / 2048)
    assert r.params_total == weights // 2
    # active: the 26 MoE layers run 6 of 64 routed experts
    routed = 26 * 64 * 3 * 1408 * 2048
    assert r.params_active == weights // 2 - routed + routed * 6 // 64


def test_mla_latent_is_replicated_on_every_tp_rank():
    pool = 30 * GiB
    blocks = pool // (16 * 576 * 2) // 27  # same page on every rank, whatever the TP degree
    for tp in (1, 2, 4):
        r = plan("deepseek-v2-lite", "h100-sxm", tp=tp, context_tokens=8192, kv_cache_memory_bytes=pool)
        assert r.budget.kv_pool_bytes == pool
        assert r.stages[0].num_blocks == blocks, tp
        assert r.per_sequence_bytes == 8192 * 27 * 1152, tp


def deepseek_v3_fp8_block_bytes_tp8() -> int:
    """DeepSeek-V3 per GPU at tp 8 with its quantization_config: fp8 e4m3 weights with an fp32
    scale per 128 x 128 block (weight_block_size) on every Linear; router bf16,
    e_score_correction_bias fp32, norms / embed / lm_head bf16; the MTP layer not loaded."""
    c = config("deepseek-v3")
    q = c["quantization_config"]
    assert q["quant_method"] == "fp8" and q["weight_block_size"] == [128, 128]
    tp, h = 8, c["hidden_size"]  # 7168

    def fp8b(rows: int, cols: int) -> int:
        return rows * cols + 4 * cdiv(rows, 128) * cdiv(cols, 128)

    heads, qk, vd, ql, r = 128, 128 + 64, 128, c["q_lora_rank"], c["kv_lora_rank"]
    attn = (fp8b(ql, h) + ql * 2  # q_a_proj (replicated) + q_a_layernorm
            + fp8b(heads * qk // tp, ql)  # q_b_proj 3072 x 1536 per rank
            + fp8b(r + 64, h) + r * 2  # kv_a_proj_with_mqa (replicated) + kv_a_layernorm
            + fp8b(heads * (128 + vd) // tp, r)  # kv_b_proj 4096 x 512
            + fp8b(h, heads * vd // tp))  # o_proj 7168 x 2048
    norms = 2 * h * 2
    dense = 2 * fp8b(c["intermediate_size"] // tp, h) + fp8b(h, c["intermediate_size"] // tp)
    expert = 2 * fp8b(c["moe_intermediate_size"] // tp, h) + fp8b(h, c["moe_intermediate_size"] // tp)
    moe = (256 * h * 2 + 256 * 4  # router (bf16) + e_score_correction_bias (fp32)
           + 256 * expert + expert)  # routed experts + one shared expert of the same width
    vocab_rows = c["vocab_size"] // tp  # 129,280 = 2020 x 64: no padding -> 16,160
    return (vocab_rows * h * 2 + 61 * (attn + norms) + 3 * dense + 58 * moe
            + h * 2 + vocab_rows * h * 2)


def test_deepseek_v3_fp8_block_tp8_h200_128k():
    weights = deepseek_v3_fp8_block_bytes_tp8()
    act, over = 4 * GiB, 4 * GiB
    pool = vllm_usable(H200, 92) - weights - act - over
    page = 16 * (512 + 64) * 2  # latent, bf16 KV: FlashAttention-3 MLA's 16-token block
    nb = pool // page // 61
    r = plan("deepseek-v3", "h200-sxm", tp=8, context_tokens=131072, activation_memory_bytes=act,
             overhead_memory_bytes=over)
    assert r.block_size_tokens == 16
    assert r.budget.weights_bytes == weights
    assert r.budget.kv_pool_bytes == pool
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // (131072 // 16)
    assert r.engine_max_concurrency == pytest.approx(nb / 8192)
    assert r.per_sequence_bytes == 131072 * 61 * 1152
    assert r.fits


# ---- 3. hybrids -------------------------------------------------------------------------------

def test_gpt_oss_20b_tp2_h100_worked_example():
    """kvpool.py's worked example (a real vLLM 0.19 log): 12 sliding (W 128) + 12 full layers,
    4 KV heads per rank x 64 x 2 x 2 B x 16 tokens = 16,384 B pages, 2 groups of 12."""
    page = 16 * (8 // 2) * 64 * 2 * 2
    assert page == 16_384
    nb = 323_972  # the logged block count; give a pool that holds exactly that many
    pool = nb * page * 12 + page * 12 - 1
    r = plan("gpt-oss-20b", "h100-sxm", tp=2, context_tokens=8192, kv_cache_memory_bytes=pool)
    assert r.stages[0].num_blocks == nb
    assert r.stages[0].groups == 2 and r.stages[0].padding_layers == 0
    assert r.kv_pool_tokens == nb // 2 * 16 == 2_591_776  # logged: 2,591,776 tokens
    # vLLM's per-request figure: full cdiv(8192, 16) = 512, sliding
    # cdiv(min(127 + 8192, 8192), 16) + 1 = 513 -> 1,025 blocks -> 316.07x (logged)
    per_request = cdiv(8192, 16) + cdiv(min(128 - 1 + 8192, 8192), 16) + 1
    assert per_request == 1025
    assert r.engine_max_concurrency == pytest.approx(nb / per_request)
    assert round(r.engine_max_concurrency, 2) == 316.07
    # a decoding sequence holds 512 full blocks + the sliding window's worst case
    # cdiv(127 + 16 - 1, 16) = 9 blocks
    assert r.max_concurrency == nb // (512 + cdiv(127 + 15, 16))


def test_gpt_oss_20b_mxfp4_budget_h200():
    c = config("gpt-oss-20b")
    h, hd, heads, kv, e = 2880, 64, 64, 8, 32
    assert (c["hidden_size"], c["head_dim"], c["num_local_experts"]) == (h, hd, e)
    bf16 = 2
    attn = ((heads * hd * h + heads * hd) + 2 * (kv * hd * h + kv * hd)  # q, k, v + biases
            + (h * heads * hd + h)  # o_proj + bias
            + heads) * bf16  # sinks
    norms = 2 * h * bf16
    router = (e * h + e) * bf16
    # experts: mxfp4 = 4 bits per element + one e8m0 scale per 32: n/2 + n/32 = 17n/32 bytes
    n = h * c["intermediate_size"]  # every expert matrix is 2880 x 2880
    assert n * 17 % 32 == 0
    experts = e * 3 * (n * 17 // 32) + e * 3 * h * bf16  # gate, up, down + their bf16 biases
    vocab = c["vocab_size"]  # 201,088 = 3142 x 64
    weights = vocab * h * bf16 + 24 * (attn + norms + router + experts) + h * bf16 + vocab * h * bf16
    act, over = 3 * GiB, GiB
    pool = vllm_usable(H200, 92) - weights - act - over
    page = 16 * 8 * 64 * 2 * 2  # tp 1: 32,768
    nb = pool // page // 12  # two groups of 12 layers share each block id
    r = plan("gpt-oss-20b", "h200-sxm", context_tokens=32768, activation_memory_bytes=act,
             overhead_memory_bytes=over)
    assert r.budget.weights_bytes == weights
    assert r.budget.kv_pool_bytes == pool
    assert r.stages[0].num_blocks == nb
    assert r.kv_pool_tokens == nb // 2 * 16
    mnbt = 8192  # vllm serve default on >= 70 GiB GPUs
    assert r.max_num_batched_tokens == mnbt
    # vLLM main (0.34): a sliding layer reserves its window + max_in_flight_tokens = (pp 1 + 1
    # async batches) x 8,192 = 16,384 tokens: cdiv(127 + 16,384, 16) + 1 = 1,033 pages
    per_request = cdiv(32768, 16) + cdiv(min(127 + 2 * mnbt, 32768), 16) + 1  # 2048 + 1033
    assert r.engine_max_concurrency == pytest.approx(nb / per_request)
    assert r.max_concurrency == nb // (2048 + 9)


def nemotron_mamba_page(tp: int, ssm_bytes: int, conv_bytes: int = 2) -> int:
    c = config("nemotron-h-56b-base-8k")
    heads, hd, state, groups = c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"], c["n_groups"]
    d_inner = heads * hd  # 256 x 64 = 16,384
    conv_dim = d_inner + 2 * groups * state  # 16,384 + 2 x 8 x 256 = 20,480
    conv = (c["conv_kernel"] - 1) * (conv_dim // tp) * conv_bytes
    ssm = (heads // tp) * hd * state * ssm_bytes
    return conv + ssm


def test_nemotron_h_56b_attention_block_covers_mamba_page():
    c = config("nemotron-h-56b-base-8k")
    pattern = c["hybrid_override_pattern"]
    n_mamba, n_attn = pattern.count("M"), pattern.count("*")
    assert (len(pattern), n_mamba, n_attn) == (118, 54, 10)
    # vLLM main: NemotronH SSM state fp32 (the config declares no mamba_ssm_cache_dtype),
    # conv state in the model dtype (bf16)
    assert "mamba_ssm_cache_dtype" not in c
    mamba = nemotron_mamba_page(1, ssm_bytes=4)
    assert mamba == 3 * 20_480 * 2 + 256 * 64 * 256 * 4 == 16_900_096
    attn_per_token = 8 * 128 * 2 * 2  # 8 KV heads x 128 x (K, V) x 2 B = 4,096
    block = 16 * cdiv(mamba, 16 * attn_per_token)  # 16 x cdiv(16,900,096, 65,536) = 16 x 258
    assert block == 4128
    page = block * attn_per_token  # the Mamba page is padded up to this
    # groups: group_size = min(54, 10) = 10 (54 >= 1.25 x 10); Mamba cdiv(54, 10) = 6 groups
    # (6 padding layers) + 1 attention group = 7 groups; blocks = pool // page // 10
    pool = 20 * GiB  # with 112 GB of weights, what one H200 can hold
    nb = pool // page // 10
    r = plan("nemotron-h-56b-base-8k", "h200-sxm", context_tokens=8192, kv_cache_memory_bytes=pool)
    assert r.block_size_tokens == block
    st = r.stages[0]
    assert (st.groups, st.padding_layers) == (7, 6)
    assert st.num_blocks == nb
    assert r.kv_pool_tokens == nb // 7 * block
    # per request: attention cdiv(8192, 4128) = 2 blocks + one block in each of 6 Mamba groups
    assert r.max_concurrency == nb // (2 + 6)
    assert r.engine_max_concurrency == pytest.approx(nb / 8)


def test_nemotron_h_56b_tp2_and_old_vllm_fp16_state():
    # tp 2: conv 3 x 10,240 x 2 B + ssm 128 x 64 x 256 x 4 B; attention 4 KV heads = 2,048 B/token
    mamba = nemotron_mamba_page(2, ssm_bytes=4)
    assert mamba == 8_450_048
    block = 16 * cdiv(mamba, 16 * 2048)
    assert block == 4128
    pool = 40 * GiB
    r = plan("nemotron-h-56b-base-8k", "h200-sxm", tp=2, context_tokens=8192, kv_cache_memory_bytes=pool)
    assert r.block_size_tokens == block
    assert r.stages[0].num_blocks == pool // (block * 2048) // 10
    # vllm@0.11: the NemotronH SSM state defaults to float16 there
    mamba_old = nemotron_mamba_page(1, ssm_bytes=2)
    assert mamba_old == 122_880 + 8_388_608
    block_old = 16 * cdiv(mamba_old, 16 * 4096)  # cdiv(8,511,488, 65,536) = 130
    assert block_old == 2080
    r = plan("nemotron-h-56b-base-8k", "h200-sxm", engine="vllm@0.11", context_tokens=8192,
             kv_cache_memory_bytes=pool)
    assert r.block_size_tokens == block_old
    assert r.stages[0].num_blocks == pool // (block_old * 4096) // 10


# ---- 4. SGLang --------------------------------------------------------------------------------

def test_sglang_pool_with_given_fraction_h100():
    weights, over = 16_060_522_496, GiB // 2
    f = Fraction(85, 100)
    pool = int((H100 - over) * f) - weights  # activations live in the (1 - f) reserve
    cell = 32 * 8 * 128 * 2 * 2  # every layer's K + V per token: 131,072 B
    r = plan("llama-3.1-8b", "h100-sxm", engine="sglang", context_tokens=8192, utilization=0.85,
             overhead_memory_bytes=over, activation_memory_bytes=GiB)
    assert r.block_size_tokens == 1  # SGLang's default page size
    assert r.budget.usable_bytes == int((H100 - over) * f)
    assert r.budget.kv_pool_bytes == pool
    assert r.kv_pool_tokens == pool // cell
    assert r.per_sequence_bytes == 8192 * cell
    assert r.max_concurrency == pool // (8192 * cell)
    assert r.engine_max_concurrency == pytest.approx((pool // cell) / 8192)
    assert "--tp-size 1" in launch_commands(r)["sglang"]
    assert "--mem-fraction-static 0.850" in launch_commands(r)["sglang"]


def sglang_reserved_mib(tp: int = 1, pp: int = 1) -> Fraction:
    # 80-160 GiB GPUs: chunked_prefill_size 8192, cuda_graph_max_bs 256 (tp < 4)
    reserved = 512 + Fraction(3, 2) * max(8192, 2048) + 2 * 256 + Fraction(tp * pp, 8) * 1024
    return max(reserved, Fraction(10 * 1024))  # at least 10 GiB on GPUs over 60 GiB


def test_sglang_default_fraction_without_smi_total_uses_driver_total():
    """With no nvidia-smi total in the YAML (a user's file), the driver total stands in."""
    from kvplan.engines.sglang_memory import default_mem_fraction

    assert sglang_reserved_mib() == 13_440
    gpu_mib = H100 // MiB
    assert gpu_mib == 81_105  # 85,045,477,376 / 2^20 = 81,105.99 MiB, floored
    f = round((gpu_mib - 13_440) / gpu_mib, 3)  # 67,665 / 81,105 = 0.83429 -> 0.834
    assert float(default_mem_fraction(H100, 1, 1)[0]) == f == 0.834


def test_sglang_default_fraction_matches_sglang():
    """SGLang reads gpu_mem from `nvidia-smi --query-gpu=memory.total` (docs/budget-research.md
    5.1): H100 81,559 MiB -> 0.835 (the value SGLang logs), H200 143,771 MiB -> 0.907."""
    from kvplan.engines.sglang_memory import default_mem_fraction

    for total, smi_mib in ((H100, 81_559), (H200, 143_771)):
        expected = round((smi_mib - 13_440) / smi_mib, 3)
        assert float(default_mem_fraction(total, 1, 1, smi_mib)[0]) == expected
    assert round((81_559 - 13_440) / 81_559, 3) == 0.835
    weights, over = 16_060_522_496, GiB // 2
    r = plan("llama-3.1-8b", "h100-sxm", engine="sglang", overhead_memory_bytes=over,
             activation_memory_bytes=GiB)
    assert r.budget.usable_bytes == int((H100 - over) * Fraction(835, 1000))
    assert r.budget.kv_pool_bytes == int((H100 - over) * Fraction(835, 1000)) - weights


# ---- 5. --kv-cache-memory, shared prefix --------------------------------------------------------

def test_kv_cache_memory_is_the_pool():
    pool = 40 * GiB
    r = plan("llama-3.1-8b", "h100-sxm", context_tokens=8192, kv_cache_memory_bytes=pool)
    assert r.budget.kv_pool_bytes == pool
    nb = pool // 65_536 // 32  # = 40 GiB / 2 MiB = 20,480 blocks
    assert nb == 20_480
    assert r.kv_pool_tokens == 327_680
    assert r.max_concurrency == 40 and r.engine_max_concurrency == pytest.approx(40.0)
    assert "--kv-cache-memory-bytes 42949672960" in launch_commands(r)["vllm"]
    odd = 12_345_678_901
    r = plan("llama-3.1-8b", "h200-sxm", tp=2, context_tokens=4096, kv_cache_memory_bytes=odd)
    page = 16 * 4 * 128 * 2 * 2  # tp 2: 4 KV heads per rank
    nb = odd // page // 32
    assert r.budget.kv_pool_bytes == odd
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // 256


def test_shared_prefix_counts_whole_blocks_once():
    pool = 40 * GiB  # 20,480 blocks of 16 tokens x 32 layers
    nb, per_seq = 20_480, cdiv(8192, 16)
    for prefix in (1000, 4096, 15):
        shared = prefix // 16  # whole blocks only: 62, 256, 0
        r = plan("llama-3.1-8b", "h100-sxm", context_tokens=8192, shared_prefix_tokens=prefix,
                 kv_cache_memory_bytes=pool)
        assert r.max_concurrency == (nb - shared) // (per_seq - shared), prefix
    assert (20_480 - 62) // (512 - 62) == 45 and (20_480 - 256) // (512 - 256) == 79
    # SGLang (page 1): prefix bytes counted once too
    cell = 131_072
    r = plan("llama-3.1-8b", "h100-sxm", engine="sglang", context_tokens=8192,
             shared_prefix_tokens=1000, kv_cache_memory_bytes=pool)
    assert r.max_concurrency == (pool - 1000 * cell) // ((8192 - 1000) * cell)


# ---- 6. speculative decoding draft ------------------------------------------------------------

def test_draft_same_page_joins_one_uniform_group():
    # llama-3-70b + llama-3-8b draft at tp 2: both 4 KV heads x 128 per rank -> 32,768 B pages,
    # one group of 80 + 32 = 112 layers
    pool, k = 50 * GiB, 4
    page = 16 * 4 * 128 * 2 * 2
    nb = pool // page // (80 + 32)
    r = plan("llama-3.1-70b", "h200-sxm", tp=2, draft="llama-3.1-8b", num_speculative_tokens=k,
             context_tokens=8192, kv_cache_memory_bytes=pool)
    assert r.stages[0].num_blocks == nb and r.stages[0].groups == 1
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // cdiv(8192 + k, 16)  # 513 blocks with the lookahead
    assert r.engine_max_concurrency == pytest.approx(nb / 512)  # vLLM's figure has no lookahead
    # the draft's weights sit on the (last) stage too: both models at tp 2, bf16
    c70, c8 = config("llama-3.1-70b"), config("llama-3.1-8b")
    w = llama_bf16_stage_bytes(c70, 2, 80, True, True) + llama_bf16_stage_bytes(c8, 2, 32, True, True)
    assert r.budget.weights_bytes == w
    assert '"num_speculative_tokens":4' in launch_commands(r)["vllm"]


def test_draft_with_other_page_sums_pages():
    # qwen2.5-72b (8 KV heads) + qwen2.5-7b draft (4 KV heads) at tp 4: pages 2 x 128 x 2 x 2 x 16
    # = 16,384 and 1 x ... = 8,192; one full-attention kind -> one block holds every layer's page
    c72, c7 = config("qwen2.5-72b-instruct"), config("qwen2.5-7b-instruct")
    assert c72["vocab_size"] == c7["vocab_size"]
    p72, p7 = llama_page(c72, 4), llama_page(c7, 4)
    assert (p72, p7) == (16_384, 8_192)
    block = 80 * p72 + 28 * p7
    assert block == 1_540_096
    pool, k = 30 * GiB, 3
    r = plan("qwen2.5-72b-instruct", "h200-sxm", tp=4, draft="qwen2.5-7b-instruct",
             num_speculative_tokens=k, context_tokens=16384, kv_cache_memory_bytes=pool)
    nb = pool // block
    assert r.stages[0].num_blocks == nb
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // cdiv(16384 + k, 16)
    assert r.engine_max_concurrency == pytest.approx(nb / 1024)


def test_llama_3_70b_fp8_with_llama_3_2_1b_draft_h200():
    # target pages 4 KV heads x 128 x 2 x 2 B x 16 = 32,768; draft (head_dim 64) 4 x 64 x 2 x 2 x 16
    # = 16,384: unequal pages of one kind -> one block holds all 80 + 16 layers' pages
    c1 = config("llama-3.2-1b")
    assert (c1["vocab_size"], c1["head_dim"], c1["tie_word_embeddings"]) == (128_256, 64, True)
    block = 80 * 32_768 + 16 * 16_384
    assert block == 2_883_584
    h = 2048
    layer = ((32 * 64 // 2) * h + 4 + 2 * ((8 // 2) * 64 * h + 4) + h * (32 * 64 // 2) + 4
             + 2 * ((8192 // 2) * h + 4) + h * (8192 // 2) + 4 + 2 * h * 2)  # fp8 Linears, bf16 norms
    draft_w = 16 * layer + (128_256 // 2) * h * 2 + h * 2  # tied: one (bf16) embedding + final norm
    target_w = 36_329_507_008  # test_llama_3_70b_fp8_tp2_h200
    act, over, k = 3 * GiB, 4 * GiB, 4
    pool = vllm_usable(H200, 92) - target_w - draft_w - act - over
    nb = pool // block
    r = plan("llama-3.1-70b", "h200-sxm", weight_dtype="fp8", tp=2, draft="llama-3.2-1b",
             num_speculative_tokens=k, context_tokens=32768, activation_memory_bytes=act,
             overhead_memory_bytes=over)
    assert r.budget.weights_bytes == target_w + draft_w
    assert r.budget.kv_pool_bytes == pool
    assert r.stages[0].num_blocks == nb
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // cdiv(32768 + k, 16)  # 2,049 blocks with the lookahead
    assert r.engine_max_concurrency == pytest.approx(nb / 2048)


def test_draft_with_other_vocabulary_is_an_error():
    with pytest.raises(InputError, match="vocabulary 32000, the target 128256"):
        plan("llama-3.1-70b", "h200-sxm", tp=2, draft="llama-2-7b", num_speculative_tokens=3)


# ---- 7. pipeline parallelism -----------------------------------------------------------------

def test_pp3_stages_and_minimum_blocks():
    c = config("llama-3.1-8b")
    # vLLM get_pp_indices: 32 // 3 = 10 each, the remainder 2 to the stages before the last
    sizes = [11, 11, 10]
    act, over = GiB, GiB
    usable = vllm_usable(H100, 90)
    w = [llama_bf16_stage_bytes(c, 1, 11, True, False),  # embed + 11 layers
         llama_bf16_stage_bytes(c, 1, 11, False, False),
         llama_bf16_stage_bytes(c, 1, 10, False, True)]  # 10 layers + final norm + lm_head
    assert w == [5_849_137_152, 4_798_464_000, 5_412_921_344]
    blocks = [(usable - w[s] - act - over) // 65_536 // sizes[s] for s in range(3)]
    nb = min(blocks)
    r = plan("llama-3.1-8b", "h100-sxm", engine="vllm@0.19", pp=3, context_tokens=8192,
             activation_memory_bytes=act, overhead_memory_bytes=over)
    assert [s.layers for s in r.stages] == sizes
    assert [s.budget.weights_bytes for s in r.stages] == w
    assert [s.num_blocks for s in r.stages] == blocks
    assert nb == blocks[0]  # stage 0: most weights and most layers
    assert r.budget.weights_bytes == w[0]
    assert r.kv_pool_tokens == nb * 16
    assert r.max_concurrency == nb // 512
    assert r.per_sequence_bytes == 8192 * 11 * 8 * 128 * 2 * 2


# ---- 8. the TP/PP suggestion -----------------------------------------------------------------

def test_llama_3_70b_bf16_32k_h100_suggestion():
    c = config("llama-3.1-70b")
    act, over, n = GiB, 2 * GiB, 8
    usable = vllm_usable(H100, 92)
    need = cdiv(32768, 16)  # 2,048 blocks per sequence

    def pp_sizes(layers: int, pp: int) -> list[int]:
        sizes = [layers // pp] * pp
        for i in range(layers % pp):
            sizes[pp - 2 - i] += 1
        return sizes

    def blocks(tp: int, pp: int) -> int:
        sizes = pp_sizes(80, pp)
        out = []
        for s, layers in enumerate(sizes):
            pool = usable - llama_bf16_stage_bytes(c, tp, layers, s == 0, s == pp - 1) - act - over
            out.append(max(pool, 0) // llama_page(c, tp) // layers)
        return min(out)

    # tp 1: 141.1 GB of bf16 weights do not fit in 78.2 GB
    assert llama_bf16_stage_bytes(c, 1, 80, True, True) == 2 * 70_553_706_496 > usable
    # tp 2: 70,555,025,408 B of weights per GPU leave 1,703 blocks < 2,048 for one sequence
    assert llama_bf16_stage_bytes(c, 2, 80, True, True) == 70_555_025_408
    assert blocks(2, 1) == 1703 and blocks(1, 2) == 1703  # pp 2 is no better
    assert blocks(1, 3) // need == 7  # 3 GPUs (pp 3): 7 sequences < 8
    assert blocks(4, 1) // need == 14  # 4 GPUs, tp 4 first: 30,320 blocks -> 14 sequences
    r = plan("llama-3.1-70b", "h100-sxm", context_tokens=32768, concurrency=n,
             activation_memory_bytes=act, overhead_memory_bytes=over)
    assert not r.fits and r.max_concurrency == 0
    assert r.suggestion == (4, 1, 1, 1)
    assert r.suggestion_concurrency == blocks(4, 1) // need == 14
    r2 = plan("llama-3.1-70b", "h100-sxm", tp=2, context_tokens=32768, concurrency=n,
              activation_memory_bytes=act, overhead_memory_bytes=over)
    assert r2.stages[0].num_blocks == 1703 and r2.max_concurrency == 0 and not r2.fits
    assert r2.suggestion == (4, 1, 1, 1)
    # a target of 5 is reached with 3 GPUs as pp 3
    r3 = plan("llama-3.1-70b", "h100-sxm", context_tokens=32768, concurrency=5,
              activation_memory_bytes=act, overhead_memory_bytes=over)
    assert r3.suggestion == (1, 3, 1, 1) and r3.suggestion_concurrency == 7


# ---- 9. KV formats the GPU cannot run -------------------------------------------------------

def test_fp8_kv_on_a100_needs_allow_emulated():
    with pytest.raises(InputError, match="cannot run KV format fp8_e4m3 natively"):
        plan("llama-3.1-8b", "a100-80gb-sxm", kv_dtype="fp8", kv_cache_memory_bytes=20 * GiB)
    r = plan("llama-3.1-8b", "a100-80gb-sxm", kv_dtype="fp8", allow_emulated=True,
             kv_cache_memory_bytes=20 * GiB)
    assert r.kv_format == "fp8_e4m3"
    # fp8: 1 B per element -> 32,768 B pages; 20 GiB // (32,768 x 32) = 20,480 blocks
    assert r.stages[0].num_blocks == 20 * GiB // (16 * 8 * 128 * 2 * 1) // 32 == 20_480
    # A100: vllm serve defaults are 2048 batched tokens / 256 sequences
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (2048, 256)
