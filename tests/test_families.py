"""One test per fixture config: layer kinds/counts in order, KV heads, head dims, windows,
bytes per token and recurrent-state bytes, with every expected value derived by hand from the
config's own numbers (the arithmetic is written out; nothing is pasted from the code's output).

Conventions checked (see kvplan/planning/footprint.py, kvplan/engines/*.py, docs/engines-research.md):
- a row's ``bytes_per_token`` / ``state_bytes`` is ONE layer; ``fp.bytes_per_token`` is the whole
  model, growing layers only (full attention + MLA); ``fp.state_bytes_per_sequence`` the whole
  model.
- vLLM keeps ``d_conv - 1`` conv columns, HF keeps ``d_conv``; vLLM runs fp32 checkpoints in
  bf16 under ``auto``; vLLM nemotron_h SSM state is fp32; HF qwen3_next recurrent state is fp32.
"""

from __future__ import annotations

import pytest
from family_helpers import (
    BF16,
    CONFIGS,
    COVERED,
    FP16,
    FP32,
    cdiv,
    check_attn,
    check_state,
    covers,
    kinds,
    load,
    raw,
    row,
)

from kvplan.core.errors import InputError
from kvplan.core.tokens import chunked_blocks_at, chunked_blocks_peak, sliding_blocks_peak
from kvplan.planning.footprint import kv_footprint

# --------------------------------------------------------------------------------------------
# Dense decoders (MHA / GQA / MQA), every layer full attention
# --------------------------------------------------------------------------------------------

