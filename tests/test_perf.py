"""``kvplan.core.perf`` (roofline decode / prefill / cost) and ``kvplan.planning.perf_model`` (FitResult ->
StepModel), derived by hand.

House rule: every expected number is derived here from the formulas documented in
``kvplan/core/perf.py`` and, for real plans, from ``model_specs/<model>.json`` ("config") and
``hardware_specs/<gpu>.yaml`` - never copied from kvplan's output.

Documented formulas (kvplan/core/perf.py):
- decode bytes = weights + E (1 - (1 - k/E)^B) x expert bytes x MoE layers + B x KV read;
  FLOPs = B x (2 x active params + attention FLOPs per cached token x n);
  step = max(bytes / (HBM x eff), FLOPs / (peak x eff)) + all-reduce;
- all-reduce = 2 x layers x (latency + 2 (tp - 1) / tp x B x hidden x 2 B / (link x eff));
- TPOT = pp x step; tokens/s = B / TPOT; $/Mtok = price / 3600 / (tokens/s) x 1e6;
- prefill = pp x (max(p (2 x active + attn x span) / peak, chunks x weights / HBM) +
  all-reduce(p)), span = p / 2 (full, causal) or (p^2 - max(p - W, 0)^2) / 2p (sliding:
  the exact count of causal pairs within the window).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.core.perf import (
    Efficiency,
    KvRead,
    StepModel,
    allreduce_s,
    attention_flops,
    compute_bound_batch,
    cost_per_mtok_usd,
    decode_step,
    distinct_experts,
    kv_read_bytes,
    prefill_s,
    tokens_per_s,
    tpot_s,
)
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.resolve import load_model
from kvplan.planning.curve import series
from kvplan.planning.deployment import plan
from kvplan.planning.fit_pools import concurrency_at

ROOT = Path(__file__).resolve().parent.parent
IDEAL = Efficiency(hbm_bandwidth=1.0, flops=1.0, interconnect=1.0, allreduce_latency_s=0.0,
                   source="test")


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=0.0)


def gpu_yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "hardware_specs" / f"{name}.yaml").read_text())


def toy(**kw) -> StepModel:
    """A round-number deployment: 1 GB of weights, 100 kB of KV per cached token, 2 GFLOP per
    token + 1 MFLOP per cached token, 1 TB/s HBM, 1 PFLOP/s, 100 GB/s link, ideal kernels."""
    base = dict(weight_bytes=1e9, expert_bytes=0.0, moe_layers=0, num_experts=0, top_k=0,
                kv_reads=(KvRead(1e5),), state_bytes=0.0, flops_per_token=2e9,
                attn_flops=(KvRead(1e6),), hidden_size=1000, layers=10, tp=1, pp=1,
                hbm_bytes_per_s=1e12, flops_per_s=1e15, link_bytes_per_s=1e11, efficiency=IDEAL)
    base.update(kw)
    return StepModel(**base)


# --- hand-built StepModel: each formula --------------------------------------------------------


def test_decode_memory_bound_terms():
    m = toy()
    s = decode_step(m, 4, 1000)
    assert s.kv_bytes == approx(4 * 1e5 * 1000)  # 4e8
    assert s.bytes == approx(1e9 + 4e8)
    assert s.flops == approx(4 * (2e9 + 1e6 * 1000))  # 1.2e10
    assert s.memory_s == approx(1.4e9 / 1e12)  # 1.4 ms
    assert s.compute_s == approx(1.2e10 / 1e15)  # 12 us
    assert s.comm_s == 0
    assert s.seconds == approx(1.4e-3)  # memory-bound


def test_decode_compute_bound_and_efficiency():
    s = decode_step(toy(), 1000, 10)
    assert s.memory_s == approx((1e9 + 1000 * 1e5 * 10) / 1e12)  # 2e-3
    assert s.compute_s == approx(1000 * (2e9 + 1e6 * 10) / 1e15)  # 2.01e-3
    assert s.seconds == approx(2.01e-3)  # compute-bound
    half = toy(efficiency=Efficiency(hbm_bandwidth=0.5, flops=0.25, interconnect=1.0,
                                     allreduce_latency_s=0.0))
    s = decode_step(half, 1000, 10)
    assert s.memory_s == approx(2e9 / (1e12 * 0.5))  # 4 ms
    assert s.compute_s == approx(2.01e12 / (1e15 * 0.25))  # 8.04 ms
    assert s.seconds == approx(8.04e-3)


def test_kv_read_caps_and_state():
    m = toy(kv_reads=(KvRead(100.0), KvRead(10.0, cap_tokens=4096)), state_bytes=7.0,
            attn_flops=(KvRead(3.0), KvRead(5.0, cap_tokens=4096)))
    assert kv_read_bytes(m, 1000) == approx(100 * 1000 + 10 * 1000 + 7)
    assert kv_read_bytes(m, 10_000) == approx(100 * 10_000 + 10 * 4096 + 7)
    assert attention_flops(m, 10_000) == approx(3 * 10_000 + 5 * 4096)


@pytest.mark.parametrize("batch,expected", [
    (1, 2.0),  # 8 x (1 - 6/8) = 2: one token hits exactly its top-2
    (2, 8 * (1 - 0.75**2)),  # 3.5
    (4, 8 * (1 - 0.75**4)),  # 5.46875
])
def test_distinct_experts(batch, expected):
    m = toy(num_experts=8, top_k=2, moe_layers=4, expert_bytes=1e8)
    assert distinct_experts(m, batch) == approx(expected)


def test_distinct_experts_saturates_and_dense_is_zero():
    m = toy(num_experts=8, top_k=2, moe_layers=4, expert_bytes=1e8)
    assert distinct_experts(m, 1000) == pytest.approx(8.0, rel=1e-12)  # 0.75^1000 ~ 1e-125
    assert distinct_experts(toy(), 64) == 0.0


def test_decode_moe_bytes():
    m = toy(num_experts=8, top_k=2, moe_layers=4, expert_bytes=1e8)
    s = decode_step(m, 2, 1000)
    # 1e9 weights + 3.5 experts x 1e8 B x 4 layers + 2 x 1e5 x 1000 KV
    assert s.bytes == approx(1e9 + 3.5 * 1e8 * 4 + 2e8)


def test_allreduce_ring():
    eff = Efficiency(hbm_bandwidth=1.0, flops=1.0, interconnect=0.5, allreduce_latency_s=1e-5)
    m = toy(tp=4, efficiency=eff)
    # 2 x 10 layers x (10 us + 2 x 3/4 x 8 tokens x 1000 hidden x 2 B / (1e11 x 0.5))
    per_call = 1e-5 + 1.5 * 16_000 / 5e10  # 1e-5 + 4.8e-7
    assert allreduce_s(m, 8) == approx(20 * per_call)  # 209.6 us
    assert allreduce_s(m, 8) == approx(2.096e-4)
    assert allreduce_s(toy(tp=1, efficiency=eff), 8) == 0
    s = decode_step(m, 8, 1000)
    assert s.comm_s == approx(2.096e-4)
    assert s.seconds == approx((1e9 + 8e8) / 1e12 + 2.096e-4)  # comm adds to max(mem, flop)


def test_tpot_pipeline_and_throughput():
    m = toy(pp=2)
    stage = (1e9 + 4e8) / 1e12  # the memory-bound stage of test_decode_memory_bound_terms
    assert tpot_s(m, 4, 1000) == approx(2 * stage)  # 2.8 ms: no micro-batch overlap
    assert tokens_per_s(m, 4, 1000) == approx(4 / 2.8e-3)
    assert tokens_per_s(toy(), 4, 1000) == approx(4 / 1.4e-3)


def test_prefill_full_attention_chunks():
    m = toy()
    # p = 10,000 in chunks of 4,096 -> 3 chunks; causal attention span p / 2 = 5,000
    flops = 10_000 * (2e9 + 1e6 * 5_000)  # 7e13
    assert prefill_s(m, 10_000, 4096) == approx(max(flops / 1e15, 3 * 1e9 / 1e12))  # 70 ms
    assert prefill_s(m, 10_000, 4096) == approx(0.07)
    # a short prompt is bound by one pass over the weights: 100 x (2e9 + 1e6 x 50) = 2.05e11 FLOPs
    assert prefill_s(m, 100, 4096) == approx(1e9 / 1e12)
    assert prefill_s(toy(pp=3), 100, 4096) == approx(3e-3)
    # chunks: ceil(8192 / 4096) = 2, ceil(8193 / 4096) = 3 (memory term with a tiny compute)
    cheap = toy(flops_per_token=0.0, attn_flops=())
    assert prefill_s(cheap, 8192, 4096) == approx(2e-3)
    assert prefill_s(cheap, 8193, 4096) == approx(3e-3)


def test_prefill_sliding_span_and_moe_weights():
    m = toy(attn_flops=(KvRead(1e6, cap_tokens=1000),))
    # p = 10,000, W = 1,000: pairs = (10,000^2 - 9,000^2) / 2 = 9,500,000 = p x 950
    assert prefill_s(m, 10_000, 4096) == approx((10_000 * 2e9 + 1e6 * 9_500_000) / 1e15)
    # p = 1,500: (1,500^2 - 500^2) / 2 = 1,000,000 pairs (compute 4 ms > 1 ms of weights)
    assert prefill_s(m, 1500, 4096) == approx((1500 * 2e9 + 1e6 * 1_000_000) / 1e15)
    # p <= W: every causal pair, p^2 / 2
    assert prefill_s(m, 800, 4096) == approx(max((800 * 2e9 + 1e6 * 320_000) / 1e15, 1e-3))
    moe = toy(num_experts=8, top_k=2, moe_layers=4, expert_bytes=1e8, flops_per_token=0.0,
              attn_flops=())
    assert prefill_s(moe, 100, 4096) == approx((1e9 + 8 * 4 * 1e8) / 1e12)  # every expert read


def test_prefill_allreduce():
    eff = Efficiency(hbm_bandwidth=1.0, flops=1.0, interconnect=0.5, allreduce_latency_s=1e-5)
    m = toy(tp=2, efficiency=eff)
    comm = 20 * (1e-5 + 2 * 1 / 2 * 100 * 1000 * 2 / 5e10)  # 2 x 10 x (10 us + 4 us)
    assert prefill_s(m, 100, 4096) == approx(1e-3 + comm)


def test_compute_bound_batch():
    m = toy()
    # per sequence: 1e6 B KV / 1e12 = 1 us memory, (2e9 + 1e7) / 1e15 = 2.01 us FLOPs
    assert compute_bound_batch(m, 10) == approx(1e-3 / (2.01e-6 - 1e-6))  # 990.099
    b = compute_bound_batch(m, 10)
    s = decode_step(m, b, 10)
    assert s.memory_s == pytest.approx(s.compute_s, rel=1e-9)
    # at 1,000 tokens the KV read (100 us) outweighs the FLOPs (3 us) at any batch
    assert compute_bound_batch(m, 1000) == math.inf


def test_cost_per_mtok():
    assert cost_per_mtok_usd(3.6, 1000) == approx(1.0)  # $3.6/h = $0.001/s over 1,000 tok/s
    assert cost_per_mtok_usd(3.99, 2000) == approx(3.99 / 3600 / 2000 * 1e6)


def test_numpy_arrays_match_scalars():
    moe = toy(num_experts=8, top_k=2, moe_layers=4, expert_bytes=1e8, tp=4, pp=2,
              kv_reads=(KvRead(1e5), KvRead(3e4, cap_tokens=4096)),
              attn_flops=(KvRead(1e6), KvRead(2e5, cap_tokens=4096)),
              efficiency=Efficiency())
    bs = np.array([1.0, 4.0, 64.0, 1000.0, 7.0])
    ns = np.array([10.0, 1000.0, 5000.0, 10.0, 131072.0])
    arr = decode_step(moe, bs, ns)
    for i, (b, n) in enumerate(zip(bs.tolist(), ns.tolist(), strict=True)):
        one = decode_step(moe, b, n)
        for f in ("seconds", "memory_s", "compute_s", "comm_s", "bytes", "kv_bytes", "flops"):
            assert getattr(arr, f)[i] == approx(getattr(one, f)), f
        assert tpot_s(moe, bs, ns)[i] == approx(tpot_s(moe, b, n))
        assert tokens_per_s(moe, bs, ns)[i] == approx(tokens_per_s(moe, b, n))
        assert prefill_s(moe, ns, 4096.0)[i] == approx(prefill_s(moe, n, 4096.0))
        assert cost_per_mtok_usd(2.0, tokens_per_s(moe, bs, ns))[i] == approx(
            cost_per_mtok_usd(2.0, tokens_per_s(moe, b, n)))


# --- StepModel of real plans ------------------------------------------------------------------


@cache
def real(model: str, gpu: str, kv: str, weight: str | None, tp: int = 1, context: int = 32768,
         eff: Efficiency = IDEAL):
    return plan(load_model(model), load_gpu(gpu), kv_dtype=kv, weight_dtype=weight,
                engine="vllm", tp=tp, pp=1, context_tokens=context, efficiency=eff,
                # past some models' limits (gemma-2 8k, Mixtral 32k): the roofline is still defined
                allow_long_max_model_len=True)


# Llama-3-70B (config: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV heads,
# head_dim 8192 / 64 = 128, vocab 128256, untied).
LLAMA_LINEAR = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28672 * 8192  # q, o, k, v, gate/up/down
LLAMA_NORMS = 80 * 2 * 8192 + 8192  # input + post-attention per layer, final norm
LLAMA_HEAD = 128256 * 8192  # 128256 = 2004 x 64: no vocab padding
LINEAR_PER_LAYER_FP8 = LLAMA_LINEAR + 4 * 7  # 1 B per fp8 param + 7 fp32 per-tensor scales


def test_llama3_70b_fp8_step_model():
    _, sm = real("llama-3.1-70b", "h100", "fp8", "fp8")
    h100 = gpu_yaml("h100-sxm")
    # fp8 Linear: 1 B / param + one fp32 scale per Linear (7 per layer); bf16 LM head and norms;
    # the embedding table is a lookup and is not read
    weights = 80 * LINEAR_PER_LAYER_FP8 + 2 * (LLAMA_HEAD + LLAMA_NORMS)
    assert weights == 70_555_027_648
    assert sm.weight_bytes == weights
    assert sm.expert_bytes == 0 and sm.moe_layers == 0 and sm.num_experts == 0
    # 2 x (params without the embedding table)
    assert sm.flops_per_token == 2 * (80 * LLAMA_LINEAR + LLAMA_NORMS + LLAMA_HEAD)
    assert sm.flops_per_token == 139_006_066_688
    assert sm.hbm_bytes_per_s == h100["hbm_bandwidth_bytes_per_s"] == 3.35e12
    assert sm.flops_per_s == h100["dense_flops_per_s"]["fp8"]  # fp8 GEMMs on Hopper
    assert sm.link_bytes_per_s == h100["interconnect"]["bandwidth_bytes_per_s_per_direction"]
    assert (sm.hidden_size, sm.layers, sm.tp, sm.pp) == (8192, 80, 1, 1)
    # attention: 2 x 64 heads x (128 + 128) per cached token per layer, 80 layers
    assert attention_flops(sm, 1) == 2 * 64 * 256 * 80
    assert sm.state_bytes == 0



def test_llama3_70b_fp8_kv_read_at_32k():
    _, sm = real("llama-3.1-70b", "h100", "fp8", "fp8")
    kv = 32768 * 2 * 80 * 8 * 128 * 1  # tokens x (K, V) x layers x KV heads x head_dim x 1 B
    assert kv == 5_368_709_120  # the guide's "5.2 GB": 5.37e9 B (= 5 GiB)
    assert kv_read_bytes(sm, 32768) == kv
    assert decode_step(sm, 1, 32768).kv_bytes == kv
    assert decode_step(sm, 3, 32768).kv_bytes == 3 * kv
    # the KV read alone at the datasheet 3.35e12 B/s: 1.6 ms
    assert kv_read_bytes(sm, 32768) / sm.hbm_bytes_per_s == pytest.approx(1.6026e-3, rel=1e-4)
    assert round(kv / 3.35e12 * 1e3, 1) == 1.6
    # with ideal kernels the step reads weights + KV: (70,555,027,648 + 5,368,709,120) / 3.35e12
    s = decode_step(sm, 1, 32768)
    assert s.memory_s == approx((70_555_027_648 + kv) / 3.35e12)
    assert s.seconds == approx(s.memory_s)  # FLOPs: 139e9 + 32768 x 2.6e6 = 2.25e11 -> 0.11 ms at 1.98e15


def test_layer_overhead_is_paid_per_decoder_layer_per_step():
    """The fitted per-layer cost (kernel launches, small kernels): Llama-3.1-70B's 80 layers at
    50 us each add 4 ms to every decode step; a prompt in 8,192-token chunks pays it per chunk
    (32k: 4 chunks x 4 ms); with PP 2 each stage runs 40 layers, and a token crosses both."""
    _, sm = real("llama-3.1-70b", "h100", "fp8", "fp8")
    e = replace(sm.efficiency, layer_overhead_s=50e-6)
    with_layers = replace(sm, efficiency=e)
    assert decode_step(with_layers, 4, 8192).seconds - decode_step(sm, 4, 8192).seconds == approx(
        80 * 50e-6)
    assert prefill_s(with_layers, 32768, 8192) - prefill_s(sm, 32768, 8192) == approx(
        4 * 80 * 50e-6)
    _, pp2 = plan(load_model("llama-3.1-70b"), load_gpu("h100"), kv_dtype="fp8",
                  weight_dtype="fp8", engine="vllm", tp=1, pp=2, context_tokens=32768,
                  efficiency=IDEAL)
    assert (pp2.layers, pp2.pp) == (40, 2)
    pp2e = replace(pp2, efficiency=replace(pp2.efficiency, layer_overhead_s=50e-6))
    assert tpot_s(pp2e, 1, 1024) - tpot_s(pp2, 1, 1024) == approx(2 * 40 * 50e-6)

def test_a_draft_runs_once_across_pipeline_stages():
    """Speculative decoding at pp 2 (SGLang, TRT-LLM run it; vLLM refuses): the verify pass
    crosses both stages, the draft runs once. Llama-3.1-8B (16 layers a stage) with a
    Llama-3.2-1B draft (16 layers), K = 4, acceptance 3, 50 us per layer per step: TPOT grows
    by (2 x 16 + 4 x 16) x 50 us / 3 = 1.6 ms (not 2 x (16 + 4 x 16) x 50 us / 3 = 2.67 ms)."""
    _, sm = real("llama-3.1-8b", "h100", "bf16", None)
    _, dm = real("llama-3.2-1b", "h100", "bf16", None)
    e = replace(IDEAL, layer_overhead_s=50e-6)
    base = replace(sm, pp=2, layers=16, speculative_tokens=4, acceptance_length=3.0, draft=dm)
    slow = replace(base, efficiency=e, draft=replace(dm, efficiency=e))
    assert dm.layers == 16
    assert tpot_s(slow, 8, 2048) - tpot_s(base, 8, 2048) == approx((2 * 16 + 4 * 16) * 50e-6 / 3)

def test_sparse_mla_reads_the_top_k_and_scores_every_token():
    """DeepSeek-V3.2 (61 layers, index_topk 2048, index_n_heads 64, index_head_dim 128) at TP 8
    with fp8: each decode token reads the fp8_ds_mla latents (656 B) of at most 2,048 tokens per
    layer, and the indexer keys (132 B) of every cached token; attention FLOPs per cached token
    are 2 x 16 heads x (576 + 512) (absorbed MLA, capped at 2,048) plus the indexer's
    2 x 64 x 128 over all (vLLM's wq_b is replicated: every rank scores all 64 heads)."""
    _, sm = real("deepseek-v3.2", "h200", "fp8", None, tp=8, context=131072)
    assert [(k.bytes_per_token, k.cap_tokens) for k in sm.kv_reads] == [
        (61 * 656, 2048), (61 * 132, None)]
    for n in (1024, 131072):
        assert kv_read_bytes(sm, n) == 61 * 656 * min(n, 2048) + 61 * 132 * n
        assert attention_flops(sm, n) == 61 * 2 * 16 * (576 + 512) * min(n, 2048) + \
            61 * 2 * 64 * 128 * n
    assert kv_read_bytes(sm, 131072) == 1_137_344_512

def test_mixtral_moe_step_model():
    _, sm = real("mixtral-8x7b-v0.1", "h200", "auto", None)
    # bf16, tp 1: one expert of one layer = gate + up + down = 3 x 14336 x 4096 x 2 B
    assert sm.expert_bytes == 3 * 14336 * 4096 * 2 == 352_321_536
    assert (sm.moe_layers, sm.num_experts, sm.top_k) == (32, 8, 2)
    # non-expert: q, o 4096 x 4096; k, v 1024 x 4096; router 8 x 4096; two norms; final norm;
    # LM head 32000 x 4096 (embedding table not read)
    dense = 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 8 * 4096 + 2 * 4096) + 4096 + 32000 * 4096
    assert sm.weight_bytes == 2 * dense
    # active = dense + top-2 experts per layer
    assert sm.flops_per_token == 2 * (dense + 2 * 32 * 3 * 14336 * 4096)
    # KV: 32 layers x 8 heads x 128 x (K, V) x 2 B per token
    assert kv_read_bytes(sm, 1000) == 1000 * 32 * 8 * 128 * 2 * 2
    # one sequence reads 2 experts per layer; 64 read E (1 - 0.75^64) ~ 8
    one = decode_step(sm, 1, 1000)
    assert one.bytes == approx(2 * dense + 2 * 352_321_536 * 32 + 1000 * 131072)
    many = decode_step(sm, 64, 1000)
    assert many.bytes == approx(2 * dense + 8 * (1 - 0.75**64) * 352_321_536 * 32
                                + 64 * 1000 * 131072)


