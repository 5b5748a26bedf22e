"""2025-2026 architectures, one test per fixture config, every number derived by hand from the
config's own fields with the arithmetic written out (TP 1 and TP 8, bf16 and fp8 where the
format applies). Rules and their sources: docs/architectures.md.
"""

from __future__ import annotations

import pytest
from family_helpers import BF16, FP8, FP32, check_attn, check_state, covers, kinds, load, row

from kvplan.core.errors import InputError
from kvplan.planning.footprint import kv_footprint

# --------------------------------------------------------------------------------------------
# Kimi delta attention (KDA) + MLA
# --------------------------------------------------------------------------------------------


def kda_layer_bytes(heads: int, dim: int, kernel: int, tp: int, conv_bytes: int, cols_dropped: int = 1):
    """conv over q, k, v (3 x heads x dim channels) x (kernel - dropped) columns + the
    heads x dim x dim recurrent state in fp32, both split by heads."""
    return (3 * heads * dim // tp) * (kernel - cols_dropped) * conv_bytes + (heads // tp) * dim * dim * FP32


@covers("moonshotai__Kimi-Linear-48B-A3B-Instruct.json")
def test_kimi_linear_48b():
    m = load("moonshotai__Kimi-Linear-48B-A3B-Instruct.json")
    # linear_attn_config: kda_layers 1-3,5-7,...,25,26 (20 layers, 1-based), full_attn_layers
    # 4,8,12,16,20,24,27 (7 MLA layers); 27 layers in all
    mla_at = {4, 8, 12, 16, 20, 24, 27}
    assert kinds(m) == [("mla",) if i + 1 in mla_at else ("kda",) for i in range(27)]
    for tp, kv, kv_bytes in ((1, "bf16", BF16), (8, "bf16", BF16), (1, "fp8", FP8), (8, "fp8", FP8)):
        fp = kv_footprint(m, [4096], kv_dtype=kv, tp=tp, block_size_tokens=1)
        # MLA latent kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements, one copy per rank
        assert row(fp, "mla").bytes_per_token_per_rank == 576 * kv_bytes
        assert fp.bytes_per_token == 7 * 576 * kv_bytes  # 8,064 B bf16, 4,032 B fp8
        # KDA: 32 heads x 128, short_conv_kernel_size 4: vLLM keeps 3 conv columns in the model
        # dtype (bf16) and the state in fp32 whatever --kv-dtype says
        kda = row(fp, "kda")
        assert kda.state_bytes_per_rank == kda_layer_bytes(32, 128, 4, tp, BF16)
    one = kv_footprint(m, [4096], block_size_tokens=1)
    # 3 x 12,288 x 2 B = 73,728 B conv + 32 x 128 x 128 x 4 B = 2,097,152 B state, x 20 layers
    assert one.state_bytes_per_sequence == 20 * (73_728 + 2_097_152) == 43_417_600
    assert row(kv_footprint(m, [4096], tp=8), "kda").state_bytes_per_rank == 9_216 + 262_144
    # SGLang: conv bf16, state fp32: the same bytes; llama.cpp: both fp32 (4 B conv)
    assert kv_footprint(m, [1], engine="sglang").state_bytes_per_sequence == 43_417_600
    cpp = kv_footprint(m, [1], engine="llama.cpp")
    assert cpp.state_bytes_per_sequence == 20 * (3 * 4096 * 3 * 4 + 2_097_152)
    # transformers: kvplan has not established how its cache keeps KDA state
    with pytest.raises(InputError, match="has not established how hf stores kda state"):
        kv_footprint(m, [1], engine="hf")


@covers("moonshotai__Kimi-K3.json")
def test_kimi_k3():
    m = load("moonshotai__Kimi-K3.json")
    # text_config (kimi_linear): 93 layers, full_attn_layers 4, 8, ..., 92 and 93 (24 MLA),
    # kda_layers the other 69; KDA 96 heads x 128, kernel 4
    mla_at = set(range(4, 93, 4)) | {93}
    assert len(mla_at) == 24
    assert kinds(m) == [("mla",) if i + 1 in mla_at else ("kda",) for i in range(93)]
    # without kda_layers, the layers not in full_attn_layers are KDA (and that is stated)
    text = dict(m.config["text_config"])
    text["linear_attn_config"] = {k: v for k, v in text["linear_attn_config"].items()
                                  if k != "kda_layers"}
    m2 = load("x.json", {**m.config, "text_config": text})
    assert m2.layers == m.layers
    assert ("text_config.linear_attn_config.kda_layers absent: the 69 layers not in "
            "full_attn_layers are KDA") in m2.assumptions
    fp = kv_footprint(m, [1])
    assert fp.bytes_per_token == 24 * (512 + 64) * BF16 == 27_648
    # 3 x 96 x 128 = 36,864 channels x 3 x 2 B = 221,184; 96 x 128 x 128 x 4 = 6,291,456
    assert fp.state_bytes_per_sequence == 69 * (221_184 + 6_291_456) == 449_372_160
    tp8 = kv_footprint(m, [1], tp=8)
    assert row(tp8, "kda").state_bytes_per_rank == kda_layer_bytes(96, 128, 4, 8, BF16) == 814_080


def test_kimi_layer_lists_are_checked():
    cfg = load("moonshotai__Kimi-Linear-48B-A3B-Instruct.json").config
    bad = {**cfg, "linear_attn_config": {**cfg["linear_attn_config"], "kda_layers": [1, 2, 4]}}
    with pytest.raises(Exception, match="layer 4 is also in full_attn_layers"):
        load("x.json", bad)
    gap = {**cfg, "linear_attn_config": {**cfg["linear_attn_config"], "kda_layers": [1, 2, 3]}}
    with pytest.raises(Exception, match="layer 5 is in neither kda_layers nor full_attn_layers"):
        load("x.json", gap)
    zero = {**cfg, "linear_attn_config": {**cfg["linear_attn_config"], "full_attn_layers": [0]}}
    with pytest.raises(Exception, match=r"full_attn_layers\[0\]: expected a layer number 1..27"):
        load("x.json", zero)


# --------------------------------------------------------------------------------------------
# Gated DeltaNet: Qwen3.5 / Qwen3.6 and Qwen3-Next
# --------------------------------------------------------------------------------------------


def gdn_layer_bytes(hk, hv, dk, dv, kernel, tp, conv_bytes, state_bytes, dropped=1):
    conv = (2 * hk * dk + hv * dv) // tp * (kernel - dropped) * conv_bytes
    return conv + (hv // tp) * dk * dv * state_bytes


@covers("Qwen__Qwen3.5-27B.json")
def test_qwen35_27b():
    m = load("Qwen__Qwen3.5-27B.json")
    # text_config (qwen3_5_text): 64 layers, layer_types: 3 linear then 1 full, 16 times
    assert kinds(m) == [("full_attention",) if (i + 1) % 4 == 0 else ("linear_attention",)
                        for i in range(64)]
    # linear: 16 key heads, 48 value heads, 128 x 128, kernel 4; vLLM reads mamba_ssm_dtype
    # (float32) for the recurrent state of Qwen3.5 and keeps the conv in bf16
    v = kv_footprint(m, [1])
    assert row(v, "linear_attention").state_bytes == gdn_layer_bytes(16, 48, 128, 128, 4, 1, BF16, FP32)
    assert v.state_bytes_per_sequence == 48 * (61_440 + 3_145_728) == 153_944_064
    # full attention: 4 KV heads x 256 (K and V), bf16: 2 x 4 x 256 x 2 = 4,096 B per layer
    check_attn(row(v, "full_attention"), count=16, kv_heads=4, head_dim=256, window=None,
               bytes_per_token=2 * 4 * 256 * BF16)
    assert v.bytes_per_token == 16 * 4_096 == 65_536
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 16 * 2 * 4 * 256 * FP8
    tp8 = kv_footprint(m, [1], tp=8)
    # 4 KV heads on 8 ranks: one head per rank, replicated: 2 x 1 x 256 x 2 = 1,024 B per layer
    assert row(tp8, "full_attention").bytes_per_token_per_rank == 1_024
    assert row(tp8, "linear_attention").state_bytes_per_rank == 7_680 + 393_216
    # SGLang reads the same mamba_ssm_dtype; llama.cpp keeps both in fp32 with K - 1 columns
    assert kv_footprint(m, [1], engine="sglang").state_bytes_per_sequence == 153_944_064
    assert kv_footprint(m, [1], engine="llama.cpp", pp=1).state_bytes_per_sequence == \
        48 * gdn_layer_bytes(16, 48, 128, 128, 4, 1, FP32, FP32)


@covers("Qwen__Qwen3.5-397B-A17B.json")
def test_qwen35_397b_moe():
    m = load("Qwen__Qwen3.5-397B-A17B.json")
    # qwen3_5_moe_text: 60 layers (45 linear, 15 full); linear 16 key / 64 value heads x 128
    fp = kv_footprint(m, [1])
    assert fp.state_bytes_per_sequence == 45 * gdn_layer_bytes(16, 64, 128, 128, 4, 1, BF16, FP32)
    assert fp.state_bytes_per_sequence == 45 * (73_728 + 4_194_304) == 192_061_440
    # full: 2 KV heads x 256: 2,048 B per layer, x 15
    assert fp.bytes_per_token == 15 * 2 * 2 * 256 * BF16 == 30_720
    tp8 = kv_footprint(m, [1], tp=8)
    assert tp8.sequences[0].per_gpu_bytes == 45 * (9_216 + 524_288) + 15 * 1_024 * 16  # 16-token block
    assert "text_config.mtp_num_hidden_layers = 1: the MTP layer(s) are not counted (they cache " \
           "KV only when used as a speculative draft)" in m.assumptions


@covers("Qwen__Qwen3-Next-80B-A3B-Thinking.json")
def test_qwen3_next_real_config_has_no_layer_types():
    m = load("Qwen__Qwen3-Next-80B-A3B-Thinking.json")
    # 48 layers, full_attention_interval 4 (no layer_types in the published file): 36 linear
    assert [k for (k,) in kinds(m)].count("linear_attention") == 36
    # no state dtype key: vLLM keeps conv and state in the model dtype (bf16); SGLang's state
    # default is fp32, twice the state bytes
    per_vllm = gdn_layer_bytes(16, 32, 128, 128, 4, 1, BF16, BF16)
    assert per_vllm == 49_152 + 1_048_576
    assert kv_footprint(m, [1]).state_bytes_per_sequence == 36 * per_vllm == 39_518_208
    assert kv_footprint(m, [1], engine="sglang").state_bytes_per_sequence == \
        36 * gdn_layer_bytes(16, 32, 128, 128, 4, 1, BF16, FP32) == 77_266_944


# --------------------------------------------------------------------------------------------
# MiniMax: lightning attention (M1, Text-01) and full attention (M2.x)
# --------------------------------------------------------------------------------------------


@covers("MiniMaxAI__MiniMax-M1.json")
def test_minimax_m1_lightning_and_engines_that_dropped_it():
    m = load("MiniMaxAI__MiniMax-M1.json")
    # attn_type_list: 7 lightning (0) then 1 softmax (1), 10 times over 80 layers
    assert kinds(m) == [("full_attention",) if (i + 1) % 8 == 0 else ("lightning_attention",)
                        for i in range(80)]
    with pytest.raises(InputError, match="vllm does not serve 'minimax_m1' models: vllm removed "
                       r"them after release 0.23.0 \(plan with --engine vllm@0.23.0\)"):
        kv_footprint(m, [1])
    fp = kv_footprint(m, [1], engine="vllm@0.23.0")
    # lightning state 64 heads x 128 x 128 in the model dtype (bf16) = 2,097,152 B per layer
    check_state(row(fp, "lightning_attention"), count=70, state_bytes=64 * 128 * 128 * BF16)
    assert fp.state_bytes_per_sequence == 70 * 2_097_152 == 146_800_640
    # softmax layers: 8 KV heads x 128: 2 x 8 x 128 x 2 = 4,096 B, x 10
    assert fp.bytes_per_token == 10 * 4_096 == 40_960
    tp8 = kv_footprint(m, [1], engine="vllm@0.23.0", tp=8, block_size_tokens=1)
    assert tp8.sequences[0].per_gpu_bytes == 70 * 8 * 128 * 128 * BF16 + 10 * 2 * 1 * 128 * BF16
    with pytest.raises(InputError, match="not established that SGLang serves"):
        kv_footprint(m, [1], engine="sglang")


@covers("MiniMaxAI__MiniMax-M2.7.json")
def test_minimax_m2_is_full_attention():
    m = load("MiniMaxAI__MiniMax-M2.7.json")
    # attn_type_list all 1 (softmax), 62 layers, 8 KV heads x head_dim 128; MTP not counted
    fp = kv_footprint(m, [1])
    check_attn(row(fp, "full_attention"), count=62, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=2 * 8 * 128 * BF16)
    assert fp.bytes_per_token == 62 * 4_096 == 253_952
    cfg = {**m.config, "attn_type_list": [0] + [1] * 61}
    with pytest.raises(Exception, match=r"attn_type_list\[0\]: minimax_m2 has no lightning layers"):
        load("x.json", cfg)


@covers("MiniMaxAI__MiniMax-M2.5.json")
def test_minimax_m25_without_attn_type_list_is_full_attention():
    # AIConfigurator's abbreviated M2.5 config has no attn_type_list: vLLM's minimax_m2.py and
    # transformers' MiniMaxM2Config never read one, every layer is softmax GQA
    m = load("MiniMaxAI__MiniMax-M2.5.json")
    assert "attn_type_list" not in m.config
    fp = kv_footprint(m, [1])
    check_attn(row(fp, "full_attention"), count=62, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=2 * 8 * 128 * BF16)
    assert fp.bytes_per_token == 62 * 2 * 8 * 128 * 2 == 253_952
    # TP 8: 8 KV heads, one per rank: 62 x 2 x 1 x 128 x 2 = 31,744 B per token per GPU
    tp8 = kv_footprint(m, [1], tp=8, block_size_tokens=1)
    assert tp8.sequences[0].per_gpu_bytes == 62 * 2 * 1 * 128 * 2 == 31_744
    # fp8 KV: one byte per element, 126,976 B per token
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 62 * 2 * 8 * 128 == 126_976
    bad = {**m.config, "attn_type_list": [1] * 61}
    with pytest.raises(Exception, match="attn_type_list: has 61 entries for 62 layers"):
        load("x.json", bad)


# --------------------------------------------------------------------------------------------
# LFM2: short-conv state + GQA
# --------------------------------------------------------------------------------------------


@covers("LiquidAI__LFM2-1.2B.json")
def test_lfm2_short_conv():
    m = load("LiquidAI__LFM2-1.2B.json")
    full = {2, 5, 8, 10, 12, 14}  # full_attn_idxs, 0-based; 16 layers
    assert kinds(m) == [("full_attention",) if i in full else ("short_conv",) for i in range(16)]
    fp = kv_footprint(m, [1])
    # conv_L_cache 3: vLLM keeps 2 columns x hidden 2048 x 2 B = 8,192 B per conv layer, x 10
    check_state(row(fp, "short_conv"), count=10, state_bytes=2 * 2048 * BF16)
    assert fp.state_bytes_per_sequence == 81_920
    # attention: 8 KV heads x 2048 / 32 = 64: 2 x 8 x 64 x 2 = 2,048 B per layer, x 6
    assert fp.bytes_per_token == 6 * 2_048 == 12_288
    tp8 = kv_footprint(m, [1], tp=8, block_size_tokens=1)
    assert tp8.sequences[0].per_gpu_bytes == 10 * 2 * 256 * BF16 + 6 * 2 * 1 * 64 * BF16
    # llama.cpp keeps the conv state in fp32 (n_embd x (L_cache - 1))
    assert kv_footprint(m, [1], engine="llama.cpp").state_bytes_per_sequence == 10 * 2048 * 2 * 4


@covers("FastFlowLM__LFM2-1.2B-NPU2.json", "LiquidAI__LFM2-700M.json")
def test_lfm2_complete_configs():
    """The complete LFM2 configs (the parameter inventories' fixtures) read as the partial one:
    6 attention layers at full_attn_idxs, 10 short-conv layers. 1.2B: as above. 700M: hidden
    1536, 24 heads (head_dim 64), 8 KV heads: 2 x 8 x 64 x 2 = 2,048 B per attention layer;
    conv state (L_cache 3 - 1) x 1536 x 2 B = 6,144 B per conv layer."""
    full = {2, 5, 8, 10, 12, 14}
    for name, hidden in (("FastFlowLM__LFM2-1.2B-NPU2.json", 2048), ("LiquidAI__LFM2-700M.json", 1536)):
        m = load(name)
        assert kinds(m) == [("full_attention",) if i in full else ("short_conv",) for i in range(16)]
        fp = kv_footprint(m, [1])
        assert fp.bytes_per_token == 6 * 2 * 8 * 64 * BF16
        assert fp.state_bytes_per_sequence == 10 * 2 * hidden * BF16


# --------------------------------------------------------------------------------------------
# Per-layer geometry: Gemma-4, Gemma-3n (KV sharing), MiMo-V2-Flash, Nemotron-NAS
# --------------------------------------------------------------------------------------------


def sliding_peak_tokens(window: int, block: int) -> int:
    """Worst case a vLLM sliding layer holds: the blocks spanning the last W - 1 tokens,
    cdiv(W - 1 + B - 1, B) of them."""
    return -(-(window - 1 + block - 1) // block) * block


@covers("google__gemma-4-26B-A4B.json")
def test_gemma4_26b_two_geometries():
    m = load("google__gemma-4-26B-A4B.json")
    # layer_types: 5 sliding then 1 full, 5 times (30 layers); num_kv_shared_layers 0
    assert kinds(m) == [("full_attention",) if (i + 1) % 6 == 0 else ("sliding_window",)
                        for i in range(30)]
    fp = kv_footprint(m, [32768])
    # sliding: num_key_value_heads 8 x head_dim 256; full (attention_k_eq_v): 2 global KV heads
    # x global_head_dim 512, K and V both stored
    check_attn(row(fp, "sliding_window"), count=25, kv_heads=8, head_dim=256, window=1024,
               bytes_per_token=2 * 8 * 256 * BF16)
    check_attn(row(fp, "full_attention"), count=5, kv_heads=2, head_dim=512, window=None,
               bytes_per_token=2 * 2 * 512 * BF16)
    assert fp.bytes_per_token == 5 * 4096 == 20_480
    # vLLM unifies page sizes: sliding pages 16 x 8,192 B are twice full pages 16 x 4,096 B, so
    # full layers get 32-token blocks; a 32k sequence: 5 x 32,768 x 4,096 + 25 sliding layers x
    # 1,040 tokens (cdiv(1,023 + 15, 16) = 65 blocks) x 8,192
    assert row(fp, "full_attention").block_multiple == 2
    assert fp.sequences[0].per_gpu_bytes == 5 * 32768 * 4096 + 25 * sliding_peak_tokens(1024, 16) * 8192
    assert fp.sequences[0].per_gpu_bytes == 884_080_640
    at_1000 = kv_footprint(m, [1000]).sequences[0].per_gpu_bytes
    assert at_1000 == 5 * (32 * 32) * 4096 + 25 * (63 * 16) * 8192  # cdiv(1000, 32), cdiv(1000, 16)
    # TP 8: 8 sliding heads -> 1 per rank; 2 full heads -> replicated, 1 per rank: the full
    # page (2 x 512 x 2 B) is now the larger one and the sliding layers get 32-token blocks
    tp8 = kv_footprint(m, [32768], tp=8)
    assert row(tp8, "sliding_window").bytes_per_token_per_rank == 2 * 1 * 256 * BF16
    assert row(tp8, "full_attention").bytes_per_token_per_rank == 2 * 1 * 512 * BF16
    assert row(tp8, "sliding_window").block_multiple == 2
    assert tp8.sequences[0].per_gpu_bytes == 5 * 32768 * 2048 + 25 * sliding_peak_tokens(1024, 32) * 1024
    # fp8 halves every page
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 5 * 2 * 2 * 512 * FP8
    # llama.cpp: full layers n_ctx cells; the iSWA cache pad256(min(n_ctx, 1024 + 512)) = 1536
    cpp = kv_footprint(m, [32768], engine="llama.cpp")
    assert cpp.sequences[0].per_gpu_bytes == 5 * 32768 * 4096 + 25 * 1536 * 8192 == 985_661_440
    # transformers: DynamicCache breaks or keeps every token for Gemma-4 (layer_types[:-0])
    with pytest.raises(InputError, match="'gemma4_text' models are not planned on hf"):
        kv_footprint(m, [1], engine="hf")


@covers("nvidia__Gemma-4-31B-IT-NVFP4.json")
def test_gemma4_31b_nvfp4_checkpoint_kv_scheme():
    m = load("nvidia__Gemma-4-31B-IT-NVFP4.json")
    # quantization_config.kv_cache_scheme {type: float, num_bits: 8}: vLLM stores fp8 under auto
    fp = kv_footprint(m, [1])
    assert fp.kv_dtype == "fp8_e4m3"
    assert ("KV format auto = fp8_e4m3: the checkpoint's quantization_config declares it and "
            "vllm applies it") in fp.notes
    # 60 layers: 50 sliding (16 KV heads x 256), 10 full (4 global KV heads x 512), 1 B each
    assert row(fp, "sliding_window").bytes_per_token == 2 * 16 * 256 * FP8
    assert fp.bytes_per_token == 10 * 2 * 4 * 512 * FP8 == 40_960
    assert kv_footprint(m, [1], kv_dtype="bf16").bytes_per_token == 81_920
    with pytest.raises(InputError, match="checkpoint declares a fp8_e4m3 KV cache and kvplan has "
                       "not established whether sglang applies it"):
        kv_footprint(m, [1], engine="sglang")


@covers("google__gemma-3n-E4B.json")
def test_gemma3n_kv_sharing():
    m = load("google__gemma-3n-E4B.json")
    # 35 layers, num_kv_shared_layers 15: layers 20..34 reuse earlier K/V and hold nothing;
    # layers 0..19: 4 sliding then 1 full (full at 4, 9, 14, 19)
    assert kinds(m) == [(("full_attention",) if (i + 1) % 5 == 0 else ("sliding_window",))
                        if i < 20 else () for i in range(35)]
    assert m.kv_shared_layers == 15
    fp = kv_footprint(m, [8192], block_size_tokens=1)
    # 2 KV heads x 256 on every layer: 2 x 2 x 256 x 2 = 2,048 B per token per layer
    assert fp.bytes_per_token == 4 * 2048 == 8_192
    # sliding window 512: each sliding layer holds 511 tokens
    assert fp.sequences[0].per_gpu_bytes == 4 * 8192 * 2048 + 16 * 511 * 2048
    tp8 = kv_footprint(m, [1], tp=8)  # 2 KV heads replicated: 1 per rank
    assert row(tp8, "full_attention").bytes_per_token_per_rank == 2 * 1 * 256 * BF16
    with pytest.raises(InputError, match="whether sglang allocates cache for the 15 KV-sharing"):
        kv_footprint(m, [1], engine="sglang")
    assert kv_footprint(m, [1], engine="hf").bytes_per_token == 8_192
    bad = {**m.config, "text_config": {**m.config["text_config"], "num_kv_shared_layers": 35}}
    with pytest.raises(Exception, match="35 shared layers leave none of the 35 layers"):
        load("x.json", bad)


@covers("XiaomiMiMo__MiMo-V2-Flash.json")
def test_mimo_v2_flash_hybrid_pattern():
    m = load("XiaomiMiMo__MiMo-V2-Flash.json")
    cfg = m.config
    # hybrid_layer_pattern: 1 = sliding window, 0 = full; 9 full (0, 5, 11, ..., 47), 39 sliding
    pattern = cfg["hybrid_layer_pattern"]
    assert pattern.count(0) == 9 and pattern.count(1) == 39
    assert kinds(m) == [("sliding_window",) if p else ("full_attention",) for p in pattern]
    fp = kv_footprint(m, [1])
    # full: 4 KV heads x (K 192 + V 128); sliding: swa 8 KV heads x (192 + 128), window 128
    check_attn(row(fp, "full_attention"), count=9, kv_heads=4, head_dim=192, head_dim_v=128,
               window=None, bytes_per_token=4 * (192 + 128) * BF16)
    check_attn(row(fp, "sliding_window"), count=39, kv_heads=8, head_dim=192, head_dim_v=128,
               window=128, bytes_per_token=8 * (192 + 128) * BF16)
    assert fp.bytes_per_token == 9 * 2560 == 23_040
    assert ("attention_chunk_size ignored: MiMo-V2 does not use chunked attention (vLLM's config "
            "convertor removes it)") in m.assumptions
    # TP 8: 4 full KV heads replicated to 1 per rank, 8 sliding heads 1 per rank: 640 B each
    tp8 = kv_footprint(m, [1], tp=8)
    assert {r.bytes_per_token_per_rank for r in tp8.layers} == {1 * 320 * BF16}
    # vLLM keeps MiMo's KV in bf16 whatever --kv-cache-dtype says; SGLang applies fp8
    with pytest.raises(InputError, match="keeps 'mimo_v2_flash' KV in the model dtype"):
        kv_footprint(m, [1], kv_dtype="fp8")
    assert kv_footprint(m, [1], kv_dtype="fp8", engine="sglang").bytes_per_token == 9 * 4 * 320


@covers("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json")
def test_nemotron_super_49b_block_configs():
    m = load("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json")
    no_op = [b["attention"]["no_op"] for b in m.config["block_configs"]]
    assert no_op.count(True) == 31  # 80 blocks, 31 without attention
    assert kinds(m) == [() if n else ("full_attention",) for n in no_op]
    fp = kv_footprint(m, [1])
    # n_heads_in_group 8: 64 / 8 = 8 KV heads; head_dim 8192 / 64 = 128: 4,096 B per layer
    check_attn(row(fp, "full_attention"), count=49, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=2 * 8 * 128 * BF16)
    assert fp.bytes_per_token == 49 * 4096 == 200_704
    assert kv_footprint(m, [1], tp=8).layers[0].bytes_per_token_per_rank == 2 * 1 * 128 * BF16
    with pytest.raises(InputError, match="'nemotron-nas' models are not planned on hf"):
        kv_footprint(m, [1], engine="hf")
    blocks = [dict(b) for b in m.config["block_configs"]]
    blocks[0] = {**blocks[0], "attention": {**blocks[0]["attention"], "window_length": 4096}}
    with pytest.raises(Exception, match=r"block_configs\[0\]\.attention\.window_length: 4096 is not "
                       "modelled"):
        load("x.json", {**m.config, "block_configs": blocks})


@covers("nvidia__Llama-3_1-Nemotron-Ultra-253B-v1.json")
def test_nemotron_ultra_253b():
    m = load("nvidia__Llama-3_1-Nemotron-Ultra-253B-v1.json")
    attn = [not b["attention"]["no_op"] for b in m.config["block_configs"]]
    assert sum(attn) == 64 and len(attn) == 162
    # n_heads_in_group 16: 128 / 16 = 8 KV heads x 16384 / 128 = 128
    fp = kv_footprint(m, [1])
    assert fp.bytes_per_token == 64 * 2 * 8 * 128 * BF16 == 262_144
    assert kv_footprint(m, [1], kv_dtype="fp8", tp=8).sequences[0].per_gpu_bytes == \
        64 * 2 * 1 * 128 * FP8 * 16  # one 16-token block per layer


# --------------------------------------------------------------------------------------------
# Sparse MLA with a lightning indexer: DeepSeek-V3.2, GLM-5, GLM-5.2; plain MLA GLM-4.7-Flash
# --------------------------------------------------------------------------------------------

LATENT = 512 + 64  # kv_lora_rank + qk_rope_head_dim
INDEXER = 128 + 128 // 128 * 4  # index_head_dim fp8 values + one fp32 scale per 128
DS_MLA = 512 + 512 // 128 * 4 + 64 * 2  # fp8_ds_mla: fp8 latent, 4 fp32 scales, bf16 RoPE


@covers("deepseek-ai__DeepSeek-V3.2.json")
def test_deepseek_v32_sparse_mla():
    m = load("deepseek-ai__DeepSeek-V3.2.json")
    # index_topk present, no index_topk_freq: an indexer on every one of the 61 layers
    assert kinds(m) == [("mla", "indexer")] * 61
    for tp in (1, 8):  # the latent and the indexer key are replicated on every rank
        fp = kv_footprint(m, [1], tp=tp)
        assert row(fp, "indexer").bytes_per_token_per_rank == INDEXER == 132
        assert fp.bytes_per_token == 61 * LATENT * BF16 + 61 * INDEXER == 78_324
    # --kv-dtype fp8: vLLM's FlashMLA sparse backend stores fp8_ds_mla (656 B); the indexer
    # keeps its 132 B
    fp8 = kv_footprint(m, [1], kv_dtype="fp8")
    assert fp8.kv_dtype == "fp8_ds_mla"
    assert fp8.bytes_per_token == 61 * DS_MLA + 61 * INDEXER == 48_068
    # SGLang 0.5.23's DSA pool (kvplan.engines.sglang_dsa): the latent format follows the GPU.
    # Without one (kvplan size) auto and fp8 are refused; bf16 and fp8_ds_mla are not
    with pytest.raises(InputError, match="SGLang's DSA cache under --kv-dtype fp8 depends on "
                       "the GPU"):
        kv_footprint(m, [1], kv_dtype="fp8", engine="sglang")
    sg = kv_footprint(m, [1], kv_dtype="bf16", engine="sglang")
    assert sg.bytes_per_token == 61 * (576 * 2 + 132) == 78_324
    assert kv_footprint(m, [1], kv_dtype="fp8_ds_mla", engine="sglang").bytes_per_token == \
        61 * (512 + 16 + 128 + 132) == 48_068
    # Hopper (SM 9.0): auto is bf16, fp8 is FlashMLA's scaled row (656 B)
    h = {"engine": "sglang", "gpu_capability": "9.0"}
    assert kv_footprint(m, [1], **h).bytes_per_token == 78_324
    assert kv_footprint(m, [1], kv_dtype="fp8", **h).bytes_per_token == 48_068
    # Blackwell (SM 10.0): auto is fp8, and TRT-LLM's DSA kernels read the raw 576-byte row
    b = {"engine": "sglang", "gpu_capability": "10.0"}
    assert kv_footprint(m, [1], **b).kv_dtype == "fp8_e4m3"
    assert kv_footprint(m, [1], **b).bytes_per_token == 61 * (576 + 132) == 43_188
    # 64-token pages whatever --block-size says; the latent is not split by TP: 100 tokens at
    # TP 8 hold 2 pages = 128 tokens x 708 B x 61 layers on every GPU
    tp8 = kv_footprint(m, [100], tp=8, block_size_tokens=1, **b)
    assert tp8.sequences[0].per_gpu_bytes == 128 * (576 + 132) * 61 == 5_528_064
    with pytest.raises(InputError, match="stores the latent as bfloat16 or fp8_e4m3, not"):
        kv_footprint(m, [1], kv_dtype="fp8_e5m2", **b)
    with pytest.raises(InputError, match="from 0.5.23 only"):
        kv_footprint(m, [1], kv_dtype="bf16", engine="sglang@0.5.20")
    # llama.cpp (llama-kv-cache-dsa): latent as K only and the indexer key in the K type (f16)
    assert kv_footprint(m, [1], engine="llama.cpp").bytes_per_token == 61 * (576 + 128) * 2
    with pytest.raises(InputError, match="'deepseek_v32' models are not planned on hf"):
        kv_footprint(m, [1], engine="hf")


@covers("zai-org__GLM-5.json")
def test_glm5_indexer_every_layer():
    m = load("zai-org__GLM-5.json")
    assert kinds(m) == [("mla", "indexer")] * 78
    assert kv_footprint(m, [1]).bytes_per_token == 78 * (LATENT * BF16 + INDEXER) == 100_152
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 78 * (DS_MLA + INDEXER) == 61_464
    # transformers caches GLM-5's attention decompressed: 64 heads x (K 192 + 64, V 256) in
    # bf16, plus the indexer key in bf16
    hf = kv_footprint(m, [1], engine="hf")
    assert hf.bytes_per_token == 78 * (64 * (192 + 64 + 256) * BF16 + 128 * BF16) == 5_131_776


@covers("zai-org__GLM-5.2.json")
def test_glm52_shared_indexers():
    m = load("zai-org__GLM-5.2.json")
    # index_topk_freq 4, index_skip_topk_offset 3: a layer computes its own top-k when
    # max(i - 3 + 1, 0) % 4 == 0: 0, 1, 2, then 6, 10, ..., 74 (21 of 78); indexer_types agrees
    with_indexer = {0, 1, 2} | set(range(6, 78, 4))
    assert len(with_indexer) == 21
    assert kinds(m) == [("mla", "indexer") if i in with_indexer else ("mla",) for i in range(78)]
    assert kv_footprint(m, [1]).bytes_per_token == 78 * LATENT * BF16 + 21 * INDEXER == 92_628
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 78 * DS_MLA + 21 * INDEXER
    # SGLang 0.5.23 elides the indexer of layers that reuse a top-k (dsa_layer_skips_topk:
    # the same 21 layers); Blackwell fp8 raw rows: 78 x 576 + 21 x 132
    assert kv_footprint(m, [1], engine="sglang", gpu_capability="10.0").bytes_per_token == \
        78 * 576 + 21 * 132 == 47_700
    # before 0.5.23 (an index buffer per layer, as read in late 2025) it is not established
    with pytest.raises(InputError, match="from 0.5.23 only"):
        kv_footprint(m, [1], engine="sglang@0.5.20", kv_dtype="bf16")
    # indexer_types that disagree with freq / offset are refused
    types = list(m.config["indexer_types"])
    types[3] = "full"
    with pytest.raises(Exception, match="indexer_types: layer 3 is 'full' but index_topk_freq"):
        load("x.json", {**m.config, "indexer_types": types})


@covers("zai-org__GLM-4.7-Flash.json")
def test_glm47_flash_is_mla():
    m = load("zai-org__GLM-4.7-Flash.json")
    # glm4_moe_lite: 47 MLA layers (kv_lora_rank 512, qk_rope_head_dim 64), no indexer;
    # head_dim 64 in the file is not the cache width
    assert kinds(m) == [("mla",)] * 47
    assert kv_footprint(m, [1]).bytes_per_token == 47 * LATENT * BF16 == 54_144
    assert kv_footprint(m, [1], kv_dtype="fp8").bytes_per_token == 47 * LATENT * FP8  # plain fp8
    with pytest.raises(Exception, match=r"attention heads \(20\) must divide by tp \(8\)"):
        kv_footprint(m, [1], tp=8)


# --------------------------------------------------------------------------------------------
# DeepSeek-V4: compressed caches (vLLM 0.27+)
# --------------------------------------------------------------------------------------------

ROW = 448 + 64 * 2 + 448 // 64 + 1  # fp8_ds_mla, DeepSeek-V4: fp8 NoPE, bf16 RoPE, scales, pad


def pad576(n: int) -> int:
    return -(-n // 576) * 576


def v4_blocks(n: int, swa_groups: int) -> int:
    """ceil(n / 256) compressed blocks + per sliding group the most blocks its window spanned
    at any length m <= n (brute force): window 128 in 64-token blocks, r=4 states 8 tokens in
    4-token blocks, r=128 states 128 tokens in 8-token blocks."""
    def held(b, w):
        return max(-(-m // b) - max(0, m - w) // b for m in range(1, n + 1))
    return -(-n // 256) + swa_groups * held(64, 128) + held(4, 8) + held(8, 128)


@covers("deepseek-ai__DeepSeek-V4-Flash.json")
def test_deepseek_v4_flash():
    m = load("deepseek-ai__DeepSeek-V4-Flash.json")
    # compress_ratios: 0, 0, then 4 / 128 alternating (21 x 4, 20 x 128) over 43 layers; the
    # 44th entry is the MTP layer's
    ratios = m.config["compress_ratios"][:43]
    assert [s.compress_ratio for (s,) in m.layers] == [max(r, 1) for r in ratios]
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    assert ROW == 584
    # one block id: 21 r=4 layers x (64 entries x 584 B and 64 indexer keys x 132 B, each padded
    # to 576 B) + 20 r=128 layers x 2 entries x 584 B padded
    block = 21 * (pad576(64 * ROW) + pad576(64 * 132)) + 20 * pad576(2 * ROW)
    assert block == 21 * (37_440 + 8_640) + 20 * 1_728 == 1_002_240
    fp = kv_footprint(m, [4096, 131072, 1048576])
    # window caches: 43 layers in groups of 22 (vLLM pads 21 + 21 + 20 + 43 least at 22): 2
    for seq, n in zip(fp.sequences, (4096, 131072, 1048576), strict=True):
        assert seq.per_gpu_bytes == v4_blocks(n, 2) * block
    # 42, 538 and 4,122 blocks: 4 more than at the last decode step of exactly 4k / 128k / 1M
    # tokens (16 + 2 x 2 + 2 + 16 = 38 at 4k), the worst case over shorter lengths
    assert [s.per_gpu_bytes for s in fp.sequences] == [42 * block, 538 * block, 4122 * block]
    tp8 = kv_footprint(m, [4096], tp=8)  # nothing is split: each rank holds it all
    assert tp8.sequences[0].per_gpu_bytes == 42 * block
    assert tp8.sequences[0].total_bytes == 8 * 42 * block
    assert kv_footprint(m, [1], kv_dtype="fp8").kv_dtype == "fp8_ds_mla"
    with pytest.raises(InputError, match="stores DeepSeek-V4's caches as fp8_ds_mla"):
        kv_footprint(m, [1], kv_dtype="bf16")
    with pytest.raises(InputError, match="for vLLM 0.27 and newer only"):
        kv_footprint(m, [1], engine="vllm@0.22")
    with pytest.raises(InputError, match="for vLLM 0.27 and newer only"):
        kv_footprint(m, [1], engine="sglang")


@covers("deepseek-ai__DeepSeek-V4-Pro.json")
def test_deepseek_v4_pro():
    m = load("deepseek-ai__DeepSeek-V4-Pro.json")
    ratios = m.config["compress_ratios"][:61]
    assert (ratios.count(4), ratios.count(128)) == (30, 31)  # 61 layers, no window-only layer
    block = 30 * (pad576(64 * ROW) + pad576(64 * 132)) + 31 * pad576(2 * ROW)
    assert block == 1_435_968
    fp = kv_footprint(m, [4096, 131072, 1048576])
    # 61 window caches in groups of 31 (30, 61, 30, 31 pad least at 31): 2 groups
    assert [s.per_gpu_bytes for s in fp.sequences] == [v4_blocks(n, 2) * block
                                                       for n in (4096, 131072, 1048576)]
    assert fp.sequences[1].per_gpu_bytes == (534 + 4) * block


# --------------------------------------------------------------------------------------------
# Wrappers, aliases and 2025-2026 plain decoders
# --------------------------------------------------------------------------------------------


@covers("Qwen__Qwen3-VL-30B-A3B-Instruct.json")
def test_qwen3_vl_moe_text_config():
    m = load("Qwen__Qwen3-VL-30B-A3B-Instruct.json")
    # text_config qwen3_vl_moe_text: 48 layers, 4 KV heads x head_dim 128
    assert m.model_type == "qwen3_vl_moe_text"
    assert kv_footprint(m, [1]).bytes_per_token == 48 * 2 * 4 * 128 * BF16 == 98_304
    # TP 8: 4 KV heads replicated, 1 per rank: 512 B per layer
    assert kv_footprint(m, [1], tp=8).layers[0].bytes_per_token_per_rank == 2 * 1 * 128 * BF16


@covers("Qwen__Qwen3-VL-8B-Instruct.json")
def test_qwen3_vl_text_config():
    m = load("Qwen__Qwen3-VL-8B-Instruct.json")
    # text_config qwen3_vl_text: 36 layers, 8 KV heads x head_dim 128
    assert m.model_type == "qwen3_vl_text"
    assert kv_footprint(m, [1]).bytes_per_token == 36 * 2 * 8 * 128 * BF16 == 147_456


@covers("zai-org__GLM-4.7-FP8.json")
def test_glm47_is_plain_gqa():
    m = load("zai-org__GLM-4.7-FP8.json")
    # glm4_moe: 92 layers, 8 KV heads x head_dim 128 (vLLM glm4_moe.py: plain GQA)
    assert kv_footprint(m, [1]).bytes_per_token == 92 * 2 * 8 * 128 * BF16 == 376_832


@covers("OpenGVLab__InternVL3-1B-Pretrained__transformers-repr.json")
def test_internvl_llm_config_wrapper():
    m = load("OpenGVLab__InternVL3-1B-Pretrained__transformers-repr.json")
    # the language model sits under llm_config (qwen2): 24 layers, 2 KV heads x 896 / 14 = 64
    assert m.model_type == "qwen2"
    assert kv_footprint(m, [1]).bytes_per_token == 24 * 2 * 2 * 64 * BF16 == 12_288
    with pytest.raises(Exception, match=r"attention heads \(14\) must divide by tp \(8\)"):
        kv_footprint(m, [1], tp=8)


def test_step3_text_one_kv_head_everywhere():
    """A rule test on a config built from vLLM's Step3TextConfig defaults (no published
    config.json was found): one KV head of 256 on every rank, whatever the TP degree."""
    cfg = {"model_type": "step3_text", "hidden_size": 7168, "num_attention_heads": 64,
           "num_attention_groups": 1, "num_hidden_layers": 61, "head_dim": 256,
           "share_q_dim": 2048, "vocab_size": 128815, "torch_dtype": "bfloat16"}
    m = load("x.json", cfg)
    for tp in (1, 8):
        assert kv_footprint(m, [1], tp=tp).layers[0].bytes_per_token_per_rank == 1 * 512 * BF16
    assert kv_footprint(m, [1]).bytes_per_token == 61 * 1024 == 62_464
    with pytest.raises(Exception, match="num_attention_groups: vLLM's step3_text serves one KV head"):
        load("x.json", {**cfg, "num_attention_groups": 4})


def test_olmo_head_width_and_hunyuan_cla_rules():
    base = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 2, "vocab_size": 100, "torch_dtype": "bfloat16"}
    m = load("x.json", {**base, "model_type": "olmo3"})
    assert kv_footprint(m, [1]).bytes_per_token == 2 * 2 * 8 * 128 * BF16  # 4096 / 32 = 128
    with pytest.raises(Exception, match="head_dim: 256 differs from hidden_size / "
                       "num_attention_heads = 128, which vLLM's OLMo uses"):
        load("x.json", {**base, "model_type": "olmo3", "head_dim": 256})
    with pytest.raises(Exception, match="use_cla: cross-layer attention"):
        load("x.json", {**base, "model_type": "hunyuan_v1_dense", "use_cla": True,
                        "cla_share_factor": 2})
    plain = load("x.json", {**base, "model_type": "hunyuan_v1_dense", "use_cla": False})
    assert kv_footprint(plain, [1]).bytes_per_token == 2 * 2 * 8 * 128 * BF16


@covers("Qwen__Qwen3-235B-A22B-FP8.json")
def test_qwen3_235b_fp8_checkpoint_keeps_bf16_kv():
    m = load("Qwen__Qwen3-235B-A22B-FP8.json")
    # quant_method fp8 declares no KV scheme: auto stays bf16; 94 layers x 4 KV heads x 128
    fp = kv_footprint(m, [1])
    assert fp.kv_dtype == "bf16" and fp.bytes_per_token == 94 * 2 * 4 * 128 * BF16 == 192_512


@covers("moonshotai__Kimi-K2.5.json")
def test_kimi_k25_wrapper_is_mla():
    m = load("moonshotai__Kimi-K2.5.json")
    # kimi_k25 wraps a kimi_k2 text_config: 61 MLA layers of 512 + 64
    assert m.model_type == "kimi_k2" and kinds(m) == [("mla",)] * 61
    assert kv_footprint(m, [1]).bytes_per_token == 61 * LATENT * BF16 == 70_272


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file and key, exit 2
# --------------------------------------------------------------------------------------------

BAD = [
    # (fixture, change to the text config, the key the line names, what it says)
    ("google__gemma-4-26B-A4B.json", {"layer_types": ["sliding_attention"] * 29},
     "text_config.layer_types", "has 29 entries for 30 layers"),
    ("XiaomiMiMo__MiMo-V2-Flash.json", {"hybrid_layer_pattern": [0, 1]},
     "hybrid_layer_pattern", "has 2 entries for 48 layers"),
    ("zai-org__GLM-5.2.json", {"index_topk_pattern": "S" * 78},
     "index_topk_pattern", "selects no layer for an indexer"),
    ("google__gemma-3n-E4B.json", {"num_kv_shared_layers": 40},
     "text_config.num_kv_shared_layers", "40 shared layers leave none of the 35 layers"),
    ("Qwen__Qwen3.5-27B.json", {"mamba_ssm_dtype": "float7"},
     "text_config.mamba_ssm_dtype", "unknown dtype 'float7'"),
    ("deepseek-ai__DeepSeek-V4-Flash.json", {"compress_ratios": [0, 4]},
     "compress_ratios", "expected 43 entries"),
    ("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json", {"block_configs": []},
     "block_configs", "has 0 entries for 80 layers"),
    ("MiniMaxAI__MiniMax-M1.json", {"attn_type_list": [0, 2] * 40},
     "attn_type_list[1]", "expected 0 (lightning) or 1 (softmax), got 2"),
]


@pytest.mark.parametrize("name,change,key,says", BAD, ids=[b[0] + ":" + b[2] for b in BAD])
def test_bad_per_layer_input_is_one_line_exit_2(tmp_path, capsys, name, change, key, says):
    import json

    from family_helpers import raw

    from kvplan.cli.main import run

    cfg = raw(name)
    if "text_config" in cfg and not cfg.get("num_hidden_layers"):
        cfg = {**cfg, "text_config": {**cfg["text_config"], **change}}
    else:
        cfg = {**cfg, **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert run(["size", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"kvplan: error: {path}: {key}: ") and says in err
