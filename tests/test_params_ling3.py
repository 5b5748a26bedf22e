"""Ling-3.0's parameter inventory (kvplan/loaders/params_bailing.py), derived by hand from the
fixture configs (tests/fixtures/configs/inclusionAI__Ling-3.0-flash.json, the full published
file, and inclusionAI__Ling-3.0-tiny.json, abbreviated) and the tensors vLLM 0.34's
bailing_moe_v3.py / bailing_moe_v3_mtp.py allocate.

Published figures:
- the model card, as the Vercel AI Gateway, Novita, Fireworks and Ollama listings repeat it:
  Ling-3.0-flash "124B total parameters, 5.1B activated"; Ling-3.0-tiny "7.9B total, 1.3B
  activated";
- the Hugging Face API's safetensors total for inclusionAI/Ling-3.0-flash, as public records copy
  it (search-index file ids 61591524919 and 71062795156; llama.cpp's GGUF conversion reports the
  same n_params 127,486,405,600): F32 165,472 + BF16 127,486,240,128 = 127,486,405,600, which
  includes the MTP layer.
"""

from __future__ import annotations

import pytest
from family_helpers import CONFIGS, covers, load, raw

from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format

FLASH = "inclusionAI__Ling-3.0-flash.json"
TINY = "inclusionAI__Ling-3.0-tiny.json"

# --- Ling-3.0-flash's shapes (asserted against the file in test_config_values) ---------------
H, VOCAB, LAYERS, GROUP = 2560, 157184, 42, 6
HEADS, D, KERNEL = 32, 128, 4
P = HEADS * D  # 4096
KV_LORA, NOPE, ROPE, V = 512, 128, 64, 128
EXPERTS, TOP_K, MOE_INTER, SHARED_INTER, DENSE_INTER, FIRST_DENSE = 512, 8, 768, 768, 6144, 2
# layers 5, 11, 17, 23, 29, 35, 41 are MLA ((i + 1) % 6 == 0; 42 = 7 whole groups), 35 KDA
MLA_LAYERS, KDA_LAYERS, MOE_LAYERS = 7, 35, LAYERS - FIRST_DENSE

# --- one layer of each kind, tensor by tensor ([out, in]) -------------------------------------
KDA_LAYER = (
    (3 * P + HEADS) * H  # qkvb_proj: q, k, v [4096, 2560] and b [32, 2560]: 12,320 x 2560 = 31,539,200
    + P * H  # f_proj 4096 x 2560 = 10,485,760
    + P  # dt_bias (fp32)
    + 3 * P * KERNEL  # q/k/v_conv1d [4096, 4] each = 49,152 (fp32)
    + HEADS  # A_log (fp32)
    + P * H  # g_proj 10,485,760
    + D  # o_norm
    + H * P  # o_proj 2560 x 4096 = 10,485,760
)  # = 63,049,888
MLA_LAYER = (
    HEADS * (NOPE + ROPE) * H  # q_proj (q_lora_rank null) 6144 x 2560 = 15,728,640
    + (KV_LORA + ROPE) * H  # kv_a_proj_with_mqa 576 x 2560 = 1,474,560
    + KV_LORA  # kv_a_layernorm
    + HEADS * (NOPE + V) * KV_LORA  # kv_b_proj 8192 x 512 = 4,194,304
    + HEADS * H  # g_proj, head_wise: 32 x 2560 = 81,920
    + H * HEADS * V  # dense 2560 x 4096 = 10,485,760
)  # = 31,965,696
EXPERT = 3 * MOE_INTER * H  # gate / up [768, 2560], down [2560, 768] = 5,898,240
MOE_LAYER = (
    EXPERTS * EXPERT  # 512 x 5,898,240 = 3,019,898,880
    + 3 * SHARED_INTER * H  # shared experts (768 x 1) = 5,898,240
    + EXPERTS * H  # router gate 512 x 2560 = 1,310,720 (fp32)
    + EXPERTS  # expert_bias (fp32)
)  # = 3,027,108,352
DENSE_MLP = 3 * DENSE_INTER * H  # layers 0 and 1: 3 x 6144 x 2560 = 47,185,920
NORMS = 2 * H  # input_layernorm, post_attention_layernorm
TOTAL = (2 * VOCAB * H  # word_embeddings + lm_head (untied): 2 x 402,391,040
         + H  # final norm
         + KDA_LAYERS * KDA_LAYER + MLA_LAYERS * MLA_LAYER
         + FIRST_DENSE * DENSE_MLP + MOE_LAYERS * MOE_LAYER + LAYERS * NORMS)
MTP_LAYER = (2 * H  # enorm, hnorm
             + H * 2 * H  # eh_proj [2560, 5120] = 13,107,200
             + NORMS + MLA_LAYER + MOE_LAYER
             + H)  # final_layernorm; embed_tokens / shared_head.head: the target's
# the fp32 tensors vLLM holds: dt_bias, the convs and A_log per KDA layer, router and bias per MoE
FP32 = KDA_LAYERS * (P + 3 * P * KERNEL + HEADS) + MOE_LAYERS * (EXPERTS * H + EXPERTS)


