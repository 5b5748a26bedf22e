"""vLLM 0.14.0 - 0.16.x start-up check under pipeline parallelism: the smallest stage's KV memory
must hold one ``max_model_len`` request of the whole model's groups (0.14.0 / 0.15.1 / 0.16.0
``kv_cache_utils.get_kv_cache_configs``: ``_check_enough_kv_cache_memory(min(available_memory),
_max_memory_usage_bytes_from_groups(global_kv_cache_groups))``); 0.13 and 0.17 check each
worker's own layers."""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run
from kvplan.engines.kvpool import PoolLayer, vllm_groups, vllm_groups_request_bytes

# Llama-3.1-8B: 32 layers, 8 KV heads x 128 x 2 (K, V) x 2 B = 4,096 B per token per layer;
# a 16-token page is 65,536 B; 131,072 tokens = 8,192 pages per layer
LLAMA_NEED = 32 * 65_536 * 8_192  # 17,179,869,184 B = 16 GiB


def test_whole_model_request_bytes_by_hand():
    layers = [PoolLayer(("f",), "full", 65_536, 16)] * 32
    assert vllm_groups_request_bytes(vllm_groups(layers, "0.14.0"), layers, 131_072, 8_192) \
        == LLAMA_NEED == 17_179_869_184


def test_hybrid_counts_the_first_group_only_as_vllm_writes_it():
    # gpt-oss-20b TP 2: 12 sliding (W 128) + 12 full layers, 16,384 B pages, group_size 12;
    # the first group (sliding, layer 0) wants cdiv(min(127 + 8,192, 131,072), 16) + 1 =
    # 520 + 1 = 521 pages: 12 x 16,384 x 521 = 102,432,768 B (the full group is not added)
    layers = [PoolLayer(("s",), "sliding", 16_384, 16, 128), PoolLayer(("f",), "full", 16_384, 16)] * 12
    g = vllm_groups(layers, "0.14.0")
    assert vllm_groups_request_bytes(g, layers, 131_072, 8_192) == 12 * 16_384 * 521 == 102_432_768


def _fit(capsys, version: str) -> dict:
    assert run(["fit", "llama-3.1-8b", "--gpu", "l4", "--pp", "2", "--engine", f"vllm@{version}",
                "-c", "131072", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("version", ["0.14.0", "0.15.1", "0.16.0"])
def test_pp2_on_l4_is_refused_where_the_whole_model_is_checked(capsys, version):
    d = _fit(capsys, version)
    pool = d["memory"]["kv_pool_bytes"]  # the busiest stage's
    # each L4 stage holds 16 layers: one request needs 16 x 65,536 x 8,192 = 8 GiB of its
    # ~10.8 GiB pool, but the check asks for the whole model's 16 GiB
    assert LLAMA_NEED // 2 < pool < LLAMA_NEED
    assert not d["fits"] and d["max_concurrency"] == 0
    assert f"vLLM {version} refuses to start" in d["verdict"]
    assert f"needs {LLAMA_NEED:,} B" in d["verdict"]


@pytest.mark.parametrize("version", ["0.13.0", "0.17.0", "main"])
def test_other_releases_check_each_stage_and_fit(capsys, version):
    d = _fit(capsys, version)
    assert d["fits"] and d["max_concurrency"] == 1
