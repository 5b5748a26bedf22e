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


def test_sglang_sliding_with_larger_pages():
    # page 64: eviction rounded down to a page, so up to W + 2P - 1 = 4223 tokens span
    # cdiv(4223, 64) = 66 pages
    f = fp("mistral-7b-v0.1", 8192, engine="sglang", block_size_tokens=64)
    assert f.sequences[0].total_bytes == 32 * 66 * 64 * 8 * 256 * 2


def test_sglang_ssm_fp32_default_on_a_bf16_model():
    # mamba2-2.7b (bf16): conv (5120 + 2 x 128) x 3 bf16 + SSM 80 x 64 x 128 fp32
    f = fp("mamba2-2.7b", 1, engine="sglang")
    assert f.state_bytes_per_sequence == 64 * (5376 * 3 * 2 + 80 * 64 * 128 * 4)


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


def test_llama_cpp_iswa_cache_small_contexts():
    # gemma-3-1b: 22 sliding layers (window 512) + 4 full; 1 KV head x (256 + 256) x 2 B
    per_cell = 1 * 512 * 2
    # n = 700: kv_size pad256(700) = 768 cells; sliding cache pad256(min(768, 512 + 512)) = 768
    assert fp("gemma-3-1b-it", 700, engine="llama.cpp").sequences[0].total_bytes == (
        26 * 768 * per_cell)
    # n = 4000: kv_size 4096; sliding pad256(min(4096, 1024)) = 1024
    assert fp("gemma-3-1b-it", 4000, engine="llama.cpp").sequences[0].total_bytes == (
        (22 * 1024 + 4 * 4096) * per_cell)


def test_llama_cpp_llama_architecture_has_no_swa():
    # Mistral-7B-v0.1 runs as the llama architecture: every layer full, 8000 -> 8192 cells
    f = fp("mistral-7b-v0.1", 8000, engine="llama.cpp")
    assert f.sequences[0].total_bytes == 32 * 8192 * 8 * 256 * 2


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
    assert any("flash attention" in n for n in f.notes)
    # DeepSeek-V3, K and V of different widths: K 576 = 18 blocks x 34 B (q8_0),
    # V 512 = 16 blocks x 18 B (q4_0); swapping the formats would give 18 x 18 + 16 x 34
    d = fp("deepseek-v3", 256, engine="llama.cpp", k_dtype="q8_0", v_dtype="q4_0")
    assert d.bytes_per_token == 61 * (18 * 34 + 16 * 18)


def test_llama_cpp_recurrent_state_f32():
    # Mamba-2.8B: r = (4 - 1) x 5120, s = 16 x 5120, f32
    assert fp("mamba-2.8b", 1, engine="llama.cpp").state_bytes_per_sequence == (
        64 * (3 * 5120 + 16 * 5120) * 4)
    # mamba2-2.7b runs bf16, but llama.cpp's r and s are f32 all the same:
    # r = 3 x (5120 + 2 x 1 x 128), s = 80 x 64 x 128
    assert fp("mamba2-2.7b", 1, engine="llama.cpp").state_bytes_per_sequence == (
        64 * (3 * 5376 + 80 * 64 * 128) * 4)
    with pytest.raises(kvplan.InputError, match="--state-dtype: llama.cpp keeps recurrent states"):
        fp("mamba2-2.7b", 1, engine="llama.cpp", state_dtype="bf16")


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
        # every engine's auto format is one it can store
        assert layout.kv_formats is None or layout.auto_kv_dtype("bf16") in layout.kv_formats


# ---- config-declared state dtypes: each engine reads only its own key ----------------------

def _with(name, **extra):
    import json

    spec = json.loads((kvplan.loaders.builtins.specs_dir() / f"{name}.json").read_text())
    return kvplan.parse_config({**spec["config"], **extra}, name=name, source=name)


NEMO_CONV = (16384 + 2 * 8 * 256) * 3 * 2  # conv channels x (4 - 1) x bf16
NEMO_SSM = 256 * 64 * 256  # heads x head_dim x d_state


def test_vllm_reads_mamba_ssm_cache_dtype_for_nemotron_only():
    m = _with("nemotron-h-56b-base-8k", mamba_ssm_cache_dtype="float16")
    assert kvplan.kv_footprint(m, [1]).state_bytes_per_sequence == 54 * (NEMO_CONV + NEMO_SSM * 2)
    m = _with("nemotron-h-56b-base-8k", mamba_ssm_dtype="float16")  # not vLLM's key
    assert kvplan.kv_footprint(m, [1]).state_bytes_per_sequence == 54 * (NEMO_CONV + NEMO_SSM * 4)


