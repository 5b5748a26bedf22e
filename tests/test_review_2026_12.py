"""Defects a review found in the 2026-12-03 inventories and plans, each pinned."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cli_helpers import fail

import kvplan
from kvplan.core.perf import Efficiency, decode_step
from kvplan.loaders.hardware import load_gpu
from kvplan.planning.deployment import plan

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
K3 = CONFIGS / "moonshotai__Kimi-K3.json"
G3N = CONFIGS / "google__gemma-3n-E4B.json"
M1 = CONFIGS / "MiniMaxAI__MiniMax-M1.json"
V4 = CONFIGS / "deepseek-ai__DeepSeek-V4-Flash.json"


def test_kimi_k3_expert_padding_above_tp_12_is_refused(capsys):
    """vLLM's KimiMoE pads a rank's expert slice to 256 rows without EP: 3,072 / 16 = 192 ->
    256, a third more expert bytes than kvplan counts: refused (tp 12: 256 rows, planned)."""
    line = fail(capsys, "fit", str(K3), "--gpu", "b200", "--tp", "16", "-c", "32k")
    assert "tp" in line and "3,072 / 16 = 192" in line and "tp <= 12" in line


def test_kimi_k3_without_vision_config_is_refused(tmp_path, capsys):
    cfg = json.loads(K3.read_text())
    del cfg["vision_config"]
    path = tmp_path / "k3.json"
    path.write_text(json.dumps(cfg))
    line = fail(capsys, "fit", str(path), "--gpu", "b200", "--tp", "8", "-c", "32k")
    assert "vision_config" in line and "KimiK3VisionConfig" in line


def test_minimax_m1_needs_its_expert_count(tmp_path, capsys):
    """MiniMaxM1Config's default (8 experts) is remote code: a missing num_local_experts is an
    error, not a dense model."""
    cfg = json.loads(M1.read_text())
    del cfg["num_local_experts"]
    path = tmp_path / "m1.json"
    path.write_text(json.dumps(cfg))
    line = fail(capsys, "fit", str(path), "--gpu", "h200", "--tp", "8", "--engine", "vllm@0.23.0")
    assert "num_local_experts" in line


def test_models_vllm_cannot_pipeline_are_refused_at_pp_2(capsys):
    assert "Gemma3nForConditionalGeneration" in fail(capsys, "fit", str(G3N), "--gpu", "l4",
                                                     "--pp", "2")
    assert "MiniMaxText01ForCausalLM" in fail(capsys, "fit", str(M1), "--gpu", "h200", "--tp", "4",
                                              "--pp", "2", "--engine", "vllm@0.23.0")


def test_gemma3n_without_num_kv_shared_layers_takes_the_class_default():
    """Gemma3nTextConfig's default is 15 shared layers (the count equals the stated file's)."""
    cfg = json.loads(G3N.read_text())
    stated = kvplan.weight_inventory(kvplan.parse_config(cfg, name="x", source="x.json"))
    text = dict(cfg["text_config"])
    del text["num_kv_shared_layers"]
    m = kvplan.parse_config({**cfg, "text_config": text}, name="x", source="x.json")
    assert m.kv_shared_layers == 15
    assert any("Gemma3nTextConfig default" in a for a in m.assumptions)
    assert kvplan.weight_inventory(m).params_total == stated.params_total == 7_818_517_072


def test_gemma3n_decode_reads_its_per_token_projections():
    """per_layer_model_projection [35 x 256, 2048], altup_projections and
    altup_unembed_projections (3 each, [2048, 2048]) run on every token: 8,960 x 2,048 +
    6 x 2,048 x 2,048 = 43,515,904 parameters, 87,031,808 B in bf16, read by each decode step
    (they sit with the embedding, which a decode step does not read)."""
    m = kvplan.parse_config(json.loads(G3N.read_text()), name="g3n", source="g3n.json")
    ideal = Efficiency(hbm_bandwidth=1.0, flops=1.0)
    _, sm = plan(m, load_gpu("l4"), kv_dtype="auto", weight_dtype=None, engine="vllm", tp=1,
                 pp=1, context_tokens=8192, efficiency=ideal)
    w = kvplan.weight_inventory(m)
    per_token = sum(t.params for t in w.tensors if t.per_token)
    assert per_token == 35 * 256 * 2048 + 6 * 2048 * 2048 == 43_515_904
    from kvplan.planning.perf_model import step_model

    r, _ = plan(m, load_gpu("l4"), kv_dtype="auto", weight_dtype=None, engine="vllm", tp=1,
                pp=1, context_tokens=8192, efficiency=ideal)
    lookups = replace(w, tensors=tuple(replace(t, per_token=False) for t in w.tensors))
    without = step_model(replace(r, request=replace(r.request, weights=lookups)), ideal)
    assert sm.weight_bytes - without.weight_bytes == 2 * 43_515_904 == 87_031_808


def test_sglang_0523_serves_gemma3_text_only(capsys):
    """Gemma3ForConditionalGeneration is in SGLang 0.5.23's mm_disabled_models: text-only, no
    multimodal budget terms, so it is planned (0.5.23's formula), not refused; Qwen3-VL is."""
    from kvplan.cli.main import run

    assert run(["fit", "gemma-3-27b-it", "--gpu", "h100", "--engine", "sglang@0.5.23"]) == 0
    assert "SGLang 0.5.23" in capsys.readouterr().out
    line = fail(capsys, "fit", str(CONFIGS / "Qwen__Qwen3-VL-8B-Instruct.json"), "--gpu", "h100",
                "--engine", "sglang@0.5.23")
    assert "multimodal" in line


def test_deepseek_v4_tp_must_divide_heads_and_output_groups(capsys):
    """vLLM asserts n_heads % tp (64 heads) and divides o_groups (8) by tp."""
    assert "num_attention_heads (64)" in fail(capsys, "fit", str(V4), "--gpu", "b200", "--tp", "3")
    assert "o_groups (8)" in fail(capsys, "fit", str(V4), "--gpu", "b200", "--tp", "16")


def test_deepseek_v4_time_takes_the_indexer_cost(monkeypatch):
    """V4-Flash's 21 ratio-4 layers run a lightning indexer: calibrated figures charge the fitted
    cost on each, and say so."""
    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    m = kvplan.parse_config(json.loads(V4.read_text()), name="v4", source="v4.json")
    assert m.lightning_indexers and not m.sparse_mla
    from kvplan.planning.deployment import efficiency_for

    e = efficiency_for(load_gpu("b200"), None, None, "vllm", m.lightning_indexers)
    assert e.indexer_overhead_s > 0 and "indexer cost" in e.source
    _, sm = plan(m, load_gpu("b200"), kv_dtype="auto", weight_dtype=None, engine="vllm", tp=8,
                 pp=1, context_tokens=32768, efficiency=e)
    assert sm.indexer_layers == 21
    slow = decode_step(sm, 4, 8192).seconds
    fast = decode_step(replace(sm, efficiency=replace(e, indexer_overhead_s=0.0)), 4, 8192).seconds
    assert slow - fast == __import__("pytest").approx(21 * e.indexer_overhead_s)


def test_deepseek_v4_takes_every_fp8_spelling_as_fp8_ds_mla(capsys):
    """vLLM's _resolve_dsv4_kv_cache_dtype maps auto and any fp8* value to fp8_ds_mla: the
    plan is the same pool (149,191 blocks of 1,002,240 B on 8 x B200); bf16 stays refused."""
    from kvplan.cli.main import run

    for kv in ("fp8_e5m2", "fp8"):
        assert run(["fit", str(V4), "--gpu", "b200", "--tp", "8", "-c", "128k", "--kv-dtype",
                    kv]) == 0
        out = capsys.readouterr().out
        assert "149,191 blocks of 256 tokens, 1,002,240 B each" in out and "KV fp8_ds_mla" in out
    assert "fp8_ds_mla" in fail(capsys, "fit", str(V4), "--gpu", "b200", "--tp", "8", "-c", "128k",
                                "--kv-dtype", "bf16")
