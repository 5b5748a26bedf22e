"""Zamba2's parameter inventory (kvplan/loaders/params_zamba2.py), derived by hand from the
built-in model_specs/zamba2-2.7b-instruct-v2.json (Zyphra/Zamba2-2.7B-Instruct-v2, the published
config's leading keys) and the tensors vLLM 0.34's zamba2.py and layers/mamba/mamba_mixer2.py
allocate.

The spec stops before the tail keys, so these come from transformers' Zamba2Config defaults
(5.25), each recorded as an assumption: vocab_size 32000,
use_shared_attention_adapter false, use_conv_bias true; num_mem_blocks 2 is in the spec, from
Zyphra's release post (no default: transformers' 1 would drop a block) (adapter_rank 128 and
intermediate_size 10240 are in the file). vLLM ties the LM head whatever tie_word_embeddings
says and builds the MLP adapters whatever use_shared_mlp_adapter says.

Published figure: Zamba2-2.7B, "2.7B" (Zyphra's Zamba2-small post; the Zamba2 technical
report, arXiv 2411.15242: "1.2B, 2.7B, and 7.4B"); Zyphra describes the 2.7B as using TWO shared
blocks interleaved ABAB. With the default num_mem_blocks = 1 the count is 2,491,813,280
(2.49B); with two blocks it is 2,662,214,560 (2.66B, the "2.7B" class). No safetensors total
was found in the search corpora.
"""

from __future__ import annotations

import pytest

import kvplan
from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format

NAME = "zamba2-2.7b-instruct-v2"

# --- the config's shapes (asserted in test_config_values) -------------------------------------
H, LAYERS, HYBRID, INTER, HEADS = 2560, 54, 9, 10240, 32
D_INNER, M_HEADS, GROUPS, D_STATE, D_CONV, RANK = 5120, 80, 1, 64, 4, 128
VOCAB = 32000  # Zamba2Config default
WIDE = 2 * H  # attention_hidden_size 5120; head dim 5120 / 32 = 160

CONV_DIM = D_INNER + 2 * GROUPS * D_STATE  # 5120 + 128 = 5248
MAMBA = (
    (2 * D_INNER + 2 * GROUPS * D_STATE + M_HEADS) * H  # in_proj 10,448 x 2560 = 26,746,880
    + CONV_DIM * D_CONV  # conv1d weight 5248 x 4 = 20,992
    + CONV_DIM  # conv1d bias (use_conv_bias default true) 5,248
    + 3 * M_HEADS  # dt_bias, A_log, D: 240
    + D_INNER  # gated RMSNorm weight 5,120
    + H * D_INNER  # out_proj 2560 x 5120 = 13,107,200
    + H  # the decoder's input_layernorm 2,560
)  # = 39,888,240
LINEAR = H * H  # each hybrid layer's own linear: 6,553,600
BLOCK = (
    3 * WIDE * WIDE  # q, k, v [5120, 5120] each: 78,643,200
    + H * WIDE  # o_proj [2560, 5120]: 13,107,200
    + 2 * INTER * H  # gate_up_proj [20480, 2560]: 52,428,800
    + H * INTER  # down_proj [2560, 10240]: 26,214,400
    + WIDE + H  # input_layernorm [5120], pre_ff_layernorm [2560]: 7,680
)  # = 170,401,280
MLP_ADAPTER = RANK * H + 2 * INTER * RANK  # A 327,680 + B 2,621,440 = 2,949,120
ATTN_ADAPTER = 3 * (RANK * WIDE + WIDE * RANK)  # 3 x 1,310,720 = 3,932,160
EMBED = VOCAB * H  # 81,920,000 (tied: no lm_head)
TOTAL = EMBED + H + LAYERS * MAMBA + HYBRID * (LINEAR + MLP_ADAPTER) + 2 * BLOCK


def config() -> dict:
    return dict(kvplan.load_model(NAME).config)


def inv(**changes):
    from kvplan.loaders.hf_config import parse_config

    return weight_inventory(parse_config({**config(), **changes}, name=NAME, source=NAME))


