"""`kvplan plan` with attention data parallelism and expert parallelism (``serving.dp`` /
``serving.ep``): candidates, per-rank memory, replica throughput, GPUs and cost, refusals,
launch lines and the simulator, each checked against a figure derived apart from the code
under test (fit's hand-pinned per-rank concurrency, the throughput formula written out here)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvplan.cli.main import run
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.scenario_yaml import load_scenario
from kvplan.planning.scenario import candidates

DSV3 = """kvplan: 1
model: deepseek-v3
hardware: {{gpu: h200}}
serving: {{tp: {tp}, dp: {dp}, ep: {ep}}}
workload: {{{demand}, prompt_tokens: 31744, output_tokens: 1024}}
slo: {{tpot_ms: 200}}
samples: 50
"""


def plan_json(tmp_path: Path, capsys, text: str, *extra: str) -> dict:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    assert run(["plan", str(p), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def by_layout(d: dict) -> dict[tuple[int, int, int], dict]:
    return {(c["tp"], c["dp"], c["ep"]): c for c in d["configurations"]}


def test_candidates_of_search(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(DSV3.format(tp="[1, 8]", dp="search", ep="search", demand="request_rate: 1"))
    s = load_scenario(p).serving
    h200 = [load_gpu("h200")]
    moe = {(c.tp, c.dp, c.ep) for c in candidates(s, h200, moe=True)}
    # dp 1, 2, 4, 8; ep 1 and tp x dp
    assert moe == {(tp, dp, ep) for tp in (1, 8) for dp in (1, 2, 4, 8) for ep in {1, tp * dp}}
    # a dense model: dp search plans dp 1 only (DP ranks are replicas), ep search ep 1 only
    assert {(c.tp, c.dp, c.ep) for c in candidates(s, h200, moe=False)} == {(1, 1, 1), (8, 1, 1)}
    # explicit lists are taken as written
    p.write_text(DSV3.format(tp=1, dp="[1, 2]", ep=2, demand="request_rate: 1"))
    s = load_scenario(p).serving
    assert [(c.dp, c.ep) for c in candidates(s, h200, moe=False)] == [(1, 2), (2, 2)]


def test_dsv3_dp8_per_rank_memory_and_replica_throughput(tmp_path, capsys):
    # DeepSeek-V3 at 32k on 8 x H200: TP 8 holds 20 sequences, DP 8 + EP 8 13 per rank (8 x 13
    # = 104), as tests/test_expert_parallel.py derives by hand; a request of 31,744 + 1,024
    # tokens peaks at 32,767, the same 2,048 blocks of 16 as 32k
    d = plan_json(tmp_path, capsys, DSV3.format(tp="[1, 8]", dp="[1, 8]", ep="search",
                                                demand="request_rate: 20"))
    cfg = by_layout(d)
    tp8, dp8 = cfg[(8, 1, 1)], cfg[(1, 8, 8)]
    assert tp8["memory_concurrency"] == 20 and dp8["memory_concurrency"] == 13
    assert (dp8["dp"], dp8["ep"], dp8["gpus_per_replica"]) == (8, 8, 8)
    # a replica is 8 ranks, each serving 1 / (prefill + output x TPOT / batch) requests/s,
    # TPOT without the prefill stalls = tpot_mean x (1 - prefill share)
    b, out = dp8["batch"], 1024
    step = dp8["tpot_mean_s"] * (1 - dp8["prefill_share"])
    per_rank = 1 / (dp8["mean_prefill_s"] + out * step / b)
    assert dp8["requests_per_s_per_replica"] == pytest.approx(8 * per_rank, rel=1e-12)
    assert dp8["replicas_needed"] == math.ceil(20 / dp8["requests_per_s_per_replica"])
    assert dp8["gpus_needed"] == 8 * dp8["replicas_needed"]
    assert dp8["usd_per_hour"] == pytest.approx(dp8["gpus"] * dp8["price_usd_per_gpu_hour"])
    # the MoE group of tp 8 x dp 8 = 64 GPUs spans nodes: skipped, with dp and ep in the JSON
    wide = [s for s in d["skipped"] if (s["tp"], s["dp"]) == (8, 8)]
    assert {s["ep"] for s in wide} == {1, 64}
    assert all("tp x dp = 64 GPUs span nodes of 8 GPUs" in s["reason"] for s in wide)


def test_closed_loop_under_dp(tmp_path, capsys):
    d = plan_json(tmp_path, capsys, DSV3.format(tp=1, dp=8, ep=8,
                                                demand="concurrent_requests: 300"))
    c = d["configurations"][0]
    b = c["batch"]
    assert b == 13  # the pool's per-rank 13 (the TPOT limit is not binding)
    need = math.ceil(300 / (b * 8))  # 104 requests per replica
    assert c["replicas_needed"] == need == 3
    assert c["headroom"] == pytest.approx(1 - 300 / (need * b * 8))


def test_dense_dp_ranks_are_replicas(tmp_path, capsys):
    # Llama-3.1-8B, dp 2 = two replicas of one GPU: the same per-rank figures, twice the
    # throughput per replica, twice its GPUs
    text = """kvplan: 1
