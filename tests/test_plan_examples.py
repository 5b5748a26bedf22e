"""Every scenario in examples/ runs, and its headline numbers equal values derived here by
hand from the model configs (layers, KV heads, head dims), vLLM's block rules and the
datasheet figures in hardware_specs/. The KV pool in bytes comes from the engine budget
(tested against real vLLM logs in test_vllm_logs.py); everything after the pool is derived
here: blocks, requests per pool, SLO batch, replicas, GPUs, dollars, transfer times."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvplan.loaders.scenario_yaml import load_scenario
from kvplan.planning.scenario import run_scenario

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
H100_HBM = 3_350_000_000_000
HBM_EFF = 0.80


def plan(name: str):
    return run_scenario(load_scenario(EXAMPLES / name))


def by(rep, gpu: str | None = None, tp: int | None = None, kv: str | None = None):
    out = [o for o in rep.outcomes if (gpu is None or o.candidate.gpu.key == gpu)
           and (tp is None or o.candidate.tp == tp) and (kv is None or o.fit.kv_format == kv)]
    assert len(out) == 1, [(o.candidate, o.fit.kv_format) for o in rep.outcomes]
    return out[0]


def blocks_in_pool(o, block_bytes: int) -> int:
    nb = o.fit.budget.kv_pool_bytes // block_bytes
    assert o.fit.stages[0].num_blocks == nb
    return nb


def test_every_example_is_tested():
    tested = {"guide-1-8xh100-llama3-70b-32k.yaml", "guide-2-h200-mla-128k.yaml",
              "guide-3-b200-1m-context.yaml", "chat-shared-prompt.yaml", "rag-trace.yaml",
              "reasoning.yaml", "hybrid-long-context.yaml"}
    assert {p.name for p in EXAMPLES.glob("*.yaml")} == tested


def test_guide_1_llama3_70b_on_8xh100():
    rep = plan("guide-1-8xh100-llama3-70b-32k.yaml")
    # 30,720 prompt + 1,024 shared + 1,024 output = 32,768 tokens = 2,048 blocks of 16
    assert rep.max_model_len == 32_768
    # TP 2: 8 KV heads / 2 = 4 per GPU; FP8: 80 layers x 2 (K, V) x 4 x 128 x 1 B = 81,920 B/token
    # (the guide's "80 KB"); a 16-token block across the 80 layers is 16 x 81,920 B
    tp2 = by(rep, tp=2)
    nb = blocks_in_pool(tp2, 16 * 81_920)
    shared = 1024 // 16  # 64 blocks of system prompt, held once
    assert tp2.evaluation.memory_concurrency == (nb - shared) // (2048 - shared)
    # TP 8: one KV head per GPU: 80 x 2 x 1 x 128 = 20,480 B/token
    tp8 = by(rep, tp=8)
    nb8 = blocks_in_pool(tp8, 16 * 20_480)
    c8 = (nb8 - shared) // (2048 - shared)
    assert tp8.evaluation.memory_concurrency == c8 and tp8.evaluation.batch == c8
    # 48 concurrent users: replicas = ceil(48 / per-replica batch); the node has 8 GPUs
    for o in rep.outcomes:
        e = o.evaluation
        if e.batch:
            assert e.replicas_needed == math.ceil(48 / e.batch)
        assert e.gpus == 8 and e.usd_per_hour == pytest.approx(8 * 3.99)
    # 70 GB of FP8 weights leave no KV pool on one 80 GB H100
    assert not by(rep, tp=1).evaluation.fits
    # TP 2 holds the users (4 replicas) but a 30k-token prefill on 2 GPUs misses the 2 s TTFT
    assert tp2.evaluation.replicas_needed * tp2.evaluation.batch >= 48
    assert not tp2.evaluation.meets_slo and any("TTFT" in r for r in tp2.evaluation.reasons)
    # both TP 4 and TP 8 meet it on the one node; the cheaper per output token ranks first
    ok = [o for o in rep.outcomes if o.evaluation.ok]
    assert {o.candidate.tp for o in ok} == {4, 8}
    assert rep.best is min(ok, key=lambda o: o.evaluation.usd_per_million_output_tokens)


def test_guide_2_mla_on_one_h200():
    rep = plan("guide-2-h200-mla-128k.yaml")
    o = by(rep)
    # DeepSeek-V2-Lite: 27 layers, latent kv_lora_rank 512 + rope 64, bf16: 27 x 576 x 2 =
    # 31,104 B per token (the guide guessed ~10 KB); vLLM (>= 0.18) uses 16-token blocks for MLA
    # on Hopper with a bf16 cache (FlashAttention-3 MLA)
    assert o.fit.block_size_tokens == 16
    nb = blocks_in_pool(o, 16 * 31_104)
    per_request = 131_072 // 16  # 126,976 + 4,096 tokens
    conc = nb // per_request
    e = o.evaluation
    assert e.memory_concurrency == conc and conc < 95  # the guide's ~95 does not fit
    assert e.replicas_needed == math.ceil(95 / conc)
    assert e.gpus == e.replicas_needed and e.nodes == e.replicas_needed  # one GPU per node
    assert e.usd_per_hour == pytest.approx(e.gpus * 4.59)
    assert e.kv_bytes_per_request_mean == per_request * 16 * 31_104


def test_guide_3_one_million_tokens_on_b200():
    rep = plan("guide-3-b200-1m-context.yaml")
    tokens = 1_048_576
    # TP 1: 80 x 2 x 8 x 128 x 1 B = 163,840 B/token (the guide's 160 KB): 160 GiB per request
    assert 80 * 2 * 8 * 128 * tokens == 160 * 2**30
    assert not by(rep, tp=1).evaluation.fits
    # TP 8: 20,480 B/token per GPU = 20 GiB per request per GPU
    o = by(rep, tp=8)
    nb = blocks_in_pool(o, 16 * 20_480)
    assert o.evaluation.memory_concurrency == nb // (tokens // 16)
    per_gpu = 20_480 * tokens
    assert o.evaluation.kv_bytes_per_request_mean == per_gpu
    cpu, nvme = o.evaluation.offload["cpu"], o.evaluation.offload["nvme"]
    assert cpu["requests_held"] == 2**40 // per_gpu == 51
    assert cpu["swap_in_s_mean"] == pytest.approx(per_gpu / 50e9)  # 0.43 s
    assert nvme["requests_held"] == 8 * 10**12 // per_gpu == 372
    assert nvme["swap_in_s_mean"] == pytest.approx(per_gpu / 12e9)  # 1.79 s
    # TP 4: 40 GiB per request per GPU
    assert by(rep, tp=4).evaluation.kv_bytes_per_request_mean == 40 * 2**30


def test_chat_shared_system_prompt():
    rep = plan("chat-shared-prompt.yaml")
    o = by(rep)
    e = o.evaluation
    # Llama-3.1-8B, FP8 KV: 32 layers x 2 x 8 x 128 x 1 B = 65,536 B/token; 16-token blocks
    nb = blocks_in_pool(o, 16 * 65_536)
    total = (4096 + 512 + 256) // 16  # 304 blocks at the last token
    shared = 4096 // 16  # 256 blocks of system prompt, held once
    assert e.memory_concurrency == (nb - shared) // (total - shared)
    assert e.memory_concurrency > 5 * (nb // total)  # sharing the prompt: > 5x the requests
    # prefill: the 512 new tokens (the prompt's 256 blocks are cached), compute-bound at 60%
    # of 989.4 TFLOP/s: 2 x 7,504,924,672 FLOPs per token + attention 32 layers x 2 x 32 heads
    # x (128 + 128) per query-key pair; the new tokens see the 4,096 cached ones and each other
    pairs = ((4096 + 512) ** 2 - 4096**2) / 2
    prefill = (512 * 2 * 7_504_924_672 + 32 * 2 * 32 * 256 * pairs) / (989.4e12 * 0.60)
    assert e.ttft_s == pytest.approx(prefill) and e.mean_prefill_s == pytest.approx(prefill)
    # decode step at B requests of n tokens, memory-bound on H100 at 80% of 3.35 TB/s: the bf16
    # weights read per step (8,030,261,248 - 128,256 x 4,096 embedding = 7,504,924,672
    # params x 2 B) + B x 65,536 B x n
    weights = (8_030_261_248 - 128_256 * 4096) * 2

    def step(b: int, n: float) -> float:
        return (weights + b * 65_536 * n) / (H100_HBM * HBM_EFF)

    # a replica serves 1 / (prefill + 256 x step(B, mean decode context) / B) requests/s, and
    # every decode step waits for the prefills: tokens come 1 / (1 - rps x prefill) slower.
    # The 40 ms TPOT SLO holds at the p95 length (4,864) up to the batch found here by brute force
    n_mean = 4608 + 255 / 2

    def rps(b: int) -> float:
        return 1 / (prefill + 256 * step(b, n_mean) / b)

    def tpot(b: int, n: float) -> float:
        return step(b, n) / (1 - rps(b) * prefill)

    batch = max(b for b in range(1, 1025) if tpot(b, 4864) <= 0.040)
    assert e.batch == batch
    assert e.tpot_s == pytest.approx(tpot(batch, 4864))
    assert e.requests_per_s_per_replica == pytest.approx(rps(batch))
    # 20 requests/s: ceil(20 / rps) replicas; whole 8-GPU nodes at the scenario's $2.50/GPU-hour
    assert e.replicas_needed == math.ceil(20 / rps(batch)) == 2
    assert e.headroom == pytest.approx(1 - 20 / (2 * rps(batch)))
    assert e.fleet_headroom == pytest.approx(1 - 20 / (8 * rps(batch)))
    assert e.gpus == 8 and e.usd_per_hour == 20.0
    assert e.usd_per_request == pytest.approx(20.0 / 3600 / 20)
    assert e.usd_per_million_output_tokens == pytest.approx(20.0 / 3600 / 20 / 256 * 1e6)
    assert e.usd_per_million_tokens == pytest.approx(20.0 / 3600 / 20 / (4608 + 256) * 1e6)
    # preemption: recompute the mean decode context vs swap it back over PCIe
    p = e.preemption
    assert p["mode"] == "recompute" and p["evicted_tokens_mean"] == round(4608 + 255 / 2)


def test_rag_trace():
    rep = plan("rag-trace.yaml")
    trace = [(6144, 256), (8192, 384), (3072, 128), (12288, 512), (7168, 200), (5120, 300),
             (9216, 256), (4096, 150), (10240, 400), (6656, 220)]
    assert rep.requests == 10 and "trace" in rep.sample_note
    finals = sorted(p + o for p, o in trace)
    assert rep.max_model_len == max(finals) == 12_800
    assert rep.stats["final_tokens"].pq == finals[8]  # p90 nearest rank: ceil(0.9 x 10) = 9th
    assert rep.stats["prompt_tokens"].mean == sum(p for p, _ in trace) / 10
    mean_blocks = sum(math.ceil(n / 16) for n in finals) / 10
    # Qwen2.5-7B: 28 layers, 4 KV heads, head dim 128: bf16 28 x 2 x 4 x 128 x 2 = 57,344 B/token
    for kv, per_token in (("bf16", 57_344), ("fp8_e4m3", 28_672)):
        for gpu in ("l40s", "h100-sxm"):
            o = by(rep, gpu=gpu, kv=kv)
            nb = blocks_in_pool(o, 16 * per_token)
            assert o.evaluation.memory_concurrency == math.floor(nb / mean_blocks)
    # the cheapest GPUs that meet the SLOs rank first: 8 L40S at $1.09 each
    best = rep.best
    assert best is not None and best.candidate.gpu.key == "l40s"
    assert best.evaluation.usd_per_hour == pytest.approx(8 * best.candidate.gpu.price_usd_per_gpu_hour)


def test_reasoning_tokens_count_as_output():
    rep = plan("reasoning.yaml")
    assert rep.stats["output_tokens"].mean == 4500  # 4,000 reasoning + 500 answer
    assert rep.max_model_len == 5500
    # Qwen3-8B: 36 layers, 8 KV heads, head dim 128, bf16: 147,456 B/token
    o = by(rep, tp=1)
    nb = blocks_in_pool(o, 16 * 147_456)
    assert o.evaluation.memory_concurrency == nb // math.ceil(5500 / 16)
    # disaggregated: the 1,000-token prompt's KV (63 blocks) crosses the 50 GB/s link
    d = o.evaluation.disaggregated
    assert d["kv_transfer_s_mean"] == pytest.approx(63 * 16 * 147_456 / 50e9)
    assert by(rep, tp=2).evaluation.disaggregated["kv_transfer_s_mean"] == pytest.approx(
        63 * 16 * 73_728 / 50e9)
    # memory binds before the 30 ms TPOT SLO: the batch is what the pool holds
    e = o.evaluation
    assert e.batch == e.memory_concurrency and e.tpot_s <= 0.030
    # decode replicas serve batch / (4,500 output tokens x TPOT at the mean decode context
    # 1,000 + 4,499 / 2) requests/s each; one prefill instance per (rate x prefill time)
    assert e.decode_context_tokens == pytest.approx(1000 + 4499 / 2)
    rps = e.batch / (4500 * e.tpot_mean_s)
    assert e.replicas_needed == math.ceil(2 / rps) and e.prefill_instances_needed == 1
    assert e.gpus_needed == e.replicas_needed + 1
    # the first answer token comes after the prompt's prefill + transfer and 4,000 reasoning
    # tokens at the mean TPOT
    assert e.time_to_first_answer_token_s == pytest.approx(e.ttft_s + 4000 * e.tpot_mean_s)
    # priced per answer token, the reasoning makes output 9x dearer
    assert e.usd_per_million_answer_tokens == pytest.approx(9 * e.usd_per_million_output_tokens)


def test_hybrid_jamba_long_context():
    rep = plan("hybrid-long-context.yaml")
    tokens = 262_144
    # Jamba v0.1: 4 attention layers (8 KV heads x 128, bf16: 4,096 B per token per layer) and
    # 28 Mamba layers (conv 3 x 8,192 + SSM 8,192 x 16, bf16 = 311,296 B each). vLLM raises the
    # attention block to the smallest multiple of 16 tokens whose page covers a Mamba page:
    # 311,296 / 4,096 = 76 -> 80 tokens (327,680 B); 32 layers in 8 groups of 4 share a block
    assert math.ceil(311_296 / 4096 / 16) * 16 == 80
    o = by(rep, tp=1)
    assert o.fit.block_size_tokens == 80
    nb = blocks_in_pool(o, 4 * 80 * 4096)
    per_request = math.ceil(tokens / 80) + 7  # the attention group's blocks + one per Mamba group
    assert o.evaluation.memory_concurrency == nb // per_request
    # TP 2: 4 KV heads and half the Mamba channels per GPU: pages of 80 x 2,048 B
    o2 = by(rep, tp=2)
    assert o2.fit.block_size_tokens == 80
    nb2 = blocks_in_pool(o2, 4 * 80 * 2048)
    assert o2.evaluation.memory_concurrency == nb2 // per_request
    assert rep.best is not None


# ---- rules the examples do not reach, derived by hand on Llama-3.1-8B / H100 ------------------

WEIGHTS_8B = (8_030_261_248 - 128_256 * 4096) * 2  # bf16 weights read per decode step
PARAMS_8B = 7_504_924_672  # non-embedding parameters: 2 FLOPs each per token


def _prefill_8b(p: int, cached: int = 0) -> float:
    """Compute-bound prefill at 60% of 989.4 TFLOP/s (one chunk): 2 x params per token +
    32 layers x 2 x 32 heads x 256 per query-key pair."""
    pairs = ((cached + p) ** 2 - cached**2) / 2
    return (p * 2 * PARAMS_8B + 32 * 2 * 32 * 256 * pairs) / (989.4e12 * 0.60)


def _step_8b(b: float, n: float, per_token: int = 65_536) -> float:
    return (WEIGHTS_8B + b * per_token * n) / (H100_HBM * HBM_EFF)


def _scenario(tmp_path, text: str):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return run_scenario(load_scenario(p))


def test_concurrent_users_are_costed_at_their_load(tmp_path):
    """20 users, each sending the next request when the last ends: one replica runs 20, and
    its rate solves r = 20 / (prefill + 256 x step(20) / (1 - r x prefill)) (iterated here)."""
    text = (EXAMPLES / "chat-shared-prompt.yaml").read_text().replace(
        "request_rate: 20", "concurrent_requests: 20")
    e = _scenario(tmp_path, text).outcomes[0].evaluation
    pre = _prefill_8b(512, 4096)
    step = _step_8b(20, 4608 + 255 / 2)
    r = 1.0
    for _ in range(200):
        r = 20 / (pre + 256 * step / (1 - r * pre))
    assert e.replicas_needed == 1 and e.request_rate_per_s == pytest.approx(r, rel=1e-6)
    assert e.prefill_share == pytest.approx(r * pre, rel=1e-6)
    assert e.tpot_s == pytest.approx(_step_8b(20, 4864) / (1 - r * pre), rel=1e-6)
    assert e.usd_per_million_output_tokens == pytest.approx(20.0 / 3600 / r / 256 * 1e6, rel=1e-6)


def test_disaggregated_prefill_instances_and_transfer(tmp_path):
    text = """kvplan: 1
