"""Pipeline parallelism on hybrid caches: vLLM's one block pool over every stage, and the step
model's mean stage. Numbers derived by hand from the real configs.

Gemma-3-27B (tests/fixtures/configs/google__gemma-3-27b-it.json): 62 layers, every 6th full
attention (layers 5, 11, ..., 59: 10 full), 52 sliding (window 1024); 16 KV heads x head_dim 128,
bf16: 2 x 16 x 128 x 2 = 8,192 B per token per layer, 16-token pages of 131,072 B.

vLLM >= 0.11 (``get_kv_cache_configs``, 0.11.0 ``vllm/v1/core/kv_cache_utils.py``) groups the
whole model's layers: group size min(10, 52) = 10; the full layers make one group, the 52 sliding
cdiv(52, 10) = 6 groups, sliding layer i in group i mod 6 (``layers[i::num_groups]``): 7 groups.
Each stage keeps every group with only its own layers. At pp 2 stage 1 holds layers 31..61: full
35, 41, 47, 53, 59 (5) and sliding indices 26..51 (26 layers: residues 2 and 3 mod 6 five times,
the others four), so its largest group has 5 layers and its block is 5 x 131,072 = 655,360 B.
"""

from __future__ import annotations

import pytest

from kvplan.core.perf import Efficiency
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.resolve import load_model
from kvplan.planning.deployment import plan
from kvplan.planning.fit_pools import pool_usage

GEMMA3 = "tests/fixtures/configs/google__gemma-3-27b-it.json"
PAGE = 16 * 2 * 16 * 128 * 2  # 16 tokens x (K, V) x 16 heads x 128 x 2 B
# 32,768 tokens: the full group 32768 / 16 = 2,048 blocks; each of the 6 sliding groups
# cdiv(1024 - 1, 16) + 1 = 65 blocks (the window, plus the block the newest token opens)
SEQ_BLOCKS_32K = 32768 // 16 + 6 * 65


def _plan(model: str, pp: int, ctx: int):
    return plan(load_model(model), load_gpu("h100"), kv_dtype="auto", weight_dtype=None,
                engine="vllm", tp=1, pp=pp, context_tokens=ctx, efficiency=Efficiency())


def test_page_and_sequence_blocks_by_hand():
    assert PAGE == 131_072
    assert SEQ_BLOCKS_32K == 2_438


def test_gemma3_pp1_block_is_ten_pages():
    r, _ = _plan(GEMMA3, 1, 32768)
    (p,) = r.stages
    assert len(p.pool_groups.groups) == 7
    assert p.pool_groups.block_bytes == 10 * PAGE == 1_310_720
    assert p.num_blocks == p.budget.kv_pool_bytes // (10 * PAGE)
    assert r.max_concurrency == p.num_blocks // SEQ_BLOCKS_32K


def test_gemma3_pp2_stage_block_is_its_largest_group():
    r, _ = _plan(GEMMA3, 2, 32768)
    s0, s1 = r.stages
    # stage 0: layers 0..30, full 5, 11, 17, 23, 29 (5) and sliding 0..25 (groups of 5 or 4)
    for p in (s0, s1):
        assert len(p.pool_groups.groups) == 7  # every whole-model group, on every stage
        assert p.pool_groups.block_bytes == 5 * PAGE == 655_360
        assert p.num_blocks == p.budget.kv_pool_bytes // (5 * PAGE)
    sizes1 = sorted(len(g) for g in s1.pool_groups.groups)
    assert sizes1 == [4, 4, 4, 4, 5, 5, 5]  # sliding residues 2, 3 five times; the full group 5
    # one pool: the fewest blocks any stage holds; each sequence takes 2,438 blocks of it
    nb = min(s0.num_blocks, s1.num_blocks)
    (use,) = pool_usage(r, 32768)
    assert (use.capacity, use.shared, use.private) == (nb, 0, SEQ_BLOCKS_32K)
    assert r.max_concurrency == nb // SEQ_BLOCKS_32K