def test_gemma2_sliding_window_reads():
    _, sm = real("gemma-2-9b", "h100", "auto", None)
    # 42 layers alternate sliding (window 4096) and full: 21 each; 8 KV heads x 256 x (K, V) x
    # 2 B = 8192 B per token per layer
    per_group = 21 * 8 * 256 * 2 * 2
    assert kv_read_bytes(sm, 1000) == 2 * per_group * 1000
    assert kv_read_bytes(sm, 4096) == 2 * per_group * 4096
    assert kv_read_bytes(sm, 32768) == per_group * 32768 + per_group * 4096
    # attention FLOPs: 2 x 16 heads x (256 + 256) per cached token per layer, same caps
    attn = 21 * 2 * 16 * 512
    assert attention_flops(sm, 32768) == attn * 32768 + attn * 4096
    # tied embeddings: the LM head reads the embedding matrix (256000 x 3584, bf16)
    per_layer = 2 * 4096 * 3584 + 2 * 2048 * 3584 + 3 * 14336 * 3584 + 4 * 3584
    assert sm.weight_bytes == 2 * (42 * per_layer + 3584 + 256000 * 3584)
    # prefill at 32k: causal p^2 / 2 on the full layers, (p^2 - (p - 4096)^2) / 2 sliding
    p = 32768
    flops = p * sm.flops_per_token + attn * p * p / 2 + attn * (p * p - (p - 4096) ** 2) / 2
    chunks = 4  # 32768 / 8192 (vLLM's max_num_batched_tokens on an 80 GB GPU)
    expected = max(flops / 989.4e12, chunks * sm.weight_bytes / 3.35e12)
    assert prefill_s(sm, p, 8192) == approx(expected)