def inv(config: dict | None = None, fname: str = FLASH):
    return weight_inventory(load(fname, config))


def with_keys(fname: str = FLASH, **changes) -> dict:
    return {**raw(fname), **changes}


@covers(FLASH, TINY)
def test_config_values():
    c = raw(FLASH)
    assert (c["hidden_size"], c["vocab_size"], c["num_hidden_layers"], c["layer_group_size"],
            c["num_attention_heads"], c["head_dim"], c["short_conv_kernel_size"]) == (
        H, VOCAB, LAYERS, GROUP, HEADS, D, KERNEL)
    assert (c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
            c["v_head_dim"], c["gated_attention_proj_granularity_type"]) == (
        None, KV_LORA, NOPE, ROPE, V, "head_wise")
    assert (c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"],
            c["moe_shared_expert_intermediate_size"], c["num_shared_experts"],
            c["intermediate_size"], c["first_k_dense_replace"], c["num_nextn_predict_layers"],
            c["tie_word_embeddings"], c["use_bias"], c["use_qkv_bias"], c["mtp_use_kda"]) == (
        EXPERTS, TOP_K, MOE_INTER, SHARED_INTER, 1, DENSE_INTER, FIRST_DENSE, 1, False, False,
        False, False)


def test_flash_total_by_hand():
    assert (KDA_LAYER, MLA_LAYER, MOE_LAYER, DENSE_MLP) == (
        63_049_888, 31_965_696, 3_027_108_352, 47_185_920)
    # 804,782,080 + 2560 + 35 x 63,049,888 + 7 x 31,965,696 + 2 x 47,185,920
    # + 40 x 3,027,108,352 + 42 x 5120
    assert TOTAL == 124_414_211_552
    w = inv()
    assert w.params_total == TOTAL
    assert w.params_expert == MOE_LAYERS * EXPERTS * EXPERT == 120_795_955_200
    assert (w.num_experts, w.experts_per_token, w.tied_embeddings) == (EXPERTS, TOP_K, False)
    groups = w.by_group()
    # (by_group sums the MTP layer too: one more MLA g_proj and router)
    # the output gates: KDA's g_proj [4096, 2560] and MLA's head-wise g_proj [32, 2560]
    assert groups["self_attn.g_proj.weight"] == (KDA_LAYERS * P + (MLA_LAYERS + 1) * HEADS) * H
    assert groups["mlp.gate_proj.weight"] == FIRST_DENSE * DENSE_INTER * H  # layers 0 and 1
    assert groups["mlp.gate.weight"] == (MOE_LAYERS + 1) * EXPERTS * H
    mla_at = {t.layer for t in w.tensors if t.name == "self_attn.kv_b_proj.weight"
              and t.place == "layer"}
    assert sorted(mla_at) == [5, 11, 17, 23, 29, 35, 41]
    assert not any("q_a_proj" in t.name for t in w.tensors)  # q_lora_rank null: q_proj


def test_flash_against_the_published_counts():
    # the Hub's safetensors total holds the MTP layer: 124,414,211,552 + 3,072,194,048
    assert MTP_LAYER == 3_072_194_048
    assert TOTAL + MTP_LAYER == 127_486_405_600
    # its F32 part: dt_bias + A_log per KDA layer, expert_bias per MoE layer (40 + the MTP's):
    # 35 x (4096 + 32) + 41 x 512 = 144,480 + 20,992 = 165,472 (the checkpoint keeps the
    # router and the convs in bf16; vLLM holds them in fp32)
    assert KDA_LAYERS * (P + HEADS) + (MOE_LAYERS + 1) * EXPERTS == 165_472
    w = inv()
    assert w.params_total + w.params_extra == 127_486_405_600
    # the card: 124B total
    assert round(w.params_total / 1e9) == 124


def test_flash_active():
    # 8 of 512 experts a token: 40 x 504 x 5,898,240 = 118,908,518,400 idle
    active = TOTAL - MOE_LAYERS * (EXPERTS - TOP_K) * EXPERT
    assert active == 5_505_693_152
    w = inv()
    assert w.params_active == active
    # the card's "5.1B activated" is this less the input embedding (a lookup):
    # 5,505,693,152 - 402,391,040 = 5,103,302,112
    assert w.params_active_without_lookup == active - VOCAB * H == 5_103_302_112
    assert round(w.params_active_without_lookup / 1e8) == 51


def test_mtp_part():
    w = inv()
    assert w.params_extra == MTP_LAYER
    assert {t.layer for t in w.tensors if t.place == "extra"} == {LAYERS}  # layer 42
    assert "shares the target's embedding and LM head" in w.extra_name
    assert not any(t.place == "extra" and t.rows == VOCAB for t in w.tensors)
    none = inv(with_keys(num_nextn_predict_layers=0))
    assert none.params_extra == 0 and none.extra_name == "" and none.params_total == TOTAL


