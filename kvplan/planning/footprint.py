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
from ..core.layers import LayerSpec
from ..core.model import Model
from ..core.parallel import check_degree, pp_stages
from ..core.units import ceil_bytes
from ..engines import EngineLayout, get_engine
from ..engines.costs import LayerCost, layer_cost, unify_pages


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
                    k_dtype: str | None = None, v_dtype: str | None = None) -> KvFormatPair:
    """Formats for K and V: ``auto`` is the checkpoint's KV scheme where the engine applies it,
    else the engine's reading of the model dtype."""
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
    k = one(k_dtype).k if k_dtype else base.k
    v = one(v_dtype).v if v_dtype else base.v
    sparse = engine.sparse_mla_fp8_format
    if sparse and k.name.startswith("fp8") and any(s.kind == "indexer" for s in model.cache_layers):
        k = v = parse_format(sparse).k  # the sparse-MLA backends' own fp8 latent layout
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
) -> Footprint:
    """Compute the KV footprint of one sequence of ``model`` at each context length."""
    layout = get_engine(engine) if isinstance(engine, str) else engine
    check_degree(tp, "tp")
    check_degree(pp, "pp")
    block = layout.default_block_size_tokens if block_size_tokens is None else block_size_tokens
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise InputError(f"must be a positive integer, got {block!r}", field="--block-size")
    contexts = tuple(contexts)
    for n in contexts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"must be a positive number of tokens, got {n!r}", field="--context")
    formats = resolve_formats(model, layout, kv_dtype, k_dtype, v_dtype)
    layout.check_options(formats.k.name, formats.v.name, block, tp)
    layout.check_model(model)
    layout.check_kv_format(model, formats.name)
    stages = pp_stages(model.num_layers, pp)

    costs: dict[LayerSpec, LayerCost] = {}
    for spec, count in model.layer_groups():
        costs[spec] = layer_cost(spec, count, layout, formats, tp, model, state_dtype)
    costs = dict(zip(costs, unify_pages(list(costs.values()), block, layout), strict=True))
    by_layer = [[costs[spec] for spec in block] for block in model.layers]
    rows = tuple(costs.values())
    scheme = [] if not (model.checkpoint_kv_format and layout.applies_checkpoint_kv_scheme
                        and "auto" in {s.strip().lower() for s in (kv_dtype, k_dtype or "auto",
                                                                     v_dtype or "auto")}) else [
        f"KV format auto = {model.checkpoint_kv_format}: the checkpoint's quantization_config "
        f"declares it and {layout.name} applies it"]
    notes = tuple(dict.fromkeys([*scheme, *(n for c in rows for n in c.notes),
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
