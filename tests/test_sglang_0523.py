"""SGLang 0.5.23's memory budget (``--engine sglang@0.5.23``), numbers by hand from the source
(``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` / ``reserve_for_graph_mb`` /
``reserve_for_deepep_a2a_mb``, ``cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes``,
``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``), against kvplan's late-2025
reading, which stays the default (``--engine sglang``).

- mem_fraction_static = round((gpu_MiB - reserved) / gpu_MiB, 3), gpu_MiB = nvidia-smi's
  memory.total from the GPU file; reserved = 512 + 1.5 x max(chunk, 2048) + tp x pp / 8 x 1024
  + 2 x max_bs [+ DP padding] + the prefill graph (1,536 MiB for MLA, 8 MiB per capture bucket
  otherwise; + 1,024 with DeepEP), at least 10,240 MiB above 60 GiB, + 2,048 with DeepEP.
- pool = int((driver total - CUDA context 0.5 GiB [+ NCCL 1 GiB with TP]) x f) - weights.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from kvplan.cli.main import run
from kvplan.core.errors import InputError
from kvplan.engines.sglang_memory import prefill_graph_buckets
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.launch import launch_commands

GiB = 2**30
TP1_OVERHEAD = GiB // 2  # CUDA context
TP_OVERHEAD = GiB // 2 + GiB  # CUDA context + NCCL


def plan(model: str, gpu: str, **kw):
    m = load_model(model)
    req = FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                     gpu=load_gpu(gpu), **kw)
    return plan_fit(req)


def fit_json(capsys, *args: str) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def f3(gpu_mib: int, reserved: Fraction | int) -> Fraction:
    return Fraction(round((gpu_mib - Fraction(reserved)) / gpu_mib, 3)).limit_denominator(1000)


def smi_mib(gpu: str) -> int:
    mib = load_gpu(gpu).memory_smi_total_mib
    assert mib is not None
    return mib


def llama_bf16_bytes(c: dict, tp: int) -> int:
    """Every weight of a Llama-3 checkpoint on one TP rank, bf16: per layer q, k, v, o split by
    heads, gate / up / down split by the intermediate size, two norms replicated; the embedding
    and the untied LM head split by vocabulary rows (padded to 64); the final norm."""
    h, inter, heads, kv = (c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                           c["num_key_value_heads"])
    hd = h // heads
    layer = (heads * hd // tp * h + 2 * max(1, kv // tp) * hd * h + h * (heads * hd // tp)
             + 3 * (inter // tp) * h + 2 * h)
    rows = -(-(-(-c["vocab_size"] // 64) * 64) // tp)
    return c["num_hidden_layers"] * layer * 2 + 2 * rows * h * 2 + h * 2


# ---- the prefill capture buckets -----------------------------------------------------------

def test_prefill_capture_buckets():
    # 4..32 step 4 (8), 48..256 step 16 (14), 288..512 step 32 (8), 576..1024 step 64 (8),
    # 1280..4096 step 256 (12), then 4608.. step 512
    assert len(prefill_graph_buckets(4096)) == 8 + 14 + 8 + 8 + 12 == 50
    assert len(prefill_graph_buckets(8192)) == 50 + (8192 - 4608) // 512 + 1 == 58
    assert prefill_graph_buckets(16384)[-1] == 16384
    assert prefill_graph_buckets(100) == [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96]


# ---- DSA (MLA): 1,536 MiB for the breakable prefill graph ----------------------------------

@pytest.mark.parametrize("gpu, chunk, late_f, new_f, cell", [
    # B200: 183,359 MiB > 160 GiB: chunked 16,384, max_bs 512; auto KV is fp8 (TRT-LLM's raw
    # 576-B latent + 132-B indexer key on 61 layers: 61 x 708 = 43,188 B)
    ("b200", 16384, "0.852", "0.844", 61 * (576 + 132)),
    # H200: 143,771 MiB < 160 GiB: chunked 8,192, max_bs 512 (tp >= 4); auto KV is bf16 on
    # Hopper (61 x (1,152 + 132) = 78,324 B)
    ("h200-sxm", 8192, "0.897", "0.886", 61 * (1152 + 132)),
])
def test_deepseek_v32_tp8(gpu, chunk, late_f, new_f, cell):
    mib = smi_mib(gpu)
    late = 512 + Fraction(3, 2) * chunk + 8 * 1 * 1024 // 8 + 2 * 512
    assert float(f3(mib, late)) == float(late_f)
    new = late + 1536  # reserve_for_graph_mb: MLA backend, breakable prefill graph on CUDA
    assert float(f3(mib, new)) == float(new_f)
    if gpu == "b200":
        assert (late, new) == (27_136, 28_672)  # 154,687 / 183,359 = 0.84363
    else:
        assert (late, new) == (14_848, 16_384)  # 127,387 / 143,771 = 0.88604
    total = load_gpu(gpu).memory_driver_total_bytes
    r = plan("deepseek-v3.2", gpu, engine="sglang@0.5.23", tp=8, context_tokens=32768)
    d = plan("deepseek-v3.2", gpu, engine="sglang", tp=8, context_tokens=32768)
    f = Fraction(new_f)
    usable = int((total - TP_OVERHEAD) * f)
    assert r.budget.usable_bytes == usable
    # plain `sglang` (main) plans a DSA model's budget as 0.5.23 too: its cache is 0.5.23's
    assert d.budget.usable_bytes == usable and "0.5.23's mem_fraction_static" in " ".join(
        d.budget.notes)
    assert late_f != new_f  # the late-2025 reading, which DSA no longer takes
    # the weights are the model's (tests/test_params*); the pool is what f leaves after them
    assert r.budget.kv_pool_bytes == usable - r.budget.weights_bytes
    assert r.block_size_tokens == 64
    assert r.kv_pool_tokens == (usable - r.budget.weights_bytes) // cell // 64 * 64
    line = launch_commands(r)["sglang"]
    assert f"--mem-fraction-static {new_f}" in line and "--page-size 64" in line
    assert f"--mem-fraction-static {new_f}" in launch_commands(d)["sglang"]
    assert "1,536 MiB" in r.budget.terms[1].how
    assert "SGLang 0.5.23" in r.budget.rules and "a DSA model" in d.budget.rules


def test_b200_dsa_pool_bytes():
    """The B200 pool written out: driver total 191,501,854,310 B - 1.5 GiB = 189,891,241,574 B;
    x 0.844 = 160,268,207,888 B (int of 160,268,207,888.456)."""
    total = load_gpu("b200").memory_driver_total_bytes
    assert total == 191_501_854_310
    assert total - TP_OVERHEAD == 189_891_241_574
    assert int(Fraction(189_891_241_574) * Fraction(844, 1000)) == 160_268_207_888
    r = plan("deepseek-v3.2", "b200", engine="sglang@0.5.23", tp=8, context_tokens=32768)
    assert r.budget.usable_bytes == 160_268_207_888


# ---- non-MLA: 8 MiB per prefill capture bucket ---------------------------------------------

def test_llama_31_70b_tp4_h100():
    c = load_model("llama-3.1-70b").config
    assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]) == (8192, 28672, 80)
    mib = smi_mib("h100-sxm")
    assert mib == 81_559
    # < 90 GiB: chunked 8,192, max_bs 512 (tp 4); prefill graph to 8,192 tokens: 58 buckets
    late = 512 + 12_288 + 4 * 1024 // 8 + 2 * 512
    assert late == 14_336
    new = late + 58 * 8
    assert new == 14_800
    assert float(f3(mib, late)) == 0.824 and float(f3(mib, new)) == 0.819  # 66,759 / 81,559
    weights = llama_bf16_bytes(c, 4)
    # per layer 213,925,888 params x 80 x 2 B + 2 x 32,064 rows x 8,192 x 2 B + 16,384
    assert weights == 80 * 213_925_888 * 2 + 2 * 32_064 * 8192 * 2 + 16_384 == 35_278_831_616
    total = load_gpu("h100-sxm").memory_driver_total_bytes
    usable = int((total - TP_OVERHEAD) * Fraction(819, 1000))
    assert usable == 68_333_154_140  # 83,434,864,640 x 0.819 = 68,333,154,140.16
    r = plan("llama-3.1-70b", "h100-sxm", engine="sglang@0.5.23", tp=4, context_tokens=8192)
    assert r.budget.weights_bytes == weights
    assert r.budget.usable_bytes == usable
    assert r.budget.kv_pool_bytes == usable - weights == 33_054_322_524
    cell = 80 * 2 * 128 * 2 * 2  # 8 KV heads / 4 = 2 per rank, K + V, bf16: 81,920 B
    assert r.kv_pool_tokens == 33_054_322_524 // cell == 403_495
    assert "--mem-fraction-static 0.819" in launch_commands(r)["sglang"]
    assert "58 buckets" in r.budget.terms[1].how
    d = plan("llama-3.1-70b", "h100-sxm", engine="sglang", tp=4, context_tokens=8192)
    assert "--mem-fraction-static 0.824" in launch_commands(d)["sglang"]


def test_pipeline_parallel_has_no_prefill_graph_reserve():
    # PP > 1 turns the breakable prefill graph off before memory is sized
    # (apply_cuda_graph_compatibility): tp 2 x pp 2, max_bs 256 (tp < 4)
    reserved = 512 + 12_288 + 2 * 2 * 1024 // 8 + 2 * 256
    assert reserved == 13_824
    r = plan("llama-3.1-70b", "h100-sxm", engine="sglang@0.5.23", tp=2, pp=2, context_tokens=8192)
    assert float(f3(81_559, reserved)) == 0.831  # 67,735 / 81,559 = 0.83051
    total = load_gpu("h100-sxm").memory_driver_total_bytes
    assert r.budget.usable_bytes == int((total - TP_OVERHEAD) * Fraction(831, 1000))
    assert "no prefill graph: pipeline parallelism" in r.budget.terms[1].how


# ---- GPUs under 35 GiB: chunked 4,096, max_bs 48 -------------------------------------------

def test_llama_31_8b_on_rtx_4090():
    c = load_model("llama-3.1-8b").config
    mib = smi_mib("rtx-4090")
    assert mib == 24_564
    late = 512 + Fraction(3, 2) * 2048 + 1024 // 8 + 2 * 24  # late 2025: 2,048 / 24
    new = 512 + Fraction(3, 2) * 4096 + 1024 // 8 + 2 * 48 + 50 * 8  # 0.5.23: 4,096 / 48
    assert (late, new) == (3_760, 7_280)
    assert float(f3(mib, late)) == 0.847 and float(f3(mib, new)) == 0.704  # 17,284 / 24,564
    weights = llama_bf16_bytes(c, 1)
    assert weights == 16_060_522_496
    total = load_gpu("rtx-4090").memory_driver_total_bytes
    usable = int((total - TP1_OVERHEAD) * Fraction(704, 1000))
    r = plan("llama-3.1-8b", "rtx-4090", engine="sglang@0.5.23", context_tokens=8192)
    assert r.budget.usable_bytes == usable
    assert r.budget.kv_pool_bytes == usable - weights
    assert r.kv_pool_tokens == (usable - weights) // (32 * 8 * 128 * 2 * 2)
    assert r.max_concurrency == (usable - weights) // (8192 * 131_072)
    assert "--mem-fraction-static 0.704" in launch_commands(r)["sglang"]


def test_llama_31_8b_on_l4_does_not_fit_under_0523():
    mib = smi_mib("l4")
    assert mib == 23_034
    assert float(f3(mib, 7_280)) == 0.684  # 15,754 / 23,034 = 0.68394
    total = load_gpu("l4").memory_driver_total_bytes
    usable = int((total - TP1_OVERHEAD) * Fraction(684, 1000))
    assert usable < 16_060_522_496  # the bf16 weights alone exceed f x free memory
    r = plan("llama-3.1-8b", "l4", engine="sglang@0.5.23", context_tokens=8192)
    assert r.budget.usable_bytes == usable
    assert r.budget.kv_pool_bytes == 0 and not r.fits
    late = plan("llama-3.1-8b", "l4", engine="sglang", context_tokens=8192)
    assert late.fits  # 0.837 = round((23,034 - 3,760) / 23,034, 3)
    assert late.budget.usable_bytes == int((total - TP1_OVERHEAD) * Fraction(837, 1000))


# ---- DeepEP: normal mode turns graphs off only after the fraction is computed -------------

@pytest.mark.parametrize("all2all, late_reserved", [
    # late 2025: normal mode (no CUDA graphs) drops 2 x max_bs and the DeepEP 2,048 MiB
    ("deepep_high_throughput", 512 + 12_288 + 1024 + 512 * 8 * 3 + 512 * 8 * 3 // 2),
    ("deepep_low_latency", 512 + 12_288 + 1024 + 2 * 512 + 512 * 8 * 3 + 512 * 8 * 3 // 2 + 2048),
])
def test_deepseek_v3_dp8_deepep(capsys, all2all, late_reserved):
    # H200, --dp 8 --ep 8: SGLang tp_size 8, max_bs 512, DP attention over 8 ranks:
    # 512 x 8 x 3 = 12,288 + 1.5 x 512 x 8 = 6,144 (max_bs > 300); 0.5.23 adds the MLA prefill
    # graph 1,536, its DeepEP delta 1,024 and (decode graphs still on) 2 x 512 and 2,048
    new = 512 + 12_288 + 1024 + 2 * 512 + 12_288 + 6_144 + 1536 + 1024 + 2048
    assert new == 37_888
    args = ("deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
            "--all2all", all2all)
    old = fit_json(capsys, *args, "--engine", "sglang")
    cur = fit_json(capsys, *args, "--engine", "sglang@0.5.23")
    expect_old = f"{float(f3(143_771, late_reserved)):.3f}"
    assert expect_old == ("0.776" if all2all == "deepep_high_throughput" else "0.754")
    assert f"--mem-fraction-static {expect_old}" in old["launch"]["sglang"]
    assert float(f3(143_771, new)) == 0.736  # 105,883 / 143,771 = 0.73647
    assert "--mem-fraction-static 0.736" in cur["launch"]["sglang"]


# ---- versions ---------------------------------------------------------------------------

def test_releases_before_0523_map_to_the_late_2025_rules():
    r = plan("llama-3.1-70b", "h100-sxm", engine="sglang@0.5.22", tp=4, context_tokens=8192)
    assert "--mem-fraction-static 0.824" in launch_commands(r)["sglang"]
    assert any("late-2025 main rules" in n and "not read" in n for n in r.budget.notes)
    assert "late-2025 main rules" in r.budget.rules
    d = plan("llama-3.1-70b", "h100-sxm", engine="sglang", tp=4, context_tokens=8192)
    assert not any("mapped explicitly" in n for n in d.budget.notes)
    with pytest.raises(InputError, match="newer than the releases kvplan has read"):
        plan("llama-3.1-70b", "h100-sxm", engine="sglang@0.5.24", tp=4, context_tokens=8192)


def test_0523_refuses_what_it_does_not_model():
    with pytest.raises(InputError, match="NVIDIA GPUs only.*aiter"):
        plan("deepseek-v3", "mi300x", engine="sglang@0.5.23", tp=8, context_tokens=32768)
    with pytest.raises(InputError, match="multimodal.*Qwen3VLForConditionalGeneration"):
        plan("tests/fixtures/configs/Qwen__Qwen3-VL-8B-Instruct.json", "h100-sxm",
             engine="sglang@0.5.23", context_tokens=8192)
    # the default keeps planning them with its late-2025 rules
    assert plan("deepseek-v3", "mi300x", engine="sglang", tp=8, context_tokens=32768).fits


def test_given_fraction_is_used_as_is():
    r = plan("llama-3.1-70b", "h100-sxm", engine="sglang@0.5.23", tp=4, context_tokens=8192,
             utilization=0.8)
    total = load_gpu("h100-sxm").memory_driver_total_bytes
    assert r.budget.usable_bytes == int((total - TP_OVERHEAD) * Fraction(8, 10))
    assert "--mem-fraction-static 0.800" in launch_commands(r)["sglang"]


def test_deepep_prefill_buckets_for_a_non_mla_model(capsys):
    """With DeepEP, cuda_graph_hook.apply_deepep_adjustments runs before the memory defaults:
    the prefill max_bs is still unset, so it takes 2,048 and rounds the sizes up to multiples
    of 8: of the 42 sizes to 2,048, 4 / 12 / 20 / 28 merge into 8 / 16 / 24 / 32: 38 buckets,
    304 MiB (not the 58 to the 8,192-token chunk). Qwen3-30B-A3B on 4 x H100, EP 4, DeepEP
    low latency: reserve 17,712 MiB of 81,559 -> (81,559 - 17,712) / 81,559 = 0.783."""
    from kvplan.engines.sglang_memory import prefill_graph_buckets

    sizes = prefill_graph_buckets(2048)
    assert len(sizes) == 8 + 14 + 8 + 8 + 4 == 42
    assert len({(b + 7) // 8 * 8 for b in sizes}) == 38
    assert f3(81_559, 17_712) == Fraction(783, 1000)
    from kvplan.cli.main import run

    assert run(["fit", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "4", "--ep", "4", "--all2all",
                "deepep_low_latency", "--engine", "sglang@0.5.23"]) == 0
    out = capsys.readouterr().out
    assert "mem_fraction_static 0.783" in out and "DeepEP-aligned" in out


def test_sglang_plans_its_own_chunked_prefill_default(capsys):
    """SGLang's prefill step takes its --chunked-prefill-size default, by the release's GPU tier
    (not vLLM's max_num_batched_tokens): an L4 (nvidia-smi 23,034 MiB < 35 GiB) under 0.5.23
    chunks 4,096 tokens (late-2025 main: 2,048); a B200 (183,359 MiB >= 160 GiB) 16,384."""
    from kvplan.engines.sglang_memory import default_chunk_tokens

    l4, b200 = load_gpu("l4"), load_gpu("b200")
    assert default_chunk_tokens("0.5.23", l4.memory_driver_total_bytes, l4.memory_smi_total_mib,
                                2, False) == 4096
    assert default_chunk_tokens("main", l4.memory_driver_total_bytes, l4.memory_smi_total_mib,
                                2, False) == 2048
    assert default_chunk_tokens("main", b200.memory_driver_total_bytes,
                                b200.memory_smi_total_mib, 8, False) == 16384
    assert run(["fit", "llama-3.1-8b", "--gpu", "l4", "--tp", "2", "--engine",
                "sglang@0.5.23"]) == 0
    assert "forward 4,096 tokens" in capsys.readouterr().out
