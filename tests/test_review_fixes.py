"""Regression tests for review findings: KV-head keys, index validation, path resolution,
engine versions, warnings in JSON mode, and odd input that used to raise tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.cli.main import run

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def parse(cfg: dict) -> kvplan.Model:
    return kvplan.parse_config(cfg, name="t", source="t.json")


def bpt(cfg: dict, **kw) -> int:
    return kvplan.kv_footprint(parse(cfg), [1], block_size_tokens=1, **kw).bytes_per_token


def test_multi_query_outside_falcon_means_one_kv_head():
    # gpt_bigcode (StarCoder): 40 layers, 1 KV head (multi_query), head_dim 6144 / 48 = 128
    cfg = {"model_type": "gpt_bigcode", "n_layer": 40, "n_head": 48, "n_embd": 6144,
           "multi_query": True}
    assert bpt(cfg) == 2 * 40 * 1 * 128 * 2


def test_multi_query_group_num():
    # ChatGLM style: 28 layers, multi_query_group_num 2, head_dim 4096 / 32 = 128
    cfg = {"model_type": "chatglm", "num_layers": 28, "num_attention_heads": 32,
           "hidden_size": 4096, "multi_query_group_num": 2}
    assert bpt(cfg) == 2 * 28 * 2 * 128 * 2


def test_falcon_without_new_arch_or_multi_query_reads_num_kv_heads():
    cfg = {"model_type": "falcon", "num_hidden_layers": 4, "num_attention_heads": 8,
           "hidden_size": 512, "new_decoder_architecture": False, "multi_query": False,
           "num_kv_heads": 2}
    assert bpt(cfg) == 2 * 4 * 2 * 64 * 2


BAMBA = {"model_type": "bamba", "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "hidden_size": 512, "mamba_n_heads": 16, "mamba_d_head": 64}


@pytest.mark.parametrize("indices,bad", [([99], "[0]"), (["1"], "[0]"), ([1, True], "[1]"),
                                         ([[1]], "[0]")])
def test_layer_index_lists_are_validated(indices, bad):
    with pytest.raises(kvplan.ConfigError, match=rf"attn_layer_indices\{bad}: expected a layer index"):
        parse({**BAMBA, "attn_layer_indices": indices})


def test_llama4_no_rope_layers_must_be_zero_or_one():
    cfg = {"model_type": "llama4_text", "num_hidden_layers": 4, "num_attention_heads": 8,
           "hidden_size": 512, "attention_chunk_size": 64, "no_rope_layers": [1, 1, 2, 0]}
    with pytest.raises(kvplan.ConfigError, match=r"no_rope_layers\[2\]: expected 0 or 1"):
        parse(cfg)


def test_layer_types_entries_must_be_strings():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8,
           "hidden_size": 512, "layer_types": ["full_attention", ["x"]]}
    with pytest.raises(kvplan.ConfigError, match=r"layer_types\[1\]: expected a string"):
        parse(cfg)


def test_absurd_layer_count_is_an_error_not_a_hang():
    cfg = {"model_type": "llama", "num_hidden_layers": 1e30, "num_attention_heads": 8,
           "hidden_size": 512}
    with pytest.raises(kvplan.ConfigError, match="num_hidden_layers: must be <= 100,000"):
        parse(cfg)


def test_mamba_ssm_attn_cfg_must_be_an_object():
    cfg = {"d_model": 256, "n_layer": 2, "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [1],
           "attn_cfg": [1]}
    with pytest.raises(kvplan.ConfigError, match="attn_cfg: expected an object"):
        parse(cfg)


def test_qwen_vl_text_types_follow_max_window_layers():
    cfg = {"model_type": "qwen2_5_vl_text", "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "hidden_size": 512, "use_sliding_window": True,
           "sliding_window": 64, "max_window_layers": 3}
    m = parse(cfg)
    assert not m.warnings
    assert [b[0].kind for b in m.layers] == ["full_attention"] * 3 + ["sliding_window"]


def test_hf5_caches_latent_only_for_deepseek_v3():
    kimi = kvplan.load_model("kimi-k2-instruct")  # kimi_k2: DeepSeek remote code, decompressed
    fp = kvplan.kv_footprint(kimi, [1], engine="hf")
    # 61 layers x 64 heads x (K 128 + 64, V 128) x 2 bytes
    assert fp.bytes_per_token == 61 * 64 * (192 + 128) * 2
    v3 = kvplan.kv_footprint(kvplan.load_model("deepseek-v3"), [1], engine="hf")
    assert v3.bytes_per_token == 61 * (512 + 64) * 2


def test_nemotron_ssm_dtype_by_vllm_version():
    m = kvplan.load_model("nemotron-h-56b-base-8k")
    # 54 Mamba-2 layers: conv (16384 + 2*8*256) x 3 x 2 B + ssm 256 x 64 x 256 x (4 or 2) B
    conv = (16384 + 2 * 8 * 256) * 3 * 2
    main = kvplan.kv_footprint(m, [1], engine="vllm").state_bytes_per_sequence
    old = kvplan.kv_footprint(m, [1], engine="vllm@0.11").state_bytes_per_sequence
    assert main == 54 * (conv + 256 * 64 * 256 * 4)
    assert old == 54 * (conv + 256 * 64 * 256 * 2)


def test_config_ssm_dtype_only_read_where_the_engine_reads_it():
    # Falcon-H1 with mamba_ssm_cache_dtype: neither vLLM (NemotronH only) nor HF read it.
    cfg = json.loads((FIXTURES / "tiiuae__Falcon-H1-0.5B.json").read_text())
    base = kvplan.kv_footprint(parse(cfg), [1]).state_bytes_per_sequence
    cfg["mamba_ssm_cache_dtype"] = "float32"
    assert kvplan.kv_footprint(parse(cfg), [1]).state_bytes_per_sequence == base


def test_engine_label_in_json_and_bad_versions(capsys):
    assert run(["size", "deepseek-v3", "--engine", "hf@4", "-c", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "hf@4"
    assert run(["size", "deepseek-v3", "-c", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "vllm"
    for bad in ("hf@x", "vllm@0.11beta", "vllm@"):
        assert run(["size", "llama-3-8b", "--engine", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--engine: bad" in err


def test_path_like_names_are_paths(tmp_path, monkeypatch, capsys):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 8, "hidden_size": 512, "torch_dtype": "bfloat16"}
    folder = tmp_path / "llama-3-70b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert kvplan.load_model("./llama-3-70b").source == str(Path("llama-3-70b") / "config.json")
    (tmp_path / "deepseek-v3.json").write_text(json.dumps(cfg))
    assert kvplan.load_model(str(tmp_path / "deepseek-v3.json")).num_layers == 2


def test_an_explicit_assumption_is_recorded_in_the_json(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"model_type": "mystery", "num_hidden_layers": 2,
                             "num_attention_heads": 4, "hidden_size": 256}))
    assert run(["size", str(p), "--json", "-c", "1"]) == 2
    assert "unknown model_type 'mystery'" in capsys.readouterr().err
    assert run(["size", str(p), "--json", "-c", "1", "--assume-standard-attention"]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert d["assumed_standard_attention"] is True
    assert d["assumptions"][0].startswith("--assume-standard-attention: model_type 'mystery'")
    assert "dtype = bf16 (config names no torch_dtype/dtype)" in d["assumptions"]
    assert d["bytes_per_token"] == 2 * 4 * (64 + 64) * 2  # 2 layers, 4 heads of 256 / 4


def test_non_utf8_config(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_bytes(b"\xff\xfe{}")
    assert run(["size", str(p)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8 text" in err and err.count("\n") == 1


def test_fractional_context_message(capsys):
    assert run(["size", "llama-3-8b", "-c", "1.5"]) == 2
    assert "'1.5' is not a whole number of tokens" in capsys.readouterr().err


def test_state_dtype_restricted(capsys):
    assert run(["size", "mamba-2.8b", "--state-dtype", "fp8"]) == 2
    assert "--state-dtype: unknown dtype 'fp8'; use fp32, bf16, fp16" in capsys.readouterr().err


def test_scale_dtype_spellings():
    # int4 group 64 over 128 elements: 64 B payload + 2 groups x (scale + zero)
    assert kvplan.parse_format("int4:scale=bfloat16").k.vector_bytes(128) == 64 + 2 * (2 + 2)
    assert kvplan.parse_format("int4:scale=fp8,zero=int8").k.vector_bytes(128) == 64 + 2 * (1 + 1)
    with pytest.raises(kvplan.FormatError, match="scale='fp5'"):
        kvplan.parse_format("int4:scale=fp5")


def test_a_separate_v_head_dim_is_refused_outside_mimo():
    """vLLM's standard attention stores V as wide as K: a llama config with v_head_dim 128 and
    head_dim 192 is refused (MiMo-V2-Flash's own reader keeps K 192 and V 128: see
    tests/test_families_2026.py)."""
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 4, "hidden_size": 1024, "head_dim": 192, "v_head_dim": 128}
    with pytest.raises(kvplan.ConfigError, match="v_head_dim: 128 differs from the head_dim 192"):
        parse(cfg)
    same = parse({**cfg, "v_head_dim": 192})
    assert kvplan.kv_footprint(same, [10], block_size_tokens=1).bytes_per_token == 2 * 4 * 2 * 192 * 2


# ---- third review: transformers config-class semantics -----------------------------------

def kinds_of(m):
    return [tuple(s.kind for s in block) for block in m.layers]


def test_gpt_oss_without_layer_types_alternates():
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 512, "sliding_window": 128}
    assert kinds_of(parse(cfg)) == [("sliding_window",), ("full_attention",)] * 2


def test_qwen_use_sliding_window_defaults_false():
    cfg = {"model_type": "qwen2", "num_hidden_layers": 8, "num_attention_heads": 8,
           "hidden_size": 512, "sliding_window": 4096, "max_window_layers": 4}
    assert kinds_of(parse(cfg)) == [("full_attention",)] * 8


def test_nemotron_h_layers_block_type_v5():
    import json as _json

    spec = _json.loads((kvplan.loaders.builtins.specs_dir() / "nemotron-h-56b-base-8k.json").read_text())
    cfg = dict(spec["config"])
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    cfg["layers_block_type"] = [names[c] for c in cfg.pop("hybrid_override_pattern")]
    new, old = parse(cfg), kvplan.load_model("nemotron-h-56b-base-8k")
    assert new.layers == old.layers


def test_granite_layer_type_names_and_default():
    base = {"model_type": "granitemoehybrid", "num_hidden_layers": 3, "num_attention_heads": 8,
            "num_key_value_heads": 2, "hidden_size": 512, "mamba_n_heads": 16,
            "mamba_d_head": 64, "mamba_d_state": 128}
    m = parse({**base, "layer_types": ["linear_attention", "full_attention", "mamba"]})
    assert kinds_of(m) == [("mamba",), ("full_attention",), ("mamba",)]
    assert kinds_of(parse(base)) == [("mamba",)] * 3


def test_nested_text_config_defaults_gemma3_llama4():
    # a gemma3 text_config saved as a diff: Gemma3TextConfig gives 4 KV heads, head_dim 256,
    # window 4096, pattern 6
    g = parse({"model_type": "gemma3", "torch_dtype": "bfloat16",
               "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 12,
                               "hidden_size": 2560, "num_attention_heads": 8}})
    full, slide = [c for c in kvplan.kv_footprint(g, [1]).layers][::-1]
    assert (slide.kind, slide.count, slide.kv_heads, slide.head_dim_k, slide.window_tokens) == (
        "sliding_window", 10, 4, 256, 4096)
    assert (full.kind, full.count) == ("full_attention", 2)
    # llama4 text_config without attention_chunk_size: Llama4TextConfig's 8192, 36 chunked
    m = parse({"model_type": "llama4", "text_config": {"model_type": "llama4_text"}})
    assert sorted((c.kind, c.count, c.window_tokens) for c in kvplan.kv_footprint(m, [1]).layers) == [
        ("chunked_local", 36, 8192), ("full_attention", 12, None)]


def test_explicit_null_is_not_filled_with_a_default():
    m = parse({"model_type": "mistral3", "text_config": {
        "model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 8, "sliding_window": None}})
    assert kinds_of(m) == [("full_attention",)] * 2


def test_falcon_h1_d_ssm_default_and_null():
    base = {"model_type": "falcon_h1", "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 256, "mamba_n_heads": 16,
            "mamba_d_head": "auto"}
    absent = parse(base).layers[0][1]
    assert (absent.d_inner, absent.head_dim) == (1024, 1024 // 16)  # FalconH1Config 1024
    null = parse({**base, "mamba_d_ssm": None}).layers[0][1]
    assert (null.d_inner, null.head_dim) == (2 * 256, 2 * 256 // 16)  # expand x hidden_size


def test_zamba2_derives_its_widths():
    cfg = {"model_type": "zamba2", "num_hidden_layers": 2, "hidden_size": 512,
           "num_attention_heads": 8, "layers_block_type": ["mamba", "hybrid"],
           "attention_head_dim": 999, "mamba_headdim": 7}
    m = parse(cfg)
    attn, mamba = m.layers[1]
    assert attn.head_dim_k == 2 * 512 // 8  # Zamba2Config recomputes attention_head_dim
    assert (mamba.num_heads, mamba.head_dim) == (8, 2 * 512 // 8)  # n_mamba_heads default 8