model: llama-3.1-8b
hardware: {gpu: h100}
serving: {tp: 1, dp: [1, 2], kv_dtype: fp8}
workload: {request_rate: 5, prompt_tokens: 2000, output_tokens: 200}
slo: {tpot_ms: 50}
samples: 50
"""
    cfg = by_layout(plan_json(tmp_path, capsys, text))
    one, two = cfg[(1, 1, 1)], cfg[(1, 2, 1)]
    for key in ("memory_concurrency", "batch", "ttft_s", "tpot_s", "kv_pool_bytes"):
        assert one[key] == two[key], key
    assert two["requests_per_s_per_replica"] == pytest.approx(2 * one["requests_per_s_per_replica"])
    assert two["gpus_per_replica"] == 2


def test_engine_refusals_are_skipped_with_the_rule(tmp_path, capsys):
    d = plan_json(tmp_path, capsys, DSV3.format(tp=1, dp=8, ep="[4, 8]",
                                                demand="request_rate: 1"))
    (s,) = d["skipped"]
    assert (s["dp"], s["ep"]) == (8, 4)
    assert "ep=4 is not a layout vLLM runs" in s["reason"]
    assert [(c["dp"], c["ep"]) for c in d["configurations"]] == [(8, 8)]


def test_launch_lines_and_simulation_under_dp(tmp_path, capsys):
    text = DSV3.format(tp=1, dp=8, ep=8, demand="request_rate: 2").replace(
        "serving: {", "serving: {engine: [vllm, sglang], ")
    d = plan_json(tmp_path, capsys, text, "--simulate", "40")
    by_engine = {c["engine"]: c for c in d["configurations"]}
    v, g = by_engine["vllm"], by_engine["sglang"]
    vllm = v["launch"]["vllm"].split()
    assert vllm[vllm.index("--max-num-seqs") + 1] == str(v["batch"])  # per rank
    assert "--data-parallel-size 8 --enable-expert-parallel" in v["launch"]["vllm"]
    sgl = g["launch"]["sglang"].split()
    assert sgl[sgl.index("--max-running-requests") + 1] == str(8 * g["batch"])  # the deployment's
    sim = d["simulation"]
    assert (sim["configuration"]["dp"], sim["configuration"]["ep"]) == (8, 8)
    best = d["best"]
    rate = 2 / (best["replicas_needed"] * 8)
    assert sim["arrivals"].startswith(f"Poisson at {rate:g} requests/s per DP rank")


@pytest.mark.parametrize("serving, needle", [
    ("{dp: 0}", 'serving.dp: expected a positive integer, a list of them or "search" (got 0)'),
    ("{ep: x}", "serving.ep: expected a positive integer, a list of them or \"search\" (got 'x')"),
    ("{dp: [2, true]}", "(got True)"),
    ("{dpp: 2}", "serving.dpp: unknown field"),
])
def test_bad_dp_ep_values(tmp_path, capsys, serving, needle):
    p = tmp_path / "s.yaml"
    p.write_text(DSV3.format(tp=1, dp=1, ep=1, demand="request_rate: 1").replace(
        "serving: {tp: 1, dp: 1, ep: 1}", f"serving: {serving}"))
    assert run(["plan", str(p)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and needle in err, err
    assert f"{p}:4: " in err  # the serving line


DISAGG = """kvplan: 1
model: deepseek-v3
hardware: {{gpu: h200}}
serving: {{tp: 1, dp: 8, ep: 8}}
workload: {{request_rate: 10, prompt_tokens: 8192, output_tokens: 1024}}
slo: {{ttft_ms: {ttft}, tpot_ms: 100}}
disaggregated:
  link_bandwidth: 50GB/s
  prefill: {{tp: [8, 1], dp: [1, 8]}}