DENSE = [
    # (fixture, layers, kv heads, head_dim, bytes/elem), each from the config (comment = fields)
    # Llama-2-7b: num_hidden_layers 32, num_key_value_heads 32 (MHA), 4096/32 = 128, float16
    ("meta-llama__Llama-2-7b-hf.json", 32, 32, 4096 // 32, FP16),
    # Llama-2-70b: 80 layers, 8 KV heads, 8192/64 = 128, float16
    ("meta-llama__Llama-2-70b-hf.json", 80, 8, 8192 // 64, FP16),
    # Llama-3.3-70B-Instruct: 80 layers, 8 KV heads, 8192/64 = 128, bfloat16
    ("meta-llama__Llama-3.3-70B-Instruct.json", 80, 8, 8192 // 64, BF16),
    # Meta-Llama-3-70B-Instruct: 80 layers, 8 KV heads, 8192/64 = 128, bfloat16
    ("meta-llama__Meta-Llama-3-70B-Instruct.json", 80, 8, 8192 // 64, BF16),
    # Meta-Llama-3-8B: 32 layers, 8 KV heads, head_dim 128 (explicit), bfloat16
    ("meta-llama__Meta-Llama-3-8B.json", 32, 8, 128, BF16),
    # Llama-3.2-1B: 16 layers, 8 KV heads, head_dim 64 (explicit; 2048/32 = 64), bfloat16
    ("meta-llama__Llama-3.2-1B.json", 16, 8, 64, BF16),
    # Mixtral-8x7B (MoE parses as plain attention; sliding_window null): 32 layers, 8 KV, 4096/32
    ("mistralai__Mixtral-8x7B-v0.1.json", 32, 8, 4096 // 32, BF16),
    # Qwen2.5-7B-Instruct: 28 layers, 4 KV heads, 3584/28 = 128, use_sliding_window false
    ("Qwen__Qwen2.5-7B-Instruct.json", 28, 4, 3584 // 28, BF16),
    # Qwen2-72B: 80 layers, 8 KV, 8192/64 = 128; sliding_window 131072 but use_sliding_window false
    ("Qwen__Qwen2-72B.json", 80, 8, 8192 // 64, BF16),
    # Qwen3-8B: 36 layers, 8 KV heads, head_dim 128 (explicit), bfloat16
    ("Qwen__Qwen3-8B.json", 36, 8, 128, BF16),
    # Qwen3-30B-A3B (MoE): 48 layers, 4 KV heads, head_dim 128 (explicit; NOT 2048/32 = 64)
    ("Qwen__Qwen3-30B-A3B.json", 48, 4, 128, BF16),
    # falcon-7b: legacy n_layer 32, n_head 71, multi_query true -> 1 KV head, 4544/71 = 64
    ("tiiuae__falcon-7b.json", 32, 1, 4544 // 71, BF16),
    # falcon-40b-instruct: 60 layers, new_decoder_architecture -> num_kv_heads 8, 8192/128 = 64
    ("tiiuae__falcon-40b-instruct.json", 60, 8, 8192 // 128, BF16),
    # Meta-Llama-3-70B (base): 80 layers, 8 KV heads, 8192/64 = 128, bfloat16
    ("meta-llama__Meta-Llama-3-70B.json", 80, 8, 8192 // 64, BF16),
    # llama-65b: 80 layers, no num_key_value_heads -> MHA 64 KV heads, 8192/64 = 128, float16
    ("huggyllama__llama-65b.json", 80, 64, 8192 // 64, FP16),
    # Llama-3.1-8B: 32 layers, 8 KV heads, 4096/32 = 128, bfloat16
    ("meta-llama__Llama-3.1-8B.json", 32, 8, 4096 // 32, BF16),
    # Llama-3.1-70B: 80 layers, 8 KV heads, 8192/64 = 128, bfloat16
    ("meta-llama__Llama-3.1-70B.json", 80, 8, 8192 // 64, BF16),
    # Llama-3.1-405B: 126 layers, 8 KV heads, 16384/128 = 128, bfloat16
    ("meta-llama__Llama-3.1-405B.json", 126, 8, 16384 // 128, BF16),
    # Mixtral-8x22B (MoE, sliding_window null): 56 layers, 8 KV heads, 6144/48 = 128
    ("mistralai__Mixtral-8x22B-v0.1.json", 56, 8, 6144 // 48, BF16),
    # gemma-7b: 28 layers, 16 KV heads, head_dim 256 (explicit; NOT 3072/16 = 192)
    ("google__gemma-7b.json", 28, 16, 256, BF16),
    # command-r-v01 (cohere): 40 layers, 64 KV heads, 8192/64 = 128, float16
    ("CohereForAI__c4ai-command-r-v01.json", 40, 64, 8192 // 64, FP16),
    # gpt-neox-20b: 44 layers, no KV-head key -> MHA 64, 6144/64 = 96, float16
    ("EleutherAI__gpt-neox-20b.json", 44, 64, 6144 // 64, FP16),
    # llava-1.5-7b: text_config names only model_type llama + float16 -> LlamaConfig defaults:
    # 32 layers, 32 heads = 32 KV heads, hidden 4096 -> 4096/32 = 128
    ("llava-hf__llava-1.5-7b-hf.json", 32, 32, 4096 // 32, FP16),
    # Qwen2-VL-7B (qwen2_vl): 28 layers, 4 KV heads, 3584/28 = 128, use_sliding_window false
    ("Qwen__Qwen2-VL-7B-Instruct.json", 28, 4, 3584 // 28, BF16),
    # Qwen1.5-MoE-A2.7B (qwen2_moe): 24 layers, 16 KV heads, 2048/16 = 128,
    # use_sliding_window false
    ("Qwen__Qwen1.5-MoE-A2.7B.json", 24, 16, 2048 // 16, BF16),
    # Qwen3-235B-A22B (qwen3_moe): 94 layers, 4 KV heads, head_dim 128 (explicit; 4096/64 = 64)
    ("Qwen__Qwen3-235B-A22B.json", 94, 4, 128, BF16),
    # Qwen2.5-72B-Instruct: 80 layers, 8 KV, 8192/64 = 128; sliding_window 131072 and
    # max_window_layers 70 but use_sliding_window false -> no layer slides
    ("Qwen__Qwen2.5-72B-Instruct.json", 80, 8, 8192 // 64, BF16),
    # falcon-180B: 80 layers, new_decoder_architecture -> num_kv_heads 8, 14848/232 = 64
    ("tiiuae__falcon-180B.json", 80, 8, 14848 // 232, BF16),
]
covers(*(d[0] for d in DENSE))


@pytest.mark.parametrize("fname,layers,kv,hd,nbytes", DENSE, ids=[d[0] for d in DENSE])
@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_dense_full_attention(fname, layers, kv, hd, nbytes, engine):
    m = load(fname)
    assert kinds(m) == [("full_attention",)] * layers
    fp = kv_footprint(m, contexts=(4096,), engine=engine)
    # K and V x kv heads x head_dim x bytes, one layer
    check_attn(row(fp, "full_attention"), count=layers, kv_heads=kv, head_dim=hd, window=None,
               bytes_per_token=2 * kv * hd * nbytes)
    assert fp.bytes_per_token == 2 * layers * kv * hd * nbytes
    assert fp.state_bytes_per_sequence == 0
    # 4096 tokens = 256 whole blocks of 16 in vLLM, unpaged in HF: no rounding either way
    assert fp.sequences[0].total_bytes == 4096 * 2 * layers * kv * hd * nbytes


def test_llama33_70b_spelled_out():
    m = load("meta-llama__Llama-3.3-70B-Instruct.json")
    fp = kv_footprint(m, contexts=(4096, 32768), engine="vllm")
    # Llama-3.3-70B: num_hidden_layers 80, num_key_value_heads 8, head_dim = 8192/64 = 128, bf16
    # K and V x layers x kv heads x head_dim x 2 B
    assert fp.bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert fp.sequences[1].total_bytes == 32768 * 2 * 80 * 8 * 128 * 2
    # fp8 KV: 1 byte per element
    fp8 = kv_footprint(m, contexts=(4096,), engine="vllm", kv_dtype="fp8")
    assert fp8.bytes_per_token == 2 * 80 * 8 * 128 * 1


def test_falcon_kv_head_traps():
    # falcon-7b: n_head 71 and multi_query true, no num_kv_heads key -> MQA, one KV head
    c7 = raw("tiiuae__falcon-7b.json")
    assert "num_kv_heads" not in c7 and c7["multi_query"] is True
    (spec,) = load("tiiuae__falcon-7b.json").layers[0]
    assert (spec.num_attention_heads, spec.num_kv_heads) == (71, 1)
    # falcon-40b: new_decoder_architecture true -> num_kv_heads 8 (multi_query true is ignored)
    c40 = raw("tiiuae__falcon-40b-instruct.json")
    assert c40["new_decoder_architecture"] is True and c40["multi_query"] is True
    (spec,) = load("tiiuae__falcon-40b-instruct.json").layers[0]
    assert (spec.num_attention_heads, spec.num_kv_heads) == (128, 8)


def test_qwen_use_sliding_window_false_ignores_window():
    # Qwen2-72B: sliding_window 131072, max_window_layers 80, use_sliding_window false -> all full
    c = raw("Qwen__Qwen2-72B.json")
    assert c["sliding_window"] == 131072 and c["use_sliding_window"] is False
    assert kinds(load("Qwen__Qwen2-72B.json")) == [("full_attention",)] * 80
    # Qwen2.5-7B as officially published: sliding_window 131072 with use_sliding_window false
    c = raw("Qwen__Qwen2.5-7B-Instruct.json")
    c["sliding_window"] = 131072
    assert kinds(load("Qwen__Qwen2.5-7B-Instruct.json", c)) == [("full_attention",)] * 28
    # even with use_sliding_window true, only layers i >= max_window_layers (28) slide: none of 28
    c["use_sliding_window"] = True
    assert kinds(load("Qwen__Qwen2.5-7B-Instruct.json", c)) == [("full_attention",)] * 28
    # with max_window_layers 20, layers 20..27 slide
    c["max_window_layers"] = 20
    assert kinds(load("Qwen__Qwen2.5-7B-Instruct.json", c)) == (
        [("full_attention",)] * 20 + [("sliding_window",)] * 8)


# --------------------------------------------------------------------------------------------
# Sliding window everywhere (sliding_window set, no layer_types)
# --------------------------------------------------------------------------------------------


@covers("mistralai__Mistral-7B-v0.1.json")
def test_mistral_7b_every_layer_slides():
    m = load("mistralai__Mistral-7B-v0.1.json")
    assert "layer_types" not in m.config
    # Mistral-7B-v0.1: 32 layers, sliding_window 4096 and no layer_types -> every layer slides
    assert kinds(m) == [("sliding_window",)] * 32
    per_layer = 2 * 8 * (4096 // 32) * 2  # K+V x 8 KV heads x 4096/32 = 128 x bf16
    n = 32768
    v = kv_footprint(m, contexts=(n, 1000), engine="vllm")
    check_attn(row(v, "sliding_window"), count=32, kv_heads=8, head_dim=128, window=4096,
               bytes_per_token=per_layer)
    assert v.bytes_per_token == 0  # no growing layer
    # vLLM block 16: worst case cdiv(min(n, 4095 + 15), 16) = 257 blocks = 257 * 16 tokens
    assert sliding_blocks_peak(n, 4096 - 1, 16) == cdiv(4095 + 15, 16) == 257
    assert v.sequences[0].total_bytes == 32 * 257 * 16 * per_layer
    # below the window every token is kept: cdiv(1000, 16) = 63 blocks
    assert v.sequences[1].total_bytes == 32 * cdiv(1000, 16) * 16 * per_layer
    # HF DynamicSlidingWindowLayer keeps sliding_window - 1 = 4095 tokens
    h = kv_footprint(m, contexts=(n, 1000), engine="hf")
    assert h.sequences[0].total_bytes == 32 * 4095 * per_layer
    assert h.sequences[1].total_bytes == 32 * 1000 * per_layer


@covers("microsoft__Phi-3-medium-4k-instruct.json")
def test_phi3_medium_every_layer_slides():
    m = load("microsoft__Phi-3-medium-4k-instruct.json")
    # Phi-3-medium: 40 layers, sliding_window 2047 (no layer_types) -> all slide
    assert kinds(m) == [("sliding_window",)] * 40
    fp = kv_footprint(m, contexts=(4096,), engine="vllm")
    # 10 KV heads, head_dim 5120/40 = 128, bf16
    check_attn(row(fp, "sliding_window"), count=40, kv_heads=10, head_dim=5120 // 40,
               window=2047, bytes_per_token=2 * 10 * 128 * 2)
    assert fp.bytes_per_token == 0
    # vLLM keeps window - 1 = 2046 tokens, worst case cdiv(2046 + 15, 16) = 129 blocks
    assert fp.sequences[0].total_bytes == 40 * cdiv(2046 + 15, 16) * 16 * (2 * 10 * 128 * 2)
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    assert h.sequences[0].total_bytes == 40 * 2046 * (2 * 10 * 128 * 2)


@covers("microsoft__Phi-3-mini-4k-instruct.json")
def test_phi3_mini_every_layer_slides():
    m = load("microsoft__Phi-3-mini-4k-instruct.json")
    # Phi-3-mini: 32 layers, sliding_window 2047 -> all slide; 32 KV heads, 3072/32 = 96, bf16
    assert kinds(m) == [("sliding_window",)] * 32
    fp = kv_footprint(m, contexts=(1000, 4096), engine="vllm")
    check_attn(row(fp, "sliding_window"), count=32, kv_heads=32, head_dim=3072 // 32,
               window=2047, bytes_per_token=2 * 32 * 96 * 2)
    assert fp.bytes_per_token == 0
    assert fp.sequences[0].total_bytes == 32 * cdiv(1000, 16) * 16 * (2 * 32 * 96 * 2)
    assert fp.sequences[1].total_bytes == 32 * cdiv(2046 + 15, 16) * 16 * (2 * 32 * 96 * 2)


# --------------------------------------------------------------------------------------------
# Interleaved sliding / full
# --------------------------------------------------------------------------------------------


@covers("google__gemma-2-9b.json")
def test_gemma2_9b_even_layers_slide():
    m = load("google__gemma-2-9b.json")
    # gemma2: layer i slides when (i + 1) % 2 != 0, i.e. even indices; 42 layers
    assert kinds(m) == [("sliding_window",) if i % 2 == 0 else ("full_attention",)
                        for i in range(42)]
    fp = kv_footprint(m, contexts=(8192,), engine="vllm")
    # 8 KV heads, head_dim 256 (explicit; NOT 3584/16 = 224), bf16; 21 sliding + 21 full layers
    per_layer = 2 * 8 * 256 * 2
    check_attn(row(fp, "full_attention"), count=21, kv_heads=8, head_dim=256, window=None,
               bytes_per_token=per_layer)
    check_attn(row(fp, "sliding_window"), count=21, kv_heads=8, head_dim=256, window=4096,
               bytes_per_token=per_layer)
    assert fp.bytes_per_token == 2 * 21 * 8 * 256 * 2
    # n = 8192: full layers 512 blocks; sliding layers cdiv(4095 + 15, 16) = 257 blocks
    assert fp.sequences[0].total_bytes == (21 * 8192 + 21 * 257 * 16) * per_layer


@covers("google__gemma-2-27b-it.json")
def test_gemma2_27b_even_layers_slide():
    m = load("google__gemma-2-27b-it.json")
    # gemma2, 46 layers: even indices slide (window 4096), odd full -> 23 + 23
    assert kinds(m) == [("sliding_window",) if i % 2 == 0 else ("full_attention",)
                        for i in range(46)]
    fp = kv_footprint(m, contexts=(4096,), engine="vllm")
    # 16 KV heads, head_dim 128 (explicit; NOT 4608/32 = 144), bf16
    check_attn(row(fp, "full_attention"), count=23, kv_heads=16, head_dim=128, window=None,
               bytes_per_token=2 * 16 * 128 * 2)
    check_attn(row(fp, "sliding_window"), count=23, kv_heads=16, head_dim=128, window=4096,
               bytes_per_token=2 * 16 * 128 * 2)
    assert fp.bytes_per_token == 2 * 23 * 16 * 128 * 2


GEMMA3 = [
    # (fixture, layers, KV heads, head_dim, window); sliding_window_pattern 6 (default or explicit):
    # layer i is full when (i + 1) % 6 == 0, the rest slide
    # gemma-3-27b-it: text_config 62 layers, 16 KV heads, head_dim 128, sliding_window 1024
    ("google__gemma-3-27b-it.json", 62, 16, 128, 1024),
    # gemma-3-4b-it: text_config 34 layers, 4 KV heads, head_dim 256, sliding_window 1024
    ("google__gemma-3-4b-it.json", 34, 4, 256, 1024),
    # gemma-3-1b-it (gemma3_text, sliding_window_pattern 6): 26 layers, 1 KV head, 256, window 512
    ("google__gemma-3-1b-it.json", 26, 1, 256, 512),
]
covers(*(d[0] for d in GEMMA3))


@pytest.mark.parametrize("fname,layers,kv,hd,window", GEMMA3, ids=[d[0] for d in GEMMA3])
def test_gemma3_five_local_one_global(fname, layers, kv, hd, window):
    m = load(fname)
    assert kinds(m) == [("full_attention",) if (i + 1) % 6 == 0 else ("sliding_window",)
                        for i in range(layers)]
    n_full = layers // 6  # 62 -> 10, 34 -> 5, 26 -> 4
    fp = kv_footprint(m, contexts=(8192,), engine="vllm")
    check_attn(row(fp, "full_attention"), count=n_full, kv_heads=kv, head_dim=hd, window=None,
               bytes_per_token=2 * kv * hd * 2)
    check_attn(row(fp, "sliding_window"), count=layers - n_full, kv_heads=kv, head_dim=hd,
               window=window, bytes_per_token=2 * kv * hd * 2)
    assert fp.bytes_per_token == 2 * n_full * kv * hd * 2  # wrapper torch_dtype bfloat16
    # n = 8192: full layers 512 blocks; sliding layers cdiv(window - 1 + 15, 16) blocks
    assert fp.sequences[0].total_bytes == (
        n_full * 8192 + (layers - n_full) * cdiv(window - 1 + 15, 16) * 16) * (2 * kv * hd * 2)
    h = kv_footprint(m, contexts=(8192,), engine="hf")
    assert h.sequences[0].total_bytes == (
        n_full * 8192 + (layers - n_full) * (window - 1)) * (2 * kv * hd * 2)


@covers("CohereForAI__c4ai-command-r7b-12-2024.json")
def test_cohere2_command_r7b_pattern_4():
    m = load("CohereForAI__c4ai-command-r7b-12-2024.json")
    # cohere2, sliding_window_pattern 4: layer i full when (i + 1) % 4 == 0; 32 layers -> 8 full
    assert kinds(m) == [("full_attention",) if (i + 1) % 4 == 0 else ("sliding_window",)
                        for i in range(32)]
    fp = kv_footprint(m, contexts=(4096,), engine="vllm")
    # 8 KV heads, head_dim 128, sliding_window 4096, bf16
    check_attn(row(fp, "full_attention"), count=8, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=2 * 8 * 128 * 2)
    check_attn(row(fp, "sliding_window"), count=24, kv_heads=8, head_dim=128, window=4096,
               bytes_per_token=2 * 8 * 128 * 2)
    assert fp.bytes_per_token == 2 * 8 * 8 * 128 * 2


@covers("openai__gpt-oss-120b.json")
def test_gpt_oss_120b_layer_types():
    c = raw("openai__gpt-oss-120b.json")
    assert c["layer_types"] == ["sliding_attention" if i % 2 == 0 else "full_attention"
                                for i in range(36)]
    m = load("openai__gpt-oss-120b.json")
    assert kinds(m) == [("sliding_window",) if i % 2 == 0 else ("full_attention",)
                        for i in range(36)]
    fp = kv_footprint(m, contexts=(4096,), engine="vllm")
    # 36 layers -> 18 + 18; 8 KV heads, head_dim 64, sliding_window 128, bfloat16
    check_attn(row(fp, "full_attention"), count=18, kv_heads=8, head_dim=64, window=None,
               bytes_per_token=2 * 8 * 64 * 2)
    check_attn(row(fp, "sliding_window"), count=18, kv_heads=8, head_dim=64, window=128,
               bytes_per_token=2 * 8 * 64 * 2)
    assert fp.bytes_per_token == 2 * 18 * 8 * 64 * 2


@covers("openai__gpt-oss-20b.json")
def test_gpt_oss_20b_layer_types():
    c = raw("openai__gpt-oss-20b.json")
    # layer_types: sliding_attention at even indices, full_attention at odd, 24 layers
    assert c["layer_types"] == ["sliding_attention" if i % 2 == 0 else "full_attention"
                                for i in range(24)]
    m = load("openai__gpt-oss-20b.json")
    assert kinds(m) == [("sliding_window",) if i % 2 == 0 else ("full_attention",)
                        for i in range(24)]
    fp = kv_footprint(m, contexts=(4096,), engine="vllm")
    # 8 KV heads, head_dim 64, sliding_window 128, no torch_dtype -> bf16 (the MXFP4 is weights)
    per_layer = 2 * 8 * 64 * 2
    check_attn(row(fp, "full_attention"), count=12, kv_heads=8, head_dim=64, window=None,
               bytes_per_token=per_layer)
    check_attn(row(fp, "sliding_window"), count=12, kv_heads=8, head_dim=64, window=128,
               bytes_per_token=per_layer)
    assert fp.bytes_per_token == 2 * 12 * 8 * 64 * 2
    # sliding: cdiv(127 + 15, 16) = 9 blocks; full: 4096 / 16 = 256 blocks
    assert fp.sequences[0].total_bytes == (12 * 4096 + 12 * cdiv(127 + 15, 16) * 16) * per_layer
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    assert h.sequences[0].total_bytes == (12 * 4096 + 12 * 127) * per_layer


@covers("meta-llama__Llama-4-Scout-17B-16E-Instruct.json")
def test_llama4_scout_chunked():
    m = load("meta-llama__Llama-4-Scout-17B-16E-Instruct.json")
    # text_config: 48 layers, attention_chunk_size 8192, no no_rope_layers -> default interval 4:
    # layer i is NoPE/global when (i + 1) % 4 == 0 (3, 7, 11, ...), the rest chunked
    assert kinds(m) == [("full_attention",) if (i + 1) % 4 == 0 else ("chunked_local",)
                        for i in range(48)]
    per_layer = 2 * 8 * 128 * 2  # K+V x 8 KV heads x head_dim 128 x bf16
    n = 20000
    v = kv_footprint(m, contexts=(n, 5000), engine="vllm")
    check_attn(row(v, "full_attention"), count=12, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=per_layer)
    check_attn(row(v, "chunked_local"), count=36, kv_heads=8, head_dim=128, window=8192,
               bytes_per_token=per_layer)
    assert v.bytes_per_token == 2 * 12 * 8 * 128 * 2
    # vLLM at exactly n = 20000: current chunk [16384, 20000) = 3616 tokens = 226 whole blocks
    assert chunked_blocks_at(n, 8192, 16) == cdiv(20000 - 2 * 8192, 16) == 226
    # but kv_footprint reports the PEAK up to n: chunk [0, 8191) = cdiv(8191, 16) = 512 blocks
    assert chunked_blocks_peak(n, 8192, 16) == cdiv(8191, 16) == 512
    assert row(v, "chunked_local").held_tokens(n, 16, v.engine) == 512 * 16
    # full layers: 20000 / 16 = 1250 blocks exactly
    assert v.sequences[0].total_bytes == (12 * 20000 + 36 * 512 * 16) * per_layer
    # n = 5000 < one chunk: all layers hold cdiv(5000, 16) = 313 blocks
    assert v.sequences[1].total_bytes == 48 * cdiv(5000, 16) * 16 * per_layer
    # HF: chunked layers are sliding windows of chunk - 1 = 8191 tokens
    h = kv_footprint(m, contexts=(n, 5000), engine="hf")
    assert h.sequences[0].total_bytes == (12 * 20000 + 36 * 8191) * per_layer
    assert h.sequences[1].total_bytes == 48 * 5000 * per_layer


# --------------------------------------------------------------------------------------------
# MLA (DeepSeek-V2/V3/R1, Kimi-K2)
# --------------------------------------------------------------------------------------------

MLA = [
    # (fixture, layers (MTP layers excluded), attention heads); all: kv_lora_rank 512,
    # qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, bf16
    ("deepseek-ai__DeepSeek-V3.json", 61, 128),  # num_nextn_predict_layers 1 not counted
    ("deepseek-ai__DeepSeek-R1.json", 61, 128),
    ("deepseek-ai__DeepSeek-V2.json", 60, 128),
    ("moonshotai__Kimi-K2-Instruct.json", 61, 64),
    ("deepseek-ai__DeepSeek-V2-Lite.json", 27, 16),  # q_lora_rank null (no effect on the cache)
]
covers(*(d[0] for d in MLA))


@pytest.mark.parametrize("fname,layers,heads", MLA, ids=[d[0] for d in MLA])
def test_mla(fname, layers, heads):
    c = raw(fname)
    assert (c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]) == (
        512, 64, 128, 128)
    m = load(fname)
    assert kinds(m) == [("mla",)] * layers
    latent_bytes = (512 + 64) * 2  # (kv_lora_rank + qk_rope_head_dim) x bf16, one copy, no K/V pair
    # vLLM caches the latent for every MLA model; transformers 5.x only for deepseek_v3
    # (DeepseekV3Attention since PR #47761); deepseek_v2 and kimi_k2 (remote code) decompress.
    latent_engines = ("vllm", "hf") if c["model_type"] == "deepseek_v3" else ("vllm",)
    for engine in latent_engines:
        fp = kv_footprint(m, contexts=(4096,), engine=engine)
        # vLLM: one latent vector; transformers 5: k_pass (512) as keys, k_rot (64) as values
        dims = (512 + 64, None) if engine == "vllm" else (512, 64)
        check_attn(row(fp, "mla"), count=layers, kv_heads=1, head_dim=dims[0], window=None,
                   bytes_per_token=latent_bytes, head_dim_v=dims[1])
        assert fp.bytes_per_token == (512 + 64) * 2 * layers
        assert fp.sequences[0].total_bytes == 4096 * (512 + 64) * 2 * layers
    # transformers 4.x caches decompressed K = heads x (nope + rope), V = heads x v_head_dim
    d = kv_footprint(m, contexts=(4096,), engine="hf@4")
    if c["model_type"] != "deepseek_v3":
        assert kv_footprint(m, contexts=(4096,), engine="hf").bytes_per_token == d.bytes_per_token
    dec_bytes = (heads * (128 + 64) + heads * 128) * 2
    check_attn(row(d, "mla"), count=layers, kv_heads=heads, head_dim=128 + 64, window=None,
               bytes_per_token=dec_bytes, head_dim_v=128)
    assert d.bytes_per_token == (heads * (128 + 64) + heads * 128) * 2 * layers
    assert d.bytes_per_token / fp.bytes_per_token == pytest.approx(
        (heads * 192 + heads * 128) / 576)


def test_deepseek_v3_decompressed_ratio_about_71x():
    m = load("deepseek-ai__DeepSeek-V3.json")
    latent = kv_footprint(m, contexts=(1,), engine="vllm").bytes_per_token
    dec = kv_footprint(m, contexts=(1,), engine="hf@4").bytes_per_token
    # 61 layers x (512 + 64) x 2 B vs 61 x (128 x 192 + 128 x 128) x 2 B: 40960 / 576 = 71.1x
    assert latent == 61 * (512 + 64) * 2
    assert dec == 61 * (128 * (128 + 64) + 128 * 128) * 2
    assert float(dec / latent) == pytest.approx(71.11, abs=0.01)


# --------------------------------------------------------------------------------------------
# Pure state-space models
# --------------------------------------------------------------------------------------------


def _mamba1_state(d_inner, d_state, d_conv, cols_dropped, nbytes):
    # conv (d_conv - dropped) columns x d_inner channels + ssm d_inner x d_state
    return (d_conv - cols_dropped) * d_inner * nbytes + d_inner * d_state * nbytes


MAMBA1 = [
    # (fixture, layers, d_inner, d_state, d_conv, vLLM bytes, HF bytes)
    # mamba-130m: num_hidden_layers 24, intermediate_size 1536, state_size 16, conv_kernel 4,
    # float32 -> vLLM runs it in bf16, HF keeps fp32
    ("state-spaces__mamba-130m-hf.json", 24, 1536, 16, 4, BF16, FP32),
    # mamba-2.8b: 64 layers, intermediate_size 5120, state_size 16, conv_kernel 4, float32
    ("state-spaces__mamba-2.8b-hf.json", 64, 5120, 16, 4, BF16, FP32),
    # falcon-mamba-7b: 64 layers, intermediate_size 8192 (wins over expand 16), state 16, conv 4,
    # bfloat16
    ("tiiuae__falcon-mamba-7b.json", 64, 8192, 16, 4, BF16, BF16),
]
covers(*(d[0] for d in MAMBA1))


@pytest.mark.parametrize("fname,layers,d_inner,d_state,d_conv,vb,hb", MAMBA1,
                         ids=[d[0] for d in MAMBA1])
def test_mamba1(fname, layers, d_inner, d_state, d_conv, vb, hb):
    m = load(fname)
    assert kinds(m) == [("mamba",)] * layers
    (spec,) = m.layers[0]
    assert (spec.version, spec.d_inner, spec.d_state, spec.d_conv) == (1, d_inner, d_state, d_conv)
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    vs = (d_conv - 1) * d_inner * vb + d_inner * d_state * vb
    hs = d_conv * d_inner * hb + d_inner * d_state * hb
    check_state(row(v, "mamba"), count=layers, state_bytes=vs)
    check_state(row(h, "mamba"), count=layers, state_bytes=hs)
    assert v.bytes_per_token == h.bytes_per_token == 0
    assert v.state_bytes_per_sequence == layers * vs
    assert h.state_bytes_per_sequence == layers * hs
    # constant in context
    assert v.sequences[0].total_bytes == layers * vs


def test_mamba_130m_spelled_out():
    m = load("state-spaces__mamba-130m-hf.json")
    # vLLM: fp32 checkpoint -> bf16; conv 3 columns x 1536 + ssm 1536 x 16, 24 layers
    assert kv_footprint(m, contexts=(1,)).state_bytes_per_sequence == 24 * (
        3 * 1536 * 2 + 1536 * 16 * 2)
    # HF: fp32 kept, conv 4 columns
    assert kv_footprint(m, contexts=(1,), engine="hf").state_bytes_per_sequence == 24 * (
        4 * 1536 * 4 + 1536 * 16 * 4)


@covers("state-spaces__mamba2-2.7b.json")
def test_mamba2_27b_mamba_ssm_format():
    c = raw("state-spaces__mamba2-2.7b.json")
    assert "model_type" not in c and c["attn_layer_idx"] == []
    assert c["ssm_cfg"] == {"layer": "Mamba2"}
    m = load("state-spaces__mamba2-2.7b.json")
    assert m.model_type == "mamba_ssm"
    # n_layer 64, d_model 2560; mamba_ssm Mamba2 defaults: expand 2 -> d_inner 5120, headdim 64
    # -> 5120/64 = 80 heads, d_state 128, ngroups 1, d_conv 4; no dtype -> bf16
    assert kinds(m) == [("mamba",)] * 64
    (spec,) = m.layers[0]
    assert (spec.version, spec.d_inner, spec.num_heads, spec.head_dim, spec.d_state,
            spec.n_groups, spec.d_conv) == (2, 2 * 2560, 5120 // 64, 64, 128, 1, 4)
    conv_ch = 5120 + 2 * 1 * 128  # d_inner + 2 * n_groups * d_state = 5376
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    vs = 3 * conv_ch * 2 + 80 * 64 * 128 * 2
    check_state(row(v, "mamba"), count=64, state_bytes=vs)
    assert v.state_bytes_per_sequence == 64 * (3 * 5376 * 2 + 80 * 64 * 128 * 2)
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=64, state_bytes=4 * conv_ch * 2 + 80 * 64 * 128 * 2)
    assert v.bytes_per_token == 0


@covers("mistralai__Mamba-Codestral-7B-v0.1.json")
def test_mamba_codestral_mamba2():
    m = load("mistralai__Mamba-Codestral-7B-v0.1.json")
    # mamba2: 64 layers; d_inner = expand 2 x hidden 4096 = 8192 = num_heads 128 x head_dim 64,
    # state_size 128, n_groups 8, conv_kernel 4, bfloat16
    assert kinds(m) == [("mamba",)] * 64
    (spec,) = m.layers[0]
    assert (spec.version, spec.d_inner, spec.num_heads, spec.head_dim, spec.d_state,
            spec.n_groups, spec.d_conv) == (2, 2 * 4096, 128, 64, 128, 8, 4)
    conv_ch = 8192 + 2 * 8 * 128  # d_inner + 2 * n_groups * d_state = 10240
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    check_state(row(v, "mamba"), count=64, state_bytes=3 * conv_ch * 2 + 128 * 64 * 128 * 2)
    assert v.state_bytes_per_sequence == 64 * (3 * 10240 * 2 + 128 * 64 * 128 * 2)
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=64, state_bytes=4 * conv_ch * 2 + 128 * 64 * 128 * 2)


# --------------------------------------------------------------------------------------------
# Hybrids
# --------------------------------------------------------------------------------------------


@covers("ibm-ai-platform__Bamba-9B.json")
def test_bamba_9b():
    m = load("ibm-ai-platform__Bamba-9B.json")
    # attn_layer_indices [9, 18, 27], Mamba-2 elsewhere; 32 layers
    assert kinds(m) == [("full_attention",) if i in (9, 18, 27) else ("mamba",)
                        for i in range(32)]
    with pytest.raises(InputError) as e:  # vLLM removed BambaForCausalLM after 0.23.0 (#45990)
        kv_footprint(m, contexts=(4096,), engine="vllm")
    assert str(e.value) == ("--engine: vllm does not serve 'bamba' models: vllm removed them after "
                            "release 0.23.0 (plan with --engine vllm@0.23.0)")
    v = kv_footprint(m, contexts=(4096,), engine="vllm@0.23.0")
    # attention: 32 heads, 8 KV heads, 4096/32 = 128, bfloat16
    check_attn(row(v, "full_attention"), count=3, kv_heads=8, head_dim=4096 // 32, window=None,
               bytes_per_token=2 * 8 * 128 * 2)
    assert v.bytes_per_token == 2 * 3 * 8 * 128 * 2
    # Mamba-2: d_inner = mamba_expand 2 x 4096 = 8192 = mamba_n_heads 128 x mamba_d_head 64,
    # mamba_d_state 128, mamba_n_groups 1, mamba_d_conv 4; conv channels 8192 + 2*1*128 = 8448
    vs = 3 * (8192 + 2 * 1 * 128) * 2 + 128 * 64 * 128 * 2
    check_state(row(v, "mamba"), count=29, state_bytes=vs)
    assert v.state_bytes_per_sequence == 29 * vs
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=29,
                state_bytes=4 * (8192 + 2 * 1 * 128) * 2 + 128 * 64 * 128 * 2)


@covers("ai21labs__Jamba-v0.1.json")
def test_jamba_v01():
    m = load("ai21labs__Jamba-v0.1.json")
    # attn_layer_period 8, attn_layer_offset 4: attention at i % 8 == 4 (4, 12, 20, 28), 32 layers
    assert kinds(m) == [("full_attention",) if i % 8 == 4 else ("mamba",) for i in range(32)]
    # attention: 8 KV heads, 4096/32 = 128; partial config has no torch_dtype -> bf16 assumed
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    check_attn(row(v, "full_attention"), count=4, kv_heads=8, head_dim=4096 // 32, window=None,
               bytes_per_token=2 * 8 * 128 * 2)
    assert v.bytes_per_token == 2 * 4 * 8 * 128 * 2
    # Mamba-1: d_inner = mamba_expand 2 x hidden 4096 = 8192, mamba_d_state 16, mamba_d_conv 4
    vs = 3 * 8192 * 2 + 8192 * 16 * 2
    check_state(row(v, "mamba"), count=28, state_bytes=vs)
    assert v.state_bytes_per_sequence == 28 * vs
    assert v.sequences[0].total_bytes == 4096 * 2 * 4 * 8 * 128 * 2 + 28 * vs
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=28, state_bytes=4 * 8192 * 2 + 8192 * 16 * 2)


@covers("Zyphra__Zamba2-2.7B-Instruct-v2.json")
def test_zamba2_hybrid_layers_carry_attention_and_mamba():
    c = raw("Zyphra__Zamba2-2.7B-Instruct-v2.json")
    hybrid = [6, 12, 18, 24, 30, 36, 42, 47, 51]  # hybrid_layer_ids
    assert c["hybrid_layer_ids"] == hybrid
    m = load("Zyphra__Zamba2-2.7B-Instruct-v2.json")
    # 54 layers; a hybrid layer runs the shared attention block beside its Mamba-2 mixer
    assert kinds(m) == [("full_attention", "mamba") if i in hybrid else ("mamba",)
                        for i in range(54)]
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    # attention: 32 heads, num_key_value_heads 32, attention_head_dim 160 (= 2 * 2560 / 32); bf16
    check_attn(row(v, "full_attention"), count=9, kv_heads=32, head_dim=160, window=None,
               bytes_per_token=2 * 32 * 160 * 2)
    assert v.bytes_per_token == 2 * 9 * 32 * 160 * 2
    # Mamba-2: d_inner = mamba_expand 2 x 2560 = 5120, n_mamba_heads 80 x mamba_headdim 64,
    # mamba_d_state 64, mamba_ngroups 1, mamba_d_conv 4; conv channels 5120 + 2*1*64 = 5248
    (spec,) = m.layers[0]
    assert (spec.d_inner, spec.num_heads, spec.head_dim, spec.d_state, spec.n_groups) == (
        2 * 2560, 80, 64, 64, 1)
    vs = 3 * (5120 + 2 * 1 * 64) * 2 + 80 * 64 * 64 * 2
    check_state(row(v, "mamba"), count=54, state_bytes=vs)
    assert v.state_bytes_per_sequence == 54 * vs
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=54,
                state_bytes=4 * (5120 + 2 * 1 * 64) * 2 + 80 * 64 * 64 * 2)


@covers("tiiuae__Falcon-H1-0.5B.json")
def test_falcon_h1_attention_and_mamba_in_every_layer():
    m = load("tiiuae__Falcon-H1-0.5B.json")
    # attn_layer_indices null: all 36 layers carry attention + Mamba-2 side by side
    assert kinds(m) == [("full_attention", "mamba")] * 36
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    # attention: 8 heads, num_key_value_heads 2, head_dim 64, dtype bfloat16
    check_attn(row(v, "full_attention"), count=36, kv_heads=2, head_dim=64, window=None,
               bytes_per_token=2 * 2 * 64 * 2)
    assert v.bytes_per_token == 2 * 36 * 2 * 64 * 2
    # Mamba-2: d_inner = mamba_d_ssm 1536 = mamba_n_heads 24 x mamba_d_head 64, mamba_d_state 128,
    # mamba_n_groups 1, mamba_d_conv 4; conv channels 1536 + 2*1*128 = 1792
    vs = 3 * (1536 + 2 * 1 * 128) * 2 + 24 * 64 * 128 * 2
    check_state(row(v, "mamba"), count=36, state_bytes=vs)
    assert v.state_bytes_per_sequence == 36 * vs
    assert v.sequences[0].total_bytes == 4096 * 2 * 36 * 2 * 64 * 2 + 36 * vs
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=36,
                state_bytes=4 * (1536 + 2 * 1 * 128) * 2 + 24 * 64 * 128 * 2)


@covers("nvidia__Nemotron-H-56B-Base-8K.json")
def test_nemotron_h_56b_pattern():
    c = raw("nvidia__Nemotron-H-56B-Base-8K.json")
    # hybrid_override_pattern, 118 chars: M = Mamba-2, * = attention, - = MLP only (no cache)
    pattern = "M-M-M-M*-" + "M-M-M-M-M*-" * 9 + "M-M-M-M-M-"
    assert c["hybrid_override_pattern"] == pattern and len(pattern) == 118
    n_attn = 1 + 9           # one * per group
    n_mamba = 4 + 5 * 9 + 5  # 54
    m = load("nvidia__Nemotron-H-56B-Base-8K.json")
    want = {"M": ("mamba",), "*": ("full_attention",), "-": ()}
    assert kinds(m) == [want[ch] for ch in pattern]
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    # attention: 64 heads, 8 KV heads, attention_head_dim 128, bf16
    check_attn(row(v, "full_attention"), count=n_attn, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=2 * 8 * 128 * 2)
    assert v.bytes_per_token == 2 * 10 * 8 * 128 * 2
    # Mamba-2: mamba_num_heads 256 x mamba_head_dim 64 = d_inner 16384, ssm_state_size 256,
    # n_groups 8, conv_kernel 4; conv channels 16384 + 2*8*256 = 20480
    # vLLM: conv bf16, SSM fp32 (NemotronH default mamba_ssm_cache_dtype float32)
    vs = 3 * (16384 + 2 * 8 * 256) * 2 + 256 * 64 * 256 * 4
    check_state(row(v, "mamba"), count=n_mamba, state_bytes=vs)
    assert v.state_bytes_per_sequence == 54 * vs
    # HF: conv 4 columns, SSM in the model dtype (bf16)
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_state(row(h, "mamba"), count=54,
                state_bytes=4 * (16384 + 2 * 8 * 256) * 2 + 256 * 64 * 256 * 2)


@covers("Qwen__Qwen3-Next-80B-A3B-Instruct.json")
def test_qwen3_next_gated_deltanet():
    c = raw("Qwen__Qwen3-Next-80B-A3B-Instruct.json")
    # layer_types: full_attention every full_attention_interval 4 -> (i + 1) % 4 == 0
    assert c["layer_types"] == ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                for i in range(48)]
    m = load("Qwen__Qwen3-Next-80B-A3B-Instruct.json")
    assert kinds(m) == [("full_attention",) if (i + 1) % 4 == 0 else ("linear_attention",)
                        for i in range(48)]
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    # attention: 16 heads, 2 KV heads, head_dim 256; no torch_dtype -> bf16
    check_attn(row(v, "full_attention"), count=12, kv_heads=2, head_dim=256, window=None,
               bytes_per_token=2 * 2 * 256 * 2)
    assert v.bytes_per_token == 2 * 12 * 2 * 256 * 2
    # gated DeltaNet: linear_num_key_heads 16, linear_num_value_heads 32, key/value head dim 128,
    # linear_conv_kernel_dim 4; conv channels 2*16*128 + 32*128 = 8192, state 32 x 128 x 128
    conv_ch = 2 * 16 * 128 + 32 * 128
    vs = 3 * conv_ch * 2 + 32 * 128 * 128 * 2  # vLLM: both in the model dtype
    check_state(row(v, "linear_attention"), count=36, state_bytes=vs)
    assert v.state_bytes_per_sequence == 36 * vs
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    hs = 4 * conv_ch * 2 + 32 * 128 * 128 * 4  # HF: conv bf16, recurrent state fp32
    check_state(row(h, "linear_attention"), count=36, state_bytes=hs)
    assert h.state_bytes_per_sequence == 36 * hs


@covers("granitemoehybrid__partial-example.json")
def test_granitemoehybrid_partial():
    c = raw("granitemoehybrid__partial-example.json")
    attn_at = [5, 15, 25, 35]
    assert [i for i, t in enumerate(c["layer_types"]) if t == "attention"] == attn_at
    m = load("granitemoehybrid__partial-example.json")
    assert kinds(m) == [("full_attention",) if i in attn_at else ("mamba",) for i in range(40)]
    # dtype float32: vLLM auto -> bf16, HF keeps fp32
    # attention: 32 heads, 8 KV heads, head_dim 2048/32 = 64
    v = kv_footprint(m, contexts=(4096,), engine="vllm")
    h = kv_footprint(m, contexts=(4096,), engine="hf")
    check_attn(row(v, "full_attention"), count=4, kv_heads=8, head_dim=2048 // 32, window=None,
               bytes_per_token=2 * 8 * 64 * 2)
    assert v.bytes_per_token == 2 * 4 * 8 * 64 * 2
    assert h.bytes_per_token == 2 * 4 * 8 * 64 * 4
    # Mamba-2: d_inner = mamba_expand 2 x 2048 = 4096 = mamba_n_heads 64 x mamba_d_head 64,
    # mamba_d_state 128, mamba_n_groups 1, mamba_d_conv 4; conv channels 4096 + 2*1*128 = 4352
    check_state(row(v, "mamba"), count=36,
                state_bytes=3 * (4096 + 2 * 1 * 128) * 2 + 64 * 64 * 128 * 2)
    check_state(row(h, "mamba"), count=36,
                state_bytes=4 * (4096 + 2 * 1 * 128) * 4 + 64 * 64 * 128 * 4)


# --------------------------------------------------------------------------------------------
# Every fixture has a test above
# --------------------------------------------------------------------------------------------


def test_every_fixture_config_is_covered():
    present = {p.name for p in CONFIGS.glob("*.json")}
    assert present - COVERED == set(), "fixture configs without a family test"