def test_tp_splits_weights_heads_and_adds_allreduce():
    _, sm = real("llama-3.1-8b", "h100", "bf16", None, tp=2, context=8192, eff=Efficiency())
    # Llama-3-8B: hidden 4096, 32 layers, 32 heads, 8 KV heads; tp 2 -> 4 KV heads per GPU
    assert kv_read_bytes(sm, 100) == 100 * 32 * 4 * 128 * 2 * 2
    assert attention_flops(sm, 1) == 32 * 2 * 16 * 256
    per_call = 10e-6 + 2 * 1 / 2 * 8 * 4096 * 2 / (450e9 * 0.7)
    assert allreduce_s(sm, 8) == approx(2 * 32 * per_call)


# --- properties -------------------------------------------------------------------------------

PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CASES = [("llama-3.1-70b", "h100", "fp8", "fp8", 1), ("llama-3.1-8b", "h100", "bf16", None, 2),
         ("mixtral-8x7b-v0.1", "h200", "auto", None, 2), ("gemma-2-9b", "h100", "auto", None, 1)]
ctx = st.integers(1, 262_144)
batch = st.integers(1, 2048)


def case(i: int):
    m, g, kv, w, tp = CASES[i]
    return real(m, g, kv, w, tp=tp, context=131072, eff=Efficiency())


