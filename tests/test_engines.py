"""SGLang and llama.cpp layouts (and the policy table shared by all engines), numbers by hand."""

from __future__ import annotations

import pytest

import kvplan
from kvplan.engines import ENGINES, get_engine


def fp(name, n, **kw):
    return kvplan.kv_footprint(kvplan.load_model(name), [n], **kw)


# ---- SGLang ------------------------------------------------------------------------------

def test_sglang_full_attention_page_one():
    # page size 1: no rounding; Llama-3-8B 32 layers x 8 heads x (128 + 128) x 2 B
    f = fp("llama-3-8b", 1000, engine="sglang")
    assert f.block_size_tokens == 1
    assert f.sequences[0].total_bytes == 1000 * 32 * 8 * 256 * 2


def test_sglang_sliding_keeps_window_plus_page():
    # Mistral-7B: window 4096; SGLang frees tokens older than seq_len - window - page (1)
    f = fp("mistral-7b-v0.1", 32768, engine="sglang")
    assert f.sequences[0].total_bytes == 32 * (4096 + 1) * 8 * 256 * 2


def test_sglang_chunked_layers_keep_everything_by_default():
    # Llama-4-Scout: no hybrid pool for chunked layers by default: all 48 layers hold n tokens
    f = fp("llama-4-scout-17b-16e-instruct", 20000, engine="sglang")
    assert f.sequences[0].total_bytes == 48 * 20000 * 8 * 256 * 2


def test_sglang_mla_latent_and_states():
    f = fp("deepseek-v3", 1, engine="sglang", tp=8)
    assert f.bytes_per_token == 61 * (512 + 64) * 2
    assert f.sequences[0].per_gpu_bytes == 61 * (512 + 64) * 2  # replicated on every rank
    # Qwen3-Next: conv (2*16*128 + 32*128) x 3 bf16 + temporal 32 x 128 x 128 fp32, 36 layers
    q = fp("qwen3-next-80b-a3b-instruct", 1, engine="sglang")
    assert q.state_bytes_per_sequence == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)
    # Mamba-2.8B (fp32 checkpoint): conv bf16 (SGLang's default), SSM fp32
    m = fp("mamba-2.8b", 1, engine="sglang")
    assert m.state_bytes_per_sequence == 64 * (5120 * 3 * 2 + 5120 * 16 * 4)


def test_sglang_fp32_checkpoint_runs_fp16():
    import json
    from pathlib import Path

    # granite hybrid partial example: dtype float32; 4 attention layers x 8 KV heads x
    # head_dim (2048 / 32 = 64) x (K, V) x 2 B (fp16)
    p = Path(__file__).parent / "fixtures" / "configs" / "granitemoehybrid__partial-example.json"
    m = kvplan.parse_config(json.loads(p.read_text()), name="g", source=str(p))
    f = kvplan.kv_footprint(m, [1], engine="sglang")
    assert f.kv_dtype == "fp16"
    assert f.bytes_per_token == 4 * 8 * (64 + 64) * 2


# ---- llama.cpp -----------------------------------------------------------------------------

def test_llama_cpp_defaults_f16_and_pads_to_256():
    f = fp("llama-3-8b", 1000, engine="llama.cpp")
    assert (f.kv_dtype, f.block_size_tokens) == ("fp16", 256)
    # 1000 tokens -> kv_size GGML_PAD(1000, 256) = 1024 cells
    assert f.sequences[0].total_bytes == 1024 * 32 * 8 * 256 * 2


def test_llama_cpp_iswa_cache():
    # gpt-oss-20b: 12 sliding layers (window 128) get pad256(min(32768, 128 + 512)) = 768 cells,
    # 12 full layers 32768 cells; 8 KV heads x (64 + 64) x 2 B = 2048 B per cell per layer
    f = fp("gpt-oss-20b", 32768, engine="llama.cpp")
    assert f.sequences[0].total_bytes == 12 * 768 * 2048 + 12 * 32768 * 2048
    # Llama-4-Scout chunked layers use the same cache with n_swa = chunk 8192:
    # pad256(min(131072, 8192 + 512)) = 8704 cells
    s = fp("llama-4-scout-17b-16e-instruct", 131072, engine="llama.cpp")
    assert s.sequences[0].total_bytes == (36 * 8704 + 12 * 131072) * 8 * 256 * 2


def test_llama_cpp_mla_stores_v_apart():
    # K = kv_lora_rank + rope = 576, V = kv_lora_rank = 512, f16, 61 layers
    f = fp("deepseek-v3", 1, engine="llama.cpp")
    assert f.bytes_per_token == 61 * (576 + 512) * 2


def test_llama_cpp_mixed_block_formats():
    # row of 8 x 128 = 1024 values: q8_0 32 x 34 B, q4_0 32 x 18 B, 32 layers
    f = fp("llama-3-8b", 256, engine="llama.cpp", k_dtype="q8_0", v_dtype="q4_0")
    assert f.bytes_per_token == 32 * (32 * 34 + 32 * 18)
    assert f.kv_dtype == "k=q8_0,v=q4_0"


def test_llama_cpp_recurrent_state_f32():
    # Mamba-2.8B: r = (4 - 1) x 5120, s = 16 x 5120, f32
    assert fp("mamba-2.8b", 1, engine="llama.cpp").state_bytes_per_sequence == (
        64 * (3 * 5120 + 16 * 5120) * 4)


def test_llama_cpp_has_no_tensor_parallel_cache():
    with pytest.raises(kvplan.ParallelismError, match="use --pp"):
        fp("llama-3-8b", 1, engine="llama.cpp", tp=2)
    # layer split: 32 layers on 2 GPUs, 16 each
    f = fp("llama-3-8b", 256, engine="llama.cpp", pp=2)
    assert f.sequences[0].per_gpu_bytes == 256 * 16 * 8 * 256 * 2


@pytest.mark.parametrize("alias", ["llama.cpp", "llamacpp", "llama-cpp", "LLAMA.CPP"])
def test_engine_aliases(alias):
    assert get_engine(alias).name == "llama.cpp"


def test_every_engine_names_known_policies():
    from kvplan.engines.base import POLICIES

    for name in ENGINES:
        layout = get_engine(name)
        assert layout.sliding_policy in POLICIES and layout.chunked_policy in POLICIES
        assert layout.label == name
