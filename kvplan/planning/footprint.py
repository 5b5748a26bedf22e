"""The KV footprint of one sequence: per layer kind, per context, per GPU. Pure.

``kv_footprint`` prices each distinct layer spec once (``kvplan.engines.costs.layer_cost``: bytes per
token or constant state under the engine layout, storage formats and TP degree), then for each
context adds up the bytes every GPU holds, with block rounding and window caps, and reports the
busiest GPU.

Conventions (documented in docs/footprint.md):
- ``bytes_per_token`` of a row is for all ``count`` layers together, whole model, unsharded,
  unrounded (an exact Fraction; the output layer rounds up to whole bytes).
- A sequence's ``per_gpu_bytes`` is the busiest GPU: the pipeline stage with the most bytes,
  on one of its TP ranks; ``total_bytes`` adds every GPU, so replicated KV heads and MLA
  latents count once per copy. Exact bytes are rounded up once per GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from ..core.errors import InputError
from ..core.formats import KvFormatPair, parse_format
from ..core.layers import CompressedAttention, LayerSpec
from ..core.model import Model
from ..core.parallel import check_degree, pp_stages
from ..core.units import ceil_bytes
from ..engines import EngineLayout, get_engine, sglang_dsa
from ..engines.base import version_tuple
from ..engines.context_parallel import check_dcp, shard_tokens
from ..engines.costs import LayerCost, layer_cost, unify_pages

#: vLLM's only block size for sparse MLA (``FlashMLASparseBackend`` kernel block sizes [64]).
SPARSE_MLA_BLOCK = 64


class SequenceBytes(NamedTuple):
    context_tokens: int
    total_bytes: int
    per_gpu_bytes: int


@dataclass(frozen=True)
class Footprint:
    model: Model
    engine: EngineLayout
    formats: KvFormatPair
    kv_dtype: str
    tp: int
    pp: int
    block_size_tokens: int
    layers: tuple[LayerCost, ...]
    bytes_per_token: Fraction  # growing layers (full attention + MLA), whole model, unsharded
    state_bytes_per_sequence: int
    sequences: tuple[SequenceBytes, ...]
    stage_layers: tuple[int, ...]
    notes: tuple[str, ...]
    layer_costs: tuple[tuple[LayerCost, ...], ...] = field(default=(), compare=False, repr=False)


def resolve_formats(model: Model, engine: EngineLayout, kv_dtype: str = "auto",
                    k_dtype: str | None = None, v_dtype: str | None = None,
                    gpu_capability: str | None = None) -> KvFormatPair:
    """Formats for K and V: ``auto`` is the checkpoint's KV scheme where the engine applies it,
    else the engine's reading of the model dtype. SGLang's sparse-MLA (DSA) pool picks its
    format by GPU (``kvplan.engines.sglang_dsa``): ``gpu_capability`` is the GPU's compute
    capability, None where no GPU is planned."""
    if sglang_dsa.applies(engine, model):
        if k_dtype or v_dtype:
            raise InputError("SGLang's DSA pool stores one latent format for K and V",
                             field="--k-dtype" if k_dtype else "--v-dtype")
        return parse_format(sglang_dsa.latent_format(
            kv_dtype, gpu_capability, model_type=model.model_type,
            learnable_sink=bool(model.config.get("learnable_sink"))))
    def one(spec: str) -> KvFormatPair:
        if spec.strip().lower() != "auto":
            return parse_format(spec)
        scheme = model.checkpoint_kv_format
        if scheme and engine.applies_checkpoint_kv_scheme:
            return parse_format(scheme)
        if scheme and engine.applies_checkpoint_kv_scheme is None:
            raise InputError(f"the checkpoint declares a {scheme} KV cache and kvplan has not "
                             f"established whether {engine.label} applies it under auto; pass "
                             "--kv-dtype", field="--kv-dtype")
        return parse_format(engine.auto_kv_dtype(model.dtype, model.model_type))

    base = one(kv_dtype)
    if engine.name == "sglang" and base.k.name == "fp8_ds_mla":
        raise InputError("SGLang stores fp8_ds_mla only for DSA models (DeepSeek-V3.2, GLM-5.x); "
                         "its MLA pool holds the raw kv_lora_rank + rope row: pass --kv-dtype fp8",
                         field="--kv-dtype")
    k = one(k_dtype).k if k_dtype else base.k
    v = one(v_dtype).v if v_dtype else base.v
    if k.name == "nvfp4_ds_mla" or v.name == "nvfp4_ds_mla":
        from ..engines.vllm_mla import check_nvfp4_ds_mla
        check_nvfp4_ds_mla(model, engine.name, engine.version, gpu_capability)
        if k.name != v.name:
            raise InputError("nvfp4_ds_mla is one latent row: K and V take the same format",
                             field="--k-dtype/--v-dtype")
        return KvFormatPair(k, v)
    sparse = engine.sparse_mla_fp8_format
    if sparse and model.sparse_mla:
        if k.name == "fp8_e4m3":
            k = v = parse_format(sparse).k  # the sparse-MLA backends' own fp8 latent layout
        if k.name not in ("bf16", sparse) or v.name != k.name:
            raise InputError(f"{engine.label}'s sparse-MLA backend stores the latent as bf16 or "
                             f"fp8 ({sparse}), not {KvFormatPair(k, v).name}", field="--kv-dtype")
    return KvFormatPair(k, v)


def _stage_mix(stage: range, costs_by_layer) -> list[tuple[LayerCost, int]]:
    """The distinct layer costs of one pipeline stage with how many layers have each."""
    mix: dict[int, list] = {}
    for cost in (c for i in stage for c in costs_by_layer[i]):
        mix.setdefault(id(cost), [cost, 0])[1] += 1
    return [(cost, count) for cost, count in mix.values()]


def _sequence_bytes(n, stage_mixes, tp, block, engine) -> SequenceBytes:
    per_stage = []
    for mix in stage_mixes:
        total = Fraction(0)
        for cost, count in mix:
            if cost.state_bytes_per_rank:
                total += count * cost.state_bytes_per_rank
            else:
                total += count * cost.rank_bytes_for_tokens(cost.held_tokens(n, block, engine))
        per_stage.append(ceil_bytes(total))
    return SequenceBytes(n, total_bytes=tp * sum(per_stage), per_gpu_bytes=max(per_stage))


def kv_footprint(
    model: Model,
    contexts: Iterable[int] = (4096, 32768, 131072),
    *,
    kv_dtype: str = "auto",
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    tp: int = 1,
    pp: int = 1,
    block_size_tokens: int | None = None,
    engine: str | EngineLayout = "vllm",
    state_dtype: str | None = None,
    dcp: int = 1,
    gpu_capability: str | None = None,
) -> Footprint:
    """Compute the KV footprint of one sequence of ``model`` at each context length; ``dcp``:
    decode context parallel GPUs each sequence's tokens are split over (of the ``tp``);
    ``gpu_capability``: the planned GPU's compute capability, where an engine's layout
    depends on it (SGLang's DSA pool), None without a GPU."""
    layout = get_engine(engine) if isinstance(engine, str) else engine
    check_degree(tp, "tp")
    check_degree(pp, "pp")
    block = layout.default_block_size_tokens if block_size_tokens is None else block_size_tokens
    if (layout.sparse_mla_fp8_format and layout.name == "vllm"
            and model.sparse_mla):
        block = SPARSE_MLA_BLOCK  # vLLM forces it whatever --block-size says (FlashMLASparse)
    if sglang_dsa.applies(layout, model):
        block = sglang_dsa.PAGE_TOKENS  # SGLang's DSA override, applied after --page-size
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise InputError(f"must be a positive integer, got {block!r}", field="--block-size")
    contexts = tuple(contexts)
    for n in contexts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"must be a positive number of tokens, got {n!r}", field="--context")
    if model.compressed_attention:
        return _compressed_footprint(model, contexts, layout, kv_dtype, k_dtype, v_dtype, tp, pp)
    formats = resolve_formats(model, layout, kv_dtype, k_dtype, v_dtype, gpu_capability)
    layout.check_options(formats.k.name, formats.v.name, block, tp)
    layout.check_model(model)
    layout.check_kv_format(model, formats.name)
    stages = pp_stages(model.num_layers, pp)

    costs: dict[LayerSpec, LayerCost] = {}
    for spec, count in model.layer_groups():
        costs[spec] = layer_cost(spec, count, layout, formats, tp, model, state_dtype)
    costs = dict(zip(costs, unify_pages(list(costs.values()), block, layout), strict=True))
    if dcp != 1:
        check_dcp(layout, list(costs.values()), tp, dcp)
        costs = {spec: shard_tokens(c, dcp) for spec, c in costs.items()}
    by_layer = [[costs[spec] for spec in block] for block in model.layers]
    rows = tuple(costs.values())
    scheme = [] if not (model.checkpoint_kv_format and layout.applies_checkpoint_kv_scheme
                        and "auto" in {s.strip().lower() for s in (kv_dtype, k_dtype or "auto",
                                                                     v_dtype or "auto")}) else [
        f"KV format auto = {model.checkpoint_kv_format}: the checkpoint's quantization_config "
        f"declares it and {layout.name} applies it"]
    dcp_note = [f"decode context parallel {dcp}: each sequence's tokens split over {dcp} of the "
                f"{tp} TP GPUs (token i on GPU i % {dcp}), in blocks of {block} x {dcp} tokens; "
                f"each GPU holds 1/{dcp} of them"
                + (f" (every token on {tp // dcp} GPUs)" if tp > dcp else "")] if dcp > 1 else []
    notes = tuple(dict.fromkeys([*scheme, *(n for c in rows for n in c.notes), *dcp_note,
                                 *layout.format_notes(formats.v.name)]))
    mixes = [_stage_mix(stage, by_layer) for stage in stages]
    sequences = tuple(_sequence_bytes(n, mixes, tp, block, layout) for n in contexts)
    return Footprint(
        model=model, engine=layout, formats=formats, kv_dtype=formats.name, tp=tp, pp=pp,
        block_size_tokens=block, layers=rows,
        bytes_per_token=sum((c.bytes_per_token * c.count for c in rows if c.spec.grows), Fraction(0)),
        state_bytes_per_sequence=sum(c.state_bytes * c.count for c in rows),
        sequences=sequences, stage_layers=tuple(len(s) for s in stages), notes=notes,
        layer_costs=tuple(tuple(b) for b in by_layer),
    )


