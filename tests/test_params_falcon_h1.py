"""Falcon-H1's parameter inventory (kvplan/loaders/hf_params.py, falcon_h1 rules), derived by
hand from the built-in model_specs/falcon-h1-0.5b.json (tiiuae/Falcon-H1-0.5B) and the tensors
vLLM 0.34's falcon_h1.py and layers/mamba/mamba_mixer2.py allocate.

Published figure: tiiuae/Falcon-H1-0.5B-Base holds 521,411,104 parameters (100% bfloat16), as
public measurements of the checkpoint record it (search-index file ids 62405531367, 60921870048,
60315456338); model listings round it to "521M", 1.04 GB in BF16.

What the multiplier / option keys do in vLLM 0.34 (none is a tensor):
- lm_head_multiplier: ``LogitsProcessor(scale=...)``; mlp_multipliers: two floats scaling the
  gate and the down projection's output (``FalconH1MLP``);
- mamba_norm_before_gate: not read (``Mixer2RMSNormGated`` fixes norm_before_gate false; its
  weight exists only under mamba_rms_norm, false here);
- mlp_expansion_factor: read by neither vLLM nor transformers' FalconH1Config; the MLP is
  intermediate_size wide (2048 = 2 x hidden_size, not 8 x);
- projectors_bias: transformers' out_proj bias; vLLM's MambaMixer2 gives in_proj and out_proj a
  bias by mamba_proj_bias alone, so the two must agree (both false here).
"""

from __future__ import annotations

import pytest

import kvplan
from kvplan.core.errors import ConfigError
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format

NAME = "falcon-h1-0.5b"

# --- the config's shapes (asserted in test_config_values) -------------------------------------
H, VOCAB, LAYERS, INTER = 1024, 32784, 36, 2048
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
D_SSM, D_STATE, GROUPS, M_HEADS, D_CONV = 1536, 128, 1, 24, 4

ATTENTION = (
    HEADS * HEAD_DIM * H  # q 512 x 1024 = 524,288
    + 2 * KV_HEADS * HEAD_DIM * H  # k, v 128 x 1024 each = 262,144
    + H * HEADS * HEAD_DIM  # o_proj 1024 x 512 = 524,288
)  # = 1,310,720 (no biases)
CONV_DIM = D_SSM + 2 * GROUPS * D_STATE  # 1536 + 256 = 1792
MAMBA = (
    (2 * D_SSM + 2 * GROUPS * D_STATE + M_HEADS) * H  # in_proj (z, x, B, C, dt) 3352 x 1024
    + CONV_DIM * D_CONV  # conv1d weight 1792 x 4 = 7,168
    + CONV_DIM  # conv1d bias (mamba_conv_bias true)
    + 3 * M_HEADS  # dt_bias, A, D
    + H * D_SSM  # out_proj 1024 x 1536 = 1,572,864 (mamba_proj_bias false: no biases)
)  # = 3,432,448 + 7,168 + 1,792 + 72 + 1,572,864 = 5,014,344 (no gated norm: mamba_rms_norm false)
MLP = 3 * INTER * H  # gate, up [2048, 1024], down [1024, 2048] = 6,291,456
NORMS = 2 * H  # input_layernorm, pre_ff_layernorm
LAYER = ATTENTION + MAMBA + MLP + NORMS  # 12,618,568
TOTAL = 2 * VOCAB * H + H + LAYERS * LAYER  # embed + lm_head (untied), final norm


def config() -> dict:
    return dict(kvplan.load_model(NAME).config)


def inv(**changes):
    from kvplan.loaders.hf_config import parse_config

    return weight_inventory(parse_config({**config(), **changes}, name=NAME, source=NAME))


def test_config_values():
    c = config()
    assert (c["hidden_size"], c["vocab_size"], c["num_hidden_layers"], c["intermediate_size"],
            c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (
        H, VOCAB, LAYERS, INTER, HEADS, KV_HEADS, HEAD_DIM)
    assert (c["mamba_d_ssm"], c["mamba_d_state"], c["mamba_n_groups"], c["mamba_n_heads"],
            c["mamba_d_conv"], c["mamba_conv_bias"], c["mamba_proj_bias"], c["mamba_rms_norm"],
            c["mamba_use_mlp"], c["projectors_bias"], c["attention_bias"], c["mlp_bias"],
            c["tie_word_embeddings"], c["mlp_expansion_factor"]) == (
        D_SSM, D_STATE, GROUPS, M_HEADS, D_CONV, True, False, False, True, False, False, False,
        False, 8)


def test_total_by_hand_is_the_published_count():
    assert (ATTENTION, MAMBA, MLP, LAYER) == (1_310_720, 5_014_344, 6_291_456, 12_618_568)
    # 2 x 33,570,816 + 1024 + 36 x 12,618,568 = 67,142,656 + 454,268,448
    assert TOTAL == 521_411_104  # the published checkpoint's count
    w = kvplan.load_model(NAME)
    weights = weight_inventory(w)
    assert weights.params_total == TOTAL
    assert weights.params_active == TOTAL and weights.params_extra == 0
    assert not weights.tied_embeddings


def test_weight_bytes():
    m = kvplan.load_model(NAME)
    w, fmt = weight_inventory(m), weight_format(m, None)
    assert fmt is not None
    # bf16; the vocabulary padded to 64: 32,784 -> 32,832 rows (48 more) in embed and lm_head
    padded = TOTAL + 2 * (32832 - VOCAB) * H
    # vLLM's MambaMixer2 holds A in fp32: 36 layers x 24 heads x (4 - 2) B more
    assert weight_bytes(w, fmt, tp=1).per_gpu_bytes == padded * 2 + 36 * 24 * 2 == 1_043_020_544


def test_multipliers_change_no_tensor():
    base = inv().params_total
    assert inv(lm_head_multiplier=1.0, mlp_multipliers=[1.0, 1.0], mamba_norm_before_gate=True,
               mlp_expansion_factor=4).params_total == base == TOTAL


def test_biases():
    # mamba_proj_bias with projectors_bias: in_proj [3352] and out_proj [1024] biases per layer
    w = inv(mamba_proj_bias=True, projectors_bias=True)
    assert w.params_total == TOTAL + LAYERS * (3352 + H)
    # mamba_rms_norm: the gated norm's weight [d_ssm] per layer
    assert inv(mamba_rms_norm=True).params_total == TOTAL + LAYERS * D_SSM


@pytest.mark.parametrize("changes, words", [
    ({"projectors_bias": True}, "transformers gives the Mamba out_proj a bias"),
    ({"mamba_proj_bias": True}, "transformers gives the Mamba out_proj a bias"),
    ({"mamba_use_mlp": False}, "builds the MLP on every layer"),
    ({"attention_bias": True}, "bias-free"),
    ({"mlp_bias": True}, "bias-free"),
])
def test_refusals(changes, words):
    with pytest.raises(ConfigError, match=words):
        inv(**changes)


def test_fit_cli(capsys):
    from kvplan.cli.main import run

    assert run(["fit", NAME, "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "521,411,104" in out