def non_decreasing(a: float, b: float) -> bool:
    return b >= a * (1 - 1e-12)  # the branch-free max() may round by an ulp


@PROPS
@given(i=st.integers(0, len(CASES) - 1), a=ctx, b=ctx, B=batch)
def test_tpot_non_decreasing_in_context(i, a, b, B):
    _, sm = case(i)
    lo, hi = sorted((a, b))
    assert non_decreasing(tpot_s(sm, B, lo), tpot_s(sm, B, hi))


@PROPS
@given(i=st.integers(0, len(CASES) - 1), n=ctx, a=batch, b=batch)
def test_tpot_non_decreasing_in_batch(i, n, a, b):
    _, sm = case(i)
    lo, hi = sorted((a, b))
    assert non_decreasing(tpot_s(sm, lo, n), tpot_s(sm, hi, n))


@PROPS
@given(i=st.integers(0, len(CASES) - 1), n=st.integers(1, 131072), a=batch, b=batch)
def test_throughput_non_decreasing_in_batch_up_to_the_cliff(i, n, a, b):
    r, sm = case(i)
    conc = concurrency_at(r, n)
    assume(conc >= 2)
    lo, hi = sorted((min(a, conc), min(b, conc)))
    assert non_decreasing(tokens_per_s(sm, lo, n), tokens_per_s(sm, hi, n))


