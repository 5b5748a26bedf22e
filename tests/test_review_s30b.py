"""Review s30b: vLLM start-up check (kvpool.vllm_start_shortfall) defects, fixed.
Every number derived by hand from vLLM's sdists and gpt-oss-20b's config (24 layers alternating
sliding_attention (window 128) / full_attention, 8 KV heads x head_dim 64, bf16)."""

from __future__ import annotations

import json

from kvplan.cli.main import run

# TP 1, 16-token blocks: page = 16 x 8 x 64 x 2 (K, V) x 2 B = 32,768 B; 12 + 12 layers ->
# group_size 12, two groups (sliding first: layer 0 is sliding), block 12 x 32,768 = 393,216 B.
# max_model_len 131,072: full group cdiv(131,072, 16) = 8,192 pages.
GPT_OSS = ["gpt-oss-20b", "--gpu", "h100", "-c", "8k", "--max-model-len", "128k",
           "--max-num-batched-tokens", "8192"]


def _fit(capsys, *args) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_019_sums_every_group(capsys):
    # vLLM 0.19.0 kv_cache_utils.py _max_memory_usage_bytes_from_groups: blocks_needed =
    # sum(cdiv(group.kv_cache_spec.max_memory_usage_bytes, page_size) for group in groups)
    # (0.18.0 still used any_spec = groups[0]). Sliding: cdiv(min(128 - 1 + 8,192, 131,072),
    # 16) + 1 = cdiv(8,319, 16) + 1 = 520 + 1 = 521 pages; full 8,192 -> 8,713 pages x 393,216
    # = 3,426,091,008 B > 2 GiB = 2,147,483,648 B -> ValueError, vLLM does not start.
    d = _fit(capsys, *GPT_OSS, "--kv-cache-memory", "2GiB", "--engine", "vllm@0.19.0")
    assert d["fits"] is False


def test_029_sliding_window_counts_in_flight_tokens(capsys):
    # vLLM 0.29.0 kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request:
    # cdiv(min(W - 1 + extra_retained + vllm_config.max_in_flight_tokens, L), B) + 1, and
    # config/vllm.py max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens,
    # max_concurrent_batches = 2 under async scheduling (default on) at pp 1:
    # in-flight 2 x 8,192 = 16,384 -> cdiv(127 + 16,384 = 16,511, 16) + 1 = 1,032 + 1 = 1,033
    # pages; need = 393,216 x (8,192 + 1,033 = 9,225) = 3,627,417,600 B. A pool of
    # 3,426,484,224 B grants 3,426,484,224 - 393,216 (null block) = 3,426,091,008 B < need ->
    # vLLM refuses (kvplan counts 8,192 + 521 pages = exactly 3,426,091,008 and passes).
    d = _fit(capsys, *GPT_OSS, "--kv-cache-memory", "3426484224", "--engine", "vllm@0.29.0")
    assert d["fits"] is False


def test_the_runner_under_pp_is_stated(capsys):
    # 0.26 - 0.28: gpt-oss is MoE and not on the V2 list: the V1 runner, pp = 2 batches
    d = _fit(capsys, "gpt-oss-20b", "--gpu", "h100", "--pp", "2", "--engine", "vllm@0.26.0")
    assert any("2 in-flight batches" in n and "V1 model runner" in n for n in d["notes"])
    d = _fit(capsys, "gpt-oss-20b", "--gpu", "h100", "--pp", "2")  # main: pp + 1, one rule
    assert not any("model runner" in n for n in d["notes"])
