"""Exact bytes per stored vector for every KV format, derived by hand from the format layouts.

Conventions (kvplan/core/formats.py): a plain / scaled format stores one vector per KV head
(``head_dim`` elements); llama.cpp block formats (q8_0, q4_0, ...) store one row per token per
layer spanning every KV head (``kv_heads * head_dim`` elements), in blocks of 32 elements.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvplan.core.errors import FormatError
from kvplan.core.formats import ALL_NAMES, FIXED_FORMATS, PARAM_DEFAULTS, parse_format


def vb(spec: str, length: int, which: str = "k") -> Fraction:
    pair = parse_format(spec)
    return getattr(pair, which).vector_bytes(length)


# --------------------------------------------------------------------------------------------
# Plain formats: element bytes x elements, no scale (per-tensor scales are model constants).
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, bytes_per_element",
    [
        ("fp32", 4),
        ("fp16", 2),
        ("bf16", 2),
        ("fp8_e4m3", 1),
        ("fp8_e5m2", 1),
        ("int8_per_channel", 1),
    ],
)
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256])
def test_plain_formats(spec, bytes_per_element, head_dim):
    assert vb(spec, head_dim) == head_dim * bytes_per_element
    assert vb(spec, head_dim, "v") == head_dim * bytes_per_element
    # 8 KV heads: 8 separate vectors
    assert parse_format(spec).k.bytes_per_token(8, head_dim) == 8 * head_dim * bytes_per_element


# --------------------------------------------------------------------------------------------
# llama.cpp block formats (ggml-common.h, QK = 32), one row of kv_heads * head_dim elements.
# --------------------------------------------------------------------------------------------


def test_q8_0_row_1024():
    # 8 KV heads x 128 = 1024 elements; block_q8_0 = fp16 d (2 B) + 32 x int8 (32 B) = 34 B.
    assert vb("q8_0", 1024) == 1024 // 32 * (2 + 32)
    assert vb("q8_0", 1024) == 1088


@pytest.mark.parametrize(
    "spec, block_bytes",
    [
        ("q8_0", 2 + 32),  # fp16 d + 32 x int8
        ("q4_0", 2 + 32 * 4 // 8),  # fp16 d + 16 B of nibbles = 18
        ("q4_1", 2 + 2 + 32 * 4 // 8),  # fp16 d, fp16 m + 16 B = 20
        ("q5_0", 2 + 32 // 8 + 32 * 4 // 8),  # fp16 d + 4 B high bits + 16 B = 22
        ("q5_1", 2 + 2 + 32 // 8 + 32 * 4 // 8),  # fp16 d, m + 4 B + 16 B = 24
        ("iq4_nl", 2 + 32 * 4 // 8),  # fp16 d + 16 B = 18
    ],
)
@pytest.mark.parametrize("heads, head_dim", [(8, 128), (1, 64), (4, 80), (10, 128), (2, 256)])
def test_ggml_block_formats(spec, block_bytes, heads, head_dim):
    assert block_bytes == {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24,
                           "iq4_nl": 18}[spec]
    row = heads * head_dim
    assert row % 32 == 0
    expected = row // 32 * block_bytes
    fmt = parse_format(spec)
    assert fmt.k.vector_bytes(row) == expected
    # one row per token per layer, covering every head (not heads x per-head vectors)
    assert fmt.k.bytes_per_token(heads, head_dim) == expected
    assert fmt.v.bytes_per_token(heads, head_dim) == expected


def test_ggml_row_vs_per_head_layout():
    # 1 head of 80 would not divide into 32-blocks, but 4 heads x 80 = 320 = 10 blocks do.
    assert parse_format("q4_0").k.bytes_per_token(4, 80) == 10 * 18
    with pytest.raises(FormatError):
        parse_format("q4_0").k.bytes_per_token(1, 80)


@pytest.mark.parametrize("spec", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"])
@pytest.mark.parametrize("row", [16, 48, 80, 1000, 33])
def test_ggml_row_not_divisible_raises(spec, row):
    with pytest.raises(FormatError, match="32"):
        parse_format(spec).k.vector_bytes(row)


# --------------------------------------------------------------------------------------------
# FP4 formats with per-block scales
# --------------------------------------------------------------------------------------------


def test_nvfp4():
    # 4-bit elements + one fp8 E4M3 scale (1 B) per 16 elements
    assert vb("nvfp4", 128) == 128 * 4 // 8 + (128 // 16) * 1
    assert vb("nvfp4", 128) == 72
    assert vb("nvfp4", 64) == 64 * 4 // 8 + (64 // 16) * 1
    assert vb("nvfp4", 256) == 128 + 16


def test_mxfp4():
    # 4-bit elements + one E8M0 exponent (1 B) per 32 elements
    assert vb("mxfp4", 128) == 64 + 4
    assert vb("mxfp4", 64) == 32 + 2
    assert vb("mxfp4", 256) == 128 + 8


# --------------------------------------------------------------------------------------------
# Parametrised integer formats
# --------------------------------------------------------------------------------------------


def test_int4_default():
    # group 64 along head_dim, fp16 scale + fp16 zero per group
    assert vb("int4", 128) == 128 // 2 + 2 * (2 + 2)
    assert vb("int4", 128) == 64 + 2 * 4
    assert vb("int4", 64) == 32 + 1 * 4
    # a partial trailing group still carries its scale and zero: 96 = 64 + 32 -> 2 groups
    assert vb("int4", 96) == 48 + 2 * 4


def test_int4_group32_no_zero():
    # 128 / 32 = 4 groups, fp16 scale only
    assert vb("int4:group=32,zero=none", 128) == 64 + 4 * 2
    assert vb("int4:group=32,zero=none", 64) == 32 + 2 * 2
    assert vb("int4:group=128", 128) == 64 + 1 * 4
    assert vb("int4:group=32,scale=fp32", 128) == 64 + 4 * (4 + 2)
    assert vb("int4:scale=bf16,zero=bf16", 128) == 64 + 2 * 4  # bf16 alias sizes as fp16


def test_int8_per_token():
    # int8 elements + one fp16 scale per token per head
    assert vb("int8", 128) == 128 + 2
    assert vb("int8_per_token", 64) == 64 + 2
    assert vb("int8:scale=fp32", 128) == 128 + 4
    assert vb("int8:zero=fp16", 128) == 128 + 2 + 2
    assert parse_format("int8").k.bytes_per_token(8, 128) == 8 * (128 + 2)


@pytest.mark.parametrize("spec, expected", [
    ("int4:scale=fp8", 64 + 2 * (1 + 2)),
    ("int4:zero=int8", 64 + 2 * (2 + 1)),
])
def test_scale_dtype_fp8_and_int8_accepted(spec, expected):
    assert vb(spec, 128) == expected


# --------------------------------------------------------------------------------------------
# KIVI: K quantised per channel (groups of G tokens), V per token (groups of G channels),
# the last R tokens kept in fp16.
# --------------------------------------------------------------------------------------------


def test_kivi2_k_and_v_vectors():
    pair = parse_format("kivi2")
    # K: 2-bit elements; one fp16 scale + fp16 zero per channel shared by 32 tokens:
    # (16 + 16) / 32 = 1 bit per element amortised.
    k_expected = Fraction(128 * 2, 8) + Fraction(128 * (16 + 16), 32 * 8)
    assert k_expected == 32 + 16
    assert pair.k.vector_bytes(128) == k_expected
    # V: 2-bit elements; fp16 scale + zero per group of 32 channels: 128 / 32 = 4 groups x 4 B
    v_expected = 128 * 2 // 8 + (128 // 32) * (2 + 2)
    assert v_expected == 32 + 16
    assert pair.v.vector_bytes(128) == v_expected
    # amortised K overhead need not be whole bytes; 24 channels: 24*2/8 = 6 B + 24*1/8 = 3 B
    assert pair.k.vector_bytes(24) == 6 + 3
    # 4 channels: 1 B + 4 bits = 1.5 B
    assert pair.k.vector_bytes(4) == Fraction(3, 2)


def test_kivi4_vectors():
    pair = parse_format("kivi4")
    assert pair.k.vector_bytes(128) == 128 * 4 // 8 + 128 * (16 + 16) // 32 // 8
    assert pair.k.vector_bytes(128) == 64 + 16
    assert pair.v.vector_bytes(128) == 64 + 4 * 4


def test_kivi_group_parameter():
    pair = parse_format("kivi2:group=64")
    # K: 32 bits per channel over 64 tokens = 0.5 bit/element -> 128 * 0.5 / 8 = 8 B
    assert pair.k.vector_bytes(128) == 32 + 8
    # V: 2 groups of 64 channels x 4 B
    assert pair.v.vector_bytes(128) == 32 + 2 * 4


def test_kivi2_bytes_for_tokens_residual():
    pair = parse_format("kivi2")
    heads, hd = 8, 128
    fp16_token = heads * hd * 2  # one token of one layer, K (or V), in fp16
    quant_k = heads * (32 + 16)
    quant_v = heads * (32 + 16)
    # under the 128-token residual everything is fp16
    assert pair.k.bytes_for_tokens(100, heads, hd) == 100 * fp16_token
    assert pair.k.bytes_for_tokens(128, heads, hd) == 128 * fp16_token
    # past it, the newest 128 stay fp16 and the rest are quantised
    assert pair.k.bytes_for_tokens(1000, heads, hd) == 128 * fp16_token + (1000 - 128) * quant_k
    assert pair.v.bytes_for_tokens(1000, heads, hd) == 128 * fp16_token + (1000 - 128) * quant_v
    assert pair.k.bytes_for_tokens(0, heads, hd) == 0
    # residual=0 quantises everything
    r0 = parse_format("kivi2:residual=0")
    assert r0.k.bytes_for_tokens(1000, heads, hd) == 1000 * quant_k
    r16 = parse_format("kivi2:residual=16")
    assert r16.v.bytes_for_tokens(20, heads, hd) == 16 * fp16_token + 4 * quant_v


def test_non_kivi_bytes_for_tokens_has_no_residual():
    assert parse_format("int4").k.bytes_for_tokens(1000, 8, 128) == 1000 * 8 * 72
    assert parse_format("bf16").k.bytes_for_tokens(7, 2, 64) == 7 * 2 * 64 * 2
    assert parse_format("q8_0").k.bytes_for_tokens(3, 8, 128) == 3 * 1088


# --------------------------------------------------------------------------------------------
# Names, aliases, canonical specs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("bfloat16", "bf16"),
        ("BF16", "bf16"),
        ("  bf16  ", "bf16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("f16", "fp16"),
        ("float32", "fp32"),
        ("float", "fp32"),
        ("f32", "fp32"),
        ("fp8", "fp8_e4m3"),
        ("fp8_e4m3fn", "fp8_e4m3"),
        ("float8_e4m3fn", "fp8_e4m3"),
        ("float8_e5m2", "fp8_e5m2"),
        ("fp4", "nvfp4"),
        ("int8", "int8_per_token"),
        ("kivi", "kivi2"),
    ],
)
def test_aliases(alias, canonical):
    assert parse_format(alias).name == canonical
    assert parse_format(alias) == parse_format(canonical)


def test_alias_bytes():
    assert vb("fp4", 128) == 72  # nvfp4
    assert vb("fp8", 128) == 128
    assert vb("bfloat16", 128) == 256


def test_canonical_names_drop_defaults():
    assert parse_format("int4").name == "int4"
    assert parse_format("int4:group=64").name == "int4"
    assert parse_format("int4:group=32,zero=none").name == "int4:group=32,zero=none"
    assert parse_format("int4:zero=none,group=32").name == "int4:group=32,zero=none"
    assert parse_format("kivi2:residual=128,group=32").name == "kivi2"
    assert parse_format("int8").name == "int8_per_token"


def test_every_name_parses():
    assert set(ALL_NAMES) == set(FIXED_FORMATS) | set(PARAM_DEFAULTS)
    for name in ALL_NAMES:
        pair = parse_format(name)
        assert pair.k.vector_bytes(pair.k.vector_length or 128) > 0


def test_fp8_ds_mla_is_656_bytes_for_the_576_latent():
    # 512 fp8 NoPE values + 512 / 128 = 4 fp32 scales (16 B) + 64 RoPE values in bf16 (128 B)
    fmt = parse_format("fp8_ds_mla").k
    assert fmt.vector_bytes(576) == 512 + 4 * 4 + 64 * 2 == 656
    with pytest.raises(FormatError, match="fp8_ds_mla stores vectors of 576 elements only"):
        fmt.vector_bytes(128)


def test_kivi_pair_name_and_mixed_pair():
    # K and V formats differ in kind but share the spec name
    assert parse_format("kivi2").name == "kivi2"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def test_unknown_name_suggests():
    with pytest.raises(FormatError) as e:
        parse_format("bf15")
    assert "did you mean" in str(e.value)
    assert "bf16" in str(e.value)
    assert e.value.field == "kv_dtype"


def test_unknown_name_suggests_q8():
    with pytest.raises(FormatError, match="q8_0"):
        parse_format("q8_1")


def test_unknown_name_without_close_match_lists_known():
    with pytest.raises(FormatError) as e:
        parse_format("zzzzzzzz")
    assert "did you mean" not in str(e.value)
    assert "known" in str(e.value)


@pytest.mark.parametrize(
    "spec",
    [
        "int4:grp=32",  # unknown key
        "int4:group",  # no '='
        "int4:group=0",  # zero group
        "int4:group=-32",
        "int4:group=abc",
        "int4:scale=fp64",  # unknown scale dtype
        "int8:zero=int3",
        "kivi2:residual=-1",
        "kivi2:residual=x",
        "kivi2:foo=1",
        "bf16:group=32",  # fixed formats take no parameters
        "q8_0:scale=fp32",
        "fp8:x",
    ],
)
def test_bad_parameters_raise(spec):
    with pytest.raises(FormatError):
        parse_format(spec)


def test_residual_zero_allowed_group_zero_not():
    assert parse_format("kivi2:residual=0").k.residual_tokens == 0
    with pytest.raises(FormatError):
        parse_format("kivi2:group=0")
