"""LFM2-MoE (``model_type: lfm2_moe``): the parameter inventory (kvplan/loaders/params_lfm2.py
``lfm2_moe_tensors``), the KV + short-conv state sizes and vLLM 0.34's own refusals, every
expected number derived by hand from the fixture configs.

Fixtures (tests/fixtures/configs/SOURCES.md): LiquidAI's own LFM2-8B-A1B config.json is not
reachable here; ``Ba2han__augment-multi-ft2.json`` is a verbatim full config of a fine-tune of
that architecture (24 layers, attention at 2, 6, 10, 14, 18, 21, two dense layers, 32 experts
top-4), and ``tiny-random__lfm2-moe.json`` a verbatim random test model. Independent checks:
transformers 5.24's Lfm2MoeForCausalLM on the meta device (the counts recorded in
fixtures/transformers_param_counts.json) and LiquidAI's published LFM2-8B-A1B figures (model
card and transformers' lfm2_moe docs: "8.3B total parameters and 1.5B active parameters").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import fail
from family_helpers import BF16, CONFIGS, FP8, FP32, covers, load, raw

from kvplan.cli.main import run
from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.planning.footprint import kv_footprint

COUNTS = json.loads((Path(__file__).parent / "fixtures" / "transformers_param_counts.json")
                    .read_text())["counts"]
A1B = "Ba2han__augment-multi-ft2.json"
TINY = "tiny-random__lfm2-moe.json"

# LFM2-8B-A1B by hand: hidden 2048, vocab 65,536, 32 heads of 64 (2048 / 32), 8 KV heads
H, VOCAB, HEADS, KV, D = 2048, 65536, 32, 8, 64
INTER, MOE_INTER, EXPERTS, TOP_K = 7168, 1792, 32, 4
ATTN_AT = (2, 6, 10, 14, 18, 21)
CONV = 3 * H * H + H * 3 + H * H  # in_proj, depthwise conv [hidden, conv_L_cache 3], out_proj
ATTN = H * HEADS * D + 2 * KV * D * H + H * HEADS * D + 2 * D  # q, k, v, out_proj, q/k norms
DENSE_FFN = 3 * INTER * H  # w1, w3, w2 on layers 0 and 1
EXPERT = 3 * MOE_INTER * H  # one routed expert's w1, w3, w2
ROUTER = EXPERTS * H  # feed_forward.gate
BIAS = EXPERTS  # feed_forward.expert_bias, fp32
NORMS = 2 * H  # operator_norm, ffn_norm
MOE_LAYERS = 24 - 2
TOTAL = (VOCAB * H + 18 * CONV + 6 * ATTN + 24 * NORMS + 2 * DENSE_FFN
         + MOE_LAYERS * (ROUTER + BIAS + EXPERTS * EXPERT) + H)  # + embedding_norm
ACTIVE = TOTAL - MOE_LAYERS * (EXPERTS - TOP_K) * EXPERT


def inv(fname: str, config: dict | None = None):
    return weight_inventory(load(fname, config))


def with_keys(fname: str, **change) -> dict:
    return {k: v for k, v in {**raw(fname), **change}.items() if v is not None}


@covers(A1B)
def test_lfm2_8b_a1b_by_hand():
    c = raw(A1B)
    assert (c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"],
            c["intermediate_size"], c["moe_intermediate_size"], c["num_experts"],
            c["num_experts_per_tok"], c["num_dense_layers"], c["num_hidden_layers"],
            c["conv_L_cache"], c["conv_bias"], c["use_expert_bias"], c["tie_word_embeddings"]) \
        == (H, VOCAB, HEADS, KV, INTER, MOE_INTER, EXPERTS, TOP_K, 2, 24, 3, False, True, True)
    assert [i for i, t in enumerate(c["layer_types"]) if t == "full_attention"] == list(ATTN_AT)
    assert "head_dim" not in c and "block_ff_dim" not in c
    assert (CONV, ATTN, DENSE_FFN) == (16_783_360, 10_485_888, 44_040_192)
    assert ROUTER + EXPERTS * EXPERT == 352_387_072  # one MoE layer without its fp32 bias
    assert TOTAL == 8_339_930_560 and ACTIVE == 1_557_740_992
    w = inv(A1B)
    assert (w.params_total, w.params_active) == (TOTAL, ACTIVE)
    assert (w.num_experts, w.experts_per_token) == (EXPERTS, TOP_K)
    assert w.params_expert == MOE_LAYERS * EXPERTS * EXPERT == 7_751_073_792
    assert w.tied_embeddings and not any(t.name == "lm_head" for t in w.tensors)
    # transformers keeps expert_bias as a buffer (22 layers x 32); vLLM holds it as a parameter
    assert COUNTS[A1B] == {"params": TOTAL - MOE_LAYERS * BIAS, "buffers": MOE_LAYERS * BIAS,
                           "class": "Lfm2MoeForCausalLM"}
    # LiquidAI: 8.3B total, 1.5B active (the active figure with the embedding: 1.5577B, as the
    # card writes it; without the embedding it would be 1.42B)
    assert round(TOTAL / 1e9, 1) == 8.3
    assert int(ACTIVE / 1e8) == 15 and int((ACTIVE - VOCAB * H) / 1e8) == 14


def test_lfm2_8b_a1b_layout_per_layer():
    w = inv(A1B)
    names = {i: {t.name for t in w.tensors if t.layer == i} for i in range(24)}
    for i in (0, 1):  # dense layers: no router
        assert "feed_forward.w1.weight" in names[i] and "feed_forward.gate.weight" not in names[i]
    for i in range(2, 24):
        assert {"feed_forward.gate.weight", "feed_forward.expert_bias",
                "feed_forward.experts.w1.weight"} <= names[i]
    bias = [t for t in w.tensors if t.name == "feed_forward.expert_bias"]
    assert len(bias) == MOE_LAYERS and all(t.dtype == "fp32" for t in bias)
    assert all(("self_attn.q_proj.weight" in names[i]) == (i in ATTN_AT) for i in range(24))


@covers(TINY)
def test_tiny_random_lfm2_moe_by_hand():
    c = raw(TINY)
    assert (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
            c["intermediate_size"], c["moe_intermediate_size"], c["num_experts"],
            c["num_dense_layers"], c["layer_types"]) == (64, 2, 1, 128, 128, 32, 2,
                                                         ["conv", "conv", "full_attention"])
    h, d = 64, 64 // 2
    conv = 4 * h * h + 3 * h  # 16,576
    attn = h * 2 * d + 2 * 1 * d * h + h * 2 * d + 2 * d  # 12,352
    moe = 32 * h + 32 + 32 * 3 * 128 * h  # the only MoE layer (layer 2): 788,512
    total = 65536 * h + 2 * conv + attn + 2 * 3 * 128 * h + moe + 3 * 2 * h + h
    assert (conv, attn, moe, total) == (16_576, 12_352, 788_512, 5_077_920)
    w = inv(TINY)
    assert w.params_total == total
    assert w.params_active == total - 28 * 3 * 128 * h
    assert COUNTS[TINY]["params"] + COUNTS[TINY]["buffers"] == total
    assert COUNTS[TINY]["buffers"] == 32


# --------------------------------------------------------------------------------------------
# kvplan size: 18 conv layers' state + 6 attention layers' KV
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tp, kv_dtype, kv_bytes", [(1, "auto", BF16), (1, "fp8", FP8),
                                                    (8, "auto", BF16), (8, "fp8", FP8)])
def test_lfm2_8b_a1b_cache_bytes(tp, kv_dtype, kv_bytes):
    ctx = 32768  # a multiple of the 16-token block: no rounding
    fp = kv_footprint(load(A1B), [ctx], kv_dtype=kv_dtype, tp=tp)
    # vLLM short_conv_state_shape: (conv_L_cache - 1) x hidden_size per conv layer, in the model
    # dtype whatever the KV format (mamba_cache_dtype auto), split by channels over TP
    state = 18 * (3 - 1) * H * BF16  # 147,456
    per_token = 6 * 2 * KV * D * kv_bytes  # K and V, 8 KV heads of 64
    assert fp.state_bytes_per_sequence == state
    assert fp.bytes_per_token == per_token
    seq = fp.sequences[0]
    assert seq.per_gpu_bytes == ctx * 6 * 2 * (KV // tp) * D * kv_bytes + 18 * 2 * (H // tp) * BF16
    assert seq.total_bytes == tp * seq.per_gpu_bytes
    if (tp, kv_dtype) == (1, "auto"):
        assert seq.per_gpu_bytes == 402_800_640  # 12,288 B per token x 32,768 + 147,456
    if (tp, kv_dtype) == (8, "fp8"):
        assert seq.per_gpu_bytes == 32768 * 768 + 18_432 == 25_184_256


def test_lfm2_8b_a1b_cache_at_tp16_replicates_kv_heads():
    fp = kv_footprint(load(A1B), [4096], tp=16)
    # 8 KV heads over 16 ranks: one whole head each (vLLM max(1, 8 // 16)); channels 2048 / 16
    assert fp.sequences[0].per_gpu_bytes == 4096 * 6 * 2 * 1 * D * BF16 + 18 * 2 * 128 * BF16


def test_lfm2_8b_a1b_weight_bytes_at_tp8():
    m = load(A1B)
    b = weight_bytes(weight_inventory(m), weight_format(m, None), tp=8)
    # replicated on every rank: q/k norms, the two norms per layer, embedding_norm, the routers
    # and the fp32 expert biases; everything else splits evenly in eight (vocab 65,536 is a
    # multiple of 64; 8 KV heads, one per rank; 7168 / 8 and 1792 / 8 rows per rank)
    replicated = 6 * 2 * D + 24 * NORMS + H + MOE_LAYERS * ROUTER  # 1,542,912
    split = TOTAL - replicated - MOE_LAYERS * BIAS
    assert b.total_bytes == (TOTAL - MOE_LAYERS * BIAS) * BF16 + MOE_LAYERS * BIAS * FP32
    assert b.per_gpu_bytes == split * BF16 // 8 + replicated * BF16 + MOE_LAYERS * BIAS * FP32 \
        == 2_087_685_376


def test_lfm2_embedding_on_every_pipeline_stage():
    m = load(A1B)
    b = weight_bytes(weight_inventory(m), weight_format(m, None), pp=8)
    # vLLM 0.34's Lfm2MoeModel builds embed_tokens on every PP rank; 3 layers a stage. Stage 1
    # (layers 3-5: conv, MoE) holds the embedding too
    stage1 = (VOCAB * H + 3 * CONV + 3 * NORMS + 3 * (ROUTER + EXPERTS * EXPERT)) * BF16 \
        + 3 * BIAS * FP32
    assert b.per_stage_bytes[1] == stage1 == 2_483_483_008
    assert all(s > VOCAB * H * BF16 for s in b.per_stage_bytes)


def test_lfm2_moe_head_dim_must_be_hidden_over_heads():
    with pytest.raises(ConfigError) as e:
        load(A1B, with_keys(A1B, head_dim=128))
    assert e.value.field == "head_dim"
    assert load(A1B, with_keys(A1B, head_dim=64)).layers  # 2048 / 32 agrees


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file and the key
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, key", [
    ({"num_dense_layers": 25}, "num_dense_layers"),  # above num_hidden_layers 24
    ({"num_dense_layers": 24}, "num_dense_layers"),  # no MoE layer: vLLM raises
    ({"num_dense_layers": -1}, "num_dense_layers"),
    ({"num_experts_per_tok": 33}, "num_experts_per_tok"),  # more than num_experts 32
    ({"num_experts_per_tok": 0}, "num_experts_per_tok"),
    ({"num_experts": None}, "num_experts"),
    ({"moe_intermediate_size": None}, "moe_intermediate_size"),
    ({"intermediate_size": None}, "intermediate_size"),
    ({"vocab_size": None}, "vocab_size"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings"),
    ({"use_expert_bias": "yes"}, "use_expert_bias"),
    ({"num_shared_experts": 1}, "num_shared_experts"),  # a weight-shaped key no rule reads
    ({"block_ff_dim": 12288}, "block_ff_dim"),  # dense LFM2's key: lfm2_moe.py never reads it
])
def test_lfm2_moe_bad_inputs_name_file_and_key(change, key):
    with pytest.raises(ConfigError) as e:
        weight_inventory(load(A1B, with_keys(A1B, **change)))
    assert e.value.field == key
    assert str(e.value).startswith(f"{CONFIGS / A1B}: {key}")


@pytest.mark.parametrize("change, key", [
    ({"layer_types": None, "full_attn_idxs": list(ATTN_AT)}, "layer_types"),
    ({"conv_dim": 1024}, "conv_dim"),
    ({"layer_types": ["conv"] * 23 + ["sliding_attention"]}, "layer_types[23]"),
])
def test_lfm2_moe_cache_bad_inputs(change, key):
    with pytest.raises(ConfigError) as e:
        load(A1B, with_keys(A1B, **change))
    assert e.value.field == key


@pytest.mark.parametrize("change, key, words", [
    ({"num_dense_layers": 30}, "num_dense_layers", "is not below num_hidden_layers 24"),
    ({"num_experts_per_tok": 40}, "num_experts_per_tok", "is more than num_experts 32"),
])
def test_lfm2_moe_cli_bad_input_is_one_line(capsys, tmp_path, change, key, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw(A1B), **change}))
    line = fail(capsys, "fit", str(path), "--gpu", "h100")
    assert line.startswith(f"kvplan: error: {path}: {key}: ") and words in line


def test_lfm2_moe_defaults_are_stated():
    w = inv(A1B, with_keys(A1B, num_dense_layers=None, use_expert_bias=None))
    assert w.params_total == TOTAL  # Lfm2MoeConfig defaults: 2 dense layers, the expert bias
    assert any("num_dense_layers" in n and "Lfm2MoeConfig default" in n for n in w.notes)
    assert any("use_expert_bias = true (Lfm2MoeConfig default)" in n for n in w.notes)
    # no expert bias: 22 fp32 vectors of 32 fewer
    assert inv(A1B, with_keys(A1B, use_expert_bias=False)).params_total == TOTAL - 22 * 32


def test_lfm2_moe_conv_bias_adds_three_biases():
    # in_proj 3 x 2048, the conv 2048 and out_proj 2048 per conv layer, 18 conv layers
    assert inv(A1B, with_keys(A1B, conv_bias=True)).params_total - TOTAL == 18 * 5 * H


# --------------------------------------------------------------------------------------------
# kvplan fit: vLLM 0.34 serves Lfm2MoeForCausalLM (registry "lfm2_moe"; SupportsPP), and
# refuses tp above the experts and a pipeline stage without an MoE layer
# --------------------------------------------------------------------------------------------

def fit_json(capsys, path, *args: str) -> dict:
    assert run(["fit", str(path), "--gpu", "h100", "--context", "32768", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_fit_needs_no_weight_memory(capsys):
    d = fit_json(capsys, CONFIGS / A1B, "--tp", "8")
    assert (d["params_total"], d["params_active"]) == (TOTAL, ACTIVE)
    assert d["memory"]["weights_bytes"] == 2_087_685_376  # test_lfm2_8b_a1b_weight_bytes_at_tp8


def test_fit_pipeline_stage_of_dense_layers_only_is_refused(capsys):
    # pp 12: 2 layers a stage, stage 0 = layers 0-1, both dense
    line = fail(capsys, "fit", str(CONFIGS / A1B), "--gpu", "h100", "--pp", "12")
    assert "pp=12: stage layers 0-1 are all dense" in line
    # pp 8: 3 layers a stage, stage 0 = layers 0-2 holds MoE layer 2. The budget shown is the
    # stage whose pool limits (fewest blocks, tests/test_fit_pp_stages.py): the last, layers
    # 21 (attention) and 22-23 (conv), all MoE, with the embedding and the final norm
    stage7 = (VOCAB * H + ATTN + 2 * CONV + 3 * NORMS + 3 * (ROUTER + EXPERTS * EXPERT) + H) \
        * BF16 + 3 * BIAS * FP32
    d = fit_json(capsys, CONFIGS / A1B, "--pp", "8")
    assert (d["busiest_stage"], d["memory"]["weights_bytes"]) == (7, stage7) \
        == (7, 2_470_892_160)


def test_fit_tp_above_experts_is_refused(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw(A1B), "num_experts": 4, "num_experts_per_tok": 2}))
    line = fail(capsys, "fit", str(path), "--gpu", "h100", "--tp", "8")
    assert "tp=8 above the model's 4 experts" in line
    assert fit_json(capsys, path, "--tp", "4")["tp"] == 4


# --------------------------------------------------------------------------------------------
# Pipeline placement by engine (review of 3998db3): vLLM builds embed_tokens on every rank;
# SGLang 0.5.23's Lfm2ForCausalLM / Lfm2MoeForCausalLM assert a single pipeline stage
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fname", [A1B, "FastFlowLM__LFM2-1.2B-NPU2.json"])
def test_sglang_refuses_pipeline_parallel_lfm2(capsys, fname):
    line = fail(capsys, "fit", str(CONFIGS / fname), "--gpu", "h100", "--pp", "2",
                "--engine", "sglang")
    assert line.startswith("kvplan: error: pp: SGLang's Lfm2")
    assert "asserts pp_group.is_first_rank and is_last_rank" in line


def test_first_last_rule_without_every_stage():
    """weight_bytes(every_stage=False), the placement of engines that build the embedding on
    the first rank only: at pp 8 stage 1 (layers 3-5) holds no embedding, the tied last
    stage (layers 21-23) does."""
    m = load(A1B)
    w, fmt = weight_inventory(m), weight_format(m, None)
    vllm = weight_bytes(w, fmt, pp=8).per_stage_bytes
    first_last = weight_bytes(w, fmt, pp=8, every_stage=False).per_stage_bytes
    assert [a - b for a, b in zip(vllm, first_last, strict=True)] == [0] + [VOCAB * H * BF16] * 6 + [0]
    assert first_last[1] == 2_483_483_008 - VOCAB * H * BF16
