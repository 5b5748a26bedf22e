"""`kvplan plan` and `kvplan init`: workload sampling, the scenario schema and its errors,
traces, the report formats, atomic writes and --require-fit."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from kvplan.cli.main import run
from kvplan.core.workload import Dist, Workload, fixed, lognormal_from_percentiles, quantile, sample
from kvplan.loaders.scenario_yaml import load_scenario
from kvplan.planning.scenario import run_scenario


def fail(argv: list[str], capsys) -> str:
    """Exit 2, nothing on stdout, no traceback, every stderr line ``kvplan: error: ...``
    (a scenario reports each of its problems on its own line). Returns stderr."""
    code = run(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == "" and "Traceback" not in err
    assert err.strip() and all(x.startswith("kvplan: error: ") for x in err.strip().splitlines())
    return err

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

BASE = """kvplan: 1
model: llama-3.1-8b
hardware:
  gpu: h100
  gpus_per_node: 8
  nodes: 1
serving:
  tp: 1
  kv_dtype: fp8
workload:
  request_rate: 5
  prompt_tokens: 2000
  output_tokens: 200
slo:
  ttft_ms: 1000
  tpot_ms: 50
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- workload ---------------------------------------------------------------------------


def test_quantile_is_nearest_rank():
    v = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]
    assert quantile(v, 50) == 5  # ceil(0.5 x 10) = 5th smallest
    assert quantile(v, 95) == 10  # ceil(9.5) = 10th
    assert quantile(v, 90) == 9
    assert quantile(v, 100) == 10 and quantile(v, 1) == 1


def test_lognormal_through_two_percentiles():
    d = lognormal_from_percentiles(50, 800, 95, 4000)
    # the median is e^mu; p95 = e^(mu + 1.6449 sigma): sigma = ln 5 / 1.6449
    assert math.exp(d.a) == pytest.approx(800)
    assert d.b == pytest.approx(math.log(5) / 1.6448536269514722)
    rng = random.Random(1)
    draws = sorted(d.draw(rng) for _ in range(40_000))
    assert quantile(draws, 50) == pytest.approx(800, rel=0.03)
    assert quantile(draws, 95) == pytest.approx(4000, rel=0.05)


def test_distributions_clip_and_round():
    rng = random.Random(0)
    u = Dist("uniform", 10, 12)
    assert {u.draw(rng) for _ in range(200)} == {10, 11, 12}
    n = Dist("normal", 100, 1000, lo=1, hi=150)
    draws = [n.draw(rng) for _ in range(500)]
    assert min(draws) == 1 and max(draws) == 150
    assert fixed(7).draw(rng) == 7


def test_multi_turn_conversation_by_hand():
    w = Workload(prompt=fixed(1000), output=fixed(100), shared_prefix_tokens=500, turns=3,
                 tokens_per_turn=fixed(50), thinking=fixed(30), images_per_request=2,
                 tokens_per_image=256, request_rate_per_s=1.0)
    reqs = sample(w, 2, seed=0)
    assert len(reqs) == 6  # 2 conversations x 3 turns
    t1, t2, t3 = reqs[:3]
    # turn 1: 500 shared + 1,000 prompt + 2 x 256 image tokens; 30 reasoning + 100 output
    assert (t1.shared_tokens, t1.history_tokens, t1.new_tokens, t1.output_tokens) == (500, 0, 1512, 130)
    # turn 2: the history keeps turn 1's prompt and visible output, not its reasoning
    assert (t2.history_tokens, t2.new_tokens, t2.output_tokens) == (1612, 50, 130)
    assert (t3.history_tokens, t3.new_tokens) == (1612 + 50 + 100, 50)
    assert t3.final_tokens == 500 + 1762 + 50 + 130


def test_seed_changes_samples_and_is_reproducible(tmp_path):
    text = BASE.replace("prompt_tokens: 2000", "prompt_tokens: {lognormal: {p50: 1000, p90: 3000}}")
    p = write(tmp_path, text + "samples: 500\n")
    sc = load_scenario(p)
    a = run_scenario(sc, seed=1)
    b = run_scenario(sc, seed=1)
    c = run_scenario(sc, seed=2)
    assert a.stats["prompt_tokens"] == b.stats["prompt_tokens"] != c.stats["prompt_tokens"]
    assert a.requests == 500 and "500 requests sampled with seed 1" in a.sample_note


