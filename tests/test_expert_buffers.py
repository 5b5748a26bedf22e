"""EPLB's redundant experts and staging copy, and DeepEP's all-to-all buffers, in ``kvplan fit``
(``kvplan.engines.expert_buffers``). Every figure is derived by hand from DeepEP v1.2.1's
size formulas (``csrc/config.hpp``), vLLM 0.34.0 / SGLang 0.5.23 and DeepSeek-V3's config; the
arithmetic is written out."""

from __future__ import annotations

import json
import shlex

import pytest
from cli_helpers import fail

from kvplan.cli.main import run
from kvplan.engines.expert_buffers import low_latency_rdma_bytes, normal_buffer_bytes

MiB = 2**20
# DeepSeek-V3: hidden 7,168; 256 routed experts; 58 MoE layers (61 - first_k_dense_replace 3);
# one expert = gate, up [2048, 7168] and down [7168, 2048] fp8 + fp32 128 x 128 block scales
EXPERT = 3 * (2048 * 7168 + 4 * 16 * 56)  # 44,050,944 B
MOE_LAYERS = 58
# DeepEP low-latency messages for H = 7,168 (56 scales): dispatch 16 + max(2 x 7,168,
# 7,168 + 4 x 56) = 14,352 B; combine 4 x 56 + 2 x 7,168 = 14,560 B
DISPATCH, COMBINE = 16 + 2 * 7168, 4 * 56 + 2 * 7168
NVL_VLLM = 1024 * MiB + 160  # VLLM_DEEPEP_BUFFER_SIZE_MB + peer pointers / barrier signals
WORKSPACE = 32 * MiB


