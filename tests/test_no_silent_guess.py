"""Never a silent guess: a config key kvplan does not interpret is an error naming it, not a
number computed without it.

The property over every fixture config: rename any one key to a name no rule knows. Either the
footprint is unchanged (the key did not shape the cache: vocab_size, rope settings, ...), or
parsing fails with one error that names the key (its old name when a rule needs it, its new
name when it is left uninterpreted). A changed number is the failure this test exists for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli.main import run
from kvplan.core.errors import ConfigError
from kvplan.engines import get_engine
from kvplan.loaders.hf_config import parse_config
from kvplan.planning.footprint import kv_footprint

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
CONFIGS = sorted(FIXTURES.glob("*.json"))


def answer(cfg: dict, source: str) -> tuple:
    m = parse_config(cfg, name="x", source=source)
    last = get_engine("vllm").removed_model_types.get(m.model_type)  # the last release serving it
    fp = kv_footprint(m, [100_000], block_size_tokens=1, engine=f"vllm@{last}" if last else "vllm")
    return (fp.bytes_per_token, fp.state_bytes_per_sequence, fp.sequences[0].total_bytes,
            m.dtype, m.hidden_size, [tuple(s.kind for s in b) for b in m.layers])


def renamed(cfg: dict, key: str) -> dict:
    """``cfg`` with ``key`` (of the text model's mapping) renamed to ``<key>_renamed``."""
    nested = "text_config" in cfg and not cfg.get("num_hidden_layers")
    text = dict(cfg["text_config"] if nested else cfg)
    text[key + "_renamed"] = text.pop(key)
    return {**cfg, "text_config": text} if nested else text


def text_keys(cfg: dict) -> list[str]:
    nested = "text_config" in cfg and not cfg.get("num_hidden_layers")
    text = cfg["text_config"] if nested else cfg
    return [k for k, v in text.items() if v is not None]


def rename_each_key(path: Path, result, errors=ConfigError) -> tuple[list, list]:
    """Rename each key of ``path``'s text model in turn: (keys whose rename changed
    ``result(cfg, source)`` without an error, (key, error) pairs whose error did not name it)."""
    cfg = json.loads(path.read_text())
    base = result(cfg, str(path))
    silent, unnamed = [], []
    for key in text_keys(cfg):
        try:
            got = result(renamed(cfg, key), str(path))
        except errors as e:
            if key not in str(e):
                unnamed.append((key, str(e)))
            continue
        if got != base:
            silent.append(key)
    return silent, unnamed


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_renaming_any_key_never_changes_the_answer_silently(path):
    assert rename_each_key(path, answer) == ([], [])


def test_the_property_would_catch_a_silent_default(monkeypatch):
    """Take the rule away (no key is ever KV-relevant) and renaming num_key_value_heads
    silently turns Llama-3-8B's GQA into MHA: the property above then fails."""
    from kvplan.loaders import hf_config

    cfg = json.loads((FIXTURES / "meta-llama__Meta-Llama-3-8B.json").read_text())
    monkeypatch.setattr(hf_config, "uninterpreted", lambda f: [])
    assert answer(renamed(cfg, "num_key_value_heads"), "x")[0] == 4 * answer(cfg, "x")[0]


def test_a_renamed_key_is_one_line_exit_2_naming_it(tmp_path, capsys):
    cfg = json.loads((FIXTURES / "meta-llama__Meta-Llama-3-8B.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps(renamed(cfg, "num_key_value_heads")))
    assert run(["size", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"kvplan: error: {p}: num_key_value_heads_renamed: key(s) "
                   "num_key_value_heads_renamed shape the KV cache of a 'llama' model but no "
                   "kvplan rule interprets them; pass --assume-standard-attention to ignore them")
    assert run(["size", str(p), "--json", "--assume-standard-attention"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["assumed_standard_attention"] is True
    assert ("--assume-standard-attention: key(s) no kvplan rule interprets are ignored: "
            "num_key_value_heads_renamed") in d["assumptions"]
    # ignored, the key is absent: 32 KV heads (MHA) x 128 x 2 (K, V) x 2 B x 32 layers
    assert d["bytes_per_token"] == 32 * 128 * 2 * 2 * 32


def test_an_unknown_model_type_with_a_latent_is_read_as_mla():
    """``kv_lora_rank`` establishes MLA whatever the model_type: DeepSeek-V3's geometry under
    another name gives its 61 x (512 + 64) x 2 B = 70,272 B per token."""
    cfg = json.loads((FIXTURES / "deepseek-ai__DeepSeek-V3.json").read_text())
    cfg["model_type"] = "some_new_mla_model"
    m = parse_config(cfg, name="x", source="x.json")
    assert kv_footprint(m, [1]).bytes_per_token == 61 * (512 + 64) * 2
    assert ("model_type 'some_new_mla_model' has no kvplan rule: read as multi-head latent "
            "attention (kv_lora_rank, qk_rope_head_dim) from its keys") in m.assumptions
    assert not m.standard_attention_assumed


def test_an_unknown_model_type_names_the_keys_it_cannot_interpret():
    cfg = {"model_type": "future_hybrid", "num_hidden_layers": 4, "hidden_size": 1024,
           "num_attention_heads": 8, "head_dim": 128, "num_key_value_heads": 2,
           "window_layers_every": 3, "linear_state_heads": 4}
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, name="x", source="x.json")
    assert ("unknown model_type 'future_hybrid': kvplan has no rule for this architecture and "
            "kvplan cannot interpret its keys window_layers_every, linear_state_heads; pass "
            "--assume-standard-attention") in str(e.value)
