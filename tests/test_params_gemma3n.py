"""Gemma-3n's parameter inventory (kvplan/loaders/params_gemma3n.py), derived by hand from the
E4B config (tests/fixtures/configs/google__gemma-3n-E4B.json) and checked against independent
counts: transformers 5.24 on the meta device (Gemma3nForCausalLM 6,835,235,568 for the text
model; Gemma3nForConditionalGeneration 7,818,517,072 with timm 1.0.31's MobileNetV5, recorded
in tests/fixtures/transformers_param_counts.json) and the Hub's safetensors total of
google/gemma-3n-E4B-it, 7,849,978,192 (quoted from the HF API in a public audit note, search
index file 70370324101; not in published_params.json, whose test loads a built-in spec that
Gemma-3n does not have)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
E4B = "google__gemma-3n-E4B.json"

# --- E4B's text config, as the hand derivations below use it ---------------------------------
H, L, SHARED, PLE, N, RANK = 2048, 35, 15, 256, 4, 64
MLP, VOCAB, PLE_VOCAB, HEADS, KV, D = 16384, 262400, 262144, 8, 2, 256

# per layer (vLLM gemma3n.py Gemma3nDecoderLayer)
ALTUP = N * N + N * N * N + N * H + H + H  # correction, prediction, router, router_norm, fp32 scale
ATTN_Q_O = HEADS * D * H + H * HEADS * D + D  # q_proj, o_proj, q_norm
ATTN_KV = 2 * KV * D * H + D  # k_proj, v_proj, k_norm: not on the sharing layers
FFN = 3 * MLP * H  # gate, up, down
LAUREL = RANK * H + H * RANK + H  # linear_left, linear_right, post_laurel_norm
PER_LAYER_INPUT = PLE * H + H * PLE  # per_layer_input_gate, per_layer_projection
NORMS = 5 * H
FULL_LAYER = ALTUP + ATTN_Q_O + ATTN_KV + FFN + LAUREL + PER_LAYER_INPUT + NORMS
SHARING_LAYER = FULL_LAYER - ATTN_KV
PLE_TABLE = PLE_VOCAB * (L * PLE)  # embed_tokens_per_layer
TEXT = (VOCAB * H  # embed_tokens (also the LM head)
        + PLE_TABLE
        + (L * PLE) * H + PLE  # per_layer_model_projection, per_layer_projection_norm
        + 2 * (N - 1) * H * H  # altup_projections, altup_unembed_projections
        + (L - SHARED) * FULL_LAYER + SHARED * SHARING_LAYER
        + H)  # final norm

# --- the towers (transformers modeling_gemma3n.py, timm mobilenetv5.py) ----------------------
# audio: d 1536, 8 heads, 12 Conformer blocks, depthwise kernel 5; subsampling 1 -> 128 -> 32
# channels, 3 x 3 kernels, stride 2: 128 mel bins -> (128 + 2 - 3) // 2 + 1 = 64 -> 32
A = 1536
CONFORMER = (2 * (A * 4 * A + 4 * A * A + 2 * A)  # two feed-forwards with two norms each
             + A + 4 * A * A + A // 8 + A * A + A  # pre norm, pos/q/k/v, per_dim_scale, post, norm
             + A + 2 * A * A + A * 5 + A + A * A  # lconv: norm, start, depthwise, norm, end
             + A)  # block norm
AUDIO = 128 * 9 + 128 + 32 * 128 * 9 + 32 + A * (32 * 32) + 12 * CONFORMER


def uir(c_in, c_out, start, mid, exp):
    """A UIR block: optional depthwise start / middle convs, 1 x 1 expand and project, each
    with an RMSNorm2d weight, and a layer scale."""
    width = c_in * exp
    return ((c_in * start * start + c_in if start else 0) + width * c_in + width
            + (width * mid * mid + width if mid else 0) + c_out * width + c_out + c_out)


def mqa(c, heads, dim, kv_stride):
    """A MobileAttention block: norm, query [heads x dim], one key and one value head (after a
    3 x 3 depthwise conv and norm when strided), output, layer scale."""
    down = c * 9 + c if kv_stride > 1 else 0
    return c + heads * dim * c + 2 * (down + dim * c) + c * heads * dim + c


STEM = 64 * 3 * 9 + 64 + 64  # conv with bias, norm
STAGE0 = (256 * 64 * 9 + 256 + 128 * 256 + 128) + 2 * (512 * 128 * 9 + 512 + 128 * 512 + 128)
STAGE1 = uir(128, 256, 3, 5, 6) + 2 * uir(256, 256, 5, 0, 4) + 2 * uir(256, 256, 3, 0, 4)
STAGE2 = (uir(256, 640, 5, 5, 6) + 7 * uir(640, 640, 5, 0, 4) + uir(640, 640, 0, 0, 1)
          + 14 * (mqa(640, 12, 64, 2) + uir(640, 640, 0, 0, 2)))
STAGE3 = uir(640, 1280, 5, 5, 6) + 19 * (mqa(1280, 16, 96, 1) + uir(1280, 1280, 0, 0, 2))
MSFA = 3840 * 1920 + 3840 + 2048 * 3840 + 2048 + 2048  # over 640 + 1280 channels, and a norm
VISION = STEM + STAGE0 + STAGE1 + STAGE2 + STAGE3 + MSFA
EMBED_VISION = 128 * 2048 + 2 * 2048 + H * 2048
EMBED_AUDIO = 128 * A + 2 * A + H * A


def raw() -> dict:
    return json.loads((CONFIGS / E4B).read_text())


def inventory(cfg: dict, name: str = E4B):
    return kvplan.weight_inventory(kvplan.parse_config(cfg, name=name, source=name))


def test_the_config_is_the_one_derived_from():
    t = raw()["text_config"]
    assert (t["hidden_size"], t["num_hidden_layers"], t["num_kv_shared_layers"]) == (H, L, SHARED)
    assert (t["hidden_size_per_layer_input"], t["altup_num_inputs"], t["laurel_rank"]) \
        == (PLE, N, RANK)
    assert t["intermediate_size"] == [MLP] * L
    assert (t["vocab_size"], t["vocab_size_per_layer_input"]) == (VOCAB, PLE_VOCAB)
    assert (t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]) == (HEADS, KV, D)
    assert t["attention_bias"] is False and t["tie_word_embeddings"] is True
    a = raw()["audio_config"]
    assert (a["hidden_size"], a["conf_num_attention_heads"], a["conf_num_hidden_layers"],
            a["conf_conv_kernel_size"], a["input_feat_size"]) == (A, 8, 12, 5, 128)
    assert a["sscp_conv_channel_size"] == [128, 32]
    assert (a["sscp_conv_kernel_size"], a["sscp_conv_stride_size"]) == ([[3, 3]] * 2, [[2, 2]] * 2)
    assert raw()["vision_config"]["architecture"] == "mobilenetv5_300m_enc"


def test_text_model_by_hand():
    assert FULL_LAYER == 112_484_944
    assert SHARING_LAYER == 112_484_944 - (2 * 512 * 2048 + 256) == 110_387_536
    assert PLE_TABLE == 262_144 * 8_960 == 2_348_810_240
    assert TEXT == 6_835_235_568  # transformers' Gemma3nForCausalLM on the same text config
    w = inventory({**raw()["text_config"]}, "text.json")  # gemma3n_text alone: no towers
    assert w.params_total == TEXT
    assert sum(t.params for t in w.tensors if t.name == "embed_tokens_per_layer") == PLE_TABLE
    assert w.tied_embeddings and not any(t.name == "lm_head" for t in w.tensors)
    # the 15 sharing layers (20..34) build q_proj only
    assert {t.layer for t in w.tensors if t.name == "self_attn.k_proj.weight"} == set(range(20))
    assert not w.notes


def test_towers_and_total_by_hand():
    assert CONFORMER == 56_644_800 and AUDIO == 681_348_640
    assert (STAGE0, STAGE1, STAGE2, STAGE3, MSFA) == (1_492_608, 2_439_168, 63_407_744,
                                                     211_540_480, 15_245_056)
    assert VISION == 294_126_912  # timm's mobilenetv5_300m_enc on the meta device
    assert (EMBED_VISION, EMBED_AUDIO) == (4_460_544, 3_345_408)
    w = inventory(raw())
    parts = {}
    for t in w.tensors:
        key = t.name.split(".")[0]
        parts[key] = parts.get(key, 0) + t.params
    assert parts["vision_tower"] == VISION and parts["audio_tower"] == AUDIO
    assert parts["embed_vision"] == EMBED_VISION and parts["embed_audio"] == EMBED_AUDIO
    total = TEXT + VISION + AUDIO + EMBED_VISION + EMBED_AUDIO
    assert w.params_total == total == 7_818_517_072  # transformers' Gemma3nForConditionalGeneration
    # the Hub checkpoint keeps the sharing layers' k / v / k_norm, which vLLM drops
    assert total + SHARED * ATTN_KV == 7_849_978_192
    assert any("MobileNetV5" in n for n in w.notes)


def test_bytes_bf16_tp1_and_tp2_by_hand():
    """bf16 everywhere but AltUp's fp32 correct_output_scale [2048] per layer. Under TP 2
    the column / row / KV-head / vocab tensors halve (every dimension divides: 8 heads, 2 KV
    heads, 16,384, rank 64, 8,960, vocabularies padded to 64 already); AltUp, the per-layer
    input gate and projection (ReplicatedLinear), the norms and both towers stay whole."""
    m = kvplan.parse_config(raw(), name=E4B, source=E4B)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    assert (fmt.scheme, fmt.base_dtype) == ("dense", "bf16")
    fp32 = L * H
    split = (VOCAB * H + PLE_TABLE + L * PLE * H + 2 * (N - 1) * H * H
             + L * (2 * HEADS * D * H + FFN + 2 * RANK * H) + (L - SHARED) * 2 * KV * D * H
             + 128 * 2048 + H * 2048 + 128 * A + H * A)  # embedders' tables and projections
    whole = w.params_total - split - fp32
    assert whole == (PLE + H + L * (ALTUP - H + D + H + PER_LAYER_INPUT + NORMS)
                     + (L - SHARED) * D + VISION + AUDIO + 2 * 2048 + 2 * A)
    tp1 = 2 * (split + whole) + 4 * fp32
    assert weight_bytes(w, fmt, tp=1).per_gpu_bytes == tp1 == 15_637_177_504
    tp2 = 2 * (split // 2) + 2 * whole + 4 * fp32
    assert weight_bytes(w, fmt, tp=2).per_gpu_bytes == tp2 == 8_831_722_656


def test_a_single_intermediate_size_applies_to_every_layer():
    cfg = raw()
    cfg["text_config"] = {**cfg["text_config"], "intermediate_size": MLP}  # Gemma3nTextConfig
    assert inventory(cfg).params_total == 7_818_517_072


def test_attention_bias_adds_q_k_v_o_biases():
    cfg = raw()
    cfg["text_config"] = {**cfg["text_config"], "attention_bias": True}
    # q and o on every layer (2048 + 2048), k and v on the 20 that hold the cache (512 + 512)
    assert inventory(cfg).params_total == 7_818_517_072 + L * 2 * 2048 + (L - SHARED) * 2 * 512


def _text(**changes) -> dict:
    cfg = raw()
    cfg["text_config"] = {**cfg["text_config"], **changes}
    return cfg


BAD = [
    (_text(laurel_rank=0), "text_config.laurel_rank", "must be >= 1"),
    (_text(intermediate_size=[MLP] * 34), "text_config.intermediate_size",
     "has 34 entries for 35 layers"),
    (_text(intermediate_size=[MLP] * 34 + ["wide"]), "text_config.intermediate_size[34]",
     "expected a positive integer"),
    (_text(activation_sparsity_pattern=[0.0] * 3), "text_config.activation_sparsity_pattern",
     "has 3 entries for 35 layers"),
    (_text(hidden_activation="silu"), "text_config.hidden_activation", "gelu_pytorch_tanh"),
    (_text(tie_word_embeddings=False), "text_config.tie_word_embeddings", "embed_tokens"),
    (_text(altup_active_idx=4), "text_config.altup_active_idx", "must be <= 3"),
    (_text(moe_intermediate_size=512), "text_config.moe_intermediate_size", "no kvplan rule"),
    ({**raw(), "vision_config": {**raw()["vision_config"], "architecture": "mobilenetv5_base"}},
     "vision_config.architecture", "only timm's mobilenetv5_300m_enc"),
    ({**raw(), "vision_config": {**raw()["vision_config"], "model_args": {"drop_rate": 0.1}}},
     "vision_config.model_args", "model_args"),
    ({k: v for k, v in raw().items() if k != "audio_config"}, "audio_config", "missing"),
    ({**raw(), "audio_config": {**raw()["audio_config"], "conf_num_attention_heads": 7}},
     "audio_config.conf_num_attention_heads", "does not divide"),
    ({**raw(), "audio_config": {**raw()["audio_config"], "sscp_conv_channel_size": [128]}},
     "audio_config.sscp_conv_channel_size", "two positive channel counts"),
]


@pytest.mark.parametrize("cfg, field, words", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_input_is_a_config_error_naming_file_and_key(cfg, field, words):
    with pytest.raises(ConfigError) as e:
        inventory(cfg)
    assert (e.value.source, e.value.field) == (E4B, field)
    assert words in str(e.value)


@pytest.mark.parametrize("cfg, field, words", BAD[:3] + BAD[8:11],
                         ids=[b[1] for b in BAD[:3] + BAD[8:11]])
def test_bad_input_through_the_cli_is_one_line(tmp_path, capsys, cfg, field, words):
    from cli_helpers import fail

    p = tmp_path / "gemma3n.json"
    p.write_text(json.dumps(cfg))
    line = fail(capsys, "fit", str(p), "--gpu", "l4", "--context", "32768")
    assert f"{p}: {field}: " in line and words in line, line


def test_fit_on_an_l4(capsys):
    from kvplan.cli.main import run

    assert run(["fit", str(CONFIGS / E4B), "--gpu", "l4", "--context", "32768"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 7,818,517,072" in out
    # the weights row: the TP 1 bytes above + vLLM's per-layer-embedding buffer, 2,048 tokens
    # (the L4's max_num_batched_tokens) x 35 layers x 256 x 2 B = 36,700,160 B
    assert 2048 * 35 * 256 * 2 == 36_700_160
    assert f"{15_637_177_504 + 36_700_160:,}" in out
    assert "per-layer-embedding buffer: 2,048 tokens" in out
