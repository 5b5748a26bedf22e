"""The step simulator (kvplan/core/scheduler_sim.py) on a toy model whose every step takes
exactly 1 ms (1e9 weight bytes at 1e12 B/s, FLOPs negligible), so times count steps."""

from __future__ import annotations

import json

import pytest

from kvplan.core.perf import Efficiency, StepModel
from kvplan.core.scheduler_sim import SimLimits, SimRequest, simulate

E = Efficiency(hbm_bandwidth=1.0, flops=1.0)
M = StepModel(weight_bytes=1e9, expert_bytes=0.0, moe_layers=0, num_experts=0, top_k=0,
              kv_reads=(), state_bytes=0.0, flops_per_token=1.0, attn_flops=(), hidden_size=1,
              layers=1, tp=1, pp=1, hbm_bytes_per_s=1e12, flops_per_s=1e18, link_bytes_per_s=1.0,
              efficiency=E)
WIDE = SimLimits(max_num_seqs=64, max_num_batched_tokens=8192, pool_tokens=10**6, block_tokens=16)


def test_one_request_counts_steps():
    # step 1 prefills 100 tokens and emits token 1; steps 2 and 3 decode tokens 2 and 3
    r = simulate(M, E, WIDE, [SimRequest(0.0, 100, 3)])
    assert r.steps == 3 and r.output_tokens == 3 and r.unfinished == 0
    assert r.ttft_s == pytest.approx((1e-3,)) and r.tpot_s == pytest.approx((1e-3,))


def test_chunked_prefill_shares_the_budget():
    # budget 100: step 1 A[0:100]; step 2 A[100:150] + B[0:50] -> A's first token at 2 ms;
    # step 3 A decodes (1 token) + B[50:149]; step 4 A decodes, B's last prompt token -> 4 ms
    lim = SimLimits(max_num_seqs=8, max_num_batched_tokens=100, pool_tokens=10**6, block_tokens=16)
    r = simulate(M, E, lim, [SimRequest(0.0, 150, 3), SimRequest(0.0, 150, 3)])
    assert r.ttft_s == pytest.approx((2e-3, 4e-3))


def test_closed_loop_users_release_the_next_request():
    # 2 users, 4 requests of 10 prompt tokens and 2 output tokens: steps 1-2 serve the first
    # two (TTFT 1 ms), their successors arrive at 2 ms and take steps 3-4
    r = simulate(M, E, WIDE, [SimRequest(0.0, 10, 2)] * 4, users=2)
    assert r.steps == 4 and r.seconds == pytest.approx(4e-3)
    assert r.ttft_s == pytest.approx((1e-3,) * 4) and r.tpot_s == pytest.approx((1e-3,) * 4)


def test_the_pool_admits_whole_requests():
    # a 2-block pool (32 tokens) and requests of 20 tokens (2 blocks each): one at a time
    lim = SimLimits(max_num_seqs=8, max_num_batched_tokens=8192, pool_tokens=32, block_tokens=16)
    r = simulate(M, E, lim, [SimRequest(0.0, 18, 2), SimRequest(0.0, 18, 2)])
    assert r.ttft_s == pytest.approx((1e-3, 3e-3))  # the second waits for the first's blocks


def test_poisson_arrivals_idle_between_requests():
    r = simulate(M, E, WIDE, [SimRequest(0.0, 10, 1), SimRequest(1.0, 10, 1)])
    assert r.ttft_s == pytest.approx((1e-3, 1e-3)) and r.seconds == pytest.approx(1.001)


def test_a_request_that_never_fits_stops_the_run():
    lim = SimLimits(max_num_seqs=8, max_num_batched_tokens=8192, pool_tokens=16, block_tokens=16)
    r = simulate(M, E, lim, [SimRequest(0.0, 100, 2)])
    assert r.unfinished == 1 and r.steps == 0


def test_plan_simulate_json():
    from pathlib import Path

    from kvplan.cli.main import run

    example = Path(__file__).resolve().parent.parent / "examples" / "chat-shared-prompt.yaml"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run(["plan", str(example), "--simulate", "300", "--format", "json"]) == 0
    sim = json.loads(buf.getvalue())["simulation"]
    assert sim["requests"] == 300 and sim["unfinished"] == 0
    assert 0 < sim["ttft_s"]["p50"] <= sim["ttft_s"]["p90"] <= sim["ttft_s"]["p99"]
    assert 0 < sim["tpot_s"]["p50"] <= sim["tpot_s"]["p99"]
    assert sim["arrivals"].startswith("Poisson at ")


def test_shared_prefix_is_held_once():
    # pool 4 blocks of 16; a 32-token shared prefix takes 2; each request's private part
    # (10 prompt + 2 output - 1 unwritten = 11 tokens) takes 1: two run together
    lim = SimLimits(max_num_seqs=8, max_num_batched_tokens=8192, pool_tokens=64, block_tokens=16)
    reqs = [SimRequest(0.0, 10, 2, cached_tokens=32, shared_tokens=32)] * 2
    r = simulate(M, E, lim, reqs)
    assert r.ttft_s == pytest.approx((1e-3, 1e-3))


def test_repeated_request_objects_keep_their_own_arrivals():
    lim = SimLimits(max_num_seqs=1, max_num_batched_tokens=8192, pool_tokens=10**6, block_tokens=16)
    same = simulate(M, E, lim, [SimRequest(0.0, 10, 2)] * 4, users=3)
    distinct = simulate(M, E, lim, [SimRequest(0.0, 10, 2) for _ in range(4)], users=3)
    assert same.ttft_s == pytest.approx(distinct.ttft_s)
    assert distinct.ttft_s == pytest.approx((1e-3, 3e-3, 5e-3, 5e-3))


def test_stall_and_bad_arrivals():
    lim = SimLimits(max_num_seqs=8, max_num_batched_tokens=8192, pool_tokens=64, block_tokens=16)
    r = simulate(M, E, lim, [SimRequest(0, 10, 2), SimRequest(0, 1000, 2), SimRequest(0, 10, 2)])
    assert r.stalled and r.unfinished == 2
    with pytest.raises(ValueError):
        simulate(M, E, WIDE, [SimRequest(float("nan"), 10, 2)])


def test_plan_simulate_states_its_limits(tmp_path):
    import contextlib
    import io
    from pathlib import Path

    from kvplan.cli.main import run

    text = (Path(__file__).resolve().parent.parent / "examples" / "chat-shared-prompt.yaml").read_text()
    assert "request_rate: 20" in text
    p = tmp_path / "cl.yaml"
    p.write_text(text.replace("request_rate: 20", "concurrent_requests: 64"))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run(["plan", str(p), "--simulate", "200", "--samples", "100", "--format", "json"]) == 0
    sim = json.loads(buf.getvalue())["simulation"]
    assert sim["requests"] == 100 and sim["arrivals"].startswith("closed loop")
    assert any("warm-up" in n for n in sim["notes"])
    assert any("200 requests asked, 100 sampled" in n for n in sim["notes"])
