"""Property tests (hypothesis) for the footprint engine, formats and block rounding."""

from __future__ import annotations

import json
import math
from functools import reduce
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.core.errors import FormatError, InputError
from kvplan.core.formats import ALL_NAMES, parse_format
from kvplan.core.layers import ChunkedLocal, FullAttention, LinearAttention, Mamba, SlidingWindow
from kvplan.core.model import Model
from kvplan.core.tokens import chunked_blocks_at
from kvplan.engines import get_engine
from kvplan.loaders.hf_config import parse_config
from kvplan.planning.footprint import kv_footprint

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
PATHS = sorted(CONFIGS.glob("*.json"))


def _parse_all():
    return {p.stem: parse_config(json.loads(p.read_text()), name=p.stem, source=str(p))
            for p in PATHS}


MODELS = _parse_all()

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

contexts = st.one_of(
    st.integers(1, 300),
    st.integers(1, 20_000),  # crosses the 128 / 2047 / 4096 / 8192 windows and chunks
    st.integers(1, 2_000_000),
)


# --- non-decreasing in context ----------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "hf", "sglang", "llama.cpp"])
@pytest.mark.parametrize("stem", sorted(MODELS))
@FAST
@given(a=contexts, b=contexts)
def test_footprint_non_decreasing_in_context(stem, engine, a, b):
    lo, hi = sorted((a, b))
    layout = get_engine(engine)
    last = layout.removed_model_types.get(MODELS[stem].model_type)
    layout = get_engine(f"{engine}@{last}") if last else layout  # the last release serving it
    try:
        layout.check_model(MODELS[stem])
    except InputError:
        pytest.skip(f"{engine} does not serve or model {stem}")
    kv = "fp8" if MODELS[stem].model_type == "deepseek_v4" else "bf16"  # its one vLLM format
    try:
        fp = kv_footprint(MODELS[stem], contexts=(lo, hi), kv_dtype=kv, engine=layout)
    except InputError as e:
        assert e.field == "--engine"
        pytest.skip(f"{engine} does not serve or model {stem}")
    s_lo, s_hi = fp.sequences
    assert s_lo.total_bytes <= s_hi.total_bytes
    assert s_lo.per_gpu_bytes <= s_hi.per_gpu_bytes


@FAST
@given(
    stem=st.sampled_from(["meta-llama__Llama-4-Scout-17B-16E-Instruct", "google__gemma-2-9b",
                          "mistralai__Mistral-7B-v0.1", "openai__gpt-oss-20b",
                          "microsoft__Phi-3-medium-4k-instruct"]),
    block=st.integers(1, 64),
    a=st.integers(1, 40_000),
    b=st.integers(1, 40_000),
)
def test_windowed_non_decreasing_any_block(stem, block, a, b):
    lo, hi = sorted((a, b))
    fp = kv_footprint(MODELS[stem], contexts=(lo, hi), kv_dtype="bf16", engine="vllm",
                      block_size_tokens=block)
    s_lo, s_hi = fp.sequences
    assert s_lo.per_gpu_bytes <= s_hi.per_gpu_bytes
    assert s_lo.total_bytes <= s_hi.total_bytes


# --- TP shards sum to the whole ---------------------------------------------------------------

ATTN = (FullAttention, SlidingWindow, ChunkedLocal)


def _divisible_counts(model):
    """Every head/channel count TP must divide for this model, or None if not eligible."""
    counts = []
    for spec, _ in model.layer_groups():
        if isinstance(spec, ATTN):
            if spec.num_kv_heads < 2:
                return None
            counts += [spec.num_attention_heads, spec.num_kv_heads]
        elif isinstance(spec, Mamba) and spec.version == 1:
            counts.append(spec.d_inner)
        elif isinstance(spec, Mamba):
            counts += [spec.num_heads, spec.d_inner, spec.n_groups]
        elif isinstance(spec, LinearAttention):
            counts += [spec.num_k_heads, spec.num_v_heads, spec.conv_channels,
                       spec.state_elements]
        else:  # MLA: the latent is replicated, not sharded
            return None
    return counts


def _tps(model):
    counts = _divisible_counts(model)
    if not counts:
        return []
    g = reduce(math.gcd, counts)
    return [t for t in range(2, g + 1) if g % t == 0]


SHARDABLE = {stem: _tps(m) for stem, m in MODELS.items() if _tps(m)}


def test_shardable_set_is_sane():
    assert "meta-llama__Meta-Llama-3-8B" in SHARDABLE  # 32 q / 8 kv heads -> tp 2, 4, 8
    assert SHARDABLE["meta-llama__Meta-Llama-3-8B"] == [2, 4, 8]
    assert "tiiuae__falcon-7b" not in SHARDABLE  # MQA
    assert "deepseek-ai__DeepSeek-V3" not in SHARDABLE  # MLA


SHARD_FORMATS = ["bf16", "fp32", "fp8", "int8", "int4", "nvfp4", "mxfp4", "q8_0", "q4_0",
                 "kivi2", "int4:group=32,zero=none"]


@FAST
@given(data=st.data(), stem=st.sampled_from(sorted(SHARDABLE)),
       fmt=st.sampled_from(SHARD_FORMATS), n=contexts,
       engine=st.sampled_from(["vllm", "hf", "sglang"]))
