"""What one layer costs under an engine, storage formats and TP degree. Pure.

``layer_cost`` turns a layer spec into a ``LayerCost``: the bytes one token adds (attention
kinds) or the constant state (Mamba, linear attention), whole model and per TP rank, with the
engine's rules for MLA, conv-state width and state dtypes, and the TP splitting rules of
``kvplan.core.parallel``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..core.dtypes import dtype_bytes
from ..core.errors import InputError
from ..core.formats import FIXED_FORMATS, INDEXER_FP8, KvFormatPair
from ..core.layers import (
    ChunkedLocal,
    FullAttention,
    LayerSpec,
    LightningAttention,
    LightningIndexer,
    LinearAttention,
    Mamba,
    MultiHeadLatent,
    ShortConv,
    SlidingWindow,
)
from ..core.model import Model
from ..core.parallel import split_heads
from . import EngineLayout


@dataclass(frozen=True)
class LayerCost:
    """One distinct layer spec under an engine, formats and TP degree."""

    spec: LayerSpec
    kind: str
    count: int
    kv_heads: int | None  # cached heads, whole model (1 for an MLA latent)
    kv_heads_per_rank: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    window_tokens: int | None
    bytes_per_token: Fraction  # one layer, unsharded
    bytes_per_token_per_rank: Fraction  # one layer, one TP rank
    state_bytes: int  # one layer, unsharded
    state_bytes_per_rank: int
    detail: str  # how the numbers were formed, for display
    notes: tuple[str, ...] = ()
    formats: KvFormatPair | None = None  # attention kinds only
    policy: str = "all"  # how the engine holds this layer's tokens (engines.base.POLICIES)
    #: this layer's blocks hold ``block_multiple`` x the engine's block of tokens (vLLM raises
    #: the block of the smaller-page layers until every page is one size; ``unify_pages``)
    block_multiple: int = 1
    #: decode context parallelism: the layer's tokens are split over this many GPUs, each
    #: holding 1/``token_shards`` of them (``kvplan.engines.context_parallel``)
    token_shards: int = 1

    def rank_bytes_for_tokens(self, tokens: int) -> Fraction:
        """Bytes of ``tokens`` cached tokens of one layer on one rank (KIVI residual included);
        under DCP ``tokens`` are the sequence's (whole virtual blocks), 1/dcp of them here."""
        if not self.kv_heads_per_rank or self.formats is None or self.head_dim_k is None:
            return Fraction(0)
        heads = self.kv_heads_per_rank
        b = self.formats.k.bytes_for_tokens(tokens, heads, self.head_dim_k)
        if self.head_dim_v:
            b += self.formats.v.bytes_for_tokens(tokens, heads, self.head_dim_v)
        return b / self.token_shards if self.token_shards > 1 else b

    def held_tokens(self, n: int, block_tokens: int, engine: EngineLayout) -> int:
        """Token slots (whole blocks) held at context n, worst case up to n (engine rules);
        ``block_tokens`` is the engine's block, this layer's is ``block_multiple`` of them."""
        return engine.held_tokens(self.policy, self.window_tokens, n,
                                  block_tokens * self.block_multiple)


def _attention_cost(spec, count, engine, formats, tp, model_type) -> LayerCost:
    split_heads(spec.num_attention_heads, tp, "attention heads", replicate=False)
    window: int | None = None
    notes: tuple[str, ...] = ()
    if isinstance(spec, MultiHeadLatent):
        heads, dk, dv, latent = engine.mla_geometry(model_type, spec)
        if latent:
            shard_per_rank = 1
            if tp > 1:
                notes = (f"MLA latent replicated on each of {tp} TP ranks",)
            detail = f"latent {spec.kv_lora_rank} + {spec.qk_rope_head_dim} = {spec.latent_dim}"
            if dv:
                detail += f", plus V {dv} stored apart"
        else:
            shard_per_rank = heads // tp
            detail = f"decompressed {heads} heads x (K {dk} + V {dv})"
    else:
        heads, dk, dv = spec.num_kv_heads, spec.head_dim_k, spec.head_dim_v
        shard = split_heads(heads, tp, "KV heads", replicate=True)
        shard_per_rank = shard.per_rank
        if shard.replicas > 1:
            notes = (f"{heads} KV heads on tp={tp}: each head replicated on {shard.replicas} ranks",)
        detail = f"{heads} heads x (K {dk} + V {dv})"
        if isinstance(spec, SlidingWindow):
            window = spec.window_tokens
        elif isinstance(spec, ChunkedLocal):
            window = spec.chunk_tokens

    def per_token(h: int) -> Fraction:
        b = formats.k.bytes_per_token(h, dk)
        if dv:
            b += formats.v.bytes_per_token(h, dv)
        return b

    return LayerCost(
        spec=spec, kind=spec.kind, count=count, kv_heads=heads, kv_heads_per_rank=shard_per_rank,
        head_dim_k=dk, head_dim_v=dv or None, window_tokens=window,
        bytes_per_token=per_token(heads), bytes_per_token_per_rank=per_token(shard_per_rank),
        state_bytes=0, state_bytes_per_rank=0, detail=detail, notes=notes, formats=formats,
        policy=engine.window_policy(spec.kind, model_type),
    )


