"""Attention data parallelism (``--dp``) and expert parallelism (``--ep``) in ``kvplan fit``:
weights per GPU, KV pool and sequences per DP rank and for the deployment, derived by hand from
the real configs (the arithmetic is written out), the engine's refusals as one line, and the
launch flags that realise the plan."""

from __future__ import annotations

import json

import pytest
from cli_helpers import fail

from kvplan.cli.main import run


def fit_json(capsys, *args: str) -> dict:
    code = run(["fit", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# DeepSeek-V3 (config.json: hidden 7168, 61 layers of which first_k_dense_replace = 3 dense,
# n_routed_experts 256, moe_intermediate_size 2048, fp8 weight_block_size [128, 128]).
# One routed expert: gate and up [2048, 7168], down [7168, 2048], each 14,680,064 fp8 bytes +
# 16 x 56 = 896 fp32 block scales (3,584 B) -> 3 x 14,683,648 = 44,050,944 B.
DSV3_EXPERT_BYTES = 3 * (2048 * 7168 + 4 * (2048 // 128) * (7168 // 128))
DSV3_MOE_LAYERS = 61 - 3
# The MLA latent at 32k: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B per token.
DSV3_SEQ_32K = 32768 * 61 * 576 * 2
DSV3_BLOCK = 64 * 61 * 576 * 2  # vLLM's 64-token FlashMLA block, all 61 layers in one group


def test_deepseek_v3_dp8_ep8_vs_tp8_on_h200(capsys):
    assert DSV3_EXPERT_BYTES == 44_050_944
    one = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "-c", "32k", "--total-memory", "2000GiB")
    tp8 = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "-c", "32k")
    dp8 = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k")
    # DP 8 x EP 8: every GPU holds the whole non-expert model and 256 / 8 = 32 routed experts
    w1 = one["memory"]["weights_bytes"]  # the whole model on one GPU (tp 1)
    expected = w1 - (256 - 32) * DSV3_MOE_LAYERS * DSV3_EXPERT_BYTES
    assert expected == 100_840_747_360
    assert dp8["memory"]["weights_bytes"] == expected
    assert dp8["memory"]["weights_bytes"] > tp8["memory"]["weights_bytes"]  # 93.9 vs 79.3 GiB
    # same sequence bytes per GPU: TP replicates the latent on every rank, DP holds it once
    assert dp8["per_sequence_bytes"] == tp8["per_sequence_bytes"] == DSV3_SEQ_32K
    m = dp8["memory"]
    assert m["usable_bytes"] == int(m["total_bytes"] * 0.92)
    assert m["kv_pool_bytes"] == (m["usable_bytes"] - m["weights_bytes"] - m["activation_bytes"]
                                  - m["runtime_overhead_bytes"])
    # MoE dispatch runs over all 8 GPUs: the same NCCL / CUDA-graph overhead as TP 8
    assert m["runtime_overhead_bytes"] == tp8["memory"]["runtime_overhead_bytes"]
    per_rank = (m["kv_pool_bytes"] // DSV3_BLOCK) // (32768 // 64)
    assert per_rank == 13
    assert dp8["max_concurrency_per_dp_rank"] == per_rank
    assert dp8["max_concurrency"] == 8 * per_rank == 104
    t = tp8["memory"]
    assert tp8["max_concurrency"] == (t["kv_pool_bytes"] // DSV3_BLOCK) // 512 == 20
    assert dp8["gpus"] == tp8["gpus"] == 8
    assert dp8["placement"] == {"attention_tp": 1, "mlp_tp": 1, "shared_expert_tp": 1,
                                "embedding_tp": 1, "lm_head_tp": 1, "moe_tp": 1, "ep": 8,
                                "routed_experts": 256, "redundant_experts": 0,
                                "routed_experts_per_gpu": 32}
    assert tp8["placement"] is None
    line = dp8["launch"]["vllm"].split()
    for flag, value in (("--tensor-parallel-size", "1"), ("--data-parallel-size", "8")):
        assert line[line.index(flag) + 1] == value
    assert "--max-num-seqs" not in line  # no --concurrency: each rank keeps the engine's cap
    assert "--enable-expert-parallel" in line


def test_deepseek_v3_tp8_with_expert_parallel(capsys):
    """vLLM --tensor-parallel-size 8 --enable-expert-parallel: EP 8 = tp x dp; each GPU holds
    1/8 of the dense layers and 32 whole experts; the experts weigh what TP 8 gives them (a
    split of the same bytes) up to the block scales: 8 x [2048/8 x 7168] keeps the 896 scales
    per matrix as 8 x 2 x 56 = 896, so the bytes are equal."""
    tp8 = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "-c", "32k")
    ep8 = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8", "-c", "32k")
    assert ep8["memory"]["weights_bytes"] == tp8["memory"]["weights_bytes"]
    assert ep8["max_concurrency"] == tp8["max_concurrency"] == 20
    line = ep8["launch"]["vllm"].split()
    assert "--enable-expert-parallel" in line and "--data-parallel-size" not in line


def test_qwen3_235b_ep8_tp1_attention(capsys):
    """Qwen3-235B-A22B (94 layers, all MoE: 128 experts, moe_intermediate_size 1536, hidden 4096,
    bf16): EP 8 with TP-1 attention is vLLM DP 8 + EP 8; each GPU holds 16 experts per layer of
    3 x 1536 x 4096 x 2 B = 37,748,736 B."""
    one = fit_json(capsys, "qwen3-235b-a22b", "--gpu", "h200", "-c", "8k", "--total-memory",
                   "2000GiB")
    d = fit_json(capsys, "qwen3-235b-a22b", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "8k")
    expert = 3 * 1536 * 4096 * 2
    assert d["memory"]["weights_bytes"] == one["memory"]["weights_bytes"] - 94 * (128 - 16) * expert
    # per sequence: 94 layers x 4 KV heads x 128 x 2 (K, V) x 2 B = 192,512 B per token, whole
    # on the rank (no TP split), 8k tokens = 512 blocks of 16
    assert d["per_sequence_bytes"] == 8192 * 192_512
    m = d["memory"]
    per_rank = (m["kv_pool_bytes"] // (16 * 192_512)) // 512
    assert d["max_concurrency"] == 8 * per_rank
    assert d["placement"]["routed_experts_per_gpu"] == 16


def test_gpt_oss_120b_dp2_tp2(capsys):
    """gpt-oss-120b (36 layers, 128 experts, hidden = intermediate = 2880, mxfp4 experts with
    bf16 biases) on 4 GPUs as DP 2 x TP 2 without EP: vLLM splits each expert over all
    tp x dp = 4 GPUs (flatten_tp_size) and the rest over the rank's 2. Against TP 2 alone the
    experts go from a split of 2 to 4: per matrix 2880 x 2880 / m elements at 17/32 B (mxfp4:
    n/2 + n/32 scales): m = 2: 2,203,200 B, m = 4: 1,101,600 B; the gate and up biases
    (2880 / m x 2 B each) shrink by 2 x 720 x 2 = 2,880 B; the down bias is replicated.
    Per layer 128 x (3 x 1,101,600 + 2,880) = 423,383,040 B; x 36 layers = 15,241,789,440 B."""
    tp2 = fit_json(capsys, "gpt-oss-120b", "--gpu", "h100", "--tp", "2", "-c", "32k")
    d = fit_json(capsys, "gpt-oss-120b", "--gpu", "h100", "--tp", "2", "--dp", "2", "-c", "32k")
    assert 128 * (3 * (2_203_200 - 1_101_600) + 2 * 720 * 2) * 36 == 15_241_789_440
    assert d["memory"]["weights_bytes"] == tp2["memory"]["weights_bytes"] - 15_241_789_440
    assert d["per_sequence_bytes"] == tp2["per_sequence_bytes"]
    assert d["max_concurrency"] == 2 * d["max_concurrency_per_dp_rank"]
    assert d["placement"]["moe_tp"] == 4 and d["placement"]["ep"] == 1
    assert d["gpus"] == 4


@pytest.mark.parametrize("args, needle", [
    (("deepseek-v3", "--dp", "8", "--ep", "4"), "ep = tp x dp = 8"),
    (("llama-3-8b", "--dp", "2", "--ep", "2"), "needs a mixture-of-experts model"),
    (("mixtral-8x7b-v0.1", "--tp", "2", "--dp", "8", "--ep", "16"), "more than the model's 8"),
    (("deepseek-v3", "--dp", "2", "--ep", "4"), "more than the tp x dp = 2 GPUs"),
    (("deepseek-v3", "--dp", "0"), "--dp"),
])
def test_refused_layouts_are_one_line(capsys, args, needle):
    line = fail(capsys, "fit", *args, "--gpu", "h200", "-c", "8k")
    assert needle in line, line


def test_dense_model_dp_is_replicas(capsys):
    """A dense model under DP: independent replicas, each with its own pool (no MoE group, so
    the overhead is that of one GPU)."""
    one = fit_json(capsys, "llama-3-8b", "--gpu", "h100", "-c", "8k")
    d = fit_json(capsys, "llama-3-8b", "--gpu", "h100", "--dp", "4", "-c", "8k")
    assert d["memory"] == one["memory"]
    assert d["max_concurrency"] == 4 * one["max_concurrency"]


def test_deepseek_v3_dp8_ep8_on_sglang_and_trtllm(capsys):
    """SGLang's DP attention replicates the embedding but keeps dense MLPs, shared experts and
    the LM head split over all 8 GPUs; TensorRT-LLM's attention DP replicates them all (the
    same bytes as vLLM's DP 8 x EP 8, where tp = 1 splits nothing). Against everything whole:
    - dense MLP (3 layers; gate/up [18432, 7168], down [7168, 18432], fp8 + 128x128 scales):
      whole 3 x (132,120,576 + 4 x 144 x 56) = 396,458,496 B; over 8:
      3 x (16,515,072 + 4 x 18 x 56) = 49,557,312 B; 3 layers x 346,901,184 = 1,040,703,552
    - shared expert (58 layers; [2048, 7168] etc.): 44,050,944 whole, over 8
      3 x (1,835,008 + 4 x 2 x 56) = 5,506,368; 58 x 38,544,576 = 2,235,585,408
    - LM head (bf16, vocab 129,280 = 2,020 x 64): 129,280 x 7168 x 2 = 1,853,358,080 whole,
      16,160 rows on each of 8: 231,669,760; saves 1,621,688,320."""
    vllm = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k")
    sg = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
                  "--engine", "sglang")
    trt = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
                   "--engine", "trtllm")
    saved = 3 * 346_901_184 + 58 * 38_544_576 + 1_621_688_320
    assert saved == 4_897_977_280
    assert sg["memory"]["weights_bytes"] == vllm["memory"]["weights_bytes"] - saved
    assert trt["memory"]["weights_bytes"] == vllm["memory"]["weights_bytes"]
    assert sg["placement"]["embedding_tp"] == 1 and sg["placement"]["lm_head_tp"] == 8
    # SGLang's default mem_fraction_static under DP attention: H200 nvidia-smi 143,771 MiB,
    # chunked_prefill 8192, cuda_graph_max_bs 512 (tp_size 8): reserved = 512 + 1.5 x 8192 +
    # 2 x 512 + 8 x 1 / 8 x 1024 + 512 x 8 x 3 + 1.5 x 512 x 8 = 33,280 MiB
    reserved = 512 + 12_288 + 1024 + 1024 + 12_288 + 6144
    assert round((143_771 - reserved) / 143_771, 3) == 0.769
    assert "0.769" in next(t["how"] for t in sg["budget_terms"] if "mem_fraction" in t["label"])
    line = sg["launch"]["sglang"].split()
    for flag, value in (("--tp-size", "8"), ("--ep-size", "8")):
        assert line[line.index(flag) + 1] == value
    assert "--max-running-requests" not in line
    assert line[line.index("--attn-dp-size") + 1] == "8" and "--enable-dp-attention" not in line
    t = trt["launch"]["trtllm"]
    assert '"enable_attention_dp": true' in t and "--tp_size 8" in t and "--ep_size 8" in t


def test_vllm_sequence_parallel_moe_replicates_shared_experts(capsys):
    """vLLM with --enable-expert-parallel, tp 4 and dp 2 (use_sequence_parallel_moe): the
    shared expert is whole on every GPU. Against tp 4 + EP 4 (dp 1): 32 experts instead of 64
    per GPU, and the shared expert whole (44,050,944 B) instead of over 4 (gate [512, 7168]:
    3,670,016 + 4 x 4 x 56 = 3,670,912; x 3 = 11,012,736): +33,038,208 B per MoE layer."""
    ep4 = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "4", "--ep", "4", "-c", "8k",
                   "--total-memory", "300GiB")
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "4", "--dp", "2", "--ep", "8",
                 "-c", "8k")
    expected = (ep4["memory"]["weights_bytes"] - 32 * DSV3_MOE_LAYERS * DSV3_EXPERT_BYTES
                + DSV3_MOE_LAYERS * (DSV3_EXPERT_BYTES - 3 * 3_670_912))
    assert d["memory"]["weights_bytes"] == expected
    assert d["placement"]["shared_expert_tp"] == 1 and d["placement"]["mlp_tp"] == 4