model: llama-3.1-8b
hardware: {gpu: h100, gpus_per_node: 8}
serving: {tp: 1, kv_dtype: fp8}
workload: {request_rate: 12, prompt_tokens: 8000, output_tokens: 100}
disaggregated: {link_bandwidth: 50GB/s}
"""
    e = _scenario(tmp_path, text).outcomes[0].evaluation
    pre = _prefill_8b(8000)
    assert e.mean_prefill_s == pytest.approx(pre)
    assert e.prefill_instances_needed == math.ceil(12 * pre) > 1
    # each rank sends the prompt's 500 blocks x 16 tokens x 65,536 B over the link
    transfer = 8000 * 65_536 / 50e9
    assert e.disaggregated["kv_transfer_s_mean"] == pytest.approx(transfer)
    assert e.ttft_s == pytest.approx(pre + transfer)
    # decode replicas: batch / (100 x step); no prefill stalls
    rps = e.batch / (100 * _step_8b(e.batch, 8000 + 99 / 2))
    assert e.requests_per_s_per_replica == pytest.approx(rps)
    assert e.replicas_needed == math.ceil(12 / rps)
    assert e.gpus_needed == e.replicas_needed + e.prefill_instances_needed
    assert e.headroom == pytest.approx(min(1 - 12 / (e.replicas_needed * rps),
                                           1 - 12 * pre / e.prefill_instances_needed))


def test_peak_is_the_last_written_token(tmp_path):
    """SGLang pages one token: a 2,000 + 200 request holds 2,199 tokens' KV at its peak."""
    text = """kvplan: 1
model: llama-3.1-8b
hardware: {gpu: h100}
serving: {tp: 1, kv_dtype: fp8, engine: sglang}
workload: {request_rate: 1, prompt_tokens: 2000, output_tokens: 200}
"""
    o = _scenario(tmp_path, text).outcomes[0]
    assert o.fit.block_size_tokens == 1
    assert o.evaluation.kv_bytes_per_request_mean == 2199 * 65_536
    assert o.evaluation.memory_concurrency == o.fit.budget.kv_pool_bytes // (2199 * 65_536)
    assert o.fit.max_model_len == 2200  # the engine must admit prompt + output


