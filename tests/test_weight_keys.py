"""Never a silent guess, for parameters: a config key that shapes weights and that no rule
interprets is an error naming it, never a different parameter total.

The property over every fixture config whose parameters kvplan counts: rename any one key of
the text model's mapping. Either the parameter total, MTP/extra total, expert layout and weight
format are unchanged, or reading fails with one error that names the key (its old name, which
a rule needs, or its new name, which no rule interprets).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_no_silent_guess import rename_each_key, renamed

import kvplan
from kvplan.cli.main import run
from kvplan.core.errors import KvplanError
from kvplan.loaders.hf_config import parse_config

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def weights(cfg: dict, source: str) -> tuple:
    m = parse_config(cfg, name="x", source=source)
    w = kvplan.weight_inventory(m)
    return (w.params_total, w.params_extra, w.num_experts, w.experts_per_token,
            w.tied_embeddings, kvplan.weight_format(m, None).name)


def _counted(path: Path) -> bool:
    try:
        weights(json.loads(path.read_text()), str(path))
    except KvplanError:
        return False
    return True


COUNTED = [p for p in sorted(FIXTURES.glob("*.json")) if _counted(p)]


def test_most_fixtures_are_counted():
    assert len(COUNTED) >= 60


@pytest.mark.parametrize("path", COUNTED, ids=lambda p: p.stem)
def test_renaming_any_key_never_changes_the_parameters_silently(path):
    assert rename_each_key(path, weights, KvplanError) == ([], [])


def test_the_property_would_catch_a_silent_default(monkeypatch):
    """Without the check, renaming DeepSeek-V3's n_routed_experts silently counts a dense
    model: 671B parameters become 37B."""
    from kvplan.loaders import hf_params

    cfg = json.loads((FIXTURES / "deepseek-ai__DeepSeek-V3.json").read_text())
    with pytest.raises(KvplanError, match="n_routed_experts_renamed shape the parameters"):
        weights(renamed(cfg, "n_routed_experts"), "x")
    monkeypatch.setattr(hf_params, "unread_weight_keys", lambda *a, **k: [])
    assert weights(renamed(cfg, "n_routed_experts"), "x")[0] < weights(cfg, "x")[0] // 10


def test_a_renamed_weight_key_is_one_line_and_weight_memory_opts_out(tmp_path, capsys):
    cfg = json.loads((FIXTURES / "deepseek-ai__DeepSeek-V3.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps(renamed(cfg, "n_routed_experts")))
    args = ["fit", str(p), "--gpu", "h200", "--tp", "8", "--context", "8k"]
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "n_routed_experts_renamed" in err and "--weight-memory" in err
    # the KV cache does not depend on it: size still answers
    assert run(["size", str(p), "-c", "1"]) == 0
    capsys.readouterr()
    assert run([*args, "--weight-memory", "80GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["weights_bytes"] == 80 * 2**30


# ---- keys the inventory now reads (each derived by hand) ------------------------------------


def load(fname: str, **changes):
    cfg = {**json.loads((FIXTURES / fname).read_text()), **changes}
    return parse_config(cfg, name="x", source=fname)


def total(fname: str, **changes) -> int:
    return kvplan.weight_inventory(load(fname, **changes)).params_total


def test_mamba_ssm_pads_its_vocabulary_and_reads_its_norm_and_tying():
    # state-spaces/mamba2-2.7b: d_model 2560, 64 layers, d_inner 5120, d_state 128, 80 heads,
    # 1 group, d_conv 4. Per layer: in_proj (2 x 5120 + 2 x 128 + 80) x 2560 = 27,074,560,
    # conv (5120 + 256) x 4 + bias 5,376 = 26,880, dt_bias / A_log / D 3 x 80, gated norm
    # 5,120, out_proj 2560 x 5120 = 13,107,200, block norm 2,560 -> 40,216,560. Embeddings:
    # vocab 50,277 padded to a multiple of pad_vocab_size_multiple 16 = 50,288 rows; tied.
    # (A third-party checkpoint receipt for this revision records 2,702,599,680 too.)
    fname = "state-spaces__mamba2-2.7b.json"
    layer = 10_576 * 2560 + 5_376 * 4 + 5_376 + 3 * 80 + 5_120 + 2560 * 5120 + 2560
    assert layer == 40_216_560
    expected = 64 * layer + 50_288 * 2560 + 2560
    assert total(fname) == expected == 2_702_599_680
    assert total(fname, pad_vocab_size_multiple=8) == expected - 8 * 2560  # 50,280 rows
    assert total(fname, tie_embeddings=False) == expected + 50_288 * 2560
    assert total(fname, rms_norm=False) == expected + 65 * 2560  # LayerNorm biases
    with pytest.raises(KvplanError, match="d_intermediate: mamba_ssm blocks with an MLP"):
        total(fname, d_intermediate=10240)


def test_jamba_inner_layernorms_follow_the_flag():
    # Jamba-v0.1: 28 Mamba layers (attention every 8th of 32), dt_rank 256, d_state 16: three
    # norms of 256 + 16 + 16 = 288 weights each
    assert total("ai21labs__Jamba-v0.1.json") - total(
        "ai21labs__Jamba-v0.1.json", mamba_inner_layernorms=False) == 28 * 288


def test_decilm_mlp_bias():
    # Nemotron-Super-49B: vLLM builds LlamaMLP(bias=mlp_bias) for each block with an FFN:
    # gate and up biases of the block's width, a down bias of hidden 8192
    m = load("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json")
    widths = [t.rows for t in kvplan.weight_inventory(m).tensors if t.name == "mlp.up_proj.weight"]
    with_bias = total("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json", mlp_bias=True)
    assert with_bias - kvplan.weight_inventory(m).params_total == sum(2 * w + 8192 for w in widths)


@pytest.mark.parametrize("fname, changes, match", [
    ("deepseek-ai__DeepSeek-V3.json", {"attention_bias": True}, "attention_bias: true: MLA"),
    ("nvidia__Nemotron-H-56B-Base-8K.json", {"mlp_hidden_act": "silu"}, "mlp_hidden_act: 'silu'"),
    ("MiniMaxAI__MiniMax-M2.7.json", {"shared_intermediate_size": 1536},
     "shared_intermediate_size: shared experts are not counted"),
    ("MiniMaxAI__MiniMax-M2.7.json", {"qk_norm_type": "per_head"}, "qk_norm_type: 'per_head'"),
])
def test_settings_the_inventory_does_not_count_are_refused(fname, changes, match):
    with pytest.raises(KvplanError, match=match):
        total(fname, **changes)


def test_glm52_mlp_layer_types_must_agree_with_first_k_dense_replace():
    cfg = json.loads((FIXTURES / "zai-org__GLM-5.2.json").read_text())
    assert cfg["mlp_layer_types"][:4] == ["dense", "dense", "dense", "sparse"]
    assert cfg["first_k_dense_replace"] == 3
    types = ["dense"] * 4 + cfg["mlp_layer_types"][4:]
    with pytest.raises(KvplanError, match=r"mlp_layer_types\[3\]: 'dense' disagrees with "
                       "first_k_dense_replace = 3, moe_layer_freq = 1 and n_routed_experts = 256"):
        total("zai-org__GLM-5.2.json", mlp_layer_types=types)


def test_nested_flags_the_inventory_does_not_count_are_refused():
    cfg = json.loads((FIXTURES / "Qwen__Qwen3.5-27B.json").read_text())
    text = {**cfg["text_config"], "mtp_use_dedicated_embeddings": True}
    with pytest.raises(KvplanError, match="mtp_use_dedicated_embeddings: true"):
        kvplan.weight_inventory(parse_config({**cfg, "text_config": text}, name="x", source="x"))
    g = json.loads((FIXTURES / "google__gemma-3-27b-it.json").read_text())
    vision = {**g["vision_config"], "vision_use_head": True}
    with pytest.raises(KvplanError, match="vision_config.vision_use_head: true"):
        kvplan.weight_inventory(parse_config({**g, "vision_config": vision}, name="x", source="x"))