# ---- memory of a workload mix equals plan_fit at one length -----------------------------


@pytest.mark.parametrize("model,engine,prefix", [
    ("llama-3.1-8b", "vllm", 0), ("llama-3.1-8b", "vllm", 3000), ("gemma-2-9b", "vllm", 0),
    ("gemma-2-9b", "sglang", 0), ("llama-3.1-8b", "sglang", 2048), ("llama-3.1-8b", "trtllm", 0),
    ("jamba-v0.1", "vllm", 0)])
def test_fixed_lengths_agree_with_fit(tmp_path, model, engine, prefix):
    """One length for every request: the workload's pool count is plan_fit's own concurrency
    for that context and shared prefix (two code paths, one rule)."""
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.hf_params import weight_inventory
    from kvplan.loaders.quant_config import weight_format
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.fit import plan_fit
    from kvplan.planning.fit_types import FitRequest

    gpu = "h200" if model == "jamba-v0.1" else "h100"
    text = (BASE.replace("llama-3.1-8b", model).replace("gpu: h100", f"gpu: {gpu}")
            .replace("tp: 1", f"tp: 1\n  engine: {engine}").replace("kv_dtype: fp8", "kv_dtype: bf16")
            .replace("output_tokens: 200", f"output_tokens: 200\n  shared_prefix_tokens: {prefix}"))
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=20)
    o = rep.outcomes[0]
    m = load_model(model)
    fit = plan_fit(FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                              gpu=load_gpu(gpu), engine=engine, kv_dtype="bf16", context_tokens=prefix + 2200,
                              shared_prefix_tokens=prefix, search=False))
    assert o.evaluation.memory_concurrency == fit.max_concurrency > 0


# ---- schema errors ----------------------------------------------------------------------


def test_every_problem_is_reported_with_its_line(tmp_path, capsys):
    text = """kvplan: 1
model: llama-3.1-8b
hardware:
  gpu: h100
  prize: 3
serving:
  tp: [0]
workload:
  request_rate: -2
  promt_tokens: 1000
  output_tokens: {lognormal: {p50: 100, p100: 900}}
slo:
  tpot_ms: 50
  percentile: 0
"""
    p = write(tmp_path, text)
    err = fail(["plan", str(p)], capsys)
    lines = err.strip().splitlines()
    assert all(x.startswith("kvplan: error: ") for x in lines)
    want = [(":5:", "hardware.prize", "did you mean 'price_usd_per_gpu_hour'"),
            (":7:", "serving.tp", "positive integer"),
            (":9:", "workload.request_rate", "greater than 0"),
            (":10:", "workload.promt_tokens", "did you mean 'prompt_tokens'"),
            (":11:", "workload.output_tokens", "outside (0, 100)"),
            (":14:", "slo.percentile", "greater than 0")]
    for line_no, field, msg in want:
        assert any(line_no in x and field in x and msg in x for x in lines), (field, lines)
    assert any("workload.prompt_tokens" in x and "missing" in x for x in lines)
    assert len(lines) == 7


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace("request_rate: 5", "request_rate: 5\n  concurrent_requests: 3"),
     "exactly one of request_rate"),
    (lambda t: t.replace("percentile: 95", "") + "  percentile: 100.5\n", "less than or equal to 100"),
    (lambda t: t.replace("kvplan: 1", "kvplan: 2"), "version 2 is not supported"),
    (lambda t: t.replace("output_tokens: 200", "output_tokens: 200\n  shared_prefix_tokens: 10\n"
                         "  prefix_cache_hit_rate: 0.5"), "not both"),
    (lambda t: t.replace("prompt_tokens: 2000", "prompt_tokens: {uniform: {min: 9, max: 3}}"),
     "below min"),
    (lambda t: t.replace("prompt_tokens: 2000", "prompt_tokens: {gamma: 3}"), "one of fixed"),
    (lambda t: t.replace("nodes: 1", "nodes: lots"), "hardware.nodes"),
    (lambda t: t + "offload:\n  cpu: {bytes: 100GiB, bandwidth: 25GB}\n", "with /s"),
    (lambda t: t.replace("gpus_per_node: 8", "gpus_per_node: 8.5"), "gpus_per_node"),
    (lambda t: t.replace("nodes: 1", "nodes: 1\n  nodes: 2"), "duplicate key 'nodes'"),
    (lambda t: t.replace("workload:", "workload: [1]\nx:"), "workload"),
    (lambda t: "kvplan: 1\nmodel: [unclosed\n", "malformed YAML"),
])
def test_bad_scenarios_exit_2(tmp_path, capsys, edit, needle):
    p = write(tmp_path, edit(BASE))
    err = fail(["plan", str(p)], capsys)
    assert needle in err and str(p) in err