samples: 50
"""


def test_disaggregated_prefill_role_layout(tmp_path, capsys):
    d = plan_json(tmp_path, capsys, DISAGG.format(ttft=2000))
    c = d["best"]
    dd = c["disaggregated"]
    opts = {(o["tp"], o["dp"], o["ep"]): o for o in dd["prefill_options"]}
    # ep defaults to 1 and tp x dp: TP 8 (ep 1, 8) and DP 8 (ep 1, 8); tp 8 x dp 8 spans nodes
    assert set(opts) == {(8, 1, 1), (8, 1, 8), (1, 8, 1), (1, 8, 8)}
    assert any("prefill layout tp 8 x pp 1 x dp 8 not planned" in n for n in c["notes"])
    for o in opts.values():  # GPU-seconds per request = mean prefill x GPUs / DP ranks
        assert o["gpu_seconds_per_request"] == pytest.approx(
            o["mean_prefill_s"] * o["gpus_per_instance"] / o["dp"])
    # every option meets 2 s; DP 8 prefills 8 prompts at once: fewest GPU-seconds
    chosen = dd["prefill_layout"]
    assert chosen == min(opts.values(), key=lambda o: o["gpu_seconds_per_request"])
    assert chosen["dp"] == 8
    pre_need = math.ceil(10 * chosen["mean_prefill_s"] / chosen["dp"])
    assert dd["prefill_instances_needed"] == pre_need
    assert dd["prefill_gpus"] == pre_need * 8 and dd["decode_gpus"] == c["replicas_needed"] * 8
    assert c["gpus_needed"] == dd["prefill_gpus"] + dd["decode_gpus"]
    # each role on its own nodes of 8
    assert c["nodes"] == c["replicas_needed"] + pre_need
    assert "--data-parallel-size 8" in dd["prefill_launch"]["vllm"]
    # a TTFT limit between TP 8's and DP 8's: TP 8 prefills instead
    tp8, dp8 = opts[(8, 1, 1)]["ttft_s"], opts[(1, 8, 1)]["ttft_s"]
    assert tp8 < dp8
    limit_ms = (tp8 + dp8) / 2 * 1e3
    d = plan_json(tmp_path, capsys, DISAGG.format(ttft=f"{limit_ms:.3f}"))
    assert d["best"]["disaggregated"]["prefill_layout"]["tp"] == 8


def test_search_stops_at_the_asked_layout(capsys):
    # tp 2 x dp 4 + ep 8 holds 68 sequences of 32k: nothing before it in the search order (fewer
    # GPUs; at 8 GPUs plain TP 8's 20, then dp 2) reaches 50, so nothing is suggested
    assert run(["fit", "deepseek-v3", "--gpu", "h200", "-c", "32k", "--tp", "2", "--dp", "4",
                "--ep", "8", "--concurrency", "50", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] and d["max_concurrency"] >= 50 and d["suggestion"] is None
    assert d["launch_layout"]["suggested"] is False


def test_repeated_values_are_planned_once(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(DSV3.format(tp="[1, 1]", dp="[8, 8]", ep=8, demand="request_rate: 1"))
    s = load_scenario(p).serving
    assert (s.tps, s.dps) == ((1,), (8,))
