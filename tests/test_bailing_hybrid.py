"""inclusionAI Ling-3.0 (model_type bailing_hybrid, BailingMoeV3ForCausalLM): KDA + MLA as vLLM
0.34's bailing_moe_v3.py builds it, every number derived by hand from the fixture configs.

vLLM's rule (bailing_moe_v3.py ``_is_kda_layer``): layer i is MLA when (i + 1) %
layer_group_size == 0 or i >= num_hidden_layers // layer_group_size * layer_group_size, else
KDA with num_attention_heads heads of head_dim. KDA (``kda_state_shape`` / ``kda_state_dtype``):
a conv over 3 x heads x head_dim channels keeping short_conv_kernel_size - 1 columns in the
model dtype, and a heads x head_dim x head_dim state in fp32, both split by heads over TP. MLA
caches the kv_lora_rank + qk_rope_head_dim latent, one copy on every TP rank.
"""

from __future__ import annotations

import pytest
from family_helpers import BF16, FP8, FP32, covers, kinds, load, raw, row

from kvplan.core.errors import KvplanError
from kvplan.planning.footprint import kv_footprint

FLASH = "inclusionAI__Ling-3.0-flash.json"
TINY = "inclusionAI__Ling-3.0-tiny.json"


def kda_rank_bytes(heads: int, dim: int, kernel: int, tp: int) -> int:
    """One KDA layer on one rank: bf16 conv (3 x heads x dim / tp channels x kernel - 1
    columns) + fp32 state ((heads / tp) x dim x dim)."""
    return (3 * heads * dim // tp) * (kernel - 1) * BF16 + (heads // tp) * dim * dim * FP32


@covers(FLASH)
def test_ling_3_flash():
    m = load(FLASH)
    # 42 layers, layer_group_size 6: 42 // 6 * 6 = 42, no partial group; MLA where i + 1 is
    # 6, 12, ..., 42 (7 layers), KDA on the other 35
    mla_at = {5, 11, 17, 23, 29, 35, 41}
    assert kinds(m) == [("mla",) if i in mla_at else ("kda",) for i in range(42)]
    for tp, kv, kv_bytes in ((1, "bf16", BF16), (8, "bf16", BF16), (1, "fp8", FP8), (8, "fp8", FP8)):
        fp = kv_footprint(m, [4096], kv_dtype=kv, tp=tp, block_size_tokens=1)
        # kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements per token, on every rank
        assert row(fp, "mla").bytes_per_token_per_rank == 576 * kv_bytes
        assert fp.bytes_per_token == 7 * 576 * kv_bytes  # 8,064 B bf16, 4,032 B fp8
        # 32 heads x head_dim 128, short_conv_kernel_size 4; --kv-dtype does not touch it
        kda = row(fp, "kda")
        assert kda.count == 35
        assert kda.state_bytes_per_rank == kda_rank_bytes(32, 128, 4, tp)
    # TP 1: conv 3 x 32 x 128 = 12,288 channels x 3 x 2 B = 73,728 B; state 32 x 128 x 128 x
    # 4 B = 2,097,152 B; 2,170,880 B per KDA layer x 35 = 75,980,800 B per sequence
    assert kv_footprint(m, [1], block_size_tokens=1).state_bytes_per_sequence == 75_980_800
    # TP 8: conv 1,536 x 3 x 2 B = 9,216 B; state 4 x 128 x 128 x 4 B = 262,144 B
    assert row(kv_footprint(m, [1], tp=8), "kda").state_bytes_per_rank == 9_216 + 262_144
    # the one MTP layer (num_nextn_predict_layers 1) caches only as a speculative draft
    assert any("num_nextn_predict_layers = 1" in a for a in m.assumptions)


@covers(TINY)
def test_ling_3_tiny():
    m = load(TINY)
    # 24 layers, layer_group_size 4: MLA at i = 3, 7, 11, 15, 19, 23 (6 layers), KDA on 18
    assert kinds(m) == [("mla",) if i % 4 == 3 else ("kda",) for i in range(24)]
    for tp, kv, kv_bytes in ((1, "bf16", BF16), (8, "bf16", BF16), (1, "fp8", FP8), (8, "fp8", FP8)):
        fp = kv_footprint(m, [4096], kv_dtype=kv, tp=tp, block_size_tokens=1)
        assert row(fp, "mla").bytes_per_token_per_rank == (512 + 64) * kv_bytes
        assert fp.bytes_per_token == 6 * 576 * kv_bytes  # 6,912 B bf16, 3,456 B fp8
        assert row(fp, "kda").state_bytes_per_rank == kda_rank_bytes(16, 128, 4, tp)
    # TP 1: conv 3 x 16 x 128 = 6,144 channels x 3 x 2 B = 36,864 B; state 16 x 128 x 128 x
    # 4 B = 1,048,576 B; 1,085,440 B x 18 = 19,537,920 B per sequence
    assert kv_footprint(m, [1], block_size_tokens=1).state_bytes_per_sequence == 19_537_920
    # TP 8: conv 768 x 3 x 2 B = 4,608 B; state 2 x 128 x 128 x 4 B = 131,072 B per rank
    assert row(kv_footprint(m, [1], tp=8), "kda").state_bytes_per_rank == 4_608 + 131_072


def test_trailing_partial_group_is_mla():
    # vLLM: i >= 26 // 4 * 4 = 24 is MLA too, so 26 layers give MLA at 3, 7, ..., 23, 24, 25
    m = load(TINY, {**raw(TINY), "num_hidden_layers": 26})
    mla_at = {3, 7, 11, 15, 19, 23, 24, 25}
    assert kinds(m) == [("mla",) if i in mla_at else ("kda",) for i in range(26)]


@pytest.mark.parametrize(("change", "match"), [
    ({"architectures": ["BailingMoeV2_5ForCausalLM"]}, "BailingMoeV2_5ForCausalLM .* is not read"),
    ({"architectures": ["SomethingForCausalLM"]}, "must name BailingMoeV3ForCausalLM"),
    ({"no_kda_lora": False}, "no_kda_lora true"),
    ({"num_kv_heads_for_linear_attn": 4}, "gives KDA's keys all 16"),
    ({"qk_head_dim": 128}, "is not qk_nope_head_dim \\+ qk_rope_head_dim = 192"),
])
def test_refused(change, match):
    with pytest.raises(KvplanError, match=match):
        load(TINY, {**raw(TINY), **change})


def test_vllm_releases():
    m = load(FLASH)
    # BailingMoeV3ForCausalLM is in 0.28.0's registry, not 0.27.1's
    with pytest.raises(KvplanError, match="first served 'bailing_hybrid' models in 0.28.0"):
        kv_footprint(m, [1], engine="vllm@0.27.1")
    assert kv_footprint(m, [1], engine="vllm@0.28.0").bytes_per_token == 7 * 576 * BF16


@pytest.mark.parametrize("engine", ["trtllm", "llama.cpp", "sglang", "transformers"])
def test_engines_whose_ling3_layout_is_not_read_refuse_it(capsys, engine):
    # only vLLM's bailing_moe_v3.py was read; the others say so rather than price a layout
    from cli_helpers import fail

    msg = fail(capsys, "size", "tests/fixtures/configs/inclusionAI__Ling-3.0-flash.json",
               "--engine", engine)
    assert "bailing_hybrid" in msg
