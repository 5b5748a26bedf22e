"""vLLM's KV cache grouping and pool arithmetic (kvplan.engines.kvpool), by hand."""

from __future__ import annotations

import pytest

from kvplan.engines.kvpool import (
    PoolLayer,
    layer_max_usage_bytes,
    vllm_groups,
    vllm_hybrid_block_size,
    vllm_max_concurrency,
    vllm_num_blocks,
    vllm_pool_tokens,
    vllm_stage_groups,
)

PAGE = 16_384


def _layers(sliding: int, full: int, window: int = 128) -> list[PoolLayer]:
    return ([PoolLayer(("s",), "sliding", PAGE, 16, window)] * sliding
            + [PoolLayer(("f",), "full", PAGE, 16)] * full)


@pytest.mark.parametrize("sliding,full,group_size,groups,padding", [
    (12, 12, 12, 2, 0),   # gpt-oss-20b
    (12, 13, 13, 2, 1),   # 13 < 1.5 x 12: pad the sliding kind to 13 (vLLM's eagle example)
    (16, 10, 10, 3, 4),   # 16 >= 1.5 x 10: groups of 10; 16 sliding -> 2 groups, 4 padding
    (52, 10, 10, 7, 8),   # Gemma-3-27B: 6 sliding groups + 1 full, "Add 8 padding layers"
])
def test_grouping(sliding, full, group_size, groups, padding):
    g = vllm_groups(_layers(sliding, full))
    assert (g.group_size, len(g.groups), g.padding_layers) == (group_size, groups, padding)
    assert g.block_bytes == PAGE * group_size


@pytest.mark.parametrize("version,sliding,full,group_size,groups,padding", [
    # up to 0.11.2 group_size = min(counts): 12; full 13 -> cdiv(13, 12) = 2 groups of 12,
    # 2 x 12 - 13 = 11 padding layers; sliding 1 group; 3 groups
    ("0.11.2", 12, 13, 12, 3, 11),
    ("0.12.0", 12, 13, 13, 2, 1),   # 13 < 1.25 x 12 = 15: 13; sliding padded by 1
    ("0.17.1", 10, 14, 10, 3, 6),   # 14 >= 1.25 x 10 = 12.5: 10; full 2 groups, 6 padding
    ("0.18.0", 10, 14, 14, 2, 4),   # 14 < 1.5 x 10 = 15: 14; sliding padded by 4
    ("main", 10, 14, 14, 2, 4),
])
def test_group_size_rule_by_release(version, sliding, full, group_size, groups, padding):
    g = vllm_groups(_layers(sliding, full), version)
    assert (g.group_size, len(g.groups), g.padding_layers) == (group_size, groups, padding)
    assert g.block_bytes == PAGE * group_size


def test_uniform_model_is_one_group():
    g = vllm_groups([PoolLayer(("f",), "full", 65_536, 16)] * 32)  # Llama-3-8B, bf16
    assert (len(g.groups), g.group_size) == (1, 32)
    nb = vllm_num_blocks(58 * 2**30, g)
    assert nb == 58 * 2**30 // (65_536 * 32) == 29_696
    assert vllm_pool_tokens(nb, g, [PoolLayer(("f",), "full", 65_536, 16)] * 32) == 29_696 * 16


def test_gpt_oss_worked_example_from_a_real_log():
    layers = _layers(12, 12)
    g = vllm_groups(layers)
    nb = vllm_num_blocks(int(59.32 * 2**30), g)
    assert nb == int(59.32 * 2**30) // (PAGE * 12)
    assert vllm_pool_tokens(nb, g, layers) == nb // 2 * 16
    # per request: full cdiv(8192, 16) = 512 blocks, sliding cdiv(min(127 + 8192, 8192), 16) + 1
    assert layer_max_usage_bytes(layers[0], 8192, 8192) == 513 * PAGE
    assert vllm_max_concurrency(nb, g, layers, 8192, 8192) == nb / (512 + 513)