def test_preemption_swap_over_datasheet_pcie(tmp_path):
    p = plan("chat-shared-prompt.yaml").outcomes[0].evaluation.preemption
    n = round(4608 + 255 / 2)  # the mean decode context
    held = math.ceil(n / 16) * 16 * 65_536
    assert p["swap_in_s_mean"] == pytest.approx(held / (64e9 * 0.70))  # PCIe 5 x link efficiency
    assert p["recompute_s_mean"] == pytest.approx(_prefill_8b(n))
    assert p["cheaper"] == "swap"


def test_multi_turn_prefill_and_reasoning_answers():
    from kvplan.core.workload import Workload, fixed, sample
    from kvplan.planning.scenario_eval import prefill_tokens

    for thinking, want in ((0, 1500 - 1296), (2000, 1500 - 992)):
        w = Workload(prompt=fixed(1000), output=fixed(300), turns=2, tokens_per_turn=fixed(200),
                     thinking=fixed(thinking), request_rate_per_s=1.0)
        t1, t2 = sample(w, 1, 0)
        assert t2.context_tokens == 1000 + 300 + 200
        # without reasoning the cache serves turn 1's prompt and answer (1,300 -> 1,296 in
        # whole blocks); after reasoning only the prompt (1,000 -> 992): the answer is new
        assert prefill_tokens(t2, w, 16) == want


def test_replicas_stay_inside_nodes():
    from kvplan.planning.scenario_eval import _slots

    assert _slots(8, 3, 6) == 3  # one 6-GPU replica per 8-GPU node, not 24 // 6 = 4
    assert _slots(8, 3, 4) == 6 and _slots(8, 2, 16) == 1