@pytest.mark.parametrize("engine, args, needle", [
    ("sglang", ("deepseek-v3", "--tp", "2", "--dp", "3", "--ep", "4"), "must divide the 6"),
    ("sglang", ("qwen3-235b-a22b", "--dp", "6", "--ep", "6"), "experts to divide by ep (6)"),
    ("trtllm", ("deepseek-v3", "--tp", "2", "--dp", "4", "--ep", "8"), "use --tp 1 --dp 8"),
    ("llama.cpp", ("qwen3-235b-a22b", "--dp", "2"), "no data or expert parallelism"),
])
def test_engine_refusals(capsys, engine, args, needle):
    line = fail(capsys, "fit", *args, "--gpu", "h200", "-c", "8k", "--engine", engine)
    assert needle in line, line


def test_step_terms_under_dp_and_ep():
    """One decode step of a DP 4 x TP 2, EP 8 deployment (hand numbers on a small model):
    every DP rank's 16 tokens meet in each MoE layer (64 tokens), routing top 2 of 8 experts
    (one per GPU), on the busiest GPU of uniform routing (``busiest_ep_rank``); communication
    is the TP all-reduces (2 per layer over tp 2) and the MoE dispatch / combine over all 8
    GPUs (2 calls per MoE layer, ring bytes
    2 x 7/8 x 64 tokens x hidden x 2 B per MoE layer)."""
    from kvplan.core.perf import Efficiency, StepModel, step_terms

    m = StepModel(weight_bytes=1e9, expert_bytes=1e6, moe_layers=3, num_experts=8, top_k=2,
                  kv_reads=(), state_bytes=0.0, flops_per_token=10e9, attn_flops=(),
                  hidden_size=1000, layers=4, tp=2, pp=1, hbm_bytes_per_s=1e12, flops_per_s=1e15,
                  link_bytes_per_s=1e11, efficiency=Efficiency(), expert_flops_per_token=4e9,
                  dp=4, ep=8)
    t = step_terms(m, 16, 100)
    # 1 local expert per GPU (8 / ep 8): hit with p = 1 - (3/4)^64, certain here, so the busiest
    # holds min(1 x p + z sqrt(p (1 - p)), 1) = 1; pairs: 64 x 2 = 128 over 8 GPUs, mean 16,
    # sd sqrt(16 x 7/8) = 3.742, z_8 = Phi^-1(7.625 / 8.25) = 1.4342 -> 21.366 on the busiest
    p = 1 - (1 - 2 / 8) ** 64
    assert p > 1 - 1e-7
    assert t.expert_bytes == pytest.approx(1e6 * 3, rel=1e-3)
    z8 = 1.43420  # Blom's approximation of the expected maximum of 8 normals (exact: 1.4236)
    busiest = 16 + z8 * (16 * 7 / 8) ** 0.5
    assert busiest == pytest.approx(21.366, rel=1e-4)
    assert t.expert_flops == pytest.approx(busiest * 4e9 / 2, rel=1e-5)
    assert t.dense_flops == pytest.approx(16 * 6e9)
    assert t.comm_calls == 2 * 4 + 2 * 3
    tp_ring = 2 * 4 * (2 * 1 / 2) * 16 * 1000 * 2
    moe = 3 * 2 * 7 / 8 * 64 * 1000 * 2
    assert t.comm_bytes == pytest.approx(tp_ring + moe)
    plain = step_terms(StepModel(**{**m.__dict__, "dp": 1, "ep": 1}), 16, 100)
    assert plain.comm_calls == 8 and plain.expert_flops == pytest.approx(16 * 4e9)