def test_different_kinds_need_one_page_size():
    with pytest.raises(ValueError):
        vllm_groups([PoolLayer(("s",), "sliding", PAGE, 16, 128), PoolLayer(("f",), "full", 2 * PAGE, 16)])


def test_hybrid_block_size():
    # Nemotron-H-56B: Mamba page 16,900,096 B, attention 4,096 B per token
    assert vllm_hybrid_block_size(4096, 16_900_096, None) == 16 * 258 == 4128
    assert vllm_hybrid_block_size(4096, 16_900_096, 8192) == 8192  # a larger user block stays
    assert vllm_hybrid_block_size(4096, 16_900_096, 16) == 4128


@pytest.mark.parametrize("version,block", [
    ("0.16.0", 65_536 + 2 * 65_536 + 3 * 65_536 + 4 * 65_536),  # the whole model's pages: 655,360
    ("0.17.0", 65_536 + 2 * 65_536),  # the stage's own two layers: 196,608
])
def test_uniform_type_group_on_a_stage_by_release(version, block):
    # one kind (full), four unequal pages (1, 2, 3, 4 KV heads' worth): one group of per-layer
    # specs; stage 0 holds layers 0 and 1. Up to 0.16 every stage keeps the whole model's spec
    # (get_kv_cache_config_from_groups divides by its page_size_bytes, all four pages); 0.17
    # projects it onto the stage's layers
    layers = [PoolLayer(("f", k), "full", k * 65_536, 16) for k in (1, 2, 3, 4)]
    g = vllm_groups(layers, version)
    assert g.uniform_type and g.block_bytes == 10 * 65_536
    s = vllm_stage_groups(g, layers, (0, 1), version)
    assert s.block_bytes == block
    assert vllm_num_blocks(2**30, s) == 2**30 // block


@pytest.mark.parametrize("version,pp,draft,v2,tokens", [
    ("0.25.0", 1, False, False, 8_192),     # the spec reads max_num_batched_tokens
    ("0.26.0", 1, False, False, 2 * 8_192),  # max_in_flight_tokens: 2 concurrent batches (V1)
    ("0.26.0", 1, False, True, 2 * 8_192),   # V2: pp + 1 = 2
    ("0.26.0", 2, False, False, 2 * 8_192),  # V1 under PP: pp batches
    ("0.26.0", 2, False, True, 3 * 8_192),   # V2 under PP: pp + 1
    ("0.26.0", 1, True, True, 8_192),        # a draft model turns async scheduling off: pp
    ("0.28.0", 1, True, False, 2 * 8_192),   # from 0.28 a draft model keeps it on
    ("0.34.0", 2, False, False, 3 * 8_192),  # 0.34: pp + 1
    ("main", 1, True, True, 2 * 8_192),
])
def test_in_flight_tokens_by_release(version, pp, draft, v2, tokens):
    from kvplan.engines.kvpool import vllm_in_flight_tokens

    assert vllm_in_flight_tokens(version, 8_192, pp, draft, v2) == tokens


@pytest.mark.parametrize("version,model_type,moe,hybrid,v2", [
    ("0.26.0", "gemma2", False, False, True),    # dense: V2
    ("0.26.0", "gpt_oss", True, False, False),   # MoE not listed: V1
    ("0.26.0", "qwen2_moe", True, False, True),  # listed MoE
    ("0.26.0", "kimi_k3", True, False, False),   # listed from 0.28
    ("0.28.0", "kimi_k3", True, False, True),
    ("0.28.0", "jamba", True, True, False),      # hybrid: V1
    ("0.29.0", "jamba", True, True, True),       # 0.29: V2 on CUDA for every model
])
def test_v2_runner_default_by_release(version, model_type, moe, hybrid, v2):
    from kvplan.engines.kvpool import vllm_v2_runner_default

    assert vllm_v2_runner_default(version, model_type, moe, hybrid) is v2