@PROPS
@given(xs=st.lists(st.integers(1, 131072), min_size=2, max_size=12, unique=True),
       target=st.sampled_from([None, 1, 16, 256]))
def test_cost_per_token_non_decreasing_in_position(xs, target):
    r, sm = real("llama-3.1-8b", "h100", "fp8", None, tp=1, context=131072, eff=Efficiency())
    xs = sorted(xs)
    s = series("fp8", r, sm, x="position", y="cost", xs=xs, context_tokens=131072, batch=target,
               price_usd_per_hour=3.99)
    ys = [p.y for p in s.points if p.y is not None]
    assert len(ys) == len(xs)  # Llama-3-8B fp8 KV: one 128k sequence still fits an H100
    assert all(math.isfinite(y) and y > 0 for y in ys)
    assert all(non_decreasing(a, b) for a, b in zip(ys, ys[1:], strict=False))


def test_efficiency_is_replaceable():
    _, sm = real("llama-3.1-70b", "h100", "fp8", "fp8")
    slow = replace(sm, efficiency=Efficiency(hbm_bandwidth=0.5, flops=1.0, interconnect=1.0,
                                             allreduce_latency_s=0.0))
    assert decode_step(slow, 1, 32768).memory_s == approx(2 * decode_step(sm, 1, 32768).memory_s)