def test_unknown_model_and_gpu_are_one_line(tmp_path, capsys):
    err = fail(["plan", str(write(tmp_path, BASE.replace("gpu: h100", "gpu: h1000")))], capsys)
    assert "unknown GPU 'h1000'" in err and len(err.strip().splitlines()) == 1
    err = fail(["plan", str(write(tmp_path, BASE.replace("llama-3.1-8b", "no-such-model")))], capsys)
    assert len(err.strip().splitlines()) == 1


def test_trace_lines_without_counts_are_all_reported(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text(
        '{"prompt_tokens": 100, "output_tokens": 10}\n'
        '{"prompt_tokens": 100}\n'
        '\n'
        '{"conversations": [{"from": "human", "value": "hi"}]}\n'
        'not json\n'
        '{"input_len": 0, "output_len": 5}\n')
    text = BASE.replace("  prompt_tokens: 2000\n  output_tokens: 200\n", "  trace: t.jsonl\n")
    err = fail(["plan", str(write(tmp_path, text))], capsys)
    lines = err.strip().splitlines()
    t = str(tmp_path / "t.jsonl")
    assert f"{t}:2: no output token count" in lines[0]
    assert any(f"{t}:4: no prompt token count" in x for x in lines)
    assert any(f"{t}:4: no output token count" in x for x in lines)
    assert any(f"{t}:5: malformed JSON" in x for x in lines)
    assert any(f"{t}:6: input_len: prompt token count must be a positive integer" in x for x in lines)
    assert len(lines) == 5


def test_missing_trace_file(tmp_path, capsys):
    text = BASE.replace("  prompt_tokens: 2000\n  output_tokens: 200\n", "  trace: gone.jsonl\n")
    err = fail(["plan", str(write(tmp_path, text))], capsys)
    assert "workload.trace" in err and "gone.jsonl" in err


def test_requests_longer_than_max_model_len_are_counted(tmp_path):
    text = BASE.replace("prompt_tokens: 2000", "prompt_tokens: {uniform: {min: 1000, max: 3000}}") \
        .replace("kv_dtype: fp8", "kv_dtype: fp8\n  max_model_len: 2200")
    rep = run_scenario(load_scenario(write(tmp_path, text + "samples: 1000\n")))
    assert rep.excluded_requests > 0 and rep.requests + rep.excluded_requests == 1000
    assert any("longer than max_model_len" in w for w in rep.warnings)
    assert rep.stats["final_tokens"].max <= 2200


# ---- reports and files ------------------------------------------------------------------


def test_json_report_keys(tmp_path, capsys):
    assert run(["plan", str(EXAMPLES / "chat-shared-prompt.yaml"), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("kvplan_plan", "scenario", "model", "seed", "requests", "sample_note", "workload",
              "slo", "best", "configurations", "skipped", "assumptions", "warnings"):
        assert k in d
    c = d["best"]
    for k in ("gpu", "engine", "tp", "pp", "kv_dtype", "fits", "meets_slo", "memory_concurrency",
              "batch", "ttft_s", "tpot_s", "replicas_needed", "gpus", "gpus_needed",
              "usd_per_hour", "usd_per_million_output_tokens", "usd_per_million_tokens",
              "usd_per_request", "headroom", "memory", "launch", "preemption"):
        assert k in c
    assert c["launch"]["vllm"].startswith("vllm serve meta-llama/Llama-3.1-8B")
    assert f"--max-num-seqs {c['batch']}" in c["launch"]["vllm"]
    assert d["requests"] == 10_000 and d["workload"]["stats"]["final_tokens"]["max"] == 4864


def test_html_report_is_self_contained(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert run(["plan", str(EXAMPLES / "guide-1-8xh100-llama3-70b-32k.yaml"), "-f", "html",
                "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("<!doctype html>") and text.count("<svg") == 3
    import re

    assert "<script" not in text and "src=" not in text
    # matplotlib's SVG refers to its own glyph and marker definitions; nothing outside the file
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', text))
    for needle in ("Configurations, best first", "Requests the KV pool holds", "Cost of the token",
                   "Memory per GPU", "Assumptions", "vllm serve"):
        assert needle in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_markdown_report(capsys):
    assert run(["plan", str(EXAMPLES / "rag-trace.yaml"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# kvplan plan: RAG from a JSONL trace")
    assert "| 1 | l40s |" in out and "## Assumptions" in out and "TTFT p90" in out


def test_terminal_report(capsys):
    assert run(["plan", str(EXAMPLES / "hybrid-long-context.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Configurations, best first" in out and "Best: " in out and "Assumptions:" in out
    assert max(len(x) for x in out.splitlines() if "h200-sxm" in x and "GPU" not in x) <= 120


def test_output_is_never_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "r.md"
    out.write_text("keep me")
    err = fail(["plan", str(EXAMPLES / "chat-shared-prompt.yaml"), "-f", "markdown", "-o", str(out)],
               capsys)
    assert "exists; pass --force" in err and out.read_text() == "keep me"
    assert run(["plan", str(EXAMPLES / "chat-shared-prompt.yaml"), "-f", "markdown", "-o", str(out),
                "--force"]) == 0
    assert out.read_text().startswith("# kvplan plan")


def test_nothing_written_on_bad_input(tmp_path, capsys):
    out = tmp_path / "r.json"
    p = write(tmp_path, BASE.replace("request_rate: 5", "request_rate: -5"))
    fail(["plan", str(p), "-f", "json", "-o", str(out)], capsys)
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["s.yaml"]


def test_require_fit_gates(tmp_path, capsys):
    ok = write(tmp_path, BASE, "ok.yaml")
    assert run(["plan", str(ok), "-f", "json", "--require-fit"]) == 0
    capsys.readouterr()
    bad = write(tmp_path, BASE.replace("tpot_ms: 50", "tpot_ms: 1"), "bad.yaml")
    assert run(["plan", str(bad), "-f", "json"]) == 0  # without the flag: a report, exit 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"] is None and "over the 1 ms limit" in d["configurations"][0]["reasons"][0]
    assert run(["plan", str(bad), "-f", "json", "--require-fit"]) == 1
    assert "no configuration meets" in capsys.readouterr().err


def test_fixed_fleet_too_small_for_the_rate(tmp_path, capsys):
    p = write(tmp_path, BASE.replace("request_rate: 5", "request_rate: 500"))
    rep = run_scenario(load_scenario(p), samples=50)
    e = rep.outcomes[0].evaluation
    assert not e.meets_rate and e.gpus == 8 and e.gpus_needed > 8
    assert any("the fleet has 8" in r for r in e.reasons) and rep.best is None


def test_init_writes_a_runnable_starter(tmp_path, capsys):
    p = tmp_path / "starter.yaml"
    assert run(["init", str(p)]) == 0
    text = p.read_text()
    assert text.startswith("# kvplan scenario") and "kvplan: 1" in text
    capsys.readouterr()
    err = fail(["init", str(p)], capsys)
    assert "exists; pass --force" in err
    assert run(["init", str(p), "--force"]) == 0
    assert run(["plan", str(p), "-f", "json", "--samples", "300"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["configurations"] and d["requests"] == 300


def test_bad_cli_values(capsys):
    assert "unknown format" in fail(["plan", str(EXAMPLES / "reasoning.yaml"), "-f", "pdf"], capsys)
    assert "--samples" in fail(["plan", str(EXAMPLES / "reasoning.yaml"), "--samples", "0"], capsys)


def test_prefix_cache_hit_rate_cuts_prefill_not_memory(tmp_path):
    from kvplan.core.workload import Request
    from kvplan.planning.scenario_eval import prefill_tokens

    w = Workload(prompt=fixed(2000), output=fixed(200), prefix_cache_hit_rate=0.3,
                 request_rate_per_s=1.0)
    assert prefill_tokens(Request(0, 0, 2000, 200), w, 16) == 2000 - 600
    w2 = Workload(prompt=fixed(2000), output=fixed(200), shared_prefix_tokens=1000, request_rate_per_s=1.0)
    assert prefill_tokens(Request(1000, 0, 2000, 200), w2, 16) == 2000 + 1000 - 992  # whole blocks
    base = run_scenario(load_scenario(write(tmp_path, BASE, "a.yaml")), samples=10)
    hit = run_scenario(load_scenario(write(tmp_path, BASE.replace(
        "output_tokens: 200", "output_tokens: 200\n  prefix_cache_hit_rate: 0.5"), "b.yaml")), samples=10)
    a, b = base.outcomes[0].evaluation, hit.outcomes[0].evaluation
    assert b.ttft_s < a.ttft_s and b.memory_concurrency == a.memory_concurrency


def test_draft_model_joins_the_memory_plan(tmp_path):
    """A draft's KV and K lookahead slots per request: the pool count equals plan_fit with
    the same draft at the same context (plan_fit adds the lookahead itself)."""
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.hf_params import weight_inventory
    from kvplan.loaders.quant_config import weight_format
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.fit import plan_fit
    from kvplan.planning.fit_types import Draft, FitRequest

    text = BASE + "draft_model: {model: llama-3.2-1b, speculative_tokens: 4}\n"
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    o = rep.outcomes[0]
    m, d = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    fit = plan_fit(FitRequest(
        model=m, weights=weight_inventory(m), weight_format=weight_format(m, None), gpu=load_gpu("h100"),
        kv_dtype="fp8", context_tokens=2200, search=False,
        draft=Draft(d, weight_inventory(d), weight_format(d, None), 4)))
    assert o.evaluation.memory_concurrency == fit.max_concurrency
    assert '"num_speculative_tokens":4' in o.launch["vllm"]
    assert any("speed-up of speculative decoding is not modelled" in a for a in rep.assumptions)


def test_speculative_decoding_tpot_by_hand(tmp_path):
    """Llama-3.1-8B with a Llama-3.2-1B draft, K = 4, acceptance length 3, on an H100 SXM
    (80% of 3.35 TB/s = 2.68e12 B/s), fp8 KV, one sequence at 2,000 tokens, uncalibrated:
    target decode (15,009,849,344 + 65,536 x 2,000) / 2.68e12 = 5.64960 ms (the verify pass of
    5 tokens is still memory-bound: 5 x 1.5e10 FLOPs / 5.94e14 = 0.13 ms); draft decode
    (2,471,628,800, tied head, + 16,384 x 2,000) / 2.68e12 = 0.934476 ms;
    TPOT = (5.64960 + 4 x 0.934476) / 3 = 3.12917 ms."""
    from kvplan.core.perf import tpot_s

    text = BASE + "draft_model: {model: llama-3.2-1b, speculative_tokens: 4, acceptance_length: 3}\n"
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    sm = rep.outcomes[0].step
    assert tpot_s(sm, 1, 2000) == pytest.approx(3.12917e-3, rel=1e-5)
    assert any("emits 3 tokens per step" in a for a in rep.assumptions)


def test_acceptance_length_outside_its_range(tmp_path, capsys):
    text = BASE + "draft_model: {model: llama-3.2-1b, speculative_tokens: 4, acceptance_length: 6}\n"
    err = fail(["plan", str(write(tmp_path, text))], capsys)
    assert "draft_model.acceptance_length: 6 is outside [1, speculative_tokens + 1 = 5]" in err


def test_chart_axes_read_in_tokens():
    from kvplan.report.charts import token_label

    assert [token_label(v) for v in (1024, 2048, 131072, 1 << 20, 3 << 20, 1000, 7.5)] == [
        "1k", "2k", "128k", "1M", "3M", "1000", "7.5"]


def test_report_charts_cap_at_max_num_seqs_and_fall_back_to_tables(monkeypatch):
    import sys

    from kvplan.report.plan_plots import concurrency_data, plots_html

    rep = run_scenario(load_scenario(EXAMPLES / "guide-1-8xh100-llama3-70b-32k.yaml"), samples=200)
    fitting = [o for o in rep.outcomes if o.evaluation.fits][:3]
    data = concurrency_data(fitting, rep.max_model_len, rep.scenario.workload.shared_prefix_tokens)
    caps = {o.fit.max_num_seqs for o in fitting}
    assert caps == {1024}
    # TP 8 at 2k holds more than 1,024 requests; the engine runs at most max_num_seqs of them
    assert max(y for _, pts in data for _, y in pts) == 1024
    svgs = plots_html(fitting, rep.max_model_len, rep.scenario.workload.shared_prefix_tokens)
    assert len(svgs) == 3 and all(x.startswith("<svg") for x in svgs)
    assert "max_num_seqs 1,024" in svgs[0] and ">GiB<" in svgs[2].replace("</tspan>", "<")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    tables = plots_html(fitting, rep.max_model_len, rep.scenario.workload.shared_prefix_tokens)
    assert "pip install 'kvplan[plot]'" in tables[0] and tables[1].startswith("<table>")
    assert "<td>2k</td><td>1,024</td>" in tables[1].replace(" ", "")


# ---- review fixes -----------------------------------------------------------------------


def test_names_are_checked_at_load_with_their_lines(tmp_path, capsys):
    text = (BASE.replace("llama-3.1-8b", "llama-3.1-8c").replace("gpu: h100", "gpu: [h100, h1000]")
            .replace("tp: 1", "tp: 1\n  engine: vlm\n  weight_dtype: fp7")
            .replace("kv_dtype: fp8", "kv_dtype: fp9"))
    err = fail(["plan", str(write(tmp_path, text))], capsys)
    lines = err.strip().splitlines()
    for line_no, field, msg in ((":2:", "model", "unknown model 'llama-3.1-8c'"),
                                (":4:", "hardware.gpu", "unknown GPU 'h1000'"),
                                (":9:", "serving.engine", "unknown engine 'vlm'"),
                                (":10:", "serving.weight_dtype", "unknown weight dtype 'fp7'"),
                                (":11:", "serving.kv_dtype", "unknown KV format 'fp9'")):
        assert any(line_no in x and field in x and msg in x for x in lines), (field, lines)
    assert "--gpu" not in err and "--engine" not in err and len(lines) == 5


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace("request_rate: 5", "request_rate: true"), "expected a number"),
    (lambda t: t.replace("tpot_ms: 50", "tpot_ms: 50\n  percentile: yes"), "expected a number"),
    (lambda t: t.replace("prompt_tokens: 2000", "prompt_tokens: 0"), "at least 1 token"),
    (lambda t: t.replace("prompt_tokens: 2000", "prompt_tokens: null"), "prompt_tokens: missing"),
    (lambda t: t.replace("output_tokens: 200", "output_tokens: {uniform: {min: 0, max: 9}}"),
     "at least 1 token"),
    (lambda t: t.replace("output_tokens: 200", "output_tokens: 200\n  turns: 3"),
     "tokens_per_turn: turns > 1 need"),
    (lambda t: t.replace("kv_dtype: fp8", "kv_dtype: fp8\n  max_model_len: 0"), "at least 1"),
    (lambda t: t.replace("gpu: h100", "gpu: [h100, l4]\n  price_usd_per_gpu_hour: 2"), "one per GPU"),
    (lambda t: t.replace("gpu: h100", "gpu: [h100, l4]\n  price_usd_per_gpu_hour: {h100: 2}"),
     "no price for l4"),
    (lambda t: t.replace("output_tokens: 200", "output_tokens: {fixed: 5, max: 0}"), "at least 1 token"),
    (lambda t: t + "offload:\n  cpu: {bytes: 100GiB, bandwidth: 0.1B/s}\n", "less than one byte"),
    # the vendored GLM-4.7-FP8 config lacks attention_bias, which its parameter count needs
    (lambda t: t.replace("llama-3.1-8b", "tests/fixtures/configs/zai-org__GLM-4.7-FP8.json"),
     "needs a parameter count"),
    (lambda t: t.replace("output_tokens: 200", "output_tokens: 200\n  shared_prefix_tokens: 3000")
     .replace("kv_dtype: fp8", "kv_dtype: fp8\n  max_model_len: 1000"), "no request fits max_model_len"),
])
def test_more_bad_values(tmp_path, capsys, edit, needle):
    err = fail(["plan", str(write(tmp_path, edit(BASE)))], capsys)
    assert needle in err


def test_nodes_zero_is_one_line(tmp_path, capsys):
    err = fail(["plan", str(write(tmp_path, BASE.replace("nodes: 1", "nodes: 0")))], capsys)
    assert len(err.strip().splitlines()) == 1 and "hardware.nodes" in err and "search" in err


def test_every_duplicate_key_is_reported(tmp_path, capsys):
    text = BASE.replace("nodes: 1", "nodes: 1\n  nodes: 2").replace("tp: 1", "tp: 1\n  tp: 2")
    err = fail(["plan", str(write(tmp_path, text))], capsys)
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert ":7: duplicate key 'nodes'" in lines[0] and ":10: duplicate key 'tp'" in lines[1]


def test_a_price_per_gpu(tmp_path):
    text = BASE.replace("gpu: h100", "gpu: [h100, l40s]\n  price_usd_per_gpu_hour: {h100: 2.0, l40s: 0.5}")
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    prices = {o.candidate.gpu.key: o.evaluation.usd_per_hour for o in rep.outcomes}
    assert prices == {"h100-sxm": 16.0, "l40s": 4.0}


def test_max_model_len_that_does_not_fit_is_not_ok(tmp_path):
    """vLLM refuses to start when one max_model_len sequence does not fit the pool."""
    text = BASE.replace("gpu: h100", "gpu: l4").replace("kv_dtype: fp8",
                                                        "kv_dtype: fp8\n  max_model_len: 128k")
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    e = rep.outcomes[0].evaluation
    assert not rep.outcomes[0].fit.fits and not e.fits and e.memory_concurrency > 1
    assert e.reasons[0].startswith("does not fit") and rep.best is None
    assert rep.outcomes[0].launch == {}


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_draft_kv_counts_on_token_engines(tmp_path, engine):
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.hf_params import weight_inventory
    from kvplan.loaders.quant_config import weight_format
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.fit import plan_fit
    from kvplan.planning.fit_types import Draft, FitRequest

    text = BASE.replace("tp: 1", f"tp: 1\n  engine: {engine}") + \
        "draft_model: {model: llama-3.2-1b, speculative_tokens: 4}\n"
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    m, d = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    fit = plan_fit(FitRequest(
        model=m, weights=weight_inventory(m), weight_format=weight_format(m, None), gpu=load_gpu("h100"),
        engine=engine, kv_dtype="fp8", context_tokens=2199, search=False,
        draft=Draft(d, weight_inventory(d), weight_format(d, None), 4)))
    # the peak of a 2,000 + 200 request is 2,199 written tokens (+ 4 lookahead, as plan_fit adds)
    assert rep.outcomes[0].evaluation.memory_concurrency == fit.max_concurrency


def test_model_and_trace_paths_are_relative_to_the_scenario(tmp_path, monkeypatch):
    fixtures = Path(__file__).resolve().parent / "fixtures" / "configs"
    src = next(p for p in fixtures.iterdir() if "llama" in p.name.lower())
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "config.json").write_bytes((src / "config.json" if src.is_dir() else src).read_bytes())
    p = write(tmp_path, BASE.replace("model: llama-3.1-8b", "model: cfg/config.json"))
    monkeypatch.chdir("/")
    rep = run_scenario(load_scenario(p), samples=10)
    assert rep.outcomes and str(cfg / "config.json") == rep.scenario.model


def test_written_files_are_ordinary_files(tmp_path):
    import os
    import stat

    out = tmp_path / "r.md"
    old = os.umask(0o022)
    try:
        assert run(["plan", str(EXAMPLES / "chat-shared-prompt.yaml"), "-f", "markdown", "-o", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_percentile_is_exact():
    assert quantile(list(range(1, 1001)), 99.9) == 999
    assert quantile(list(range(1, 10_001)), 99.9) == 9990


def test_skip_reasons_name_scenario_keys(tmp_path):
    text = BASE.replace("gpu: h100", "gpu: a100-80gb")
    rep = run_scenario(load_scenario(write(tmp_path, text)), samples=10)
    assert rep.skipped and "serving.allow_emulated: true" in rep.skipped[0].reason
    assert "--allow-emulated" not in rep.skipped[0].reason
    ok = run_scenario(load_scenario(write(tmp_path, text.replace(
        "kv_dtype: fp8", "kv_dtype: fp8\n  allow_emulated: true"), "b.yaml")), samples=10)
    assert not ok.skipped and ok.outcomes


def test_kv_cache_memory_larger_than_the_gpu_does_not_fit(tmp_path):
    text = BASE.replace("kv_dtype: fp8", "kv_dtype: fp8\n  kv_cache_memory: 1TB")
    e = run_scenario(load_scenario(write(tmp_path, text)), samples=10).outcomes[0].evaluation
    assert not e.fits and "exceeds" in e.reasons[0]


def test_price_map_keyed_by_a_spec_file(tmp_path, monkeypatch):
    import shutil

    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(Path(__file__).resolve().parent.parent / "hardware_specs" / "l40s.yaml", specs / "mine.yaml")
    text = BASE.replace("gpu: h100", "gpu: [specs/mine.yaml, h100]\n"
                        "  price_usd_per_gpu_hour: {specs/mine.yaml: 0.5, h100: 2}")
    p = write(tmp_path, text)
    monkeypatch.chdir("/")
    rep = run_scenario(load_scenario(p), samples=10)
    assert sorted(o.evaluation.usd_per_hour for o in rep.outcomes) == [4.0, 16.0]


def test_launch_cap_at_the_slo_batch_states_the_engine_pool(tmp_path, capsys):
    """The starter's best line caps vLLM at the SLO batch (--max-num-seqs B); the note gives the
    pool vLLM then has, which ``kvplan fit`` with the same flags computes on its own."""
    p = tmp_path / "starter.yaml"
    assert run(["init", str(p)]) == 0
    capsys.readouterr()
    assert run(["plan", str(p), "-f", "json", "--samples", "2000"]) == 0
    best = json.loads(capsys.readouterr().out)["configurations"][0]
    line = best["launch"]["vllm"].split()
    assert line[line.index("--max-num-seqs") + 1] == str(best["batch"])
    assert best["max_num_seqs"] > best["batch"]  # the figures keep the default cap
    argv = ["fit", "llama-3.1-8b", "--gpu", best["gpu"], "--kv-dtype", best["kv_dtype"],
            "-c", str(best["max_model_len"]), "--json"]
    assert run(argv) == 0
    default = json.loads(capsys.readouterr().out)["memory"]["kv_pool_bytes"]
    assert run([*argv, "--max-num-seqs", str(best["batch"])]) == 0
    capped = json.loads(capsys.readouterr().out)["memory"]["kv_pool_bytes"]
    assert best["kv_pool_bytes"] == default < capped
    note = next(n for n in best["notes"] if "SLO batch" in n)
    assert f"its pool is {capped:,} B" in note and f"{capped - default:+,} B" in note