def test_vllm_010_groups_each_stage_alone():
    """0.10 grouped each stage's own layers (get_kv_cache_config per worker) and drove them all
    with stage 0's config: Gemma-3 at pp 2 has 5 full + 26 sliding per stage, groups of 5,
    1 + cdiv(26, 5) = 7 groups on each stage - the same kinds, so it plans."""
    from kvplan.loaders.hf_params import weight_inventory
    from kvplan.loaders.quant_config import weight_format
    from kvplan.planning.fit import plan_layout
    from kvplan.planning.fit_types import FitRequest

    m = load_model(GEMMA3)
    req = FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                     gpu=load_gpu("h100"), engine="vllm@0.10.2", tp=1, pp=2, dp=1, ep=1,
                     kv_dtype="auto", context_tokens=32768, search=False, allow_emulated=False,
                     allow_long_max_model_len=False)
    r = plan_layout(req)
    for p in r.stages:
        assert len(p.pool_groups.groups) == 7
        assert p.pool_groups.block_bytes == 5 * PAGE


def test_step_model_is_the_mean_stage():
    """Under pp the step model is the mean stage: pp x each additive term is the whole model's.
    Gemma-3-27B KV read per cached token: 52 sliding x 8,192 = 425,984 B (capped at the window)
    and 10 full x 8,192 = 81,920 B; at pp 2 half of each, over 31 layers a stage."""
    _, sm1 = _plan(GEMMA3, 1, 32768)
    _, sm2 = _plan(GEMMA3, 2, 32768)
    reads1 = sorted((k.bytes_per_token, k.cap_tokens or 0) for k in sm1.kv_reads)
    assert reads1 == [(81_920, 0), (425_984, 1024)]
    reads2 = sorted((k.bytes_per_token, k.cap_tokens or 0) for k in sm2.kv_reads)
    assert reads2 == [(40_960, 0), (212_992, 1024)]
    assert (sm1.layers, sm2.layers) == (62, 31)
    assert sm2.weight_bytes == pytest.approx(sm1.weight_bytes / 2, rel=1e-12)


def test_llama8b_mean_stage_halves_weights_and_kv():
    """Llama-3.1-8B: 8,030,261,248 params; the 128,256 x 4,096 embedding (a lookup) is not
    read, the untied LM head is: (8,030,261,248 - 525,336,576) x 2 B = 15,009,849,344 B read per
    step, and 2 x 32 x 8 x 128 x 2 = 131,072 B of KV per cached token; at pp 2 each stage (the
    mean) half of both."""
    _, sm1 = _plan("llama-3.1-8b", 1, 8192)
    _, sm2 = _plan("llama-3.1-8b", 2, 8192)
    assert sm1.weight_bytes == (8_030_261_248 - 128_256 * 4_096) * 2 == 15_009_849_344
    assert sm2.weight_bytes == 15_009_849_344 / 2
    assert [k.bytes_per_token for k in sm1.kv_reads] == [131_072]
    assert [k.bytes_per_token for k in sm2.kv_reads] == [65_536]


def test_zamba2_has_no_pipeline_parallelism_in_vllm(capsys):
    """vLLM 0.34 zamba2.py: ``Zamba2ForCausalLM(nn.Module, HasInnerState, IsHybrid)``, no
    SupportsPP, so vLLM refuses pp > 1; pp 1 plans."""
    from kvplan.cli.main import run

    cfg = "tests/fixtures/configs/Zyphra__Zamba2-2.7B-Instruct-v2.json"
    base = ["fit", cfg, "--gpu", "h100", "--weight-memory", "6GiB", "-c", "4k"]
    assert run([*base, "--pp", "2"]) == 2
    err = capsys.readouterr().err
    assert "Zamba2ForCausalLM does not implement SupportsPP" in err and "--pp 1" in err
    assert run(base) == 0
