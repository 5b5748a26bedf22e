"""Weights of 2025-2026 checkpoints: parameter totals against published figures, the formats
people ship (fp8 block, ModelOpt NVFP4, compressed-tensors int4 / NVFP4) with their scales, and
module-name matching as vLLM applies it. Bytes derived by hand from shapes and the format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.core.module_match import SkipList, module_names

FIX = Path(__file__).parent / "fixtures"
CONFIGS = FIX / "configs"


def load(name: str, **changes):
    cfg = json.loads((CONFIGS / name).read_text())
    cfg.update(changes)
    return kvplan.parse_config(cfg, name=name, source=name)


# --- parameter totals ------------------------------------------------------------------------

def fp8_block_scales(m) -> int:
    """The fp32 weight_scale_inv elements of an fp8 128 x 128 block checkpoint: one per block of
    every quantised linear (the Hub's safetensors total counts them with the weights)."""
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    return sum(-(-t.rows // 128) * -(-t.cols // 128) * t.count for t in w.tensors if fmt.quantizes(t))


PUBLISHED = [
    # (fixture, Hub safetensors total, whether that total counts fp8 block scales, changes)
    # DeepSeek-V3.2: the Hub total of DeepSeek-V3.2-Exp (same tensors), 685,396,921,376, counts
    # the fp8 checkpoint's elements: V3's tensors + an indexer per layer (wq_b 8192 x 1536, wk
    # 128 x 7168, k_norm 2 x 128, weights_proj 64 x 7168) incl. the MTP layer, + the scales
    ("deepseek-ai__DeepSeek-V3.2.json", 685_396_921_376, True, {}),
    # GLM-5 (bf16): 753,864,139,008, the safetensors total of the GLM-5.1 tensor report (the
    # same architecture); its MTP block keeps no embedding copies
    ("zai-org__GLM-5.json", 753_864_139_008, False, {}),
    # GLM-5.2 (bf16): its index total_size 1,506,659,919,872 B holds 76 x 256 fp32 elements
    # (e_score_correction_bias) and the rest bf16: (1,506,659,919,872 - 76 x 256 x 4) / 2 + 76 x 256
    ("zai-org__GLM-5.2.json", (1_506_659_919_872 - 76 * 256 * 4) // 2 + 76 * 256, False, {}),
    # GLM-4.7-Flash: Hub API 31,221,488,576; the vendored config omits num_nextn_predict_layers 1
    ("zai-org__GLM-4.7-Flash.json", 31_221_488_576, False, {"num_nextn_predict_layers": 1}),
    # MiniMax-M2.7: the Hub total of MiniMax-M2.5 (the same shapes and fp8 block format),
    # 228,703,644,928, per-layer q/k norms over all heads, 256 experts, + the scales
    ("MiniMaxAI__MiniMax-M2.7.json", 228_703_644_928, True, {}),
    # MiniMax-M2.5 itself (AIConfigurator's abbreviated config: no attn_type_list, no dtype)
    ("MiniMaxAI__MiniMax-M2.5.json", 228_703_644_928, True, {}),
    # Kimi-Linear-48B (bf16): Hub total 49,122,681,728 (20 KDA layers of 39,514,272, 7 MLA layers
    # of 29,114,880, a dense layer 0, 26 MoE blocks of 256 experts + 1 shared)
    ("moonshotai__Kimi-Linear-48B-A3B-Instruct.json", 49_122_681_728, False, {}),
    # Qwen3.5-27B / 397B-A17B (bf16): Hub totals count the text stack, the MTP block and the
    # vision tower (27 blocks + merger): 27,781,427,952 and 403,397,928,944
    ("Qwen__Qwen3.5-27B.json", 27_781_427_952, False, {}),
    ("Qwen__Qwen3.5-397B-A17B.json", 403_397_928_944, False, {}),
]


@pytest.mark.parametrize("name,total,scales,changes", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameter_totals_match_published(name, total, scales, changes):
    m = load(name, **changes)
    w = kvplan.weight_inventory(m)
    assert w.params_total + w.params_extra + (fp8_block_scales(m) if scales else 0) == total


def test_nemotron_nas_block_sizes():
    """Llama-3.3-Nemotron-Super-49B: per block, attention q/k/v/o with 64 / n_heads_in_group KV
    heads unless no_op, an MLP of round_up_256(int(2 x ffn_mult x 8192 / 3)) unless no_op, one
    norm before each part. Only "49B" is published; the total is derived here by hand."""
    m = load("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json")
    cfg, h = m.config, 8192
    total = 2 * 128_256 * h + h  # untied embed_tokens and lm_head, final norm
    for block in cfg["block_configs"]:
        a, f = block["attention"], block["ffn"]
        if not a["no_op"]:
            kv = 64 // a["n_heads_in_group"]
            total += h + h * h * 2 + 2 * kv * 128 * h  # input norm, q and o, k and v
        if not f["no_op"]:
            inter = -(-int(2 * f["ffn_mult"] * h / 3) // 256) * 256
            total += h + 3 * h * inter
    assert kvplan.weight_inventory(m).params_total == total == 49_867_145_216


# --- formats and module matching ------------------------------------------------------------


def experts_of_layer(w, layer: int):
    return [t for t in w.tensors if t.expert and t.layer == layer]


def test_fp8_block_keeps_experts_quantised_despite_the_router_entry():
    """Qwen3-235B-A22B-FP8 lists model.layers.N.mlp.gate (the router) in modules_to_not_convert.
    vLLM matches whole module names, so the experts' gate_proj stay fp8: per MoE layer 128
    experts x 3 projections x (1536 x 4096 fp8 + ceil(1536/128) x ceil(4096/128) fp32 scales)."""
    m = load("Qwen__Qwen3-235B-A22B-FP8.json")
    fmt, w = kvplan.weight_format(m, None), kvplan.weight_inventory(m)
    assert "model.layers.0.mlp.gate" in fmt.skip.entries and fmt.skip.rule == "exact"
    per_projection = 1536 * 4096 + 12 * 32 * 4
    assert sum(fmt.tensor_bytes(t) for t in experts_of_layer(w, 0)) == 128 * 3 * per_projection
    assert 128 * 3 * per_projection == 2_416_508_928
    assert all(fmt.quantizes(t) for t in experts_of_layer(w, 0))


def test_modelopt_nvfp4_from_hf_quant_config():
    """nvidia/Qwen3-235B-A22B-NVFP4 keeps its quantisation in hf_quant_config.json (NVFP4, FP8 KV).
    Per expert projection of n weights: n/2 packed + n/16 fp8 scales + 8 B of fp32 scalars."""
    m = kvplan.load_model(str(FIX / "checkpoints" / "nvidia__Qwen3-235B-A22B-NVFP4"))
    fmt, w = kvplan.weight_format(m, None), kvplan.weight_inventory(m)
    assert fmt.name == "modelopt nvfp4"
    n = 1536 * 4096
    assert sum(fmt.tensor_bytes(t) for t in experts_of_layer(w, 0)) == 128 * 3 * (n // 2 + n // 16 + 8)
    assert 128 * 3 * (n // 2 + n // 16 + 8) == 1_358_957_568
    # tp 8 splits the expert intermediate: 192 rows (or columns) per rank; scalars replicated
    n8 = 192 * 4096
    per_rank = 128 * 3 * (n8 // 2 + n8 // 16 + 8)
    assert sum(fmt.tensor_bytes(t, tp=8) for t in experts_of_layer(w, 0)) == per_rank
    # the checkpoint's FP8 KV: vLLM stores 1 B per element under --kv-dtype auto
    fp = kvplan.kv_footprint(m, [1])
    assert fp.kv_dtype == "fp8_e4m3" and fp.bytes_per_token == 94 * 2 * 4 * 128


def test_compressed_tensors_int4_with_regex_ignores():
    """Kimi-K2.5 (pack-quantized int4, group 32, bf16 scales): attention, shared experts and the
    dense MLP are ignored by re: entries (re.match, anchored at the start), routed experts stay
    int4: gate_proj [2048, 7168] = 7,340,032 packed + 2048 x 224 x 2 B scales + 16 B shape."""
    m = load("moonshotai__Kimi-K2.5.json")
    fmt, w = kvplan.weight_format(m, None), kvplan.weight_inventory(m)
    assert fmt.skip.rule == "compressed_tensors"
    gate = next(t for t in experts_of_layer(w, 1) if t.name == "mlp.experts.gate_proj.weight")
    assert fmt.tensor_bytes(gate) == 384 * (7_340_032 + 917_504 + 16)  # 384 experts
    by_name = {t.name: fmt.quantizes(t) for t in w.tensors if t.layer == 1}
    assert by_name["mlp.shared_experts.gate_proj.weight"] is False
    assert by_name["self_attn.q_b_proj.weight"] is False
    dense = {t.name: fmt.quantizes(t) for t in w.tensors if t.layer == 0}
    assert dense["mlp.gate_proj.weight"] is False


def test_vllm_matching_rules_never_component_wise():
    names, fused = module_names("mlp.experts.gate_proj.weight", 0, "layer", True)
    assert names[0] == "model.layers.0.mlp.experts.0.gate_proj" and fused == "model.layers.0.mlp.experts"
    exact = SkipList(("model.layers.0.mlp.gate", "gate"), "exact")
    assert not exact.skips(names, fused)  # neither entry names the experts
    assert exact.skips(("model.layers.0.mlp.gate",))
    substring = SkipList(("gate",), "substring")  # AWQ / GPTQ: an entry anywhere in the name
    assert substring.skips(names)
    ct = SkipList(("re:.*mlp.gate$", "re:mlp.gate$"), "compressed_tensors")
    assert ct.skips(("model.layers.3.mlp.gate",))
    assert not ct.skips(("model.layers.3.mlp.gate_proj",))  # the $ anchors the end
    assert not SkipList(("re:mlp.gate$",), "compressed_tensors").skips(("model.layers.3.mlp.gate",))
    modelopt = SkipList(("model.layers.1*",), "modelopt")  # X* also means X and X.* ...
    assert modelopt.skips(("model.layers.1.self_attn.q_proj",))
    assert modelopt.skips(("model.layers.12.self_attn.q_proj",))  # ... and, as vLLM, layer 12
    assert not SkipList(("model.layers.2.self_attn*",), "modelopt").skips(
        ("model.layers.21.self_attn.q_proj",))


def test_nvfp4_dense_projection_bytes():
    """Llama-70B-shaped q, k, v at TP 1 (8192 x 8192, 1024 x 8192 twice): 10240 x 8192 x 9/16 B
    + 3 x 8 B of scalars = 47,185,944 B, as vLLM allocates the merged qkv_proj."""
    from kvplan.core.weights import Tensor, WeightFormat

    fmt = WeightFormat(name="nvfp4", scheme="nvfp4")
    ts = [Tensor(name=f"self_attn.{p}_proj.weight", rows=r, cols=8192, layer=0, linear=True,
                 shard="column") for p, r in (("q", 8192), ("k", 1024), ("v", 1024))]
    assert sum(fmt.tensor_bytes(t) for t in ts) == 47_185_944


def test_mimo_v2_flash_parameters_by_hand():
    """MiMo-V2-Flash (Xiaomi: "309B total, 15B active"), counted as vLLM's mimo_v2.py builds it:
    hybrid_layer_pattern gives 9 full-attention layers (64 q heads, 4 KV heads, head 192, V 128)
    and 39 sliding-window ones (64 / 8 KV heads, + a 64-entry attention sink); moe_layer_freq
    gives 47 MoE layers (fp32 router 256 x 4096 + fp32 score bias 256 + 256 experts of
    3 x 4096 x 2048) and 1 dense MLP (3 x 4096 x 16384); no shared experts."""
    m = load("XiaomiMiMo__MiMo-V2-Flash.json")
    w = kvplan.weight_inventory(m)
    h = 4096
    full = 64 * 192 * h + 4 * 192 * h + 4 * 128 * h + h * 64 * 128  # 89,128,960
    swa = 64 * 192 * h + 8 * 192 * h + 8 * 128 * h + h * 64 * 128 + 64  # 94,371,904
    expert = 3 * h * 2048
    moe = 256 * h + 256 + 256 * expert
    total = 2 * 152_576 * h + 9 * full + 39 * swa + 47 * moe + 3 * h * 16_384 + 48 * 2 * h + h
    assert total == w.params_total == 308_778_780_864  # 309B
    assert w.params_active == total - 47 * 248 * expert == 15_445_936_320  # 15B
    assert (w.num_experts, w.experts_per_token) == (256, 8)
    # the router is fp32 in vLLM (moe_router_dtype default float32), outside the fp8 format
    router = next(t for t in w.tensors if t.name == "mlp.router.weight")
    assert router.dtype == "fp32" and not router.linear


def test_mimo_v2_flash_refuses_what_vllm_does_not_build():
    with pytest.raises(kvplan.ConfigError, match="add_full_attention_sink_bias"):
        kvplan.weight_inventory(load("XiaomiMiMo__MiMo-V2-Flash.json",
                                     add_full_attention_sink_bias=True))
    with pytest.raises(kvplan.ConfigError, match="n_shared_experts"):
        kvplan.weight_inventory(load("XiaomiMiMo__MiMo-V2-Flash.json", n_shared_experts=1))
    with pytest.raises(kvplan.ConfigError, match="moe_layer_freq"):
        kvplan.weight_inventory(load("XiaomiMiMo__MiMo-V2-Flash.json", moe_layer_freq=1))


def qwen3_vl_tower(out: int) -> int:
    """Qwen3-VL's vision tower (vLLM qwen3_vl.py), width 1152, MLP 4304, 27 blocks, 16 x 16 x 2
    patches of 3 channels, 2304 learned positions, 2 x 2 merge (4608 wide), the merger and
    three deepstack mergers (deepstack_visual_indexes [8, 16, 24]) to the text width ``out``."""
    d, inter, merged = 1152, 4304, 4 * 1152
    block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (inter * d + inter) + (d * inter + d)
    merger = lambda norm: norm + merged * (merged + 1) + out * (merged + 1)  # noqa: E731
    return (d * 3 * 2 * 16 * 16 + d + 2304 * d + 27 * block + merger(2 * d)
            + 3 * merger(2 * merged))


@pytest.mark.parametrize("name, text_total, out, total", [
    # text parts: Qwen3-30B-A3B and Qwen3-8B (their published safetensors totals, pinned in
    # tests/test_params.py and by the Hub); totals: the Hub's 31.1B and 8.77B
    ("Qwen__Qwen3-VL-30B-A3B-Instruct.json", 30_532_122_624, 2048, 31_070_754_032),
    ("Qwen__Qwen3-VL-8B-Instruct.json", 8_190_735_360, 4096, 8_767_123_696),
])
def test_qwen3_vl_text_and_tower(name, text_total, out, total):
    w = kvplan.weight_inventory(load(name))
    assert qwen3_vl_tower(out) == total - text_total
    assert w.params_total == text_total + qwen3_vl_tower(out) == total


def test_glm4_moe_by_hand_and_refusal_of_the_abbreviated_config():
    """GLM-4.x (``glm4_moe``, vLLM glm4_moe.py): GQA with q/k/v biases (attention_bias), no
    o_proj bias, per-head q/k norms (use_qk_norm), 3 dense layers then MoE with an fp32 router
    and score bias, one shared expert. The vendored GLM-4.7 config is abbreviated: it omits
    both keys, whose transformers defaults (false) would undercount, so it is refused; stated,
    the count is exact."""
    with pytest.raises(kvplan.ConfigError, match="attention_bias"):
        kvplan.weight_inventory(load("zai-org__GLM-4.7-FP8.json"))
    m = load("zai-org__GLM-4.7-FP8.json", attention_bias=True, use_qk_norm=True)
    w = kvplan.weight_inventory(m)
    h, heads, kv, d = 5120, 96, 8, 128
    attn = (heads * d * h + heads * d) + 2 * (kv * d * h + kv * d) + h * heads * d + 2 * d
    expert = 3 * h * 1536
    moe = 160 * h + 160 + 160 * expert + expert  # router, score bias, routed, shared
    total = 2 * 151_552 * h + h + 92 * (attn + 2 * h) + 3 * 3 * h * 12_288 + 89 * moe
    assert w.params_total == total == 352_797_829_024
    assert w.params_active == total - 89 * 152 * expert
    router = next(t for t in w.tensors if t.name == "mlp.router.weight")
    assert router.dtype == "fp32"


def test_gemma4_26b_a4b_by_hand():
    """Gemma-4 26B-A4B as vLLM allocates it (gemma4.py, gemma4_mm.py). Text: 25 sliding layers
    (16 heads, 8 KV heads x 256) and 5 full ones (16 heads, 2 KV heads x 512, attention_k_eq_v:
    the checkpoint has no v_proj there, vLLM's fused QKV still holds a V slot), q/k norms, a dense
    MLP (2112) beside 128 experts (704, top 8) with the router's projection, scale and
    per-expert scale, seven norms and a loaded layer_scalar per layer; tied embeddings. Vision:
    27 bias-free layers of width 1152 (16 heads x 72, MLP 4304), 2 x 10240 position rows, the
    standardize scale and bias, the projection to 2816. transformers 5.24.0 counts
    25,805,933,872 parameters on the meta device (buffers apart): that, + 5 V slots
    (2 x 512 x 2816 each) + 30 layer scalars + 2 x 1152 standardize values, is this total."""
    w = kvplan.weight_inventory(kvplan.load_model("gemma-4-26b-a4b"))
    h = 2816
    sliding = (16 + 8 + 8) * 256 * h + h * 16 * 256 + 2 * 256
    full = (16 + 2 + 2) * 512 * h + h * 16 * 512 + 2 * 512
    expert = 3 * h * 704
    layer = 3 * h * 2112 + 128 * h + h + 128 + 128 * expert + 7 * h + 1
    text = 262_144 * h + h + 25 * sliding + 5 * full + 30 * layer
    d = 1152
    vision = (d * 3 * 16 * 16 + 2 * 10_240 * d + 27 * (4 * d * d + 2 * 72 + 3 * 4304 * d + 4 * d)
              + 2 * d + h * d)
    assert w.params_total == text + vision == 25_805_933_872 + 5 * 2 * 512 * h + 30 + 2 * d
    assert w.params_active == w.params_total - 30 * 120 * expert
    assert (w.num_experts, w.experts_per_token) == (128, 8)


def test_gemma4_refuses_what_it_does_not_count():
    base = json.loads((CONFIGS / "google__gemma-4-26B-A4B.json").read_text())
    for key, value in (("num_kv_shared_layers", 4), ("hidden_size_per_layer_input", 256),
                       ("enable_moe_block", False)):
        cfg = json.loads(json.dumps(base))
        cfg["text_config"][key] = value
        m = kvplan.parse_config(cfg, name="g4", source="g4")
        with pytest.raises(kvplan.ConfigError, match=key):
            kvplan.weight_inventory(m)
    cfg = json.loads(json.dumps(base))
    cfg["audio_config"] = {"hidden_size": 1024}
    with pytest.raises(kvplan.ConfigError, match="audio"):
        kvplan.weight_inventory(kvplan.parse_config(cfg, name="g4", source="g4"))


def test_glm4_and_mimo_odd_keys_are_one_line_errors():
    with pytest.raises(kvplan.ConfigError, match="moe_layer_freq"):
        kvplan.weight_inventory(load("zai-org__GLM-4.7-FP8.json", attention_bias=True,
                                     use_qk_norm=True, moe_layer_freq=2))
    # topk_method does not drop the score bias vLLM's glm4_moe.py always builds (160 x 89)
    a = kvplan.weight_inventory(load("zai-org__GLM-4.7-FP8.json", attention_bias=True,
                                     use_qk_norm=True, topk_method="greedy"))
    assert a.params_total == 352_797_829_024
    for value in (["float32"], {"a": 1}, "float64"):
        with pytest.raises(kvplan.ConfigError, match="moe_router_dtype"):
            kvplan.weight_inventory(load("XiaomiMiMo__MiMo-V2-Flash.json",
                                         moe_router_dtype=value))


def test_kimi_k25_moonvit_tower():
    """Kimi-K2.5's MoonViT (vLLM kimi_k25_vit.py): width 1152, 27 layers, 16 heads, MLP 4304,
    14 x 14 patches, a 64 x 64 position table and a 4-frame fp32 time table, the 2 x 2
    patch-merger projector to 7168. transformers 5.24.0 counts its tower and projector at
    471,143,920 parameters on the meta device; the time table (4 x 1152) is a loaded buffer."""
    m = load("moonshotai__Kimi-K2.5.json")
    w = kvplan.weight_inventory(m)
    h, inter, merged = 1152, 4304, 4 * 1152
    layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (inter * h + inter) + (h * inter + h)
    tower = (h * (3 * 14 * 14 + 1) + 64 * 64 * h + 27 * layer + 2 * h
             + 2 * h + merged * (merged + 1) + 7168 * (merged + 1))
    assert tower == 471_143_920
    text = kvplan.weight_inventory(kvplan.parse_config(
        json.loads((CONFIGS / "moonshotai__Kimi-K2-Instruct.json").read_text()),
        name="k2", source="k2")).params_total  # the same text stack (Kimi-K2)
    assert w.params_total == text + tower + 4 * h
    # at TP 32 the 16 heads do not divide: vLLM keeps the ViT whole on every GPU
    t = next(t for t in w.tensors if t.name == "vision.layers.attn.wqkv.weight")
    assert t.shape_on_rank(8) == (3 * h // 8, h) and t.shape_on_rank(32) == (3 * h, h)


def test_qwen3_vl_deepstack_buffers_join_the_weights(capsys):
    """vLLM's Qwen3-VL allocates one max_num_batched_tokens x hidden bf16 buffer per deepstack
    level at load: Qwen3-VL-8B on an H100 (8,192 tokens) 3 x 8,192 x 4,096 x 2 = 201,326,592 B
    beside its 8,767,123,696 bf16 parameters; with --max-num-batched-tokens 2048, a quarter."""
    from kvplan.cli.main import run

    path = str(CONFIGS / "Qwen__Qwen3-VL-8B-Instruct.json")
    for tokens, buffers in ((None, 201_326_592), ("2048", 3 * 2048 * 4096 * 2)):
        args = ["fit", path, "--gpu", "h100", "--json"] + (
            ["--max-num-batched-tokens", tokens] if tokens else [])
        assert run(args) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["memory"]["weights_bytes"] == 2 * 8_767_123_696 + buffers


# --- DeepSeek-V4 (vLLM 0.34 vllm/models/deepseek_v4) -------------------------------------------

V4 = "deepseek-ai__DeepSeek-V4-Flash.json"


def v4_flash_by_hand() -> dict[str, int]:
    """DeepSeek-V4-Flash from its config, term by term (hidden 4096, vocab 129,280, 43 layers:
    compress_ratios 0, 0, then 4 / 128 alternating: 2 window-only, 21 ratio-4, 20 ratio-128
    layers; one MTP layer)."""
    h, vocab, heads, hd, q_lora, o_lora, groups = 4096, 129_280, 64, 512, 1024, 1024, 8
    index_heads, index_dim, hc, experts, top_k, inter = 64, 128, 4, 256, 6, 2048
    # attention: fp32 sinks, fused wq_a + wkv, q_norm, wq_b, kv_norm, grouped wo_a, wo_b
    attn = (heads + (q_lora + hd) * h + q_lora + heads * hd * q_lora + hd
            + groups * o_lora * (heads * hd // groups) + h * groups * o_lora)
    assert attn == 106_956_352

    def compressor(dim, ratio):  # fp32 ape, fused wkv + wgate, norm (overlap 2 for ratio 4)
        coff = 2 if ratio == 4 else 1
        return ratio * coff * dim + 2 * coff * dim * h + dim

    indexer = index_heads * index_dim * q_lora + index_heads * h + compressor(index_dim, 4)
    csa = attn + compressor(hd, 4) + indexer  # ratio 4: compressor + indexer
    hca = attn + compressor(hd, 128)  # ratio 128: compressor only
    assert (compressor(hd, 4), compressor(hd, 128), indexer) == (8_393_216, 4_260_352, 10_749_056)
    expert = 3 * inter * h  # w1, w3, w2
    router = experts * h
    moe_hash = router + vocab * top_k + experts * expert + expert  # tid2eid, routed, 1 shared
    moe = router + experts + experts * expert + expert  # fp32 score-correction bias instead
    mix = (2 + hc) * hc
    rest = 2 * h + 2 * (mix * hc * h + mix + 3)  # attn/ffn norms, two hyper-connections
    layers = (2 * attn + 21 * csa + 20 * hca  # layers 0-1, the even and odd ones from 2
              + 3 * moe_hash + 40 * moe + 43 * rest)  # num_hash_layers 3
    hyper_head = hc * hc * h + hc + 1
    total = 2 * vocab * h + layers + h + hyper_head  # embedding, LM head, final norm
    # MTP: a ratio-1 layer (no compressor, no indexer) with a non-hash MoE, enorm, hnorm,
    # shared_head.norm, e_proj and h_proj, its own hyper-head; the target's embedding and head
    mtp = attn + moe + rest + 3 * h + 2 * h * h + hyper_head
    active = total - 43 * (experts - top_k) * expert
    return {"total": total, "active": active, "mtp": mtp}


def test_deepseek_v4_flash_parameters_by_hand():
    """Model card: "284B total, 13B active". transformers 5.24.0 on the meta device counts
    284,332,230,231 parameters + 2,337,280 buffers (tests/test_params_vs_transformers.py)."""
    w = kvplan.weight_inventory(load(V4))
    hand = v4_flash_by_hand()
    assert w.params_total == hand["total"] == 284_334_567_511
    assert w.params_active == hand["active"] == 13_801_959_511
    assert w.params_extra == hand["mtp"] == 6_610_048_891
    assert (w.num_experts, w.experts_per_token) == (256, 6)
    # the built-in is the same config
    assert kvplan.weight_inventory(kvplan.load_model("deepseek-v4-flash")).params_total \
        == hand["total"]


def test_deepseek_v4_pro_against_transformers_and_the_card():
    """DeepSeek-V4-Pro ("1.6T total, 49B active"): transformers' 1,572,997,179,491 parameters
    + its 3 x 129,280 x 6 hash tables and 58 x 384 score biases (buffers there)."""
    w = kvplan.weight_inventory(load("deepseek-ai__DeepSeek-V4-Pro.json"))
    assert w.params_total == 1_572_997_179_491 + 3 * 129_280 * 6 + 58 * 384
    expert = 3 * 3072 * 7168
    assert w.params_active == w.params_total - 61 * (384 - 6) * expert == 49_781_408_099
    assert any("expert_dtype not stated" in n for n in w.notes)  # vLLM's default fp4


def _v4_group_bytes(w, fmt, tp, names, layer=2):
    from fractions import Fraction

    from kvplan.core.parallel import plain_split
    from kvplan.core.weights import rank_tensor_bytes

    return sum((rank_tensor_bytes(t, fmt, plain_split(tp)) for t in w.tensors
                if t.name in names and t.layer == layer), Fraction(0))


def test_deepseek_v4_flash_bytes_per_gpu_by_hand():
    """vLLM's DeepseekV4FP8Config with expert_dtype fp4: routed experts through Mxfp4MoEMethod
    (w13 [E, 2 x I/tp, H/2] and w2 [E, H, I/tp/2] uint8 + uint8 e8m0 scales per 32 values),
    every other linear fp8 128 x 128 blocks with e8m0fnu (1-byte) weight_scale_inv."""
    m = load(V4)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    assert (fmt.scheme, fmt.expert_scheme, fmt.scale_bytes) == ("fp8_block", "mxfp4", 1)
    experts = ("ffn.experts.w1.weight", "ffn.experts.w3.weight", "ffn.experts.w2.weight")
    # one layer's 256 experts: 3 x 2048 x 4096 values a half byte each + a byte per 32
    tp1 = 256 * 3 * (2048 * 4096 // 2 + 2048 * 4096 // 32)
    assert tp1 == 3_422_552_064
    assert _v4_group_bytes(w, fmt, 1, experts) == tp1
    # TP 8 (no expert parallelism): each expert 256 wide on a rank
    assert _v4_group_bytes(w, fmt, 8, experts) == 256 * 3 * (256 * 4096 // 2 + 256 * 4096 // 32) \
        == 427_819_008
    # wq_b [32768, 1024], column: 256 x 8 blocks (TP 1), 32 x 8 a rank (TP 8), a byte each
    assert _v4_group_bytes(w, fmt, 1, {"attn.wq_b.weight"}) == 32768 * 1024 + 256 * 8
    assert _v4_group_bytes(w, fmt, 8, {"attn.wq_b.weight"}) == 4096 * 1024 + 32 * 8
    # fused wq_a + wkv [1536, 4096], replicated: whole on every rank
    for tp in (1, 8):
        assert _v4_group_bytes(w, fmt, tp, {"attn.fused_wqa_wkv.weight"}) == 1536 * 4096 + 12 * 32
    # fp32 hyper-connection and compressor tensors, bf16 router and compressor projection
    hc = {"hc_attn_fn", "hc_ffn_fn", "hc_attn_base", "hc_ffn_base", "hc_attn_scale",
          "hc_ffn_scale"}
    assert _v4_group_bytes(w, fmt, 8, hc) == 4 * 2 * (24 * 16384 + 24 + 3)
    assert _v4_group_bytes(w, fmt, 8, {"attn.compressor.ape"}) == 4 * 4 * 1024
    assert _v4_group_bytes(w, fmt, 8, {"ffn.gate.weight",
                                       "attn.compressor.fused_wkv_wgate.weight"}) \
        == 2 * (256 * 4096 + 2048 * 4096)
    # hash layers' int32 tid2eid [129280, 6]
    assert _v4_group_bytes(w, fmt, 8, {"ffn.gate.tid2eid"}, layer=0) == 4 * 129_280 * 6
    # expert_dtype fp8 (DeepSeek-V4-Flash-Base): fp8 block experts with fp32 scales
    base = load(V4, expert_dtype="fp8")
    fmt8 = kvplan.weight_format(base, None)
    assert (fmt8.expert_scheme, fmt8.scale_bytes) == ("", 4)
    assert _v4_group_bytes(w, fmt8, 8, experts) == 256 * 3 * (256 * 4096 + 4 * 2 * 32)


@pytest.mark.parametrize("change, key", [
    ({"compress_ratios": [0, 0, 8] + [4] * 41}, "compress_ratios[2]"),
    ({"compress_ratios": [0, 4]}, "compress_ratios"),
    ({"expert_dtype": "int4"}, "expert_dtype"),
    ({"num_hash_layers": 44}, "num_hash_layers"),
    ({"mlp_layer_types": ["moe"] + ["hash_moe"] * 3 + ["moe"] * 39}, "mlp_layer_types[0]"),
    ({"o_groups": 7}, "o_groups"),
    ({"vision_n_layers": 2}, "vision_n_layers"),
    ({"first_k_dense_replace": 1}, "first_k_dense_replace"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"layer_types": ["sliding_attention"] * 43}, "layer_types"),  # the KV rules refuse it
    ({"shared_expert_intermediate_size": 1024}, "shared_expert_intermediate_size"),  # unread
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                              "moe_quant_algo": "NVFP4"}}, "quantization_config.moe_quant_algo"),
])
def test_deepseek_v4_unmodelled_values_are_one_error_naming_the_key(tmp_path, capsys, change,
                                                                    key):
    from cli_helpers import fail

    cfg = json.loads((CONFIGS / V4).read_text())
    cfg.update(change)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    line = fail(capsys, "fit", str(p), "--gpu", "h200", "--tp", "8", "--context", "32768")
    assert f" {key}" in line or f"{key}:" in line, line
