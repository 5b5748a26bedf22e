"""Measured serving benchmarks: readers, the closed-loop model, re-prediction, calibration
fits, and the CLI (`kvplan validate --benchmarks`, `kvplan calibrate --from-benchmarks`).

Fixture: tests/fixtures/benchmarks/aic_sample.csv holds six rows of AIConfigurator's
silicon_sample.csv (aiconfigurator-core 0.12.0 wheel, Apache-2.0; benchmarks/data/README.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.core.benchmark import MeasuredRun
from kvplan.core.serving import loop_shape, loop_times
from kvplan.loaders.benchmarks import BenchmarkFileError, read_benchmarks
from kvplan.planning.bench_predict import predict, row_terms
from kvplan.planning.deployment import efficiency_for

FIX = Path(__file__).parent / "fixtures" / "benchmarks"
REPO = Path(__file__).parent.parent


def kvplan(*args, env=None):
    import os

    e = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], capture_output=True,
                          text=True, env=e, timeout=300)


# --- the closed-loop model, by hand -------------------------------------------------------

def test_loop_shape_by_hand():
    # 16 users, 1,024-token prompts, 1,025 output tokens, 8,192-token budget:
    # room = 8,192 - 16 = 8,176 -> 1 chunk; a cycle is 1,024 decode steps + 1 chunk step;
    # b = 16 x 1,024 / 1,025; prompt tokens per step = 16 x 1,024 / 1,025 = 15.98 < c = 1,024
    # -> phi = 16 / 1,025; the start-up wave is 16 x 1,024 = 16,384 tokens = 2 full steps
    s = loop_shape(16, 16, 1024, 1025, 8192)
    assert s.chunks == 1
    assert s.decode_batch == pytest.approx(16 * 1024 / 1025)
    assert s.chunk_tokens == 1024
    assert s.chunk_share == pytest.approx(16 / 1025)
    assert (s.burst_steps, s.burst_tokens) == (2, 8192)


def test_loop_times_by_hand():
    s = loop_shape(16, 16, 1024, 1025, 8192)
    t = loop_times(s, 0.010, 0.030, 0.050, 0.050, 0.0)
    phi = 16 / 1025
    tpot = 0.010 + phi * 0.020
    rho = phi * 15 / 16  # the other 15 slots' prompts
    wait = 0.5 * tpot + rho / (2 * (1 - rho)) * 0.030
    ttft = 0.050 + 0.030 + wait
    assert t.tpot_s == pytest.approx(tpot, rel=1e-12)
    assert t.ttft_s == pytest.approx(ttft, rel=1e-12)
    assert t.output_tokens_per_s == pytest.approx(16 * 1025 / (ttft + 1024 * tpot), rel=1e-12)
    # the start-up wave at share 1/4: (2 + 1) / 2 burst steps of 50 ms after the host's 50 ms
    t4 = loop_times(s, 0.010, 0.030, 0.050, 0.050, 0.25)
    assert t4.ttft_s == pytest.approx(0.75 * ttft + 0.25 * (0.050 + 1.5 * 0.050), rel=1e-12)


def test_users_beyond_slots_wait_whole_cycles():
    s = loop_shape(8, 4, 100, 11, 8192)
    t = loop_times(s, 0.01, 0.02, 0.02, 0.0, 0.0)
    s4 = loop_shape(4, 4, 100, 11, 8192)
    t4 = loop_times(s4, 0.01, 0.02, 0.02, 0.0, 0.0)
    cycle = t4.ttft_s + 10 * t4.tpot_s
    assert t.ttft_s == pytest.approx(t4.ttft_s + 1 * cycle)  # (8 / 4 - 1) cycles
    assert t.output_tokens_per_s == pytest.approx(t4.output_tokens_per_s)  # the slots bind


def test_output_of_one_token_has_no_decode_steps():
    s = loop_shape(4, 4, 100, 1, 8192)
    assert s.decode_batch == 0 and s.chunk_share == 1.0
    t = loop_times(s, 0.01, 0.02, 0.02, 0.0, 0.0)
    assert t.ttft_s > 0 and t.output_tokens_per_s > 0


# --- re-prediction: the plan's numbers, by hand -----------------------------------------

def test_llama_8b_h200_row_by_hand():
    """Llama-3.1-8B bf16 on one H200, vLLM, 1 user, 1,000-token prompt, 101 output tokens,
    uncalibrated (HBM 80% of 4.8 TB/s = 3.84e12 B/s, 60% of 989.4 TFLOP/s = 5.9364e14).
    Weights a step reads: 8,030,261,248 - 525,336,576 (embedding lookup) = 7,504,924,672
    parameters x 2 B = 15,009,849,344 B; KV 131,072 B per token; attention 524,288 FLOPs per
    query-key pair. b = 100/101 decoding, decode context 1,050.5.
    decode step = (15,009,849,344 + 100/101 x 131,072 x 1,050.5) / 3.84e12 = 3.94432 ms;
    mixed step (1,000 prompt tokens) is compute-bound: (1,000.99 x 15,009,849,344 + 100/101 x
    524,288 x 1,050.5 + 1,000 x 524,288 x 500) / 5.9364e14 = 25.7520 ms.
    TPOT = 100/101 x 3.94432 + 1/101 x 25.7520 = 4.16024 ms;
    TTFT = 25.7520 + 0.5 x 4.16024 = 27.8321 ms (one user never queues behind itself)."""
    run = MeasuredRun(source="hand:1", model="llama-3.1-8b", gpu="h200-sxm", engine="vllm",
                      prompt_tokens=1000, output_tokens=101, concurrency=1, tpot_s=0.005)
    terms, problems = row_terms([run])
    assert problems == []
    t = terms[0]
    e = efficiency_for(t.plan.request.gpu, None, None, "vllm")
    assert not e.calibrated and "uncalibrated" in e.source
    decode = (15_009_849_344 + 100 / 101 * 131_072 * 1050.5) / 3.84e12
    mixed = (1000.990099 * 15_009_849_344 + 100 / 101 * 524_288 * 1050.5
             + 1000 * 524_288 * 500) / 5.9364e14
    lt = predict(t, e)
    assert lt.tpot_s == pytest.approx(100 / 101 * decode + 1 / 101 * mixed, rel=1e-6)
    assert lt.tpot_s == pytest.approx(4.16024e-3, rel=1e-5)
    assert lt.ttft_s == pytest.approx(27.8321e-3, rel=1e-5)


# --- readers ------------------------------------------------------------------------------

def test_aic_rows_and_problems():
    runs, problems = read_benchmarks(FIX / "aic_sample.csv")
    assert [r.model for r in runs] == ["meta-llama/Llama-3.1-70B", "moonshotai/Kimi-K2.5",
                                       "deepseek-ai/DeepSeek-V3", "MiniMaxAI/MiniMax-M2.5",
                                       "Qwen/Qwen3-32B", "deepseek-ai/DeepSeek-R1"]
    wide = runs[2]  # 64 GPUs: tp 64 over 8 HGX nodes (the spec's NIC times the crossing)
    assert (wide.tp, wide.dp, wide.ep) == (64, 1, 8)
    kimi = runs[1]  # disaggregated: 1 prefill worker (dp 4 x tp 1, ep 4), 4 decode (tp 8, ep 8)
    assert kimi.disaggregated and kimi.prefill == (1, 1, 4, 4)
    assert (kimi.prefill_workers, kimi.decode_workers, kimi.tp, kimi.dp, kimi.ep) == (1, 4, 8, 1, 8)
    r1 = runs[5]  # attention DP 8 x EP 8 (tp_size 1): 64 users, batch_size 8 per DP rank
    assert (r1.tp, r1.dp, r1.ep, r1.concurrency, r1.engine) == (1, 8, 8, 64, "trtllm")
    llama = runs[0]
    assert (llama.gpu, llama.engine, llama.tp, llama.weight_dtype) == ("h200-sxm", "vllm", 1, "fp8")
    assert (llama.prompt_tokens, llama.output_tokens, llama.concurrency) == (1024, 8192, 8)
    assert llama.tpot_s == pytest.approx(24.0974342786796e-3)
    assert llama.throughput_derived
    # 8 users x 8,192 tokens / (TTFT + 8,191 x TPOT)
    assert llama.output_tokens_per_s == pytest.approx(
        8 * 8192 / (0.2473047496867366 + 8191 * 0.0240974342786796))
    assert any("KV-cache dtype" in a for a in llama.assumptions)
    assert problems == []


def test_vllm_json_with_metadata(tmp_path):
    d = {"date": "20261201-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B",
         "num_prompts": 80, "request_rate": "inf", "max_concurrency": 8, "completed": 80,
         "total_input_tokens": 80 * 1000, "total_output_tokens": 80 * 200,
         "mean_ttft_ms": 40.0, "mean_tpot_ms": 5.0, "output_throughput": 1500.0,
         "gpu": "h200-sxm", "tp": "1"}
    p = tmp_path / "run.json"
    p.write_text(json.dumps(d))
    runs, problems = read_benchmarks(p)
    assert problems == []
    r = runs[0]
    assert (r.model, r.gpu, r.engine, r.concurrency, r.num_prompts) == (
        "meta-llama/Llama-3.1-8B", "h200-sxm", "vllm", 8, 80)
    assert (r.prompt_tokens, r.output_tokens) == (1000, 200)
    assert (r.ttft_s, r.tpot_s, r.output_tokens_per_s) == (0.040, 0.005, 1500.0)
    del d["gpu"]
    p.write_text(json.dumps(d))
    runs, problems = read_benchmarks(p)
    assert runs == [] and problems[0].field == "gpu"
    assert "--metadata gpu=" in problems[0].message
    runs, problems = read_benchmarks(p, {"gpu": "h100-sxm"})
    assert runs[0].gpu == "h100-sxm"


def test_sglang_jsonl_bad_line_keeps_others(tmp_path):
    good = {"backend": "sglang", "max_concurrency": 4, "completed": 10, "total_input_tokens": 5000,
            "total_output_tokens": 1000, "mean_ttft_ms": 30, "mean_tpot_ms": 6,
            "output_throughput": 600}
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps(good) + "\n[1, 2]\n" + json.dumps({**good, "mean_tpot_ms": -1}) + "\n")
    runs, problems = read_benchmarks(p, {"model": "llama-3.1-8b", "gpu": "h100-sxm"})
    assert len(runs) == 1 and runs[0].engine == "sglang" and runs[0].prompt_tokens == 500
    assert [(p.source.rsplit(":", 1)[1], p.field) for p in problems] == [("2", "line"),
                                                                          ("3", "mean_tpot_ms")]


def test_kvplan_csv_values_and_tolerance(tmp_path):
    p = tmp_path / "k.csv"
    p.write_text("model,gpu,engine,tp,prompt_tokens,output_tokens,concurrency,tpot_ms,tolerance\n"
                 "llama-3.1-8b,h200-sxm,vllm,1,1000,101,1,4.16024,0.01\n"
                 "llama-3.1-8b,h200-sxm,vllm,1,0,101,1,4.0,\n"
                 "llama-3.1-8b,h200-sxm,vllm,1,1000,101,1,nan,\n"
                 "llama-3.1-8b,h200-sxm,vllm,1,1000,101,1,1e400,\n")
    runs, problems = read_benchmarks(p)
    assert len(runs) == 1 and runs[0].tolerance == 0.01 and runs[0].tpot_s == pytest.approx(4.16024e-3)
    assert [(x.source.rsplit(":", 1)[1], x.field) for x in problems] == [
        ("3", "prompt_tokens"), ("4", "tpot_ms"), ("5", "tpot_ms")]


@pytest.mark.parametrize("name,text,words", [
    ("x.txt", "hello", "format not recognised"),
    ("x.csv", "a,b\n1,2\n", "unknown column(s) a, b"),
    ("x.json", "[1]", "not a `vllm bench serve"),
    ("x.json", "{", "not JSON"),
])
def test_files_that_are_no_benchmark(tmp_path, name, text, words):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(BenchmarkFileError) as e:
        read_benchmarks(p)
    assert words in str(e.value) and str(p) in str(e.value)


def test_unknown_model_and_gpu_are_row_problems():
    runs = [MeasuredRun(source="f:2", model="no-such-model-xyz", gpu="h200-sxm", engine="vllm",
                        prompt_tokens=10, output_tokens=10, concurrency=1, tpot_s=1.0),
            MeasuredRun(source="f:3", model="llama-3.1-8b", gpu="no-such-gpu", engine="vllm",
                        prompt_tokens=10, output_tokens=10, concurrency=1, tpot_s=1.0)]
    terms, problems = row_terms(runs)
    assert terms == [] and [p.source for p in problems] == ["f:2", "f:3"]


# --- calibration ----------------------------------------------------------------------------

def test_fit_recovers_a_known_efficiency():
    """Rows measured as a known efficiency predicts them: the fit finds a model that predicts
    them again to well under 1%."""
    from dataclasses import replace

    from kvplan.core.perf import Efficiency
    from kvplan.planning.calibration_fit import fit, predicted_times

    runs = [MeasuredRun(source=f"s:{i}", model=m, gpu="h200-sxm", engine="vllm", tp=tp,
                        prompt_tokens=isl, output_tokens=osl, concurrency=c, tpot_s=1.0, ttft_s=1.0)
            for i, (m, tp, isl, osl, c) in enumerate(
                (m, tp, isl, osl, c) for m in ("llama-3.1-8b", "qwen3-30b-a3b") for tp in (1, 2)
                for isl, osl in ((1024, 1024), (8192, 256)) for c in (1, 8, 64))]
    terms, problems = row_terms(runs)
    assert problems == []
    truth = Efficiency(hbm_bandwidth=0.7, flops=0.5, moe=0.6, step_overhead_s=2e-3,
                       layer_overhead_s=30e-6, allreduce_latency_s=25e-6, host_ttft_s=0.02,
                       host_ttft_per_prompt_token_s=2e-6, startup_share=0.1)
    ttft, tpot = predicted_times(terms, truth)
    measured = [replace(t, run=replace(t.run, ttft_s=float(a), tpot_s=float(b)))
                for t, a, b in zip(terms, ttft, tpot, strict=True)]
    f = fit(measured, "synthetic")
    ttft2, tpot2 = predicted_times(measured, f.efficiency)
    assert max(abs(tpot2 / tpot - 1)) < 0.01
    assert max(abs(ttft2 / ttft - 1)) < 0.02


def test_one_depth_leaves_the_layer_cost_out():
    """Rows of one model depth (Llama-3.1-8B, 32 layers) cannot tell a cost per layer from a
    cost per step: the fit leaves the per-layer term at 0 and puts it all in the step."""
    from dataclasses import replace

    from kvplan.core.perf import Efficiency
    from kvplan.planning.calibration_fit import fit, predicted_times

    runs = [MeasuredRun(source=f"s:{i}", model="llama-3.1-8b", gpu="h200-sxm", engine="vllm",
                        tp=tp, prompt_tokens=isl, output_tokens=osl, concurrency=c, tpot_s=1.0,
                        ttft_s=1.0)
            for i, (tp, isl, osl, c) in enumerate(
                (tp, isl, osl, c) for tp in (1, 2) for isl, osl in ((1024, 1024), (8192, 256))
                for c in (1, 4, 8, 16, 32, 64))]
    terms, _ = row_terms(runs)
    truth = Efficiency(hbm_bandwidth=0.7, flops=0.5, step_overhead_s=2e-3, layer_overhead_s=30e-6,
                       allreduce_latency_s=25e-6, host_ttft_s=0.02, startup_share=0.1)
    ttft, tpot = predicted_times(terms, truth)
    measured = [replace(t, run=replace(t.run, ttft_s=float(a), tpot_s=float(b)))
                for t, a, b in zip(terms, ttft, tpot, strict=True)]
    e = fit(measured, "synthetic").efficiency
    assert e.layer_overhead_s == 0.0
    assert e.step_overhead_s == pytest.approx(2e-3 + 32 * 30e-6, rel=0.05)


def test_calibration_file_errors(tmp_path):
    from kvplan.loaders.serving_calibration import CalibrationFileError, read_calibration

    src = json.loads((REPO / "calibrations" / "h200-sxm--vllm.json").read_text())
    e, _ = read_calibration(REPO / "calibrations" / "h200-sxm--vllm.json")
    assert e.calibrated and "h200-sxm--vllm.json" in e.source
    for key, value in (("hbm_bandwidth", 1.5), ("step_overhead_s", -1), ("moe", "x"),
                       ("layer_overhead_s", -1e-6), ("layer_overhead_s", None),
                       ("layer_overhead_s", 1e308), ("host_ttft_s", 10 ** 400)):
        bad = json.loads(json.dumps(src))
        bad["efficiency"][key] = value
        p = tmp_path / "c.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(CalibrationFileError) as err:
            read_calibration(p)
        assert f"efficiency.{key}" in str(err.value) and len(str(err.value)) < 300


def test_calibration_file_without_layer_overhead_reads_as_zero(tmp_path):
    """Files written before kvplan fitted a per-layer cost stay readable: the term is 0 there."""
    from kvplan.loaders.serving_calibration import read_calibration

    doc = json.loads((REPO / "calibrations" / "h200-sxm--vllm.json").read_text())
    assert doc["efficiency"]["layer_overhead_s"] > 0
    del doc["efficiency"]["layer_overhead_s"]
    p = tmp_path / "old.json"
    p.write_text(json.dumps(doc))
    e, _ = read_calibration(p)
    assert e.layer_overhead_s == 0.0 and e.step_overhead_s == doc["efficiency"]["step_overhead_s"]


def test_plan_uses_the_calibration(calibrations_on):
    from kvplan.loaders.hardware import load_gpu
    from kvplan.planning.deployment import efficiency_for

    e = efficiency_for(load_gpu("h200-sxm"), None, None, "vllm")
    doc = json.loads((REPO / "calibrations" / "h200-sxm--vllm.json").read_text())
    assert e.calibrated and e.step_overhead_s == doc["efficiency"]["step_overhead_s"]
    assert "calibration h200-sxm--vllm.json" in e.source
    none = efficiency_for(load_gpu("mi300x"), None, None, "vllm")
    assert not none.calibrated and "uncalibrated: no serving calibration for mi300x vllm" in none.source


# --- CLI ------------------------------------------------------------------------------------

def test_cli_validate_json_and_tolerance(tmp_path):
    p = tmp_path / "k.csv"
    p.write_text("model,gpu,engine,prompt_tokens,output_tokens,concurrency,tpot_ms,ttft_ms\n"
                 "llama-3.1-8b,h200-sxm,vllm,1000,101,1,4.16024,27.8321\n"
                 "llama-3.1-8b,h200-sxm,vllm,1000,101,1,0,27.8321\n")
    r = kvplan("validate", "--benchmarks", str(p), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rows"] == 1 and doc["rows_not_predicted"] == 1
    assert doc["problems"][0]["field"] == "tpot_ms" and doc["problems"][0]["source"].endswith(":3")
    row = doc["results"][0]
    assert row["predicted"]["tpot_s"] == pytest.approx(4.16024e-3, rel=1e-5)
    assert abs(row["errors"]["tpot"]) < 1e-5 and abs(row["errors"]["ttft"]) < 1e-5
    assert row["calibration"].startswith("kvplan defaults; uncalibrated")
    r = kvplan("validate", "--benchmarks", str(p), "--tpot-tolerance", "0.1")
    assert r.returncode == 0 and "tolerance tpot median |error| <= 10%: ok" in r.stdout
    p.write_text("model,gpu,engine,prompt_tokens,output_tokens,concurrency,tpot_ms\n"
                 "llama-3.1-8b,h200-sxm,vllm,1000,101,1,8.32048\n")
    r = kvplan("validate", "--benchmarks", str(p), "--tpot-tolerance", "0.1")
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_cli_bad_input_is_one_line(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("nothing")
    r = kvplan("validate", "--benchmarks", str(p))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "format not recognised" in r.stderr
    r = kvplan("validate", "--benchmarks", str(FIX / "aic_sample.csv"), "--meta", "nope=1")
    assert r.returncode == 2 and "--meta" in r.stderr


def test_cli_calibrate_refuses_without_rows_and_writes_nothing(tmp_path):
    out = tmp_path / "cal"
    r = kvplan("calibrate", "--from-benchmarks", str(FIX / "aic_sample.csv"), "--out", str(out))
    assert r.returncode == 2 and "enough measured rows" in r.stderr
    assert not out.exists()


# --- review findings, pinned -------------------------------------------------------------

def _vllm_doc(**kw):
    d = {"backend": "vllm", "model_id": "llama-3.1-8b", "num_prompts": 80, "request_rate": "inf",
         "max_concurrency": 8, "completed": 80, "total_input_tokens": 80_000,
         "total_output_tokens": 16_000, "mean_ttft_ms": 40.0, "mean_tpot_ms": 5.0,
         "output_throughput": 1500.0, "gpu": "h200-sxm"}
    d.update(kw)
    return d


def test_hostile_json_is_one_problem(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"mean_tpot_ms": ' + "[" * 100_000)
    with pytest.raises(BenchmarkFileError):
        read_benchmarks(deep)
    big = tmp_path / "big.jsonl"
    big.write_text('{"completed": ' + "9" * 5000 + "}\n" + json.dumps(_vllm_doc()) + "\n")
    runs, problems = read_benchmarks(big)
    assert len(runs) == 1 and problems[0].field == "line"


def test_non_string_dtype_is_a_row_problem(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(_vllm_doc(kv_dtype=5)) + "\n" + json.dumps(_vllm_doc(weight_dtype={})) + "\n")
    runs, problems = read_benchmarks(p)
    assert runs == [] and [x.field for x in problems] == ["kv_dtype", "weight_dtype"]


def test_vllm_json_rules(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_vllm_doc(request_rate=0.5)))
    runs, problems = read_benchmarks(p)
    assert runs == [] and problems[0].field == "request_rate"
    p.write_text(json.dumps(_vllm_doc(num_prompts=4, completed=4, total_input_tokens=4000,
                                      total_output_tokens=800)))
    (r,), _ = read_benchmarks(p)
    assert r.concurrency == 4  # never more users than prompts
    assert "tp not recorded: 1" in r.assumptions
    p.write_text(json.dumps(_vllm_doc(mean_tpot_ms=0.0, total_output_tokens=80)))
    (r,), _ = read_benchmarks(p)
    assert r.tpot_s is None and r.ttft_s == 0.040  # a prefill-only run keeps its TTFT
    p.write_text(json.dumps(_vllm_doc()))
    (r,), _ = read_benchmarks(p, {"gpu": "b200"})
    assert r.gpu == "h200-sxm"  # what the file records wins over --meta


def test_meta_does_not_apply_to_aic():
    with pytest.raises(BenchmarkFileError) as e:
        read_benchmarks(FIX / "aic_sample.csv", {"gpu": "l4"})
    assert "--meta does not apply" in str(e.value)


def test_empty_and_header_only_name_the_file(tmp_path):
    for name, text in (("e.jsonl", ""), ("h.csv", "model,gpu,engine\n")):
        p = tmp_path / name
        p.write_text(text)
        r = kvplan("validate", "--benchmarks", str(p))
        assert r.returncode == 2 and str(p) in r.stderr and "Traceback" not in r.stderr


def test_one_unplannable_row_spares_its_deployment():
    ok = MeasuredRun(source="f:3", model="llama-3.1-8b", gpu="h200-sxm", engine="vllm",
                     prompt_tokens=1024, output_tokens=256, concurrency=4, tpot_s=0.01)
    huge = MeasuredRun(source="f:2", model="llama-3.1-8b", gpu="h200-sxm", engine="vllm",
                       prompt_tokens=10**9, output_tokens=256, concurrency=4, tpot_s=0.01)
    terms, problems = row_terms([huge, ok])
    assert [t.run.source for t in terms] == ["f:3"] and [p.source for p in problems] == ["f:2"]
    alone, _ = row_terms([ok])
    assert predict(terms[0], efficiency_for(terms[0].plan.request.gpu, None, None)).tpot_s == \
        predict(alone[0], efficiency_for(alone[0].plan.request.gpu, None, None)).tpot_s


def test_capacity_is_the_plans_rule():
    from kvplan.planning.fit_pools import concurrency_at

    run = MeasuredRun(source="f:2", model="llama-3.1-70b", gpu="h200-sxm", engine="vllm", tp=4,
                      pp=2, prompt_tokens=4096, output_tokens=512, concurrency=256, tpot_s=0.01)
    (t,), _ = row_terms([run])
    assert t.capacity == concurrency_at(t.plan, 4096 + 256)


def test_one_user_never_queues_behind_itself():
    s = loop_shape(1, 1, 4096, 1, 8192)
    t = loop_times(s, 0.01, 0.1, 0.1, 0.0, 0.0)
    assert t.queue_s == pytest.approx(0.5 * t.tpot_s)  # half a step, no M/D/1 wait
    assert not t.saturated


def test_calibrate_failure_writes_nothing(tmp_path):
    data = REPO / "benchmarks" / "data" / "aiconfigurator_silicon_sample.csv"
    f = tmp_path / "file"
    f.write_text("x")
    r = kvplan("calibrate", "--from-benchmarks", str(data), "--out", str(f / "sub"))
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
    out = tmp_path / "cal"
    r = kvplan("calibrate", "--from-benchmarks", str(data), "--out", str(out), "--report",
               str(tmp_path / "nodir" / "r.md"))
    assert r.returncode == 2 and "--report" in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_rows_without_times_are_not_fitted(tmp_path):
    p = tmp_path / "t.csv"
    lines = ["model,gpu,engine,prompt_tokens,output_tokens,concurrency,output_tokens_per_s,group"]
    lines += [f"llama-3.1-8b,h200-sxm,vllm,1024,256,{c},{100 * c},g{c}" for c in range(1, 40)]
    p.write_text("\n".join(lines) + "\n")
    r = kvplan("calibrate", "--from-benchmarks", str(p), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "enough measured rows" in r.stderr


def test_a_fit_needs_two_rows_per_term(tmp_path):
    """Eleven terms are not fitted on ~15 rows (two per term: 22): every sweep is its own group,
    so about half of the 30 rows train; before the guard (8 rows) this wrote a calibration."""
    from kvplan.planning.calibration_fit import MIN_ROWS, PARAMS

    assert len(PARAMS) == 11 and MIN_ROWS == 22
    p = tmp_path / "t.csv"
    lines = ["model,gpu,engine,prompt_tokens,output_tokens,concurrency,tpot_ms,ttft_ms,group"]
    lines += [f"llama-3.1-8b,h200-sxm,vllm,1024,256,{c},{4 + c / 10},{30 + c},g{c}"
              for c in range(1, 31)]
    p.write_text("\n".join(lines) + "\n")
    r = kvplan("calibrate", "--from-benchmarks", str(p), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "enough measured rows" in r.stderr
    assert not (tmp_path / "c").exists()


def test_disaggregated_row_by_hand():
    from kvplan.core.perf import Efficiency
    from kvplan.planning.bench_predict import predict_detail

    runs, _ = read_benchmarks(FIX / "aic_sample.csv")
    (t,), problems = row_terms([runs[1]])
    assert problems == []
    e = Efficiency()  # the roofline: no host time, no start-up share
    lt, d = predict_detail(t, e)
    # 4 users over 4 decode workers of one DP rank: 1 each; 1 prefill worker of 4 DP ranks
    assert (d["slots"], d["prefill_ranks"], d["prefill_chunks"]) == (1, 4, 1)
    # the KV of a 1,024-token prompt on a decode GPU: Kimi-K2.5's MLA latent (512 + 64) x 2 B
    # x 61 layers, replicated on its TP 8; over GB200's NVLink (900 GB/s x 0.7)
    assert d["kv_transfer_bytes"] == 1024 * 576 * 2 * 61 == 71_958_528
    assert d["kv_transfer_s"] == pytest.approx(71_958_528 / (900e9 * e.interconnect))
    # the steady state: TTFT = prefill + M/D/1 wait + transfer, at the users' rate
    cycle = lt.ttft_s + 1023 * lt.tpot_s
    rho = 4 / cycle / 4 * d["prefill_s"]
    assert d["prefill_utilisation"] == pytest.approx(rho, rel=1e-6)
    wait = rho / (2 * (1 - rho)) * d["prefill_s"]
    assert lt.ttft_s == pytest.approx(d["prefill_s"] + wait + d["kv_transfer_s"], rel=1e-6)
    assert lt.output_tokens_per_s == pytest.approx(4 * 1024 / cycle)
    # a decode rank holds its one user for 1,023 of every cycle's steps: batch 1 (at least one)
    assert d["decode_batch"] == 1.0


def test_disaggregated_row_without_worker_counts(tmp_path):
    src = (FIX / "aic_sample.csv").read_text().splitlines()
    head = src[0].split(",")
    row = src[2].split(",")
    row[head.index("decode_num_workers")] = ""
    p = tmp_path / "s.csv"
    p.write_text("\n".join([src[0], ",".join(row)]) + "\n")
    runs, problems = read_benchmarks(p)
    assert runs == [] and [x.field for x in problems] == ["decode_num_workers"]
    assert "does not record how many workers" in problems[0].message


def test_a_named_release_plans_with_its_engines_calibration(monkeypatch):
    """`--engine sglang@0.5.23` or `vllm@0.11.0` takes the (GPU, engine) calibration, whose
    label names the releases it was fitted on (it once fell back to the uncalibrated
    roofline)."""
    import json
    from pathlib import Path

    from kvplan.loaders.hardware import load_gpu
    from kvplan.planning.deployment import efficiency_for

    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    doc = json.loads((Path(__file__).parents[1] / "calibrations" / "b200--sglang.json").read_text())
    for engine in ("sglang@0.5.23", "sglang"):
        e = efficiency_for(load_gpu("b200"), None, None, engine)
        assert e.calibrated and e.hbm_bandwidth == doc["efficiency"]["hbm_bandwidth"]
        assert f"on releases {doc['engine_versions'][0]}, " in e.source
    assert efficiency_for(load_gpu("h100"), None, None, "vllm@0.11.0").calibrated