def test_indexer_overhead_is_paid_per_layer_with_its_own_indexer():
    """The fitted indexer cost (calibrations/indexer/overhead.json) is paid by each layer that
    computes its own top-k, per forward pass: GLM-5 (78 layers, every one with an indexer) at
    80 us adds 78 x 80 us = 6.24 ms to a decode step and to each prefill chunk; GLM-5.2 (21
    of its layers run an indexer, the others reuse one's top-k) adds 21 x 80 us; DeepSeek-V3
    (no indexer) nothing."""
    for name, indexers in (("glm-5", 78), ("glm-5.2", 21), ("deepseek-v3", 0)):
        _, sm = plan(load_model(name), load_gpu("b200"), kv_dtype="auto", weight_dtype="fp8",
                     engine="sglang@0.5.23", tp=8, pp=1, context_tokens=32768, efficiency=IDEAL)
        assert sm.indexer_layers == indexers, name
        slow = replace(sm, efficiency=replace(IDEAL, indexer_overhead_s=80e-6))
        assert decode_step(slow, 4, 2048).seconds - decode_step(sm, 4, 2048).seconds == approx(
            indexers * 80e-6)
        assert prefill_s(slow, 16384, 8192) - prefill_s(sm, 16384, 8192) == approx(
            2 * indexers * 80e-6)