def test_config_values():
    c = config()
    assert (c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"],
            c["num_attention_heads"], c["num_key_value_heads"], c["attention_hidden_size"],
            c["attention_head_dim"]) == (H, LAYERS, INTER, HEADS, HEADS, WIDE, 160)
    assert (c["mamba_expand"] * H, c["n_mamba_heads"], c["mamba_ngroups"], c["mamba_d_state"],
            c["mamba_d_conv"], c["adapter_rank"], c["add_bias_linear"], c["hidden_act"]) == (
        D_INNER, M_HEADS, GROUPS, D_STATE, D_CONV, RANK, False, "gelu")
    assert c["layers_block_type"].count("hybrid") == len(c["hybrid_layer_ids"]) == HYBRID
    assert c["num_mem_blocks"] == 2  # Zyphra: two shared blocks, ABAB
    for key in ("vocab_size", "use_shared_attention_adapter",
                "use_shared_mlp_adapter", "use_conv_bias", "tie_word_embeddings"):
        assert key not in c  # the tail the spec leaves out


def test_total_by_hand():
    assert (MAMBA, BLOCK, MLP_ADAPTER, ATTN_ADAPTER) == (
        39_888_240, 170_401_280, 2_949_120, 3_932_160)
    # 81,920,000 + 2,560 + 54 x 39,888,240 (2,153,964,960) + 9 x (6,553,600 + 2,949,120)
    # (85,524,480) + 2 x 170,401,280 = 2,662,214,560 (the "2.7B" class)
    assert TOTAL == 2_662_214_560
    w = weight_inventory(kvplan.load_model(NAME))
    assert w.params_total == TOTAL
    assert w.params_active == TOTAL and w.params_extra == 0
    assert w.tied_embeddings


def test_defaults_are_stated():
    notes = " | ".join(weight_inventory(kvplan.load_model(NAME)).notes)
    for text in ("vocab_size = 32000 (Zamba2Config default)",
                 "use_shared_attention_adapter = false (Zamba2Config default)",
                 "use_conv_bias = true (Zamba2Config default)"):
        assert text in notes


def test_shared_blocks_are_counted_and_required():
    # one block fewer: the adapters unchanged (one per hybrid layer, split between the blocks)
    assert inv(num_mem_blocks=1).params_total == TOTAL - BLOCK == 2_491_813_280
    # more blocks than hybrid layers: vLLM still builds every block
    assert inv(num_mem_blocks=10).params_total == TOTAL + 8 * BLOCK
    cfg = {k: v for k, v in config().items() if k != "num_mem_blocks"}
    from kvplan.loaders.hf_config import parse_config

    with pytest.raises(ConfigError, match="num_mem_blocks: missing"):
        weight_inventory(parse_config(cfg, name=NAME, source=NAME))


def test_attention_adapters():
    # 9 hybrid layers x 3,932,160 = 35,389,440
    assert inv(use_shared_attention_adapter=True).params_total == TOTAL + HYBRID * ATTN_ADAPTER
    # rank 64: every adapter halves (A and B are both rank-wide)
    assert inv(adapter_rank=64).params_total == TOTAL - HYBRID * MLP_ADAPTER // 2


def test_keys_that_change_no_tensor():
    # vLLM ties the head always; builds the MLP adapters always; rope has no weights
    assert inv(tie_word_embeddings=False, use_shared_mlp_adapter=False, use_mem_rope=True,
               vocab_size=VOCAB).params_total == TOTAL
    assert any("ties the LM head" in n for n in inv(tie_word_embeddings=False).notes)
    # no conv bias: 54 x 5,248 fewer
    assert inv(use_conv_bias=False).params_total == TOTAL - LAYERS * CONV_DIM


def test_weight_bytes():
    m = kvplan.load_model(NAME)
    w, fmt = weight_inventory(m), weight_format(m, None)
    assert fmt is not None
    # bf16; 32000 is a multiple of 64 (no vocab padding); A_log in fp32: 54 x 80 x (4 - 2) B more
    assert weight_bytes(w, fmt, tp=1).per_gpu_bytes == TOTAL * 2 + LAYERS * M_HEADS * 2 \
        == 5_324_437_760


@pytest.mark.parametrize("changes, words", [
    ({"add_bias_linear": True}, "not counted"),
    ({"hidden_act": "silu"}, "gelu only"),
    ({"num_key_value_heads": 8}, "as many KV heads as heads"),
    ({"hybrid_layer_ids": [6, 12]}, "disagrees"),
])
def test_refusals(changes, words):
    with pytest.raises(ConfigError, match=words):
        inv(**changes)


def test_fit_cli(capsys):
    from kvplan.cli.main import run

    assert run(["fit", NAME, "--gpu", "h100", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "2,662,214,560" in out
    assert "vocab_size = 32000 (Zamba2Config default)" in out
