"""Regression tests for the review of the 2025-2026 families: keys read beside layer_types,
routing keys that shape no cache, families a key-based guess would get wrong, vLLM's hybrid
block alignment, engine and release refusals, sparse-MLA blocks and formats, KV-sharing
targets, per-layer overrides and bounds. Expected values are derived in the comments from the
fixture configs and the engines' rules."""

from __future__ import annotations

import json

import pytest
from family_helpers import BF16, CONFIGS, FP32, cdiv, kinds, load, raw

from kvplan.cli.main import run
from kvplan.core.errors import KvplanError as InputError
from kvplan.planning.footprint import kv_footprint


def fit_json(capsys, *args: str) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def error_line(capsys, *args: str) -> str:
    assert run(list(args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


# ---- keys read beside layer_types -----------------------------------------------------------


def test_gemma3_layer_types_with_the_private_pattern_key():
    # transformers >= 4.5x saves both layer_types and _sliding_window_pattern; the pattern is
    # then redundant, not an unknown KV key. Gemma-3-1B: 26 layers, every 6th global.
    cfg = {k: v for k, v in raw("google__gemma-3-1b-it.json").items()
           if k != "sliding_window_pattern"}
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    m = load("x.json", {**cfg, "layer_types": types, "_sliding_window_pattern": 6})
    assert [k for (k,) in kinds(m)].count("full_attention") == 4  # layers 6, 12, 18, 24
    assert kinds(m) == kinds(load("google__gemma-3-1b-it.json"))


def test_cohere2_layer_types_win_over_the_pattern():
    # Command-R7B: 32 layers, pattern 4 -> 8 global layers; a layer_types list (which
    # transformers and vLLM follow) naming only the last layer global gives 1
    cfg = raw("CohereForAI__c4ai-command-r7b-12-2024.json")
    types = ["sliding_attention"] * 31 + ["full_attention"]
    m = load("x.json", {**cfg, "layer_types": types})
    assert [k for (k,) in kinds(m)] == ["sliding_window"] * 31 + ["full_attention"]


# ERNIE-4.5-21B-A3B's config.json fields (baidu/ERNIE-4.5-21B-A3B-PT)
ERNIE = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
         "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
         "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
         "head_dim": 128, "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_k": 6,
         "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
         "vocab_size": 103424, "tie_word_embeddings": True, "hidden_act": "silu"}


def test_ernie_moe_routing_keys_shape_no_cache():
    # moe_layer_interval matches the "layer" KV words but only routes experts;
    # 28 layers x 4 KV heads x 128 x (K, V) x 2 B = 57,344 B per token
    fp = kv_footprint(load("x.json", ERNIE), [1], block_size_tokens=1)
    assert fp.bytes_per_token == 28 * 4 * 128 * 2 * BF16 == 57_344


def test_bailing_layer_groups_are_not_guessed_as_all_mla():
    # Ling-2.5 (bailing_hybrid) has kv_lora_rank, so a key-based reading would make every layer
    # MLA; its layer_group_size makes 7 of every 8 layers lightning attention instead
    ds = raw("deepseek-ai__DeepSeek-V3.json")
    # (the architecture decides which: Ling-3.0 KDA + MLA, Ling-2.5 lightning + MLA)
    with pytest.raises(InputError, match="a bailing_hybrid config must name "
                       "BailingMoeV3ForCausalLM"):
        load("x.json", {**ds, "model_type": "bailing_hybrid", "layer_group_size": 8})


def test_two_spellings_of_one_setting_must_agree():
    cfg = {**raw("meta-llama__Llama-3.1-8B.json"), "n_head": 16}  # num_attention_heads is 32
    with pytest.raises(InputError, match="n_head: 16 disagrees with num_attention_heads = 32"):
        load("x.json", cfg)


# ---- vLLM's hybrid block alignment -------------------------------------------------------


def test_kimi_linear_attention_block_is_a_multiple_of_64(capsys):
    # MLA page per token 576 x 2 B = 1,152 B; KDA page = 3 x 4,096 x 3 x 2 B conv + 32 x 128 x
    # 128 x 4 B state = 73,728 + 2,097,152 = 2,170,880 B. FlashMLA's block is 64 on Hopper:
    # 64 x cdiv(2,170,880, 64 x 1,152) = 64 x 30 = 1,920 (multiples of 16 would give 1,888)
    d = fit_json(capsys, str(CONFIGS / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json"),
                 "--gpu", "h200", "--tp", "1", "--context", "32k")
    state = 3 * 4096 * 3 * BF16 + 32 * 128 * 128 * FP32
    assert state == 2_170_880
    assert d["block_size_tokens"] == 64 * cdiv(state, 64 * 576 * BF16) == 1_920


def test_qwen35_attention_block_on_blackwell_is_a_multiple_of_32(capsys):
    # Qwen3.5-27B: 4 KV heads x 256 x (K, V) x 2 B = 4,096 B per token; GDN page = conv (2 x 16
    # x 128 + 48 x 128) x 3 x 2 B = 61,440 + state 48 x 128 x 128 x 4 B (mamba_ssm_dtype
    # float32) = 3,145,728 -> 3,207,168 B. FlashInfer's block for head size 256 on Blackwell is
    # 32: 32 x cdiv(3,207,168, 32 x 4,096) = 32 x 25 = 800 (multiples of 16 would give 784)
    d = fit_json(capsys, str(CONFIGS / "Qwen__Qwen3.5-27B.json"), "--gpu", "b200", "--tp", "1",
                 "--context", "32k")
    state = (2 * 16 * 128 + 48 * 128) * 3 * BF16 + 48 * 128 * 128 * FP32
    assert state == 3_207_168
    assert d["block_size_tokens"] == 32 * cdiv(state, 32 * 4 * 256 * 2 * BF16) == 800


# ---- engines and releases ------------------------------------------------------------------


def test_old_vllm_releases_refuse_families_they_may_not_serve(capsys):
    err = error_line(capsys, "size", str(CONFIGS / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json"),
                     "--engine", "vllm@0.11.0", "-c", "1")
    assert ("--engine: vllm@0.11.0: kvplan has not established which vllm release first served "
            "'kimi_linear' models; plan them with --engine vllm") in err
    err = error_line(capsys, "size", str(CONFIGS / "deepseek-ai__DeepSeek-V4-Flash.json"),
                     "--engine", "vllm@0.19.0", "-c", "1")
    assert "vLLM 0.27 and newer only" in err
    # the current rules still plan it
    assert run(["size", str(CONFIGS / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json"),
                "-c", "1"]) == 0


@pytest.mark.parametrize("fname, engine, why", [
    ("deepseek-ai__DeepSeek-V3.2.json", "sglang@0.5.20", "SGLang's DSA pool from 0.5.23"),
    ("zai-org__GLM-5.json", "sglang@0.5.20", "SGLang's DSA pool from 0.5.23"),
    ("MiniMaxAI__MiniMax-M1.json", "sglang", ""),
    ("Qwen__Qwen3.5-27B.json", "trtllm", "TensorRT-LLM 1.1 as read in late 2025"),
])
def test_engines_that_do_not_plan_a_family_say_so(capsys, fname, engine, why):
    err = error_line(capsys, "size", str(CONFIGS / fname), "--engine", engine, "-c", "1")
    assert "models are not planned on " + engine in err and why in err


def test_launch_lines_for_refusing_engines_are_comments(capsys):
    # V3.2, TP 8 on H200 at 32k with fp8: vLLM gets a command (fp8, which it rewrites to
    # fp8_ds_mla, and the forced 64-token block); TRT-LLM gets a comment saying why
    d = fit_json(capsys, str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu", "h200",
                 "--tp", "8", "--context", "32k", "--kv-dtype", "fp8")
    vllm = d["launch"]["vllm"]
    assert vllm.startswith("vllm serve ") and "--kv-cache-dtype fp8 " in vllm
    # the forced 64-token block (FlashMLASparse) is passed as planned
    assert "--block-size 64 " in vllm and "--max-num-seqs" not in vllm
    # SGLang 0.5.23 plans DSA models (sglang_dsa.py): on an H200 fp8 is FlashMLA's scaled row,
    # the same 656 B, spelled fp8_e4m3 on its command line
    assert d["launch"]["sglang"].startswith("python -m sglang.launch_server ")
    assert "--kv-cache-dtype fp8_e4m3" in d["launch"]["sglang"]
    assert d["launch"]["trtllm"].startswith("# 'deepseek_v32' models are not planned on trtllm")


# ---- sparse MLA (DeepSeek-V3.2) ------------------------------------------------------------


def test_sparse_mla_fp8_fit_on_h200(capsys):
    # per token per layer: fp8_ds_mla 656 B + indexer 128 fp8 + one fp32 scale = 132 B -> 788 B;
    # one 32,768-token sequence on 61 layers: 61 x 32,768 x 788 = 1,575,092,224 B (replicated
    # on every TP rank). The pool is the budget's; whole sequences = blocks // 512.
    d = fit_json(capsys, str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu", "h200",
                 "--tp", "8", "--context", "32k", "--kv-dtype", "fp8")
    assert d["kv_dtype"] == "fp8_ds_mla"
    assert d["block_size_tokens"] == 64
    assert d["per_sequence_bytes"] == 61 * 32_768 * (656 + 132) == 1_575_092_224
    block_bytes = 61 * 64 * 788
    assert d["kv_pool_blocks"] == d["memory"]["kv_pool_bytes"] // block_bytes
    assert d["max_concurrency"] == d["kv_pool_blocks"] // (32_768 // 64) == 29


def test_sparse_mla_on_ampere_is_not_native(capsys):
    err = error_line(capsys, "fit", str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu",
                     "a100-80gb-sxm", "--tp", "8", "--context", "32k", "--kv-dtype", "fp8")
    assert "cannot run KV format fp8_ds_mla natively" in err


def test_sparse_mla_size_uses_64_token_blocks(capsys):
    # 4,100 tokens in 64-token blocks = 65 blocks = 4,160 tokens; bf16 latent 576 x 2 B =
    # 1,152 B + indexer 132 B = 1,284 B per token per layer, 61 layers:
    # 61 x 4,160 x 1,284 = 325,827,840 B (16-token blocks would give 61 x 4,112 x 1,284)
    assert run(["size", str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "-c", "4100",
                "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["block_size"] == 64
    assert d["sequences"][0]["total_bytes"] == 61 * cdiv(4100, 64) * 64 * 1_284 == 325_827_840


def test_sparse_mla_refuses_formats_its_backend_lacks(capsys):
    err = error_line(capsys, "size", str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"),
                     "--kv-dtype", "nvfp4", "-c", "1")
    assert "sparse-MLA backend stores the latent as bf16 or fp8 (fp8_ds_mla), not nvfp4" in err


# ---- KV sharing, per-layer overrides, block configs ---------------------------------------


def test_kv_sharing_needs_an_earlier_layer_of_the_same_kind():
    # Gemma-3n-E4B: the last 15 of 35 layers share; with the first 20 all sliding, a shared
    # global layer has no global layer to read its K and V from
    cfg = raw("google__gemma-3n-E4B.json")
    text = dict(cfg["text_config"])
    types = ["sliding_attention"] * 20 + ["full_attention"] + ["sliding_attention"] * 14
    with pytest.raises(InputError, match="leave no full layer before layer 20"):
        load("x.json", {**cfg, "text_config": {**text, "layer_types": types}})


def test_gemma4_per_layer_config_names_global_layers_only():
    cfg = raw("google__gemma-4-26B-A4B.json")
    text = dict(cfg["text_config"])
    first_sliding = text["layer_types"].index("sliding_attention")
    bad = {k: v for k, v in text.items() if k not in ("global_head_dim",
                                                       "num_global_key_value_heads")}
    bad["per_layer_config"] = {str(first_sliding): {"head_dim": 256, "num_key_value_heads": 8}}
    with pytest.raises(InputError, match=f"per_layer_config.{first_sliding}: names no "
                       "full-attention layer"):
        load("x.json", {**cfg, "text_config": bad})


def test_nemotron_block_configs_attention_must_be_an_object():
    cfg = raw("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json")
    blocks = list(cfg["block_configs"])
    blocks[3] = {**blocks[3], "attention": 8}
    with pytest.raises(InputError, match=r"block_configs\[3\]\.attention"):
        load("x.json", {**cfg, "block_configs": blocks})


def test_lfm2_layer_lists_must_agree():
    cfg = raw("LiquidAI__LFM2-1.2B.json")  # full_attn_idxs 2, 5, 8, 10, 12, 14 of 16
    types = ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)]
    same = load("x.json", {**cfg, "layer_types": types})
    assert kinds(same) == kinds(load("LiquidAI__LFM2-1.2B.json"))
    types[3] = "full_attention"
    with pytest.raises(InputError, match="full_attn_idxs: disagrees with layer_types"):
        load("x.json", {**cfg, "layer_types": types})


# ---- bounds and types ------------------------------------------------------------------------


def test_nested_model_type_must_be_a_string():
    cfg = raw("google__gemma-3-27b-it.json")
    with pytest.raises(InputError, match="text_config.model_type: expected a string"):
        load("x.json", {**cfg, "text_config": {**cfg["text_config"], "model_type": ["gemma3"]}})


@pytest.mark.parametrize("value", [1e30, 10**9, 65])
def test_absurd_mtp_counts_are_errors(value):
    cfg = {**raw("deepseek-ai__DeepSeek-V3.json"), "num_nextn_predict_layers": value}
    with pytest.raises(InputError, match="num_nextn_predict_layers"):
        load("x.json", cfg)


def test_sglang_dsa_fit_follows_the_gpu(capsys):
    """SGLang 0.5.23 on DeepSeek-V3.2 at TP 8, 32k (kvplan.engines.sglang_dsa): on a B200
    auto is fp8 and TRT-LLM's kernels read the raw row, 61 x (576 + 132) = 43,188 B per token;
    on an H200 auto is bf16, 61 x (1,152 + 132) = 78,324 B; pages are 64 tokens either way."""
    b = fit_json(capsys, str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu", "b200",
                 "--tp", "8", "--context", "32k", "--engine", "sglang", "--block-size", "16")
    assert b["kv_dtype"] == "fp8_e4m3"
    assert b["per_sequence_bytes"] == 32_768 * 61 * (576 + 132) == 1_415_184_384
    assert "--page-size 64" in b["launch"]["sglang"]
    assert any("SGLang forces 64-token pages" in n and "--block-size 16 does not apply" in n
               for n in b["notes"])
    h = fit_json(capsys, str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu", "h200",
                 "--tp", "8", "--context", "32k", "--engine", "sglang")
    assert h["kv_dtype"] == "bf16"
    assert h["per_sequence_bytes"] == 32_768 * 61 * (1_152 + 132) == 2_566_520_832


def test_sglang_dsa_launch_and_refusals(capsys):
    """SGLang 0.5.23 on DSA models: a planned bf16 cache is launched as bfloat16 (auto is fp8 on
    Blackwell); fp8_ds_mla is FlashMLA's row (Hopper, GLM on SM 12), refused where SGLang's
    TRT-LLM kernels read the raw row, and refused for non-DSA MLA models (SGLang's MLA pool is
    the raw 576-element row); AMD and pre-Hopper GPUs are refused (other pages and kernels)."""
    v32 = str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json")
    d = fit_json(capsys, v32, "--gpu", "b200", "--tp", "8", "--context", "32k", "--engine",
                 "sglang", "--kv-dtype", "bf16")
    assert d["per_sequence_bytes"] == 32_768 * 61 * (1_152 + 132)
    assert "--kv-cache-dtype bfloat16" in d["launch"]["sglang"]
    for args, needle in (
            (("--gpu", "b200", "--kv-dtype", "fp8_ds_mla"), "TRT-LLM's kernels, as the raw"),
            (("--gpu", "mi355x"), "on NVIDIA GPUs only; on gfx950"),
            (("--gpu", "a100-80gb-sxm", "--kv-dtype", "bf16"), "need SM 9.0 or newer")):
        err = error_line(capsys, "fit", v32, "--tp", "8", "-c", "32k", "--engine", "sglang", *args)
        assert needle in err
    err = error_line(capsys, "fit", str(CONFIGS / "deepseek-ai__DeepSeek-V3.json"), "--gpu",
                     "h200", "--tp", "8", "-c", "32k", "--engine", "sglang", "--kv-dtype",
                     "fp8_ds_mla")
    assert "SGLang stores fp8_ds_mla only for DSA models" in err


def test_sglang_dsa_learnable_sink_needs_bf16():
    from kvplan.engines.sglang_dsa import latent_format

    for spec in ("fp8", "fp8_ds_mla", "fp8_e4m3"):
        with pytest.raises(InputError, match="learnable DSA attention sinks need a bfloat16"):
            latent_format(spec, "10.0", model_type="deepseek_v32", learnable_sink=True)
    assert latent_format("auto", "10.0", model_type="deepseek_v32", learnable_sink=True) == "bf16"
    # GLM on SM 12 reads fp8 with FlashInfer sparse MLA: the scaled row
    assert latent_format("fp8", "12.0", model_type="glm_moe_dsa", learnable_sink=False) == \
        "fp8_ds_mla"
    assert latent_format("fp8", "12.0", model_type="deepseek_v32", learnable_sink=False) == \
        "fp8_e4m3"