def test_validate_predicts_an_attention_dp_row(capsys, monkeypatch):
    """TensorRT-LLM DeepSeek-R1 on 8 x B200, attention DP 8 x EP 8, 64 users: each DP rank
    serves 64 / 8 = 8 of them; the row is re-predicted (no calibration was fitted on such rows)."""
    from pathlib import Path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # every row's model is built in: never the Hub
    fix = Path(__file__).parent / "fixtures" / "benchmarks" / "aic_sample.csv"
    code = run(["validate", "--benchmarks", str(fix), "--json", "--by", "layout"])
    out, err = capsys.readouterr()
    d = json.loads(out)
    row = next(r for r in d["results"] if r["model"] == "deepseek-ai/DeepSeek-R1")
    assert row["detail"]["slots"] == 8
    assert "dp 8 x tp 1, ep 8" in d["by"]["layout"]
    # MiniMax-M2.5 (built in from AIConfigurator's abbreviated config) is predicted too
    mm = next(r for r in d["results"] if r["model"] == "MiniMaxAI/MiniMax-M2.5")
    assert (mm["gpu"], mm["engine"], mm["tp"]) == ("b300", "vllm", 4)
    assert code in (0, 1)


@pytest.mark.parametrize("args, needle", [
    # Qwen3-30B-A3B experts are 768 wide: vLLM's flattened MoE TP over 5 GPUs cannot split them
    (("qwen3-30b-a3b", "--dp", "5"), "768 intermediate rows over 5 GPUs"),
    (("deepseek-v3", "--dp", "99999999999"), "kvplan plans at most 4,096"),
    (("deepseek-v3", "--dp", "8", "--ep", "8", "--draft-model", "deepseek-v3",
      "--num-speculative-tokens", "1"), "speculative decoding under --dp / --ep"),
])
def test_review_refusals(capsys, args, needle):
    line = fail(capsys, "fit", *args, "--gpu", "h200", "-c", "8k")
    assert needle in line, line


