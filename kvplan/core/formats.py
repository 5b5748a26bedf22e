"""KV storage formats: exact bytes per stored vector, scale overhead included. Pure, no I/O.

A format stores one *vector* at a time: for most formats a vector is one head's K (or V) of one
token in one layer (``head_dim`` elements); llama.cpp's block formats quantise a whole row, all
KV heads of a layer for one token (``kv_heads * head_dim`` elements), as ggml lays out
``k_l``/``v_l``. A vector of ``L`` elements costs::

    bits = L * element_bits
         + ceil(L / block_elements) * block_overhead_bits      # per-block scales (and zeros)
         + per_vector_overhead_bits                            # one scale per vector (per token)
    bytes = Fraction(bits, 8) + L * amortized_overhead_bits_per_element / 8

``amortized_overhead_bits_per_element`` is for scales whose groups run along the *token* axis
(KIVI's per-channel K): G tokens share one scale and zero per channel, so each element carries
``(scale_bits + zero_bits) / G`` bits. Scales that are calibrated once per layer and shared by
every sequence (fp8 ``k_scale``/``v_scale``, int8 per-channel scales, nvfp4's per-tensor fp32
scale) are model constants, not part of any sequence's cache, and are not counted here.

KIVI-style formats keep the most recent ``residual_tokens`` tokens in full precision
(``residual_bits``); only older tokens are quantised.

Worked numbers (head_dim 128): bf16 256 B; fp8 128 B; int4 (group 64, fp16 scale + fp16 zero)
64 + 2*4 = 72 B; nvfp4 64 + 8*1 = 72 B; mxfp4 64 + 4*1 = 68 B; q8_0 on a 1024-element row
(8 heads x 128) 32 blocks x 34 B = 1088 B.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from .dtypes import canonical_dtype, dtype_bytes
from .errors import FormatError
from .suggest import did_you_mean
from .units import cdiv

#: Architectures that run fp8 attention natively (NVIDIA Ada sm89, Hopper sm90, Blackwell sm100+;
#: AMD CDNA3 MI300 series, CDNA4 MI350 series).
FP8_ARCHS = ("ada", "hopper", "blackwell", "cdna3", "cdna4")
ANY_GPU = ("any",)

#: Scale / zero-point element types a parametrised format accepts, beyond the float dtypes of
#: ``kvplan.core.dtypes`` (fp32, bf16, fp16, fp8 ...).
EXTRA_SCALE_BITS = {"int8": 8, "e8m0": 8, "none": 0}


@functools.cache
def _bytes_per_token(fmt: KvFormat, heads: int, head_dim: int) -> Fraction:
    count, length = fmt._vectors(heads, head_dim)
    return count * fmt.vector_bytes(length)


@dataclass(frozen=True, kw_only=True)
class KvFormat:
    """One storage format for K or V elements (see the module docstring for the equation)."""

    name: str
    element_bits: int
    block_elements: int | None = None
    block_overhead_bits: int = 0
    per_vector_overhead_bits: int = 0
    amortized_overhead_bits_per_element: Fraction = Fraction(0)
    residual_tokens: int = 0
    residual_bits: int = 16
    row_vectors: bool = False  # llama.cpp: one vector per token per layer spans every KV head
    strict_blocks: bool = False  # the vector length must be a multiple of block_elements
    vector_length: int | None = None  # the only vector length the format is defined for
    native_archs: tuple[str, ...] = ANY_GPU
    description: str = ""

    def vector_bytes(self, length: int) -> Fraction:
        """Exact bytes of one quantised vector of ``length`` elements."""
        if self.vector_length is not None and length != self.vector_length:
            raise FormatError(f"{self.name} stores vectors of {self.vector_length} elements only "
                              f"(got {length})", field="kv_dtype")
        bits = length * self.element_bits + self.per_vector_overhead_bits
        if self.block_elements:
            if self.strict_blocks and length % self.block_elements:
                raise FormatError(
                    f"{self.name} stores blocks of {self.block_elements} elements; a row of "
                    f"{length} elements does not divide into them",
                    field="kv_dtype",
                )
            bits += cdiv(length, self.block_elements) * self.block_overhead_bits
        return Fraction(bits, 8) + length * self.amortized_overhead_bits_per_element / 8

    def _vectors(self, heads: int, head_dim: int) -> tuple[int, int]:
        return (1, heads * head_dim) if self.row_vectors else (heads, head_dim)

    def bytes_per_token(self, heads: int, head_dim: int) -> Fraction:
        """Bytes one (quantised) token adds for ``heads`` vectors of ``head_dim`` in one layer."""
        return _bytes_per_token(self, heads, head_dim)

    def bytes_for_tokens(self, tokens: int, heads: int, head_dim: int) -> Fraction:
        """Bytes of ``tokens`` tokens in one layer, the full-precision residual included."""
        full = min(tokens, self.residual_tokens)
        residual = Fraction(full * heads * head_dim * self.residual_bits, 8)
        return (tokens - full) * self.bytes_per_token(heads, head_dim) + residual

    @property
    def nominal_bits_per_element(self) -> Fraction:
        """Bits per element for a long vector, scales included (used to order formats)."""
        per_block = (
            Fraction(self.block_overhead_bits, self.block_elements) if self.block_elements else 0
        )
        return self.element_bits + per_block + self.amortized_overhead_bits_per_element


@dataclass(frozen=True)
class KvFormatPair:
    """The formats K and V are stored in (they may differ, as llama.cpp and KIVI allow)."""

    k: KvFormat
    v: KvFormat

    @property
    def name(self) -> str:
        if self.k.name == self.v.name:
            return self.k.name
        return f"k={self.k.name},v={self.v.name}"


def _plain(name: str, bits: int, archs: tuple[str, ...], desc: str) -> KvFormat:
    return KvFormat(name=name, element_bits=bits, native_archs=archs, description=desc)


def _ggml(name: str, bits: int, overhead_bits: int, desc: str) -> KvFormat:
    return KvFormat(
        name=name,
        element_bits=bits,
        block_elements=32,
        block_overhead_bits=overhead_bits,
        row_vectors=True,
        strict_blocks=True,
        native_archs=("llama.cpp",),
        description=desc,
    )


#: Fixed-parameter formats. llama.cpp block sizes follow ggml-common.h (QK = 32):
#: block_q8_0 = fp16 d + 32 x int8 = 34 B; block_q4_0 = fp16 d + 16 B = 18 B;
#: block_q4_1 = fp16 d, m + 16 B = 20 B; block_q5_0 = fp16 d + 4 B high bits + 16 B = 22 B;
#: block_q5_1 = fp16 d, m + 4 B + 16 B = 24 B; block_iq4_nl = fp16 d + 16 B = 18 B.
FIXED_FORMATS: dict[str, KvFormat] = {
    f.name: f
    for f in (
        _plain("fp32", 32, ANY_GPU, "IEEE float32"),
        _plain("fp16", 16, ANY_GPU, "IEEE float16"),
        _plain("bf16", 16, ANY_GPU, "bfloat16 (Ampere and newer, CDNA2 and newer)"),
        _plain("fp8_e4m3", 8, FP8_ARCHS, "fp8 E4M3, per-tensor scale shared by all sequences"),
        _plain("fp8_e5m2", 8, FP8_ARCHS, "fp8 E5M2, no scale"),
        _plain("int8_per_channel", 8, ANY_GPU, "int8, static per-channel scales (model constants)"),
        KvFormat(
            name="nvfp4",
            element_bits=4,
            block_elements=16,
            block_overhead_bits=8,
            native_archs=("blackwell",),
            description="NVFP4: 16-element blocks, fp8 E4M3 block scale, fp32 per-tensor scale",
        ),
        KvFormat(
            name="mxfp4",
            element_bits=4,
            block_elements=32,
            block_overhead_bits=8,
            native_archs=("blackwell", "cdna4"),
            description="OCP MXFP4: 32-element blocks with an 8-bit E8M0 shared exponent",
        ),
        KvFormat(
            name="fp8_ds_mla",
            element_bits=8,
            per_vector_overhead_bits=(4 * 4 + 64) * 8,
            vector_length=576,
            native_archs=("hopper", "blackwell"),
            description="DeepSeek sparse MLA: 512 fp8 latent values + 4 fp32 scales + 64 bf16 "
                        "RoPE values = 656 B per token (vLLM FlashMLA sparse, SGLang NSA)",
        ),
        # vLLM >= 0.30 FlashMLA sparse, Blackwell SM 10.x (vllm/v1/attention/backends/mla/
        # flashmla_sparse.py:118, 0.34): the 576-element latent as 512 e2m1 NoPE values (4 bits
        # each, counted by element_bits over all 576), 64 e4m3 RoPE values (the 4 bits each
        # beyond element_bits) and one e4m3 scale per 16 NoPE values (512 / 16 = 32 bytes):
        # 576 * 4 / 8 + 64 * 4 / 8 + 32 = 288 + 32 + 32 = 352 B = 256 + 64 + 32
        KvFormat(
            name="nvfp4_ds_mla",
            element_bits=4,
            per_vector_overhead_bits=64 * (8 - 4) + 512 // 16 * 8,
            vector_length=576,
            native_archs=("blackwell",),
            description="DeepSeek sparse MLA on Blackwell SM 10.x: 512 e2m1 latent values + "
                        "32 e4m3 scales (one per 16) + 64 e4m3 RoPE values = 352 B per token "
                        "(vLLM >= 0.30 FlashMLA sparse)",
        ),
        _ggml("q8_0", 8, 16, "llama.cpp q8_0: 32 x int8 + fp16 scale (34 B per 32)"),
        _ggml("q4_0", 4, 16, "llama.cpp q4_0: 32 x 4-bit + fp16 scale (18 B per 32)"),
        _ggml("q4_1", 4, 32, "llama.cpp q4_1: 32 x 4-bit + fp16 scale and min (20 B per 32)"),
        _ggml("q5_0", 5, 16, "llama.cpp q5_0: 32 x 5-bit + fp16 scale (22 B per 32)"),
        _ggml("q5_1", 5, 32, "llama.cpp q5_1: 32 x 5-bit + fp16 scale and min (24 B per 32)"),
        _ggml("iq4_nl", 4, 16, "llama.cpp iq4_nl: 32 x 4-bit non-linear + fp16 scale (18 B)"),
    )
}

ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "fp8": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "int8": "int8_per_token",
    "fp4": "nvfp4",
    "kivi": "kivi2",
}

#: Parametrised formats and their defaults.
PARAM_DEFAULTS: dict[str, dict[str, str]] = {
    "int8_per_token": {"scale": "fp16", "zero": "none"},
    "int4": {"group": "64", "scale": "fp16", "zero": "fp16"},
    "kivi2": {"group": "32", "residual": "128", "scale": "fp16", "zero": "fp16"},
    "kivi4": {"group": "32", "residual": "128", "scale": "fp16", "zero": "fp16"},
}

ALL_NAMES = sorted([*FIXED_FORMATS, *PARAM_DEFAULTS])


def _dtype_bits(value: str, key: str, spec: str) -> int:
    if value in EXTRA_SCALE_BITS:
        return EXTRA_SCALE_BITS[value]
    dtype = canonical_dtype(value)
    if dtype is None:
        raise FormatError(
            f"{key}={value!r} in {spec!r}: expected one of fp32, fp16, bf16, fp8, "
            f"{', '.join(EXTRA_SCALE_BITS)}",
            field="kv_dtype",
        )
    return 8 * dtype_bytes(dtype)


def _positive(value: str, key: str, spec: str, allow_zero: bool = False) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0 or (n == 0 and not allow_zero):
        raise FormatError(f"{key}={value!r} in {spec!r} must be a positive integer", field="kv_dtype")
    return n


def _build_param(base: str, params: dict[str, str], spec: str) -> KvFormatPair:
    scale = _dtype_bits(params["scale"], "scale", spec)
    zero = _dtype_bits(params["zero"], "zero", spec)
    if base == "int8_per_token":
        f = KvFormat(
            name=spec,
            element_bits=8,
            per_vector_overhead_bits=scale + zero,
            description="int8 with one scale (and zero) per token per head",
        )
        return KvFormatPair(f, f)
    group = _positive(params["group"], "group", spec)
    if base == "int4":
        f = KvFormat(
            name=spec,
            element_bits=4,
            block_elements=group,
            block_overhead_bits=scale + zero,
            description=f"int4 groups of {group} along head_dim with scale (+zero)",
        )
        return KvFormatPair(f, f)
    bits = 2 if base == "kivi2" else 4
    residual = _positive(params["residual"], "residual", spec, allow_zero=True)
    k = KvFormat(
        name=spec, element_bits=bits, residual_tokens=residual, residual_bits=16,
        amortized_overhead_bits_per_element=Fraction(scale + zero, group),
        description=f"KIVI {bits}-bit K per-channel (groups of {group} tokens)",
    )
    v = KvFormat(
        name=spec, element_bits=bits, residual_tokens=residual, residual_bits=16,
        block_elements=group, block_overhead_bits=scale + zero,
        description=f"KIVI {bits}-bit V per-token (groups of {group} channels)",
    )
    return KvFormatPair(k, v)


def parse_format(spec: str) -> KvFormatPair:
    """Parse ``name`` or ``name:key=value,...`` (e.g. ``int4:group=32,zero=none``)."""
    text = spec.strip().lower()
    base, _, rest = text.partition(":")
    base = ALIASES.get(base, base)
    if base in FIXED_FORMATS:
        if rest:
            raise FormatError(f"{base} takes no parameters (got {rest!r})", field="kv_dtype")
        f = FIXED_FORMATS[base]
        return KvFormatPair(f, f)
    if base not in PARAM_DEFAULTS:
        hint = did_you_mean(base, ALL_NAMES + list(ALIASES))
        raise FormatError(
            f"unknown KV format {spec!r}{hint}; known: {', '.join(ALL_NAMES)}", field="kv_dtype"
        )
    params = dict(PARAM_DEFAULTS[base])
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise FormatError(
                f"bad parameter {item!r} in {spec!r}; {base} takes {', '.join(params)}",
                field="kv_dtype",
            )
        params[key] = value
    canonical = base + "".join(
        f"{':' if i == 0 else ','}{k}={v}"
        for i, (k, v) in enumerate((k, v) for k, v in params.items() if v != PARAM_DEFAULTS[base][k])
    )
    return _build_param(base, params, canonical)


#: The lightning indexer's key as vLLM and SGLang store it: fp8 values with one fp32 scale per
#: 128 (``DeepseekV32IndexerCache``: index_head_dim + index_head_dim // 128 * 4 bytes). Not a
#: ``--kv-dtype`` choice: the indexer keeps it whatever the KV format is.
INDEXER_FP8 = KvFormat(name="fp8_indexer", element_bits=8, block_elements=128,
                       block_overhead_bits=32, native_archs=("hopper", "blackwell"),
                       description="indexer key: fp8 + one fp32 scale per 128 values")