def test_sglang_reads_mamba_ssm_dtype():
    m = _with("nemotron-h-56b-base-8k", mamba_ssm_cache_dtype="float16")  # not SGLang's key
    assert kvplan.kv_footprint(m, [1], engine="sglang").state_bytes_per_sequence == (
        54 * (NEMO_CONV + NEMO_SSM * 4))
    q = _with("qwen3-next-80b-a3b-instruct", mamba_ssm_dtype="bfloat16")
    assert kvplan.kv_footprint(q, [1], engine="sglang").state_bytes_per_sequence == (
        36 * (8192 * 3 * 2 + 32 * 128 * 128 * 2))


# ---- versions, formats and block sizes each engine accepts --------------------------------

def test_vllm_011_keeps_chunked_layers_whole():
    # 0.11 turns the hybrid manager off for chunked models: all 48 layers hold 20000 tokens
    f = fp("llama-4-scout-17b-16e-instruct", 20000, engine="vllm@0.11")
    assert f.sequences[0].total_bytes == 48 * 20000 * 8 * 256 * 2


@pytest.mark.parametrize("engine,kw,needle", [
    ("vllm", {"kv_dtype": "q8_0"}, "vllm stores KV as"),
    ("vllm@0.11", {"kv_dtype": "nvfp4"}, "vllm@0.11 stores KV as"),
    ("llama.cpp", {"kv_dtype": "fp8"}, "llama.cpp stores KV as"),
    ("llama.cpp", {"kv_dtype": "kivi2"}, "llama.cpp stores KV as"),
    ("sglang", {"kv_dtype": "int4"}, "sglang stores KV as"),
    ("vllm", {"k_dtype": "fp8"}, "stores K and V in one kv_cache_dtype"),
    ("sglang", {"v_dtype": "fp8"}, "stores K and V in one kv_cache_dtype"),
    ("llama.cpp", {"block_size_tokens": 1}, "always pads its cache to 256 cells"),
])
def test_engine_rejects_what_it_cannot_store(engine, kw, needle):
    with pytest.raises(kvplan.InputError, match=needle):
        fp("llama-3-8b", 1, engine=engine, **kw)


def test_any_format_under_hf():
    # int4 group 64 with fp16 scale + zero: 64 + 2 x 4 = 72 B per 128-vector; 32 x 8 x 2 x 72
    assert fp("llama-3-8b", 1, engine="hf", kv_dtype="int4").bytes_per_token == 32 * 8 * 2 * 72


def test_hf5_deepseek_latent_is_k_pass_and_k_rot():
    # keys k_pass 512 wide (bf16), values k_rot 64 wide (fp8): 61 x (512 x 2 + 64 x 1)
    f = fp("deepseek-v3", 1, engine="hf", k_dtype="bf16", v_dtype="fp8")
    assert f.bytes_per_token == 61 * (512 * 2 + 64 * 1)


def test_sglang_fp32_gemma_runs_bf16():
    cfg = {"model_type": "gemma2", "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 4, "head_dim": 64, "hidden_size": 512, "torch_dtype": "float32"}
    m = kvplan.parse_config(cfg, name="g", source="g")
    assert kvplan.kv_footprint(m, [1], engine="sglang").kv_dtype == "bf16"
    assert kvplan.kv_footprint(m, [1], engine="vllm").kv_dtype == "bf16"
    assert kvplan.kv_footprint(m, [1], engine="hf").kv_dtype == "fp32"


@pytest.mark.parametrize("spec,ok", [("llama.cpp@b6500", True), ("llama.cpp@master", True),
                                     ("llama.cpp@4.2", False), ("sglang@0.5.2", True),
                                     ("sglang@x", False)])
def test_engine_versions(spec, ok):
    if ok:
        assert get_engine(spec).label == spec.replace("@master", "")
    else:
        with pytest.raises(kvplan.InputError, match="--engine: bad"):
            get_engine(spec)


@pytest.mark.parametrize("spec, newest", [("vllm@0.35", "0.34.0"), ("vllm@99.99", "0.34.0"),
                                          ("sglang@0.5.24", "0.5.23")])
def test_releases_newer_than_read_are_refused(spec, newest):
    """kvplan does not guess the rules of a release it has not read."""
    from kvplan.core.errors import InputError
    from kvplan.engines import get_engine

    with pytest.raises(InputError, match=f"newer than the releases kvplan has read \\(up to {newest}\\)"):
        get_engine(spec)
    get_engine(spec.split("@")[0] + "@" + newest)  # the newest read is planned