def _compressed_footprint(model: Model, contexts: tuple[int, ...], layout: EngineLayout,
                          kv_dtype: str, k_dtype: str | None, v_dtype: str | None, tp: int,
                          pp: int) -> Footprint:
    """DeepSeek-V4's compressed caches under vLLM 0.27+ (``kvplan.engines.vllm_dsv4``): a
    sequence holds whole block ids of a pool shared by every cache group, each costing the
    widest group's pages; nothing is split by TP."""
    from ..engines import vllm_dsv4 as v4

    if layout.name != "vllm" or version_tuple(layout.version) < (0, 27):
        raise InputError(f"kvplan models DeepSeek-V4's compressed caches for vLLM 0.27 and newer "
                         f"only (vLLM first served it in 0.20; {layout.label}'s layout is not "
                         "established)", field="--engine")
    if pp > 1:
        raise InputError("DeepSeek-V4 under pipeline parallelism is not modelled", field="--pp")
    asked = {s.strip().lower() for s in (kv_dtype, k_dtype or kv_dtype, v_dtype or kv_dtype)}
    if any(a != "auto" and not a.startswith("fp8") for a in asked):
        raise InputError("vLLM stores DeepSeek-V4's caches as fp8_ds_mla on its default FlashMLA "
                         "path (auto and every fp8 spelling mean that: _resolve_dsv4_kv_cache_"
                         "dtype); other formats need another attention backend, not modelled",
                         field="--kv-dtype")
    specs = [s for s in model.cache_layers if isinstance(s, CompressedAttention)]
    v4.check(specs)
    rows = []
    for spec, count in model.layer_groups():
        assert isinstance(spec, CompressedAttention)
        e, r = v4.entry_bytes(spec), spec.compress_ratio
        grow = Fraction(e + (spec.index_head_dim + spec.index_head_dim // 128 * 4), r) if r > 1 \
            else Fraction(0)
        const = v4.payload_bytes(spec.overlap * max(r, spec.window_tokens), spec) - int(
            grow * spec.overlap * max(r, spec.window_tokens))
        what = ("window only" if r == 1 else f"1 entry per {r} tokens"
                + (" + indexer key" if spec.index_head_dim else ""))
        rows.append(LayerCost(
            spec=spec, kind=spec.kind, count=count, kv_heads=1, kv_heads_per_rank=1,
            head_dim_k=spec.head_dim, head_dim_v=None, window_tokens=spec.window_tokens,
            bytes_per_token=grow, bytes_per_token_per_rank=grow, state_bytes=const,
            state_bytes_per_rank=const,
            detail=f"ratio {r}: {what}; {e}-B fp8_ds_mla rows, window {spec.window_tokens}",
            formats=None))
    per_block = v4.block_bytes(specs)
    sequences = tuple(SequenceBytes(n, tp * v4.sequence_bytes(n, specs), v4.sequence_bytes(n, specs))
                      for n in contexts)
    notes = (f"vLLM DeepSeek-V4: one block id costs {per_block:,} B (the compressed caches' "
             f"padded pages); a sequence of n tokens holds ceil(n / 256) of them plus its window "
             "and compressor-state blocks; every TP rank holds all of it",)
    return Footprint(
        model=model, engine=layout, formats=parse_format("fp8_ds_mla"), kv_dtype="fp8_ds_mla",
        tp=tp, pp=pp, block_size_tokens=v4.FULL_BLOCK, layers=tuple(rows),
        bytes_per_token=sum((c.bytes_per_token * c.count for c in rows), Fraction(0)),
        state_bytes_per_sequence=sum(c.state_bytes * c.count for c in rows),
        sequences=sequences, stage_layers=(model.num_layers,), notes=notes,
        layer_costs=tuple((next(c for c in rows if c.spec is s),) for (s,) in model.layers))
