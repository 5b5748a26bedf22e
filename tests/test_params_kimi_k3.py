"""Kimi-K3's parameter inventory (kvplan/loaders/params_kimi_k3.py), derived by hand from the
fixture config (tests/fixtures/configs/moonshotai__Kimi-K3.json) and the tensors vLLM 0.34's
``vllm/models/kimi_k3/nvidia`` allocates, then checked against published figures.

No independent implementation is recorded in fixtures/transformers_param_counts.json:
transformers 5.24 has no kimi_k3 class (CONFIG_MAPPING holds kimi_k25, kimi_k25_vision and
kimi_linear), and its KimiLinear classes build none of K3's parts (no latent MoE, no full-rank
KDA gate, no MLA output gate, no Attention Residuals), so a meta-device count of them would
measure another model.

Published figures (the record "kimi-k3" in fixtures/published_params.json):
- the HF Hub API's safetensors parameters of moonshotai/Kimi-K3, as two public records copy
  them (search-index file ids 57694383931 and 71553780238): BF16 57,179,884,544, F32
  11,122,432, U8 2,722,740,830,208 (the routed experts' logical weights), total
  2,779,931,837,184, index total_size 1,560,860,324,864 bytes;
- the model card, as Baidu's AIHC quick-start page mirrors it
  (https://cloud.baidu.com/doc/AIHC/s/hmtl8ixwa): 2.8T total, 104B activated, vision encoder
  401M, 69 KDA + 24 gated MLA layers, latent MoE width 3584.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from cli_helpers import fail
from family_helpers import CONFIGS, covers, load, raw

from kvplan.core.errors import ConfigError
from kvplan.core.parallel import plain_split
from kvplan.core.weights import expert_layer_bytes, weight_bytes
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format

K3 = "moonshotai__Kimi-K3.json"
PUBLISHED = {r["name"]: r for r in json.loads(
    (Path(__file__).parent / "fixtures" / "published_params.json").read_text())["models"]}

# --- the fixture's shapes (asserted against the file in test_config_values) -------------------
H, VOCAB, LAYERS = 7168, 163840, 93
HEADS, D, KERNEL = 96, 128, 4  # linear_attn_config: KDA heads x head_dim, short conv taps
P = HEADS * D  # 12,288
Q_LORA, KV_LORA, NOPE, ROPE, V = 1536, 512, 128, 64, 128
EXPERTS, TOP_K, MOE_INTER, LATENT, SHARED = 896, 16, 3072, 3584, 2
DENSE_INTER = 33792
KDA_LAYERS, MLA_LAYERS, MOE_LAYERS = 69, 24, 92

# --- one layer of each kind, tensor by tensor (vLLM's shapes: [out, in]) -------------------------
KDA_LAYER = (
    4 * P * H  # q, k, v and the full-rank output gate g: 4 x 12,288 x 7168 = 352,321,536
    + D * H  # f_a_proj 128 x 7168 = 917,504
    + HEADS * H  # b_proj 96 x 7168 = 688,128
    + P * D  # f_b_proj 12,288 x 128 = 1,572,864
    + P  # dt_bias (fp32)
    + 3 * P * KERNEL  # conv1d: q/k/v convs, 36,864 x 4 = 147,456 (fp32)
    + HEADS  # A_log (fp32)
    + D  # o_norm
    + H * P  # o_proj 7168 x 12,288 = 88,080,384
)  # = 443,740,384
MLA_LAYER = (
    Q_LORA * H  # q_a_proj 1536 x 7168 = 11,010,048
    + Q_LORA  # q_a_layernorm
    + HEADS * (NOPE + ROPE) * Q_LORA  # q_b_proj 18,432 x 1536 = 28,311,552
    + (KV_LORA + ROPE) * H  # kv_a_proj_with_mqa 576 x 7168 = 4,128,768
    + KV_LORA  # kv_a_layernorm
    + HEADS * (NOPE + V) * KV_LORA  # kv_b_proj 24,576 x 512 = 12,582,912
    + H * HEADS * V  # o_proj 7168 x 12,288 = 88,080,384
    + HEADS * V * H  # g_proj (mla_use_output_gate) 12,288 x 7168 = 88,080,384
)  # = 232,196,096
EXPERTS_LAYER = EXPERTS * 3 * MOE_INTER * LATENT  # w1, w3 [3072, 3584], w2 [3584, 3072]
MOE_OTHER = (
    EXPERTS * H  # router gate 896 x 7168 = 6,422,528
    + EXPERTS  # e_score_correction_bias (fp32)
    + 3 * (SHARED * MOE_INTER) * H  # shared experts, one MLP of 6144: 132,120,576
    + LATENT * H  # routed_expert_down_proj 3584 x 7168 = 25,690,112
    + LATENT  # routed_expert_norm (latent_moe_use_norm)
    + H * LATENT  # routed_expert_up_proj 7168 x 3584 = 25,690,112
)  # = 189,927,808
DENSE_MLP = 3 * DENSE_INTER * H  # layer 0 (first_k_dense_replace 1): 726,663,168
LAYER_NORMS = 6 * H  # input/post_attention layernorms, AttnRes' two norms and two [1, h] projs
TOWER = (
    1024 * 3 * 14 * 14  # patch conv, no bias: 602,112
    + 64 * 64 * 1024  # learned position table: 4,194,304
    + 27 * (2 * 1024  # norm0, norm1 (RMSNorm)
            + 3 * 1536 * 1024  # wqkv: 12 heads x 128 (qkv_hidden_size 1536) each of q, k, v
            + 1024 * 1536  # wo
            + 4096 * 1024 + 1024 * 4096)  # fc0, fc1 (no biases): 27 x 14,682,112
    + 1024  # final_layernorm
)  # = 401,214,464
PROJECTOR = 4096 * 4096 + H * 4096 + H  # linear_1, linear_2 over 2 x 2 x 1024, post_norm
TIME_TABLE = 4 * 1024  # the fp32 sin-cos time buffer [init_pos_emb_time, 1024]
TEXT = (VOCAB * H * 2  # embed_tokens + lm_head (no tying)
        + 3 * H  # final norm, output_attn_res_norm, output_attn_res_proj
        + KDA_LAYERS * KDA_LAYER + MLA_LAYERS * MLA_LAYER
        + MOE_LAYERS * (MOE_OTHER + EXPERTS_LAYER) + DENSE_MLP + LAYERS * LAYER_NORMS)
TOTAL = TEXT + TOWER + PROJECTOR + TIME_TABLE


def inv(config: dict | None = None):
    return weight_inventory(load(K3, config))


def with_text(**changes) -> dict:
    cfg = raw(K3)
    return {**cfg, "text_config": {**cfg["text_config"], **changes}}


@covers(K3)
def test_config_values():
    c = raw(K3)
    t, lac, v = c["text_config"], c["text_config"]["linear_attn_config"], c["vision_config"]
    assert (t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]) == (H, VOCAB, LAYERS)
    assert (lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"],
            lac["use_full_rank_gate"], len(lac["kda_layers"]),
            len(lac["full_attn_layers"])) == (HEADS, D, KERNEL, True, KDA_LAYERS, MLA_LAYERS)
    assert (t["q_lora_rank"], t["kv_lora_rank"], t["qk_nope_head_dim"], t["qk_rope_head_dim"],
            t["v_head_dim"], t["num_attention_heads"], t["mla_use_output_gate"],
            t["mla_use_nope"]) == (Q_LORA, KV_LORA, NOPE, ROPE, V, HEADS, True, True)
    assert (t["num_experts"], t["num_experts_per_token"], t["moe_intermediate_size"],
            t["routed_expert_hidden_size"], t["num_shared_experts"], t["latent_moe_use_norm"],
            t["first_k_dense_replace"], t["moe_layer_freq"], t["intermediate_size"],
            t["attn_res_block_size"], t["num_nextn_predict_layers"],
            t["tie_word_embeddings"]) == (EXPERTS, TOP_K, MOE_INTER, LATENT, SHARED, True, 1, 1,
                                          DENSE_INTER, 12, 0, False)
    assert (v["vt_hidden_size"], v["vt_intermediate_size"], v["vt_num_attention_heads"],
            v["vt_num_hidden_layers"], v["qkv_hidden_size"], v["patch_size"],
            v["init_pos_emb_height"], v["init_pos_emb_width"], v["init_pos_emb_time"],
            v["merge_kernel_size"], v["norm_type"], v["mm_projector_type"], v["attn_bias"],
            v["linear_bias"], v["patch_embed_proj_bias"]) == (
        1024, 4096, 12, 27, 1536, 14, 64, 64, 4, [2, 2], "rmsnorm", "patchmergerv2", False,
        False, False)


def test_total_by_hand():
    assert (KDA_LAYER, MLA_LAYER, MOE_OTHER, EXPERTS_LAYER) == (
        443_740_384, 232_196_096, 189_927_808, 29_595_009_024)
    assert (TOWER, PROJECTOR) == (401_214_464, 46_144_512)
    assert TOTAL == 2_779_931_839_072
    w = inv()
    assert w.params_total == TOTAL
    assert w.params_expert == MOE_LAYERS * EXPERTS_LAYER == 2_722_740_830_208
    assert (w.num_experts, w.experts_per_token) == (EXPERTS, TOP_K)
    groups = w.by_group()
    # the output gates: KDA's full-rank g [p, h] and MLA's g_proj [heads x v, h], both 12,288 x h
    assert groups["self_attn.g_proj.weight"] == (KDA_LAYERS * P + MLA_LAYERS * HEADS * V) * H
    assert groups["block_sparse_moe.routed_expert_down_proj.weight"] == MOE_LAYERS * LATENT * H
    assert groups["block_sparse_moe.routed_expert_norm.weight"] == MOE_LAYERS * LATENT
    assert groups["mlp.gate_proj.weight"] == DENSE_INTER * H  # layer 0 only
    assert not any("g_a_proj" in t.name for t in w.tensors)  # no low-rank gate


def test_total_against_the_published_checkpoint():
    rec = PUBLISHED["kimi-k3"]
    # The checkpoint holds no time table (a vLLM buffer) and 2,208 F32 elements more than vLLM
    # allocates: 69 x 32, one set per KDA layer, not identified in vLLM 0.34's kimi_k3 files.
    # Its BF16 count is reproduced exactly: everything but the experts and the fp32 tensors
    # (dt_bias, conv1d, A_log, e_score_correction_bias, and o_norm, which the checkpoint keeps in
    # F32: the census's F32 total needs it) -- so the latent projections are bf16 on disk.
    f32_vllm = KDA_LAYERS * (P + 3 * P * KERNEL + HEADS) + MOE_LAYERS * EXPERTS
    f32_disk = f32_vllm + KDA_LAYERS * D + KDA_LAYERS * 32
    assert f32_disk == 11_122_432  # the record's F32 count
    bf16_disk = TOTAL - TIME_TABLE - MOE_LAYERS * EXPERTS_LAYER - f32_vllm - KDA_LAYERS * D
    assert bf16_disk == 57_179_884_544  # the record's BF16 count
    assert bf16_disk + f32_disk + MOE_LAYERS * EXPERTS_LAYER == rec["params_total"]
    assert inv().params_total - TIME_TABLE == rec["params_total"] - KDA_LAYERS * 32
    # index total_size: bf16 x 2 + f32 x 4 + mxfp4 experts (n/2 codes + n/32 e8m0 scales)
    experts = MOE_LAYERS * EXPERTS_LAYER
    assert bf16_disk * 2 + f32_disk * 4 + experts // 2 + experts // 32 == 1_560_860_324_864
    # the model card: 2.8T total, a 401M vision encoder
    assert round(TOTAL / 1e11) / 10 == 2.8 == round(rec["params_total"] / 1e11) / 10
    assert round(TOWER / 1e6) == 401


def test_active_per_token():
    # 16 of 896 routed experts a token: 2,722,740,830,208 x 16 / 896 = 48,620,371,968
    routed = MOE_LAYERS * EXPERTS_LAYER * TOP_K // EXPERTS
    assert routed == 48_620_371_968
    active = TOTAL - MOE_LAYERS * EXPERTS_LAYER + routed
    assert active == 105_811_380_832
    w = inv()
    assert w.params_active == active
    # the card's "104B activated" is this less the input embedding (a lookup) and the vision
    # tower and projector: 105,811,380,832 - 1,174,405,120 - 447,362,608 = 104,189,612,640
    card = active - VOCAB * H - (TOWER + PROJECTOR + TIME_TABLE)
    assert card == 104_189_612_640
    assert round(card / 1e9) * 10**9 == PUBLISHED["kimi-k3"]["params_active"]


def test_mtp_part():
    w = inv()
    assert w.params_extra == 0 and w.extra_name == ""  # num_nextn_predict_layers 0
    one = inv(with_text(num_nextn_predict_layers=1))
    # layer 93 (no KDA number lies past 93: an MLA layer), a MoE layer (93 >= 1), no AttnRes:
    mtp = (MLA_LAYER + 2 * H  # input_layernorm, post_attention_layernorm
           + MOE_OTHER + EXPERTS_LAYER
           + 3 * H  # enorm, hnorm, shared_head.norm
           + H * 2 * H)  # eh_proj [7168, 14336] = 102,760,448
    assert mtp == 30_119_929_216
    assert one.params_extra == mtp
    assert one.params_total == TOTAL  # reported apart; the target's embedding and head shared
    assert {t.layer for t in one.tensors if t.place == "extra"} == {93}
    assert "shares the target's embedding and LM head" in one.extra_name


def test_expert_and_weight_bytes_at_tp8():
    m = load(K3)
    w, fmt = weight_inventory(m), weight_format(m, None)
    assert fmt is not None and fmt.scheme == "mxfp4"
    # one rank's share of one expert: w1 / w3 [3072 / 8, 3584], w2 [3584, 3072 / 8], each
    # 384 x 3584 = 1,376,256 weights in mxfp4: 688,128 B of codes + 43,008 B of e8m0 scales
    per_expert = 3 * (384 * 3584 // 2 + 384 * 3584 // 32)
    assert per_expert == 2_193_408
    layer = EXPERTS * per_expert  # 1,965,293,568 B a MoE layer a GPU
    assert expert_layer_bytes(w, fmt, plain_split(8)) == layer == 1_965_293_568
    experts_tp8 = sum(fmt.tensor_bytes(t, 8) for t in w.tensors if t.expert)
    assert experts_tp8 == MOE_LAYERS * layer == 180_807_008_256
    # everything else in bf16 (fp32 where vLLM keeps it), split as vLLM splits it at TP 8
    kda = (4 * (P // 8) * H * 2  # q, k, v, g column
           + D * H * 2  # f_a replicated
           + (HEADS // 8) * H * 2 + (P // 8) * D * 2  # b, f_b column
           + (P // 8) * 4 + (HEADS // 8) * 4 + 3 * (P // 8) * KERNEL * 4  # fp32 dt_bias, A_log, conv
           + D * 2 + H * (P // 8) * 2)  # o_norm, o_proj row
    mla = (Q_LORA * H * 2 + Q_LORA * 2  # q_a (replicated), q_a_layernorm
           + (HEADS // 8) * (NOPE + ROPE) * Q_LORA * 2  # q_b column
           + (KV_LORA + ROPE) * H * 2 + KV_LORA * 2  # kv_a (replicated), kv_a_layernorm
           + (HEADS // 8) * (NOPE + V) * KV_LORA * 2  # kv_b column
           + 2 * H * (HEADS // 8) * V * 2)  # o_proj row, g_proj column
    moe_other = (EXPERTS * H * 2 + EXPERTS * 4  # router (bf16), fp32 score bias
                 + 3 * (SHARED * MOE_INTER // 8) * H * 2  # shared experts, split
                 + 2 * LATENT * H * 2 + LATENT * 2)  # latent down / up (replicated, bf16), norm
    assert (kda, mla, moe_other) == (112_580_912, 84_545_536, 148_646_400)
    rest = (2 * (VOCAB // 8) * H * 2 + 3 * H * 2  # embed + head; final norm and AttnRes head
            + KDA_LAYERS * kda + MLA_LAYERS * mla + MOE_LAYERS * moe_other
            + 3 * (DENSE_INTER // 8) * H * 2 + LAYERS * LAYER_NORMS * 2
            + (TOWER + PROJECTOR) * 2 + TIME_TABLE * 4)  # 12 heads % 8: the tower whole
    assert weight_bytes(w, fmt, tp=8).per_gpu_bytes == MOE_LAYERS * layer + rest \
        == 205_951_298_032


def test_what_is_quantized():
    m = load(K3)
    w, fmt = weight_inventory(m), weight_format(m, None)
    assert fmt is not None
    quantized = {t.name for t in w.tensors if fmt.quantizes(t)}
    assert quantized == {"block_sparse_moe.experts.w1.weight",
                         "block_sparse_moe.experts.w3.weight",
                         "block_sparse_moe.experts.w2.weight"}
    dtypes = {t.name: t.dtype for t in w.tensors}
    assert dtypes["self_attn.conv1d.weight"] == dtypes["self_attn.A_log"] == "fp32"
    assert dtypes["block_sparse_moe.gate.e_score_correction_bias"] == "fp32"
    assert Fraction(fmt.tensor_bytes(next(t for t in w.tensors if t.name.endswith(
        "routed_expert_up_proj.weight")))) == H * LATENT * 2


@pytest.mark.parametrize("value, words", [(8000, "must be <= 7,168, got 8000"),
                                          (0, "must be >= 1, got 0")])
def test_bad_latent_width_is_one_line(capsys, tmp_path, value, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(with_text(routed_expert_hidden_size=value)))
    line = fail(capsys, "fit", str(path), "--gpu", "b200", "--tp", "8", "--context", "32768")
    assert f"{path}: text_config.routed_expert_hidden_size: {words}" in line, line


def test_refusals():
    with pytest.raises(ConfigError, match="DSA indexer is not counted"):
        inv(with_text(dsa_config={"dsa_layers": [4], "index_topk": 2048}))
    with pytest.raises(ConfigError, match="no tying"):
        inv(with_text(tie_word_embeddings=True))
    # a plain kimi_linear config with a latent MoE keeps hf_params' refusal
    text = {**raw(K3)["text_config"]}
    text.pop("quantization_config")
    with pytest.raises(ConfigError, match="latent MoE"):
        weight_inventory(load("k3-text.json", text))


def test_latent_off_and_no_norm():
    # without routed_expert_hidden_size the experts run over hidden_size, with no projection
    w = inv(with_text(routed_expert_hidden_size=None, latent_moe_use_norm=None))
    assert w.params_expert == MOE_LAYERS * EXPERTS * 3 * MOE_INTER * H
    assert not any("routed_expert" in t.name for t in w.tensors)
    # latent without its norm: 92 x 3584 fewer, and the default is stated
    w = inv(with_text(latent_moe_use_norm=None))
    assert w.params_total == TOTAL - MOE_LAYERS * LATENT
    assert any("latent_moe_use_norm absent" in n for n in w.notes)


def test_fit_cli_on_b200(capsys):
    from kvplan.cli.main import run

    assert run(["fit", str(CONFIGS / K3), "--gpu", "b200", "--tp", "8", "--context", "32768"]) == 0
    out = capsys.readouterr().out
    assert "2,779,931,839,072" in out and "205,951,298,032" in out
