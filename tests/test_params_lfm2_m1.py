"""LFM2 and MiniMax-M1 parameter inventories (kvplan/loaders/params_lfm2.py,
params_minimax_m1.py), derived by hand from the fixture configs, checked against the published
counts and against transformers 5.24 on the meta device (the counts recorded in
fixtures/transformers_param_counts.json, which test_params_vs_transformers.py pins too).

Published figures (not in fixtures/published_params.json: its records are loaded by Hub id
through the built-in model_specs, which have no LFM2 or MiniMax-M1 entry):
- LiquidAI's LFM2 model cards (LFM2-1.2B; the LFM2 table of LFM2-2.6B-Exp's card): LFM2-700M
  742,489,344 and LFM2-1.2B 1,170,340,608 parameters;
- MiniMax-M1 (arXiv 2506.13585, abstract): 456 billion parameters in total, 45.9 billion
  activated per token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import fail
from family_helpers import BF16, CONFIGS, covers, load, raw

from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes
from kvplan.loaders.fields import Fields
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.params_lfm2 import ffn_width
from kvplan.loaders.quant_config import weight_format
from kvplan.planning.footprint import kv_footprint

COUNTS = json.loads((Path(__file__).parent / "fixtures" / "transformers_param_counts.json")
                    .read_text())["counts"]
LFM2_12B = "FastFlowLM__LFM2-1.2B-NPU2.json"
LFM2_700M = "LiquidAI__LFM2-700M.json"
M1 = "MiniMaxAI__MiniMax-M1.json"


def inv(fname: str, config: dict | None = None):
    return weight_inventory(load(fname, config))


def lfm2_by_hand(vocab, h, heads, kv, ff, conv_layers, attn_layers, kernel=3):
    """Embedding (tied: counted once) + conv layers + attention layers + a SwiGLU FFN and two
    norms on every layer + the final embedding_norm."""
    d = h // heads
    conv = 3 * h * h + h * kernel + h * h  # in_proj, depthwise conv, out_proj
    attn = heads * d * h + 2 * kv * d * h + h * heads * d + 2 * d  # q, k, v, out_proj, q/k norms
    ffn = 3 * ff * h + 2 * h  # w1, w3, w2; operator_norm, ffn_norm
    return vocab * h + conv_layers * conv + attn_layers * attn + (conv_layers + attn_layers) * ffn + h


# --------------------------------------------------------------------------------------------
# LFM2
# --------------------------------------------------------------------------------------------


@covers(LFM2_12B)
def test_lfm2_1_2b_by_hand_is_the_published_count():
    c = raw(LFM2_12B)
    assert (c["vocab_size"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
            c["block_ff_dim"], c["block_multiple_of"], c["block_ffn_dim_multiplier"],
            c["block_auto_adjust_ff_dim"], c["conv_L_cache"], c["conv_bias"],
            c["full_attn_idxs"]) == (65536, 2048, 32, 8, 12288, 256, 1.0, True, 3, False,
                                     [2, 5, 8, 10, 12, 14])
    # FFN: int(2 x 12288 / 3) = 8192, x 1.0 = 8192, 256 x cdiv(8192, 256) = 8192 (the file's
    # own intermediate_size 8192 is FastFlowLM's already-adjusted width; transformers' Lfm2Config
    # takes block_ff_dim over it)
    conv = 3 * 2048 * 2048 + 2048 * 3 + 2048 * 2048  # 16,783,360
    attn = 2048 * 2048 + 2 * 512 * 2048 + 2048 * 2048 + 2 * 64  # 10,485,888
    ffn = 3 * 2048 * 8192 + 2 * 2048  # 50,335,744
    total = 65536 * 2048 + 10 * conv + 6 * attn + 16 * ffn + 2048
    assert (conv, attn, ffn) == (16_783_360, 10_485_888, 50_335_744)
    assert total == lfm2_by_hand(65536, 2048, 32, 8, 8192, 10, 6) == 1_170_340_608  # published
    w = inv(LFM2_12B)
    assert w.params_total == w.params_active == total
    assert w.tied_embeddings and not any(t.name == "lm_head" for t in w.tensors)
    assert any("intermediate_size = 8192 ignored" in n for n in w.notes)
    assert COUNTS[LFM2_12B]["params"] == total  # transformers' Lfm2ForCausalLM
    # KV: the same geometry as the partial LFM2-1.2B fixture (test_families_2026): 10 conv
    # layers x 2 x 2048 x 2 B of state, 6 attention layers x 2 x 8 x 64 x 2 B per token
    fp = kv_footprint(load(LFM2_12B), [1])
    assert (fp.state_bytes_per_sequence, fp.bytes_per_token) == (10 * 2 * 2048 * BF16,
                                                                  6 * 2 * 8 * 64 * BF16)


@covers(LFM2_700M)
def test_lfm2_700m_by_hand_is_the_published_count():
    c = raw(LFM2_700M)
    assert (c["vocab_size"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
            c["block_ff_dim"], c["block_multiple_of"]) == (65536, 1536, 24, 8, 10240, 256)
    assert "intermediate_size" not in c and "tie_word_embeddings" not in c  # Lfm2Config: tied
    # FFN: int(2 x 10240 / 3) = int(6826.67) = 6826, x 1.0, 256 x cdiv(6826, 256) = 256 x 27
    assert 256 * -(-6826 // 256) == 6912
    total = (65536 * 1536
             + 10 * (3 * 1536 * 1536 + 1536 * 3 + 1536 * 1536)  # conv layers, 9,441,792 each
             + 6 * (1536 * 1536 + 2 * 512 * 1536 + 1536 * 1536 + 2 * 64)  # attention, 6,291,584
             + 16 * (3 * 6912 * 1536 + 2 * 1536)  # FFN + two norms
             + 1536)  # embedding_norm
    assert total == lfm2_by_hand(65536, 1536, 24, 8, 6912, 10, 6) == 742_489_344  # published
    assert inv(LFM2_700M).params_total == total
    assert COUNTS[LFM2_700M]["params"] == total
    fp = kv_footprint(load(LFM2_700M), [1])
    assert (fp.state_bytes_per_sequence, fp.bytes_per_token) == (10 * 2 * 1536 * BF16,
                                                                  6 * 2 * 8 * 64 * BF16)


def test_lfm2_1_2b_bytes_at_tp2():
    m = load(LFM2_12B)
    w = weight_inventory(m)
    b = weight_bytes(w, weight_format(m, None), tp=2)
    # replicated: q/k norms 6 x 2 x 64, operator/ffn norms 16 x 2 x 2048, embedding_norm 2048
    replicated = 6 * 2 * 64 + 16 * 2 * 2048 + 2048  # 68,352
    # everything else splits in half (vocab 65,536 is a multiple of 64: no padding; 8 KV heads
    # over 2 ranks: 4 each; the depthwise conv splits with its channels)
    assert b.total_bytes == 1_170_340_608 * BF16
    assert b.per_gpu_bytes == (1_170_340_608 - replicated) * BF16 // 2 + replicated * BF16 \
        == 1_170_408_960
    assert b.replicated_bytes == replicated * BF16


@pytest.mark.parametrize("keys, expected", [
    # LFM2-2.6B style: auto-adjust off, block_ff_dim as written
    ({"block_ff_dim": 10752, "block_auto_adjust_ff_dim": False}, 10752),
    # Lfm2Config defaults (auto-adjust on, multiplier 1.0, multiple 256): int(2 x 6656 / 3) =
    # 4437 -> 256 x 18 = 4608 (LFM2.5-350M)
    ({"intermediate_size": 6656}, 4608),
    # both spelled, equal (LFM2.5 files)
    ({"intermediate_size": 6656, "block_ff_dim": 6656}, 4608),
    # multiplier 1.5: int(1.5 x 8192) = 12288 -> 12288
    ({"block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.5}, 12288),
    # multiplier 1.3: int(1.3 x 8192) = 10649 -> 256 x 42 = 10752
    ({"block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.3}, 10752),
    # an explicit null multiplier, as vLLM 0.34 reads it: no multiplier, still rounded:
    # int(2 x 1000 / 3) = 666 -> 64 x 11 = 704
    ({"block_ff_dim": 1000, "block_ffn_dim_multiplier": None, "block_multiple_of": 64}, 704),
])
def test_lfm2_ffn_width_rule(keys, expected):
    assert ffn_width(Fields(keys, "x.json")) == expected


def test_lfm2_block_ff_dim_wins_over_intermediate_size():
    notes: list[str] = []
    assert ffn_width(Fields({"block_ff_dim": 12288, "intermediate_size": 8192}, "x.json"),
                     notes) == 8192
    assert notes and "block_ff_dim = 12288" in notes[0]


def test_lfm2_conv_bias_adds_three_biases():
    cfg = {**raw(LFM2_700M), "conv_bias": True}
    # in_proj 3 x 1536, the conv 1536 and out_proj 1536 per conv layer, 10 conv layers
    assert inv(LFM2_700M, cfg).params_total - 742_489_344 == 10 * (3 * 1536 + 1536 + 1536)


@pytest.mark.parametrize("change, key", [
    ({"tie_word_embeddings": False}, "tie_word_embeddings"),
    ({"tie_embedding": False}, "tie_embedding"),
    ({"block_use_swiglu": False}, "block_use_swiglu"),
    ({"block_dim": 1024}, "block_dim"),
    ({"conv_dim_out": 1024}, "conv_dim_out"),
    ({"block_ffn_dim_multiplier": "big"}, "block_ffn_dim_multiplier"),
    ({"head_dim": 128}, "head_dim"),
    ({"block_ff_dim": None}, "block_ff_dim"),
    ({"block_dim": None}, "block_dim"),
    ({"block_gate_bias": True}, "block_gate_bias"),  # a weight-shaped key no rule reads
])
def test_lfm2_bad_inputs_name_file_and_key(change, key):
    cfg = {k: v for k, v in {**raw(LFM2_700M), **change}.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        weight_inventory(load(LFM2_700M, cfg))
    assert e.value.field == key
    assert str(e.value).startswith(f"{CONFIGS / LFM2_700M}: {key}: ")


def test_lfm2_partial_fixture_says_what_is_missing():
    # the cache-only LFM2-1.2B fixture has no block_dim, FFN keys or vocabulary
    with pytest.raises(ConfigError, match="block_dim: missing"):
        inv("LiquidAI__LFM2-1.2B.json")


def test_lfm2_cli_untied_is_one_line(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw(LFM2_700M), "tie_word_embeddings": False}))
    line = fail(capsys, "fit", str(path), "--gpu", "l4")
    assert f"{path}: tie_word_embeddings: false: vLLM 0.34's lfm2.py always ties" in line


# --------------------------------------------------------------------------------------------
# MiniMax-M1
# --------------------------------------------------------------------------------------------

M1_LIGHTNING = 3 * 8192 * 6144 + 8192 * 6144 + 6144 * 8192 + 8192  # qkv, gate, out, norm
M1_SOFTMAX = 64 * 128 * 6144 + 2 * 8 * 128 * 6144 + 6144 * 64 * 128  # q, k, v, o
M1_EXPERTS = 32 * 3 * 9216 * 6144  # per layer
M1_LAYER_REST = 32 * 6144 + 2 * 6144  # router, input / post-attention norms
M1_VOCAB = 200064 * 6144


def test_minimax_m1_by_hand():
    c = raw(M1)
    assert (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
            c["intermediate_size"], c["num_local_experts"], c["num_experts_per_tok"],
            c["vocab_size"], c["shared_intermediate_size"], c["tie_word_embeddings"]) == \
        (6144, 64, 8, 128, 9216, 32, 2, 200064, 0, False)
    assert c["attn_type_list"].count(0) == 70 and c["attn_type_list"].count(1) == 10
    assert (M1_LIGHTNING, M1_SOFTMAX, M1_EXPERTS) == (251_666_432, 113_246_208, 5_435_817_984)
    total = (70 * M1_LIGHTNING + 10 * M1_SOFTMAX + 80 * (M1_EXPERTS + M1_LAYER_REST)
             + 2 * M1_VOCAB + 6144)  # embed_tokens, lm_head (untied), final norm
    assert total == 456_089_655_296
    active = total - 80 * M1_EXPERTS + 80 * M1_EXPERTS * 2 // 32  # 2 of 32 experts
    assert active == 48_403_306_496
    w = inv(M1)
    assert (w.params_total, w.params_active) == (total, active)
    assert (w.num_experts, w.experts_per_token) == (32, 2)
    assert COUNTS[M1]["params"] == total  # transformers' MiniMaxForCausalLM, layer_types mapped
    # published: 456B in total (rounded to 1e9); 45.9B activated, which is kvplan's active
    # count less the embedding and LM head matrices (2 x 1,229,193,216), to the 0.1B printed
    assert round(total / 1e9) == 456
    assert active - 2 * M1_VOCAB == 45_944_920_064
    assert abs((active - 2 * M1_VOCAB) - 45.9e9) < 0.05e9


def test_minimax_m1_bytes_at_tp8_fp32_head_and_router():
    m = load(M1)
    assert "dtype = bf16 (config names no torch_dtype/dtype)" in m.assumptions
    b = weight_bytes(weight_inventory(m), weight_format(m, None), tp=8)
    vocab_rank = 200064 // 8  # 200,064 is a multiple of 64: no padding
    per_gpu = (vocab_rank * 6144 * BF16  # embed_tokens
               + vocab_rank * 6144 * 4  # lm_head, fp32
               + 6144 * BF16  # final norm
               + 70 * (3 * 1024 * 6144 + 1024 * 6144 + 6144 * 1024 + 1024) * BF16  # lightning
               + 10 * (1024 * 6144 + 2 * 128 * 6144 + 6144 * 1024) * BF16  # softmax, 1 KV head
               + 80 * (32 * 3 * 1152 * 6144 * BF16  # experts, 9216 / 8 = 1152 wide per rank
                       + 32 * 6144 * 4  # router, fp32, replicated
                       + 2 * 6144 * BF16))  # norms
    assert per_gpu == b.per_gpu_bytes == 114_390_425_600
    assert b.replicated_bytes == 80 * (32 * 6144 * 4 + 2 * 6144 * BF16) + 6144 * BF16


def test_minimax_text_01_builds_the_same_class():
    cfg = {**raw(M1), "model_type": "minimax_text_01",
           "architectures": ["MiniMaxText01ForCausalLM"]}
    assert inv(M1, cfg).params_total == 456_089_655_296


def test_minimax_shared_mlp_and_single_expert():
    # shared_intermediate_size 1024: shared_mlp gate / up / down + the fp32 coefficient [1, h]
    cfg = {**raw(M1), "shared_intermediate_size": 1024}
    assert inv(M1, cfg).params_total - 456_089_655_296 == 80 * (3 * 1024 * 6144 + 6144)
    # as a list: only the layers it names (vLLM: 0 past its end)
    cfg = {**raw(M1), "shared_intermediate_size": [1024, 0, 512]}
    assert inv(M1, cfg).params_total - 456_089_655_296 == \
        (3 * 1024 * 6144 + 6144) + (3 * 512 * 6144 + 6144)
    # one expert: vLLM's dense MLP, no router
    cfg = {**raw(M1), "num_local_experts": 1}
    w = inv(M1, cfg)
    assert w.num_experts == 0
    assert w.params_total == 456_089_655_296 - 80 * (M1_EXPERTS + 32 * 6144) \
        + 80 * 3 * 9216 * 6144


@pytest.mark.parametrize("change, key", [
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"num_local_experts": [32] * 80}, "num_local_experts"),
    ({"num_experts_per_tok": 33}, "num_experts_per_tok"),
    ({"layernorm_mlp_alpha": "x"}, "layernorm_mlp_alpha"),
    ({"shared_intermediate_size": 64, "shared_moe_mode": "tanh"}, "shared_moe_mode"),
    ({"shared_intermediate_size": [64, -1]}, "shared_intermediate_size[1]"),
    ({"vocab_size": None}, "vocab_size"),
    ({"moe_router_bias": True}, "moe_router_bias"),  # a weight-shaped key no rule reads
])
def test_minimax_bad_inputs_name_file_and_key(change, key):
    cfg = {k: v for k, v in {**raw(M1), **change}.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        weight_inventory(load(M1, cfg))
    assert e.value.field == key
    assert str(e.value).startswith(f"{CONFIGS / M1}: {key}: ")


def test_minimax_cli_lines(capsys, tmp_path):
    # vLLM 0.34 no longer serves it: the fit names the last release that did
    line = fail(capsys, "fit", str(CONFIGS / M1), "--gpu", "h200", "--tp", "8")
    assert "vllm removed them after release 0.23.0 (plan with --engine vllm@0.23.0)" in line
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw(M1), "tie_word_embeddings": True}))
    line = fail(capsys, "fit", str(path), "--gpu", "h200", "--tp", "8", "--engine", "vllm@0.23.0")
    assert f"{path}: tie_word_embeddings: true: vLLM's minimax_text_01.py" in line
