"""The 2026 built-ins (model_specs): each one's KV bytes per token, derived by hand from its
config (the same file as the fixture it copies), and each one plans a fit on an H200."""

from __future__ import annotations

import pytest
from cli_helpers import run
from family_helpers import BF16, FP8, row

import kvplan
from kvplan.planning.footprint import kv_footprint

# name -> growing KV bytes per token over the whole model (one sequence, tp 1), by hand:
EXPECTED = {
    # glm4_moe_lite (MLA): 47 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B
    # = 47 x 1,152 = 54,144
    "glm-4.7-flash": 47 * (512 + 64) * BF16,
    # gemma4_text E2B: 35 layers, the last num_kv_shared_layers 20 reuse earlier caches, so
    # layers 0-14 hold KV; full_attention among them at 4, 9, 14 (3 layers): 1 KV head x
    # (global_head_dim 512 K + 512 V) x 2 B = 2,048 each -> 3 x 2,048 = 6,144 (the 12 sliding
    # layers hold a 512-token window, not per-token growth)
    "gemma-4-e2b-it": 3 * 1 * (512 + 512) * BF16,
    # gemma4_text E4B: 42 layers, 18 shared -> layers 0-23 hold KV; full at 5, 11, 17, 23
    # (4 layers): 2 KV heads x (512 + 512) x 2 B = 4,096 each -> 16,384
    "gemma-4-e4b-it": 4 * 2 * (512 + 512) * BF16,
    # gemma4_text 31B (NVFP4 checkpoint, kv_cache_scheme float 8 bits -> fp8, 1 B): 60 layers,
    # no sharing; 10 full layers with attention_k_eq_v: num_global_key_value_heads 4 x
    # (512 + 512) x 1 B = 4,096 each -> 40,960
    "gemma-4-31b-it-nvfp4": 10 * 4 * (512 + 512) * FP8,
    # lfm2 1.2B: full_attn_idxs has 6 layers: 8 KV heads x (64 + 64) x 2 B = 2,048 each
    # -> 12,288 (the 10 short-conv layers hold a constant state)
    "lfm2-1.2b-npu2": 6 * 8 * (64 + 64) * BF16,
    # InternVL3-1B (llm_config qwen2): 24 layers x 2 KV heads x head_dim 896 / 14 = 64 for
    # K and V x 2 B = 24 x 512 = 12,288
    "internvl3-1b-pretrained": 24 * 2 * (64 + 64) * BF16,
    # qwen3_vl_text 8B: 36 layers x 8 KV heads x (128 + 128) x 2 B = 147,456
    "qwen3-vl-8b-instruct": 36 * 8 * (128 + 128) * BF16,
}


def test_hand_values():  # the arithmetic of the comments above
    assert EXPECTED == {"glm-4.7-flash": 54_144, "gemma-4-e2b-it": 6_144,
                        "gemma-4-e4b-it": 16_384, "gemma-4-31b-it-nvfp4": 40_960,
                        "lfm2-1.2b-npu2": 12_288, "internvl3-1b-pretrained": 12_288,
                        "qwen3-vl-8b-instruct": 147_456}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bytes_per_token(name):
    model = kvplan.load_model(name)
    assert not model.warnings
    assert kv_footprint(model, [1]).bytes_per_token == EXPECTED[name]


def test_windowed_and_state_rows():
    # (a row's bytes_per_token is one layer's)
    # gemma-4-E2B: 12 sliding layers (0-14 less the 3 full), each 1 KV head x (head_dim 256 K
    # + 256 V) x 2 B = 1,024 B per token, window 512
    fp = kv_footprint(kvplan.load_model("gemma-4-e2b-it"), [1])
    r = row(fp, "sliding_window")
    assert (r.count, r.window_tokens, r.bytes_per_token) == (12, 512, 1 * 512 * BF16)
    # gemma-4-31B: 50 sliding layers, each 16 KV heads x (256 + 256) x 1 B (fp8) = 8,192,
    # window 1,024
    r = row(kv_footprint(kvplan.load_model("gemma-4-31b-it-nvfp4"), [1]), "sliding_window")
    assert (r.count, r.window_tokens, r.bytes_per_token) == (50, 1024, 16 * 512 * FP8)
    # LFM2: 16 - 6 = 10 short-conv layers, each conv_dim 2,048 x (conv_L_cache 3 - 1) x 2 B
    # = 8,192 -> 81,920 per sequence
    fp = kv_footprint(kvplan.load_model("lfm2-1.2b-npu2"), [1])
    assert fp.state_bytes_per_sequence == 10 * 2048 * (3 - 1) * BF16 == 81_920


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_size_and_fit_run(name, capsys):
    assert run(["size", name]) == 0
    assert run(["fit", name, "--gpu", "h200", "-c", "8192"]) == 0
    capsys.readouterr()


def test_models_lists_them(capsys):
    assert run(["models"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED:
        assert name in out