def _mamba_cost(spec: Mamba, count, engine, tp, model, state_override) -> LayerCost:
    cols = spec.d_conv - engine.conv_state_columns_dropped
    conv_dt, ssm_dt = engine.state_dtypes(model.model_type, model.dtype, spec.ssm_dtypes,
                                          state_override, kind=spec.kind)
    if spec.version == 1:
        split_heads(spec.d_inner, tp, "mamba d_inner channels", replicate=False)
        conv_rank = spec.d_inner // tp
        ssm_rank = conv_rank * spec.d_state
        notes: tuple[str, ...] = ()
    else:
        split_heads(spec.num_heads, tp, "mamba heads", replicate=False)
        split_heads(spec.d_inner, tp, "mamba d_inner channels", replicate=False)
        groups = split_heads(spec.n_groups, tp, "mamba groups", replicate=True)
        conv_rank = spec.d_inner // tp + 2 * groups.per_rank * spec.d_state
        ssm_rank = (spec.num_heads // tp) * spec.head_dim * spec.d_state
        notes = ()
        if groups.replicas > 1:
            notes = (f"{spec.n_groups} mamba group(s) on tp={tp}: replicated on {groups.replicas} ranks",)
    cb, sb = dtype_bytes(conv_dt), dtype_bytes(ssm_dt)
    whole = spec.conv_channels * cols * cb + spec.ssm_elements * sb
    rank = conv_rank * cols * cb + ssm_rank * sb
    ssm_shape = (
        f"{spec.d_inner} x {spec.d_state}" if spec.version == 1
        else f"{spec.num_heads} x {spec.head_dim} x {spec.d_state}"
    )
    detail = f"conv {spec.conv_channels} x {cols} {conv_dt} + ssm {ssm_shape} {ssm_dt}"
    return _state_cost(spec, count, detail, whole, rank, notes)


def _indexer_cost(spec: LightningIndexer, count, engine, formats, tp, model) -> LayerCost:
    """The indexer's one key head per token, replicated on every TP rank, in the engine's
    storage (``EngineLayout.indexer_storage``)."""
    how = engine.indexer_storage
    if how == "fp8_scaled":
        fmt = INDEXER_FP8
    elif how == "k_format":
        fmt = formats.k
    else:
        fmt = FIXED_FORMATS[engine.run_dtype(model.dtype, model.model_type)]
    pair = KvFormatPair(fmt, fmt)
    per = fmt.bytes_per_token(1, spec.index_head_dim)
    notes = (f"indexer key replicated on each of {tp} TP ranks",) if tp > 1 else ()
    return LayerCost(
        spec=spec, kind=spec.kind, count=count, kv_heads=1, kv_heads_per_rank=1,
        head_dim_k=spec.index_head_dim, head_dim_v=None, window_tokens=None,
        bytes_per_token=per, bytes_per_token_per_rank=per, state_bytes=0, state_bytes_per_rank=0,
        detail=f"indexer key {spec.index_head_dim} ({fmt.name})", notes=notes, formats=pair)


def _state_cost(spec, count: int, detail: str, whole: int, rank: int,
                notes: tuple[str, ...] = ()) -> LayerCost:
    return LayerCost(
        spec=spec, kind=spec.kind, count=count, kv_heads=None, kv_heads_per_rank=None,
        head_dim_k=None, head_dim_v=None, window_tokens=None,
        bytes_per_token=Fraction(0), bytes_per_token_per_rank=Fraction(0),
        state_bytes=whole, state_bytes_per_rank=rank, detail=detail, notes=notes,
    )


def _linear_cost(spec: LinearAttention, count, engine, tp, model, state_override) -> LayerCost:
    """Gated DeltaNet and KDA: a short conv over q, k, v plus a heads x dk x dv state, both split
    by heads over TP (vLLM ``gated_delta_net_state_shape`` / ``kda_state_shape``)."""
    cols = spec.conv_kernel - engine.conv_state_columns_dropped
    conv_dt, st_dt = engine.state_dtypes(model.model_type, model.dtype, spec.state_dtypes,
                                         state_override, kind=spec.kind)
    split_heads(spec.num_k_heads, tp, "linear-attention key heads", replicate=False)
    split_heads(spec.num_v_heads, tp, "linear-attention value heads", replicate=False)
    cb, sb = dtype_bytes(conv_dt), dtype_bytes(st_dt)
    whole = spec.conv_channels * cols * cb + spec.state_elements * sb
    rank = (spec.conv_channels // tp) * cols * cb + (spec.state_elements // tp) * sb
    detail = (
        f"conv {spec.conv_channels} x {cols} {conv_dt} + state "
        f"{spec.num_v_heads} x {spec.head_k_dim} x {spec.head_v_dim} {st_dt}"
    )
    return _state_cost(spec, count, detail, whole, rank)


def _lightning_cost(spec: LightningAttention, count, engine, tp, model, state_override) -> LayerCost:
    """A heads x D x D state, split by heads (vLLM ``linear_attention_state_shape``)."""
    _, st_dt = engine.state_dtypes(model.model_type, model.dtype, (), state_override,
                                   kind=spec.kind)
    split_heads(spec.num_heads, tp, "lightning-attention heads", replicate=False)
    sb = dtype_bytes(st_dt)
    detail = f"state {spec.num_heads} x {spec.head_dim} x {spec.head_dim} {st_dt}"
    return _state_cost(spec, count, detail, spec.state_elements * sb,
                       spec.state_elements // tp * sb)


def _short_conv_cost(spec: ShortConv, count, engine, tp, model, state_override) -> LayerCost:
    """The last conv_kernel - 1 inputs (the engine's column rule) of every channel, split by
    channels (vLLM ``short_conv_state_shape``)."""
    cols = spec.conv_kernel - engine.conv_state_columns_dropped
    conv_dt, _ = engine.state_dtypes(model.model_type, model.dtype, (), state_override,
                                     kind=spec.kind)
    split_heads(spec.channels, tp, "short-conv channels", replicate=False)
    cb = dtype_bytes(conv_dt)
    detail = f"conv {spec.channels} x {cols} {conv_dt}"
    return _state_cost(spec, count, detail, spec.channels * cols * cb,
                       spec.channels // tp * cols * cb)


def layer_cost(spec: LayerSpec, count: int, engine: EngineLayout, formats: KvFormatPair,
               tp: int, model: Model, state_dtype: str | None = None) -> LayerCost:
    if isinstance(spec, Mamba):
        return _mamba_cost(spec, count, engine, tp, model, state_dtype)
    if isinstance(spec, LinearAttention):
        return _linear_cost(spec, count, engine, tp, model, state_dtype)
    if isinstance(spec, LightningAttention):
        return _lightning_cost(spec, count, engine, tp, model, state_dtype)
    if isinstance(spec, LightningIndexer):
        return _indexer_cost(spec, count, engine, formats, tp, model)
    if isinstance(spec, ShortConv):
        return _short_conv_cost(spec, count, engine, tp, model, state_dtype)
    if isinstance(spec, (FullAttention, SlidingWindow, ChunkedLocal, MultiHeadLatent)):
        return _attention_cost(spec, count, engine, formats, tp, model.model_type)
    raise TypeError(f"unknown layer spec {spec!r}")


def unify_pages(costs: list[LayerCost], block_tokens: int, engine: EngineLayout) -> list[LayerCost]:
    """vLLM's ``unify_kv_cache_spec_page_size``: when attention layers of different spec types
    (full, sliding, chunked) have pages of different sizes, the largest page wins and every
    smaller-page layer's block is raised by the ratio, which must be whole
    (``vllm/v1/core/kv_cache_utils.py``). Gemma-4-26B at TP 1, bf16, 16-token blocks: sliding
    pages 16 x 8,192 B = 131,072 B, full pages 16 x 4,096 B = 65,536 B, so the full layers get
    32-token blocks. One spec type with unequal pages is vLLM's uniform-type case (no change);
    other engines keep their block everywhere."""
    attn = [c for c in costs if not c.state_bytes_per_rank and c.bytes_per_token_per_rank]
    types = {"all" if c.policy == "all" else c.policy for c in attn}
    if not engine.unify_page_sizes or len(types) < 2:
        return costs
    pages = {id(c): c.bytes_per_token_per_rank * block_tokens for c in attn}
    largest = max(pages.values())
    out = []
    for c in costs:
        if id(c) not in pages:
            out.append(c)
            continue
        ratio = largest / pages[id(c)]
        if ratio.denominator != 1:
            raise InputError(f"vLLM cannot group this model's KV caches: a page of "
                             f"{pages[id(c)]} B does not divide the largest page of {largest} B "
                             f"({block_tokens}-token blocks); try another --block-size or KV "
                             "format", field="MODEL")
        out.append(replace(c, block_multiple=int(ratio)) if ratio != 1 else c)
    return out
