"""Regressions from the review of fit / launch / validate."""

from __future__ import annotations

import json

from cli_helpers import fail

from kvplan.cli.main import run


def _fit(capsys, *args):
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_fp32_checkpoint_weights_run_in_16_bits(capsys):
    d = _fit(capsys, "mamba-2.8b", "--gpu", "h100")
    assert d["weight_dtype"] == "bf16"
    assert d["memory"]["weights_bytes"] < 2.8e9 * 2 * 1.01  # ~2 B per parameter, not 4


def test_launch_never_exceeds_the_planned_max_num_seqs(capsys):
    d = _fit(capsys, "llama-3-8b", "--gpu", "h100", "-c", "128")
    assert d["max_concurrency"] > 1024 and d["max_num_seqs"] == 1024
    # the engine keeps its own cap (1,024, the one the budget used), so the line sets none
    assert "--max-num-seqs" not in d["launch"]["vllm"]
    assert any("max_num_seqs is 1,024" in n for n in d["notes"])
    d = _fit(capsys, "llama-3-8b", "--gpu", "h100", "-c", "128", "--max-num-seqs", "512")
    assert "--max-num-seqs 512" in d["launch"]["vllm"] and d["max_num_seqs"] == 512


def test_pipeline_stages_without_cache_layers(capsys):
    # Nemotron-H-56B: 118 layers, only 10 attention + 54 Mamba; pp 60 leaves some stages
    # holding only MLP layers, a worker vLLM cannot build a KV cache for (>= 0.11: a group
    # with no layer there, ``assert group_size > 0``): refused, naming the stage
    msg = fail(capsys, "fit", "nemotron-h-56b-base-8k", "--gpu", "h100", "--pp", "60")
    assert "holding no cache layer" in msg and "--pp" in msg
    d = _fit(capsys, "nemotron-h-56b-base-8k", "--gpu", "h100", "--pp", "2")
    assert d["max_concurrency"] >= 1


def test_sglang_curve_and_fit_agree_on_hybrid_windows(capsys):
    from kvplan.core.perf import Efficiency
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.deployment import plan
    from kvplan.planning.fit_pools import concurrency_at

    d = _fit(capsys, "gemma-3-27b-it", "--gpu", "h100", "--engine", "sglang")
    r, _ = plan(load_model("gemma-3-27b-it"), load_gpu("h100"), kv_dtype="auto",
                weight_dtype=None, engine="sglang", tp=1, pp=1, context_tokens=8192,
                efficiency=Efficiency())
    assert concurrency_at(r, 8192) == d["max_concurrency"]


def test_sglang_launch_carries_a_given_pool(capsys):
    d = _fit(capsys, "llama-3-8b", "--gpu", "h100", "--engine", "sglang", "--kv-cache-memory",
             "10GiB")
    # 10 GiB / (32 layers x 8 KV heads x 256 (K + V) x 2 B) = 81,920 tokens
    assert d["kv_pool_tokens"] == 10 * 2**30 // (32 * 8 * 256 * 2) == 81920
    assert "--max-total-tokens 81920" in d["launch"]["sglang"]


def test_draft_needs_speculative_tokens(capsys):
    assert "--num-speculative-tokens K" in fail(capsys, "fit", "llama-3-8b", "--gpu", "h100",
                                                "--draft-model", "llama-3.2-1b")


def test_validate_rejects_a_zero_timing(tmp_path, capsys):
    run_file = {"schema": "kvplan-calibration-run", "version": 1, "cases": [
        {"kind": "decode_step", "id": "z", "tolerance": 0.1, "measured_seconds": 0,
         "inputs": {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 4, "intermediate": 128,
                    "batch": 1, "context": 16, "element_bytes": 4, "copy_bytes_per_s": 1e9,
                    "flops_per_s": 1e9}}]}
    path = tmp_path / "z.json"
    path.write_text(json.dumps(run_file))
    assert "measured_seconds must be positive" in fail(capsys, "validate", str(path))


def test_mxfp4_on_a_dense_model_is_refused(capsys):
    assert "mxfp4 quantises routed experts only" in fail(capsys, "fit", "llama-3-8b", "--gpu",
                                                         "h100", "--weight-dtype", "mxfp4")


def test_curve_warns_when_nothing_fits(capsys):
    # Llama-3-70B bf16 (141 GB of weights) on one 24 GB RTX 4090: no pool at all
    assert run(["curve", "llama-3-70b", "--gpu", "rtx-4090", "--x", "batch", "--json"]) == 0
    err = capsys.readouterr().err
    assert "nothing fits at any point" in err


def test_sweep_leaves_timings_empty_where_nothing_fits():
    from kvplan.planning.sweep import Grid
    from kvplan.report.sweep_table import sweep

    df = sweep(Grid(models=["llama-3-70b"], gpus=["rtx-4090"], tps=[1], pps=[1],
                    kv_dtypes=["auto"], contexts=[8192], batches=[1]))
    assert not df["fits"].any() and df["ttft_ms"].isna().all()
