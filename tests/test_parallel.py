"""Tensor- and pipeline-parallel splitting, hand-derived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.core.errors import ParallelismError
from kvplan.core.layers import FullAttention, Mamba
from kvplan.core.model import Model
from kvplan.core.parallel import Shard, pp_stage_sizes, pp_stages, split_heads
from kvplan.loaders.hf_config import parse_config
from kvplan.planning.footprint import kv_footprint

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def load(stem: str):
    p = CONFIGS / f"{stem}.json"
    return parse_config(json.loads(p.read_text()), name=stem, source=str(p))


def synthetic(specs, n_layers, dtype="bf16", model_type="llama"):
    return Model(
        name="synthetic", model_type=model_type, layers=tuple((tuple(specs),) * n_layers),
        hidden_size=4096, vocab_size=32000, num_attention_heads=32, dtype=dtype,
    )


# --- pipeline parallel ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "layers, pp, expected",
    [
        (61, 4, [15, 15, 16, 15]),  # 61 = 4 x 15 + 1: the extra to the stage before the last
        (10, 4, [2, 3, 3, 2]),  # 10 = 4 x 2 + 2: stages -2 and -3
        (80, 3, [27, 27, 26]),  # 80 = 3 x 26 + 2
        (7, 4, [2, 2, 2, 1]),  # 7 = 4 x 1 + 3: every stage but the last
        (32, 4, [8, 8, 8, 8]),
        (5, 5, [1, 1, 1, 1, 1]),
        (5, 1, [5]),
        (3, 2, [2, 1]),  # 3 = 2 x 1 + 1: the first stage is the one before the last
    ],
)
def test_pp_stage_sizes(layers, pp, expected):
    assert pp_stage_sizes(layers, pp) == expected


def test_pp_stage_sizes_rule_brute():
    # independent statement of vLLM get_pp_indices: base = L // pp each; the remainder r goes
    # one each to stages pp-1-r .. pp-2 (just before the last).
    for layers in range(1, 70):
        for pp in range(1, layers + 1):
            base, r = divmod(layers, pp)
            expected = [base + (1 if pp - 1 - r <= i <= pp - 2 else 0) for i in range(pp)]
            assert pp_stage_sizes(layers, pp) == expected
            ranges = pp_stages(layers, pp)
            assert [len(x) for x in ranges] == expected
            assert [i for x in ranges for i in x] == list(range(layers))


@pytest.mark.parametrize("layers, pp", [(4, 5), (1, 2), (61, 62)])
def test_pp_more_than_layers(layers, pp):
    with pytest.raises(ParallelismError, match="pp"):
        pp_stage_sizes(layers, pp)


@pytest.mark.parametrize("pp", [0, -1, True, 1.5, "2"])
def test_pp_bad_degree(pp):
    with pytest.raises(ParallelismError):
        pp_stage_sizes(10, pp)


def test_pp_footprint_deepseek_v3():
    m = load("deepseek-ai__DeepSeek-V3")
    # 61 MLA layers, latent (512 + 64) x 2 B = 1152 B per token per layer (vLLM)
    fp = kv_footprint(m, contexts=(4096,), kv_dtype="bf16", pp=4)
    assert fp.stage_layers == (15, 15, 16, 15)
    s = fp.sequences[0]
    assert s.per_gpu_bytes == 16 * 1152 * 4096
    assert s.total_bytes == 61 * 1152 * 4096


def test_pp_footprint_too_many_stages():
    m = load("meta-llama__Meta-Llama-3-8B")  # 32 layers
    with pytest.raises(ParallelismError):
        kv_footprint(m, contexts=(4096,), kv_dtype="bf16", pp=33)


# --- split_heads ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "total, tp, replicate, expected",
    [
        (8, 1, True, Shard(8, 1)),
        (8, 2, True, Shard(4, 1)),
        (8, 8, True, Shard(1, 1)),
        (8, 16, True, Shard(1, 2)),  # 8 KV heads on 16 ranks: 1 per rank, each on 2 ranks
        (1, 8, True, Shard(1, 8)),  # MQA
        (2, 8, True, Shard(1, 4)),
        (64, 8, False, Shard(8, 1)),
    ],
)
def test_split_heads(total, tp, replicate, expected):
    assert split_heads(total, tp, "KV heads", replicate=replicate) == expected


@pytest.mark.parametrize(
    "total, tp, replicate",
    [
        (8, 3, True),  # neither divides
        (12, 8, True),  # more heads than ranks, not divisible
        (3, 8, True),  # fewer, but 8 is not a multiple of 3
        (4, 8, False),  # replication not allowed (query heads)
        (71, 2, False),  # falcon-7b query heads
    ],
)
def test_split_heads_errors(total, tp, replicate):
    with pytest.raises(ParallelismError) as e:
        split_heads(total, tp, "heads", replicate=replicate)
    assert e.value.field == "tp"
    assert str(total) in str(e.value)


def test_falcon_7b_query_heads_do_not_split():
    m = load("tiiuae__falcon-7b")  # 71 query heads, 1 KV head
    kv_footprint(m, contexts=(4096,), kv_dtype="bf16", tp=1)
    with pytest.raises(ParallelismError, match="71"):
        kv_footprint(m, contexts=(4096,), kv_dtype="bf16", tp=2)


def test_kv_heads_8_on_tp_3():
    # synthetic: 24 query heads divide by 3, 8 KV heads do not
    spec = FullAttention(num_attention_heads=24, num_kv_heads=8, head_dim_k=128, head_dim_v=128)
    with pytest.raises(ParallelismError, match="KV heads"):
        kv_footprint(synthetic([spec], 4), contexts=(16,), kv_dtype="bf16", tp=3)


def test_gqa_replicated_kv_heads_footprint():
    m = load("meta-llama__Meta-Llama-3-8B")  # 32 layers, 32 q heads, 8 KV heads x 128
    # tp 16: each rank holds 1 KV head: 1 x (128 + 128) x 2 B = 512 B per token per layer
    fp = kv_footprint(m, contexts=(4096,), kv_dtype="bf16", tp=16)
    s = fp.sequences[0]
    assert s.per_gpu_bytes == 32 * 512 * 4096
    assert s.total_bytes == 16 * 32 * 512 * 4096
    # unsharded: 8 heads x 256 x 2 B = 4096 B/token/layer; replication doubles the total
    assert s.total_bytes == 2 * (32 * 4096 * 4096)
    assert any("replicated on 2" in n for n in fp.notes)
    # tp 8: one head per rank, no replication
    fp8 = kv_footprint(m, contexts=(4096,), kv_dtype="bf16", tp=8)
    assert fp8.sequences[0].per_gpu_bytes == 32 * 512 * 4096
    assert fp8.sequences[0].total_bytes == 32 * 4096 * 4096
    assert not fp8.notes


# --- MLA ------------------------------------------------------------------------------------


def test_mla_latent_replicated_on_every_rank():
    m = load("deepseek-ai__DeepSeek-V3")
    latent_layer_token = (512 + 64) * 2  # 1152 B, shared by all 128 heads
    n = 4096
    unsharded = 61 * latent_layer_token * n
    fp1 = kv_footprint(m, contexts=(n,), kv_dtype="bf16", tp=1)
    fp8 = kv_footprint(m, contexts=(n,), kv_dtype="bf16", tp=8)
    assert fp1.sequences[0].per_gpu_bytes == unsharded
    assert fp8.sequences[0].per_gpu_bytes == unsharded
    assert fp8.sequences[0].total_bytes == 8 * unsharded
    assert fp8.layers[0].kv_heads_per_rank == 1
    assert fp8.layers[0].bytes_per_token == latent_layer_token
    assert fp8.layers[0].bytes_per_token_per_rank == latent_layer_token


def test_mla_decompressed_shards_heads():
    m = load("deepseek-ai__DeepSeek-V3")
    # transformers 4.x: 128 heads x (K 128 + 64, V 128) x 2 B = 81920 B per token per layer
    per_layer = 128 * (192 + 128) * 2
    assert per_layer == 81920
    n = 100
    fp = kv_footprint(m, contexts=(n,), kv_dtype="bf16", tp=8, engine="hf@4.57")
    s = fp.sequences[0]
    assert s.per_gpu_bytes == 61 * (per_layer // 8) * n
    assert s.total_bytes == 61 * per_layer * n


def test_mla_query_heads_must_divide():
    m = load("deepseek-ai__DeepSeek-V3")  # 128 heads
    with pytest.raises(ParallelismError):
        kv_footprint(m, contexts=(16,), kv_dtype="bf16", tp=3)


# --- Mamba-2 groups -------------------------------------------------------------------------


def test_mamba2_single_group_replicated_tp2():
    m = load("state-spaces__mamba2-2.7b")
    # 64 layers; d_inner 5120, d_state 128, n_groups 1, 80 heads x 64, d_conv 4 (vLLM keeps 3
    # conv columns), bf16.
    cols, b = 4 - 1, 2
    whole = (5120 + 2 * 1 * 128) * cols * b + 80 * 64 * 128 * b
    # tp 2: x channels split (2560), the single group's B and C (2 x 128) kept on both ranks
    rank = (5120 // 2 + 2 * 1 * 128) * cols * b + (80 // 2) * 64 * 128 * b
    fp = kv_footprint(m, contexts=(4096,), kv_dtype="bf16", tp=2)
    (cost,) = fp.layers
    assert cost.state_bytes == whole
    assert cost.state_bytes_per_rank == rank
    assert fp.sequences[0].per_gpu_bytes == 64 * rank
    assert fp.sequences[0].total_bytes == 2 * 64 * rank
    # the replicated groups make the total exceed the unsharded state by one copy of B and C
    assert fp.sequences[0].total_bytes - 64 * whole == 64 * 2 * 128 * cols * b
    assert any("replicated on 2" in n for n in fp.notes)


def test_nemotron_h_groups_and_kv_heads_replicated_tp16():
    m = load("nvidia__Nemotron-H-56B-Base-8K")
    # 54 Mamba-2 layers: d_inner 16384, d_state 256, 8 groups, 256 heads x 64, d_conv 4;
    # conv bf16, SSM fp32 (vLLM NemotronH default). 10 attention layers, 8 KV heads x 128.
    # tp 16: 1 group per rank (8 < 16, each on 2 ranks), 16 heads, 1024 x channels per rank.
    conv_rank = (16384 // 16 + 2 * 1 * 256) * 3 * 2
    ssm_rank = (256 // 16) * 64 * 256 * 4
    attn_rank_token = 1 * (128 + 128) * 2  # one replicated KV head per rank
    n = 4096
    fp = kv_footprint(m, contexts=(n,), kv_dtype="bf16", tp=16)
    s = fp.sequences[0]
    assert s.per_gpu_bytes == 54 * (conv_rank + ssm_rank) + 10 * attn_rank_token * n
    assert s.total_bytes == 16 * s.per_gpu_bytes
    # tp 8: 1 group per rank, no replication
    fp8 = kv_footprint(m, contexts=(n,), kv_dtype="bf16", tp=8)
    conv8 = (16384 // 8 + 2 * 1 * 256) * 3 * 2
    ssm8 = (256 // 8) * 64 * 256 * 4
    assert fp8.sequences[0].per_gpu_bytes == 54 * (conv8 + ssm8) + 10 * 256 * 2 * n


def test_mamba2_groups_synthetic():
    def mamba(groups):
        return Mamba(version=2, d_inner=1024, d_state=16, d_conv=4, num_heads=16, head_dim=64,
                     n_groups=groups)

    # 2 groups on tp 4: 1 group per rank, each on 2 ranks
    fp = kv_footprint(synthetic([mamba(2)], 2), contexts=(16,), kv_dtype="bf16", tp=4)
    rank = (1024 // 4 + 2 * 1 * 16) * 3 * 2 + (16 // 4) * 64 * 16 * 2
    assert fp.layers[0].state_bytes_per_rank == rank
    assert fp.sequences[0].per_gpu_bytes == 2 * rank
    # 4 groups on tp 4: split, sums back to the whole
    fp4 = kv_footprint(synthetic([mamba(4)], 2), contexts=(16,), kv_dtype="bf16", tp=4)
    whole = (1024 + 2 * 4 * 16) * 3 * 2 + 16 * 64 * 16 * 2
    assert fp4.layers[0].state_bytes == whole
    assert 4 * fp4.layers[0].state_bytes_per_rank == whole
    # 3 groups on tp 4: neither divides
    with pytest.raises(ParallelismError, match="groups"):
        kv_footprint(synthetic([mamba(3)], 2), contexts=(16,), kv_dtype="bf16", tp=4)


@pytest.mark.parametrize("tp", [0, -2, True, 2.0])
def test_bad_tp(tp):
    m = load("meta-llama__Meta-Llama-3-8B")
    with pytest.raises(ParallelismError):
        kv_footprint(m, contexts=(16,), kv_dtype="bf16", tp=tp)