def test_weight_bytes_bf16():
    m = load(FLASH)
    w, fmt = weight_inventory(m), weight_format(m, None)
    assert fmt is not None
    # 54,314,080 fp32 parameters: 35 x (4096 + 49,152 + 32) + 40 x (1,310,720 + 512)
    assert FP32 == 1_864_800 + 52_449_280 == 54_314_080
    fp32 = {t.name for t in w.tensors if t.dtype == "fp32"}
    assert fp32 == {"self_attn.dt_bias", "self_attn.A_log", "self_attn.q_conv1d.weight",
                    "self_attn.k_conv1d.weight", "self_attn.v_conv1d.weight",
                    "mlp.gate.weight", "mlp.gate.expert_bias"}
    # tp 1: bf16 x 2 B, fp32 x 4 B; 157,184 = 2456 x 64 rows, no vocab padding
    assert weight_bytes(w, fmt, tp=1).per_gpu_bytes == (TOTAL - FP32) * 2 + FP32 * 4 \
        == 248_937_051_264


def test_tiny_total_by_hand():
    t = raw(TINY)
    h, heads, layers, group = 1536, 16, 24, 4
    assert (t["hidden_size"], t["num_attention_heads"], t["num_hidden_layers"],
            t["layer_group_size"], t["q_lora_rank"], t["num_experts"],
            t["moe_intermediate_size"], t["intermediate_size"],
            t["first_k_dense_replace"]) == (h, heads, layers, group, 256, 128, 512, 4608, 1)
    p = heads * D  # 2048
    kda = ((3 * p + heads) * h  # qkvb 6160 x 1536 = 9,461,760
           + 3 * p * h  # f_proj, g_proj, o_proj: 9,437,184
           + p + 3 * p * KERNEL + heads + D)  # dt_bias, convs, A_log, o_norm: 26,768
    mla = ((256 + KV_LORA + ROPE) * h  # q_a | kv_a fused (replicated) 832 x 1536 = 1,277,952
           + 256 + KV_LORA  # q_a_layernorm, kv_a_layernorm
           + heads * (NOPE + ROPE) * 256  # q_b 3072 x 256 = 786,432
           + heads * (NOPE + V) * KV_LORA  # kv_b 4096 x 512 = 2,097,152
           + heads * h  # head-wise g_proj 24,576
           + h * p)  # dense 3,145,728
    moe = 128 * 3 * 512 * h + 3 * 512 * h + 128 * h + 128  # experts, shared, router, bias
    assert (kda, mla, moe) == (18_925_712, 7_332_608, 304_545_920)
    # MLA at 3, 7, 11, 15, 19, 23 (6), KDA 18; layer 0 dense, 23 MoE
    total = (2 * VOCAB * h + h + 18 * kda + 6 * mla + 3 * 4608 * h + 23 * moe
             + layers * 2 * h)
    assert total == 7_893_392_800  # the card's 7.9B
    w = inv(fname=TINY)
    assert w.params_total == total and w.params_extra == 0  # no num_nextn_predict_layers
    assert round(total / 1e8) == 79


def test_gate_granularity():
    # element_wise: [heads x v, h] = 4096 x 2560 instead of 32 x 2560 on each MLA layer
    w = inv(with_keys(gated_attention_proj_granularity_type="element_wise"))
    assert w.params_total == TOTAL + MLA_LAYERS * (HEADS * V - HEADS) * H
    # null: no gate (7 x 81,920 fewer, and one fewer in the MTP layer)
    w = inv(with_keys(gated_attention_proj_granularity_type=None))
    assert w.params_total == TOTAL - MLA_LAYERS * HEADS * H
    assert w.params_extra == MTP_LAYER - HEADS * H
    with pytest.raises(ConfigError, match="head_wise and element_wise"):
        inv(with_keys(gated_attention_proj_granularity_type="channel_wise"))


def test_q_lora_and_dense_only():
    # q_lora_rank 1536 on the flash shapes: q_a [1536, 2560] + norm + q_b [6144, 1536] replace
    # q_proj [6144, 2560] on every MLA layer
    w = inv(with_keys(q_lora_rank=1536))
    delta = 1536 * H + 1536 + HEADS * (NOPE + ROPE) * 1536 - HEADS * (NOPE + ROPE) * H
    assert w.params_total == TOTAL + MLA_LAYERS * delta
    # first_k_dense_replace 0: every layer MoE
    w = inv(with_keys(first_k_dense_replace=0))
    assert w.params_total == TOTAL + FIRST_DENSE * (MOE_LAYER - DENSE_MLP)


@pytest.mark.parametrize("changes, words", [
    ({"use_bias": True}, "bias-free MLPs"),
    ({"use_qkv_bias": True}, "builds none"),
    ({"tie_word_embeddings": True}, "no tying"),
    ({"up_proj_norm": True}, "does not build"),
    ({"value_norm": True}, "does not build"),
    ({"mtp_use_kda": True}, "builds an MLA MTP layer"),
])
def test_refusals(changes, words):
    with pytest.raises(ConfigError, match=words):
        inv(with_keys(**changes))


def test_fit_cli(capsys):
    from kvplan.cli.main import run

    assert run(["fit", str(CONFIGS / FLASH), "--gpu", "h200", "-c", "8192", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "124,414,211,552" in out