def test_dp_needs_a_parameter_inventory(tmp_path, capsys):
    # Ling-3.0-flash with qkv biases, which vLLM's BailingMoeV3 does not build: kvplan has no
    # parameter inventory for it, and --weight-memory cannot say which weights are experts
    cfg = json.loads(open("tests/fixtures/configs/inclusionAI__Ling-3.0-flash.json").read())
    path = tmp_path / "ling.json"
    path.write_text(json.dumps(cfg | {"use_qkv_bias": True}))
    line = fail(capsys, "fit", str(path), "--dp", "8", "--weight-memory", "40GiB", "--gpu",
                "h200", "-c", "8k")
    assert "need the model's parameter inventory" in line, line


def test_layout_search_from_a_dp_plan_and_into_one(capsys):
    # DP 8 + EP 8 holds 104 sequences of 32k (8 x 13, above); 200 need more GPUs than the
    # DP search's 8 (all-to-all within a node): the smallest TP x PP layout, 16 GPUs
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
                 "--concurrency", "200")
    assert not d["fits"] and d["suggestion"]["tp"] * d["suggestion"]["pp"] == 16
    assert (d["suggestion"]["dp"], d["suggestion"]["ep"]) == (1, 1)
    assert d["suggestion"]["max_concurrency"] >= 200
    # TP 8 holds 20; 100 sequences: DP 8 + EP 8 on the same 8 GPUs (104) before any 16-GPU layout
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "-c", "32k",
                 "--concurrency", "100")
    assert d["suggestion"] == {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "dcp": 1,
                               "max_concurrency": 104}
    assert d["launch_layout"] == {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "dcp": 1, "suggested": True}
    assert "--data-parallel-size 8 --enable-expert-parallel" in d["launch"]["vllm"]
    assert "--max-num-seqs 13" in d["launch"]["vllm"]  # ceil(100 / 8) per rank
    # a dense model is searched over TP x PP only
    d = fit_json(capsys, "llama-3.3-70b", "--gpu", "h100", "-c", "32k", "--concurrency", "64")
    assert d["suggestion"]["dp"] == 1 and d["suggestion"]["ep"] == 1
    note = next(n for n in fit_json(capsys, "qwen3-30b-a3b", "--gpu", "h100", "-c", "8k", "--dp",
                                    "2", "--engine", "sglang")["notes"] if "data-parallel" in n)
    assert "shared experts" not in note and "dense MLPs" not in note  # the model has neither


@pytest.mark.parametrize("version, flags", [
    ("0.5.21", ["--dp-size", "8", "--enable-dp-attention"]),  # before the deprecation
    ("0.5.22", ["--attn-dp-size", "8"]),  # DeprecatedStoreTrueAction from 0.5.22
])
def test_sglang_dp_attention_spelling_by_release(capsys, version, flags):
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
                 "--engine", f"sglang@{version}")
    line = d["launch"]["sglang"].split()
    i = line.index(flags[0])
    assert line[i:i + len(flags)] == flags
    assert ("--enable-dp-attention" in line) == (version == "0.5.21")
