"""Built-in models: coverage of every family, unique aliases, and every spec parses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan
from kvplan.loaders import builtins

SPECS = sorted(builtins.specs_dir().glob("*.json"))
FAMILIES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "falcon",
    "gpt_neox", "gemma", "gemma2", "gemma3", "cohere", "cohere2", "deepseek_v2", "deepseek_v3",
    "kimi_k2", "llama4", "gpt_oss", "mamba", "mamba2", "jamba", "zamba2", "falcon_h1",
    "nemotron_h", "bamba", "qwen3_next", "llava", "qwen2_vl",
}


def test_at_least_30_models():
    assert len(SPECS) >= 30


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_spec_shape_and_parses(path: Path):
    spec = json.loads(path.read_text())
    assert set(spec) == {"name", "hub_id", "aliases", "family", "source", "config"}
    assert spec["name"] == path.stem
    assert "/" in spec["hub_id"] and spec["source"]
    model = kvplan.load_model(spec["name"])
    assert model.hub_id == spec["hub_id"]
    assert model.cache_layers
    assert not model.warnings  # every built-in family has its own adapter


def test_every_family_has_a_builtin():
    types = set()
    for path in SPECS:
        cfg = json.loads(path.read_text())["config"]
        types.add(cfg.get("model_type") or "mamba_ssm")
        if isinstance(cfg.get("text_config"), dict):
            types.add(cfg["text_config"].get("model_type"))
    types.add("mamba2")  # state-spaces/mamba2-2.7b is mamba_ssm format; Codestral is mamba2
    missing = FAMILIES - types
    assert not missing, missing


def test_aliases_unique_and_indexed():
    index = builtins.index()  # raises if two models claim one key
    for path in SPECS:
        spec = json.loads(path.read_text())
        for alias in spec["aliases"] + [spec["hub_id"]]:
            assert index[builtins.normalize(alias)] == path


def test_no_substring_matching():
    assert builtins.find("llama") is None
    assert builtins.find("70b") is None
    assert builtins.find("qwen2-57b") is None  # dots are kept: not qwen2.5-7b


def test_suggestions_for_near_misses():
    assert "llama-3-70b" in builtins.suggestions("llama-3-70")
    assert "deepseek-v3" in builtins.suggestions("deepsek-v3")


def test_source_says_which_resolution_was_used(tmp_path):
    assert kvplan.load_model("llama-3-70b").source.startswith("built-in llama-3-70b")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(json.loads(SPECS[0].read_text())["config"]))
    assert kvplan.load_model(str(tmp_path)).source == str(cfg)


def test_unknown_model_type_is_refused_without_the_explicit_assumption(tmp_path):
    cfg = {"model_type": "brand_new", "hidden_size": 2048, "num_hidden_layers": 4,
           "num_attention_heads": 16}
    with pytest.raises(kvplan.ConfigError) as e:
        kvplan.parse_config(cfg, name="x", source="x.json")
    assert str(e.value) == (
        "x.json: model_type: unknown model_type 'brand_new': kvplan has no rule for this "
        "architecture; pass --assume-standard-attention to read it as a standard decoder (K and "
        "V of num_key_value_heads x head_dim on every layer, full attention or, where layer_types "
        "/ sliding_window / attention_chunk_size say so, windowed or chunked)")
    m = kvplan.parse_config(cfg, name="x", source="x.json", assume_standard_attention=True)
    assert m.standard_attention_assumed and not m.warnings
    assert m.assumptions[0].startswith("--assume-standard-attention: model_type 'brand_new' read "
                                       "as a standard decoder")
    assert "num_key_value_heads = 16" in " ".join(m.assumptions)  # MHA assumed
    assert ("head_dim = hidden_size / num_attention_heads = 2048 / 16 = 128 (no head_dim in "
            "config)") in m.assumptions
    # 4 layers x 16 heads x (128 + 128) x 2 bytes
    assert kvplan.kv_footprint(m, [1]).bytes_per_token == 4 * 16 * (128 + 128) * 2