def ll_by_hand(tokens: int, experts: int) -> int:
    send = max(tokens * DISPATCH, experts * tokens * COMBINE)
    recv = experts * tokens * max(DISPATCH, COMBINE)
    total = 2 * send + 2 * recv + 2 * -(-4 * experts // 128) * 128
    return (total + 128) // 128 * 128


def fit_json(capsys, *args: str) -> dict:
    code = run(["fit", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


DSV3 = ("deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k")


def test_low_latency_rdma_size_by_hand():
    # T 128, E 256: send = recv = 256 x 128 x 14,560 = 477,102,080 B; signals 1,024 B;
    # 2 x (477,102,080 + 477,102,080 + 1,024) = 1,908,410,368 -> 1,908,410,496 (128-aligned + 128)
    assert 256 * 128 * COMBINE == 477_102_080
    assert low_latency_rdma_bytes(128, 7168, 256) == 1_908_410_496 == ll_by_hand(128, 256)
    assert low_latency_rdma_bytes(256, 7168, 256) == 3_816_818_816
    assert low_latency_rdma_bytes(256, 7168, 288) == 4_293_921_152 == ll_by_hand(256, 288)
    # it does not depend on the EP size and grows linearly with the tokens
    assert low_latency_rdma_bytes(512, 7168, 256) == ll_by_hand(512, 256) == 7_633_635_456


def test_normal_mode_sizes_by_hand():
    # EP 8 (one node): 10 channels x 8 NVL ranks x ((2 x 1 + 3) x 4 + 256 tokens x (14,336 data
    # + 8 source meta + 128 x 8 top-k indices + 128 x 4 weights + 128 x 4 scales = 16,392 B))
    # = 335,709,760 -> 335,709,824 B; no RDMA within a node
    assert 10 * 8 * (20 + 256 * 16_392) == 335_709_760
    assert normal_buffer_bytes(14_336, 8) == (335_709_824, 0)
    # EP 16: NVL 10 x 8 x (7 x 4 + 288 x 16,392) = 377,673,920 -> 377,673,984; RDMA over 2
    # nodes: dispatch's 128 receive tokens rounded up to its 20 send tokens = 140:
    # 10 x 2 x (18 x 2 x 4 + 140 x (16,392 + 16) x 2) = 91,887,680 -> 91,887,744
    assert normal_buffer_bytes(14_336, 16) == (377_673_984, 91_887_744)


def test_vllm_deepep_low_latency_and_eplb_on_deepseek_v3(capsys):
    base = fit_json(capsys, *DSV3)
    ll = fit_json(capsys, *DSV3, "--all2all", "deepep_low_latency")
    eplb = fit_json(capsys, *DSV3, "--all2all", "deepep_low_latency", "--eplb")
    r32 = fit_json(capsys, *DSV3, "--all2all", "deepep_low_latency", "--eplb",
                   "--redundant-experts", "32")
    # vLLM 0.34: DeepEP low-latency with DP > 1 lowers max_num_batched_tokens to 256, and its
    # RDMA buffer holds 256 tokens per rank
    assert base["max_num_batched_tokens"] == 8192 and ll["max_num_batched_tokens"] == 256
    buffers = NVL_VLLM + ll_by_hand(256, 256) + WORKSPACE
    assert buffers == 1_073_741_984 + 3_816_818_816 + 33_554_432
    assert ll["memory"]["ep_buffers_bytes"] == buffers
    assert base["memory"]["ep_buffers_bytes"] == 0
    # vLLM then caps max_num_seqs at max_num_batched_tokens: 1,024 -> 256, and the sampler's
    # warm-up (the activation peak) is 15.45 B x 256 x 129,280 vocab = 511,328,256 B instead of
    # 15.45 x 1,024 x 129,280 = 2,045,313,024 B
    assert ll["max_num_seqs"] == 256 and base["max_num_seqs"] == 1024
    assert ll["memory"]["activation_bytes"] == 511_328_256
    assert base["memory"]["activation_bytes"] == 2_045_313_024
    pool = base["memory"]["kv_pool_bytes"] + (2_045_313_024 - 511_328_256) - buffers
    assert ll["memory"]["kv_pool_bytes"] == pool == 28_051_432_949
    # sequences (docs/fit.md's table): pool // (16-token block of 61 x 1,152 B) // 2,048 blocks
    # per 32k sequence, x 8 ranks: 28,051,432,949 // 1,124,352 = 24,948 -> 12 -> 96
    block16 = 16 * 61 * 1152
    assert ll["max_concurrency"] == 8 * (pool // block16 // 2048) == 96
    assert (base["max_concurrency"], eplb["max_concurrency"], r32["max_concurrency"]) == \
        (104, 88, 48)
    # EPLB with vLLM 0.34's default: 256 % 8 == 0 -> no redundant slot, a staging copy of one
    # layer's 32 local experts = 32 x 44,050,944 = 1,409,630,208 B
    assert eplb["expert_parallel"]["redundant_experts"] == 0
    assert eplb["memory"]["ep_buffers_bytes"] == buffers + 32 * EXPERT == buffers + 1_409_630_208
    # 32 redundant slots: 288 / 8 = 36 experts per GPU on every one of the 58 MoE layers
    # (+4 x 58 x 44,050,944 = 10,219,819,008 B of weights), a 36-expert staging copy, and
    # DeepEP's buffer sized for the 288 physical experts
    assert r32["placement"]["routed_experts_per_gpu"] == 36
    assert r32["memory"]["weights_bytes"] - base["memory"]["weights_bytes"] == \
        4 * MOE_LAYERS * EXPERT == 10_219_819_008
    assert r32["memory"]["ep_buffers_bytes"] == NVL_VLLM + ll_by_hand(256, 288) + WORKSPACE \
        + 36 * EXPERT
    per_seq = 32768 * 61 * 576 * 2  # the MLA latent, 16-token blocks on H200
    block = 16 * 61 * 576 * 2
    assert r32["per_sequence_bytes"] == per_seq
    assert r32["max_concurrency"] == 8 * ((r32["memory"]["kv_pool_bytes"] // block) // 2048)
    line = shlex.split(r32["launch"]["vllm"])
    assert "--enable-eplb" in line and line[line.index("--eplb-config") + 1] == \
        '{"num_redundant_experts":32}'
    assert line[line.index("--all2all-backend") + 1] == "deepep_low_latency"
    sg = shlex.split(r32["launch"]["sglang"])
    assert sg[sg.index("--ep-num-redundant-experts") + 1] == "32"
    assert sg[sg.index("--deepep-mode") + 1] == "low_latency"


def test_vllm_high_throughput_is_one_gib_within_a_node(capsys):
    ht = fit_json(capsys, *DSV3, "--all2all", "deepep_high_throughput")
    assert ht["memory"]["ep_buffers_bytes"] == NVL_VLLM + WORKSPACE
    assert ht["max_num_batched_tokens"] == 8192


def test_sglang_deepep_auto_comes_from_the_reserve(capsys):
    plain = fit_json(capsys, *DSV3, "--engine", "sglang")
    auto = fit_json(capsys, *DSV3, "--engine", "sglang", "--all2all", "deepep_auto")
    # auto = normal (NVL 335,709,824 + 160 B) and low-latency (RDMA for 128 tokens, 256 experts)
    assert auto["memory"]["ep_buffers_bytes"] == 335_709_824 + 160 + 1_908_410_496 + WORKSPACE
    term = next(t for t in auto["budget_terms"] if t["key"] == "ep_buffers_bytes")
    assert term["subtracted"] is False
    # the buffer is made after the pool; SGLang's default mem_fraction_static reserves 2,048 MiB
    # more for it: on the 143,771 MiB H200 round((143,771 - 33,280) / 143,771, 3) = 0.769 becomes
    # round((143,771 - 35,328) / 143,771, 3) = 0.754
    f = lambda d: next(t for t in d["budget_terms"] if t["key"] == "usable_bytes")["how"]  # noqa: E731
    assert "x 0.769" in f(plain) and "x 0.754" in f(auto)
    assert round((143_771 - 35_328) / 143_771, 3) == 0.754
    assert auto["memory"]["kv_pool_bytes"] < plain["memory"]["kv_pool_bytes"]


def test_sglang_buffers_past_the_reserve_do_not_fit(capsys):
    d = fit_json(capsys, *DSV3, "--engine", "sglang", "--all2all", "deepep_auto",
                 "--gpu-memory-utilization", "0.99")
    assert d["fits"] is False and d["max_concurrency"] == 0
    assert "reserve" in d["verdict"] and "expert-parallel buffers" in d["verdict"]


@pytest.mark.parametrize("args, field, words", [
    (("--redundant-experts", "8"), "eplb", "needs --eplb"),
    (("--eplb", "--redundant-experts", "3"), "eplb", "259"),
    (("--all2all", "deepep_auto"), "all2all", "no automatic DeepEP mode"),
    (("--all2all", "mori"), "all2all", "unknown all-to-all backend"),
    (("--all2all", "deepep_low_latency", "--engine", "trtllm"), "all2all", "not trtllm"),
    (("--all2all", "deepep_low_latency", "--engine", "vllm@0.20"), "all2all", "0.20"),
    (("--eplb", "--engine", "vllm@0.11"), "eplb", "from 0.12"),
])
def test_refusals_name_the_rule(capsys, args, field, words):
    err = fail(capsys, "fit", *DSV3, *args)
    assert field in err and words in err


def test_refusals_of_model_layout_and_domain(capsys):
    err = fail(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--eplb")
    assert "--ep > 1" in err
    err = fail(capsys, "fit", "gpt-oss-120b", "--gpu", "h200", "--dp", "2", "--ep", "2", "--eplb")
    assert "gpt_oss.py" in err and "MixtureOfExperts" in err
    # SGLang's DeepEP sets ep_size to every GPU of the stage
    err = fail(capsys, "fit", "qwen3-235b-a22b", "--gpu", "h200", "--tp", "4", "--ep", "2",
               "--engine", "sglang", "--all2all", "deepep_low_latency")
    assert "ep_size = tp_size" in err
    err = fail(capsys, "fit", "deepseek-v3", "--gpu", "gb200", "--dp", "8", "--ep", "8",
               "--all2all", "deepep_low_latency")
    assert "NVL72" in err
    err = fail(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--eplb")
    assert "no routed experts" in err or "none" in err


SCENARIO = """kvplan: 1
model: deepseek-v3
hardware: {gpu: h200}
serving: {dp: 8, ep: [1, 8], eplb: true, redundant_experts: 32, all2all: deepep_low_latency}
workload: {request_rate: 1, prompt_tokens: 2000, output_tokens: 500}
slo: {tpot_ms: 200}
samples: 50
"""


def test_plan_takes_the_same_keys(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO)
    assert run(["plan", str(p), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (c,) = [c for c in d["configurations"] if c["ep"] == 8]
    # the plan's budget is fit's: the same expert-parallel buffers (36 local experts' staging
    # copy + DeepEP low-latency for 288 experts and 256 tokens)
    term = next(t for t in c["budget_terms"] if t["key"] == "ep_buffers_bytes")
    assert term["bytes"] == NVL_VLLM + ll_by_hand(256, 288) + WORKSPACE + 36 * EXPERT
    assert "--all2all-backend deepep_low_latency" in c["launch"]["vllm"]
    # ep 1 cannot balance experts: skipped with the scenario's own words
    assert any("serving.ep > 1" in s["reason"] for s in d["skipped"])
    p.write_text(SCENARIO.replace("all2all: deepep_low_latency", "all2all: pplx"))
    assert run(["plan", str(p)]) == 2
    assert "serving.all2all" in capsys.readouterr().err


def test_review_fixes_rules(capsys):
    # vLLM runs the all-to-all kernels only with DP (use_all2all_kernels): no buffer at dp 1
    err = fail(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8",
               "--all2all", "deepep_low_latency")
    assert "--dp > 1" in err
    # vLLM refuses max_num_seqs above max_num_batched_tokens (256 under low-latency with DP)
    err = fail(capsys, "fit", *DSV3, "--all2all", "deepep_low_latency", "--max-num-seqs", "1024")
    assert "max_num_batched_tokens (256) >= max_num_seqs (1,024)" in err
    # supports_eplb by release: ModelOpt NVFP4 MoE gained it in 0.13
    err = fail(capsys, "fit", "qwen3-30b-a3b", "--gpu", "b200", "--dp", "4", "--ep", "4",
               "--eplb", "--weight-dtype", "nvfp4", "--engine", "vllm@0.12")
    assert "do not support EPLB" in err
    assert run(["fit", "qwen3-30b-a3b", "--gpu", "b200", "--dp", "4", "--ep", "4", "--eplb",
                "--weight-dtype", "nvfp4", "--engine", "vllm@0.13", "--json"]) == 0
    capsys.readouterr()
    # SGLang: EPLB needs the model's expert locations (Mixtral has none)
    err = fail(capsys, "fit", "mixtral-8x7b-v0.1", "--gpu", "h200", "--dp", "8", "--ep", "8",
               "--eplb", "--engine", "sglang")
    assert "expert locations" in err
    # DeepEP's normal mode takes at most 160 ranks
    err = fail(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--dp", "256", "--ep", "256",
               "--all2all", "deepep_high_throughput")
    assert "at most 160 ranks" in err
    # redundant slots cannot be added to a given weight figure
    err = fail(capsys, "fit", *DSV3, "--eplb", "--redundant-experts", "8", "--weight-memory",
               "90GiB")
    assert "--weight-memory" in err


def test_sglang_redundant_slots_make_the_split_divide(capsys):
    # Qwen3-30B-A3B: 128 experts do not divide by 6, 128 + 4 = 132 do (22 per GPU)
    fail(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h200", "--dp", "6", "--ep", "6",
         "--engine", "sglang")
    d = fit_json(capsys, "qwen3-30b-a3b", "--gpu", "h200", "--dp", "6", "--ep", "6",
                 "--engine", "sglang", "--eplb", "--redundant-experts", "4")
    assert d["placement"]["routed_experts_per_gpu"] == 132 // 6 == 22


def test_vllm_low_latency_rounds_the_hidden_size_up(capsys):
    # gpt-oss-120b: hidden 2,880 -> the kernel's 3,072; 128 experts, 256 tokens per rank
    d = fit_json(capsys, "gpt-oss-120b", "--gpu", "h200", "--dp", "2", "--ep", "2",
                 "--all2all", "deepep_low_latency")
    scales = 3072 // 128
    disp, comb = 16 + 2 * 3072, 4 * scales + 2 * 3072
    send = recv = 128 * 256 * max(disp, comb)
    rdma = (2 * send + 2 * recv + 2 * 512 + 128) // 128 * 128
    assert d["expert_parallel"]["buffer_bytes"] == NVL_VLLM + rdma + WORKSPACE
    assert "rounded up to 3,072" in d["expert_parallel"]["how"]


def test_given_pool_counts_the_buffers(capsys):
    d = fit_json(capsys, *DSV3, "--all2all", "deepep_low_latency", "--eplb",
                 "--kv-cache-memory", "40GiB")
    # 93.92 weights + 0.48 activation + 3.52 overhead + 5.90 buffers + 40 > 139.81 GiB
    assert d["fits"] is False and "expert-parallel buffers" in d["verdict"]