def test_tp_shards_sum_to_whole(data, stem, fmt, n, engine):
    tp = data.draw(st.sampled_from(SHARDABLE[stem]))
    model = MODELS[stem]
    try:
        whole = kv_footprint(model, contexts=(n,), kv_dtype=fmt, tp=1, block_size_tokens=1,
                             engine=engine).sequences[0]
    except (FormatError, InputError):  # a block format whose row does not divide into 32s,
        assume(False)  # or a format the engine does not have
    sharded = kv_footprint(model, contexts=(n,), kv_dtype=fmt, tp=tp, block_size_tokens=1,
                           engine=engine).sequences[0]
    # exact bytes are rounded up once per GPU, so allow < 1 B per rank of rounding
    assert whole.per_gpu_bytes <= sharded.per_gpu_bytes * tp < whole.per_gpu_bytes + tp
    assert sharded.total_bytes == sharded.per_gpu_bytes * tp


# --- formats ordered by size ------------------------------------------------------------------


def _bytes(pair, heads, head_dim):
    return pair.k.bytes_per_token(heads, head_dim) + pair.v.bytes_per_token(heads, head_dim)


def _nominal(pair):
    return pair.k.nominal_bits_per_element + pair.v.nominal_bits_per_element


PAIRS = {name: parse_format(name) for name in ALL_NAMES}
#: formats defined for any vector length (fp8_ds_mla is for the 576-element MLA latent only)
GENERAL = [name for name in ALL_NAMES if PAIRS[name].k.vector_length is None]


@settings(max_examples=100, deadline=None)
@given(heads=st.integers(1, 16), blocks32=st.integers(1, 16),
       a=st.sampled_from(GENERAL), b=st.sampled_from(GENERAL))
def test_formats_ordered_by_nominal_bits(heads, blocks32, a, b):
    head_dim = 32 * blocks32
    pa, pb = PAIRS[a], PAIRS[b]
    if _nominal(pa) > _nominal(pb):
        # per-vector scales (int8) and partial groups (int4 on 32) may tie, never invert
        assert _bytes(pa, heads, head_dim) >= _bytes(pb, heads, head_dim)


@settings(max_examples=100, deadline=None)
@given(heads=st.integers(1, 16), blocks64=st.integers(1, 8),
       a=st.sampled_from(GENERAL), b=st.sampled_from(GENERAL))
def test_formats_strictly_ordered_on_whole_groups(heads, blocks64, a, b):
    head_dim = 64 * blocks64  # int4's default 64-element groups are whole
    pa, pb = PAIRS[a], PAIRS[b]
    if _nominal(pa) > _nominal(pb):
        assert _bytes(pa, heads, head_dim) > _bytes(pb, heads, head_dim)


def test_named_order_chain():
    # hand-ordered by bits per element (K + V identical except KIVI), scales included:
    # fp32 32 > bf16 16 > q8_0 8.5 > fp8 8 > q5_1 6 > q5_0 5.5 > q4_1 5 > q4_0 4.5
    #   > mxfp4 4.25 > kivi2 3 (2 bits + 32 overhead bits per 32)
    chain = ["fp32", "bf16", "q8_0", "fp8", "q5_1", "q5_0", "q4_1", "q4_0", "mxfp4", "kivi2"]
    sizes = [_bytes(parse_format(c), 8, 128) for c in chain]
    assert sizes == sorted(sizes, reverse=True)
    assert len(set(sizes)) == len(sizes)
    # 8 heads x 128 = 1024 elements per token per layer, K and V each
    assert sizes[0] == 2 * 1024 * 4
    assert sizes[2] == 2 * 32 * 34
    assert sizes[-1] == 2 * 8 * (32 + 16)


# --- block rounding never loses a token -------------------------------------------------------


def _one_layer(spec):
    return Model(name="s", model_type="llama", layers=((spec,),), hidden_size=1024,
                 vocab_size=None, num_attention_heads=spec.num_attention_heads, dtype="bf16")


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 50_000), window=st.integers(2, 9000), block=st.integers(1, 64),
       kind=st.sampled_from(["full", "sliding", "chunked"]),
       engine=st.sampled_from(["vllm", "hf"]))
def test_block_rounding_never_loses_a_token(n, window, block, kind, engine):
    layout = get_engine(engine)
    if not layout.paged:
        block = 1
    common = dict(num_attention_heads=8, num_kv_heads=2, head_dim_k=64, head_dim_v=64)
    if kind == "full":
        spec, policy = FullAttention(**common), "all"
        need = n
    elif kind == "sliding":
        spec, policy = SlidingWindow(window_tokens=window, **common), layout.sliding_policy
        need = min(n, window - 1)  # the next token attends to the last window - 1 tokens
    else:
        spec, policy = ChunkedLocal(chunk_tokens=window, **common), layout.chunked_policy
        need = n - (n // window) * window  # the tokens of the current chunk
    fp = kv_footprint(_one_layer(spec), contexts=(n,), kv_dtype="bf16", engine=layout,
                      block_size_tokens=block)
    (cost,) = fp.layers
    held = cost.held_tokens(n, block, layout)
    assert held % block == 0
    assert held >= need
    # upper bounds, by how the engine holds windowed tokens
    if policy == "all":
        assert held < n + block
    elif policy == "window":  # last W - 1 tokens, whole blocks freed
        assert held < min(n, window - 1) + 2 * block
    elif policy == "window_page":  # last W + one page
        assert held < min(n, window + block) + block
    elif policy == "chunk":  # at most the C - 1 tokens of one chunk, over 2 extra blocks
        assert held < min(n, window - 1) + 2 * block
        assert held >= chunked_blocks_at(n, window, block) * block
    else:  # fixed cache of W + 512 cells, padded to the block
        assert held < window + 512 + block and held < n + block
    # bytes: 2 heads x (64 + 64) x 2 B = 512 B per held token
    assert fp.sequences[0].per_gpu_bytes == held * 512
    assert fp.sequences[0].per_gpu_bytes >= need * 512
