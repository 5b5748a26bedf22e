"""Families whose layers do not share one attention geometry, or share KV across layers.

Rules as vLLM implements them (research notes in docs/architectures.md):
- gemma4_text (Gemma-4): ``layer_types`` sliding / full; sliding layers use ``head_dim`` and
  ``num_key_value_heads``, full layers ``global_head_dim`` and, with ``attention_k_eq_v``,
  ``num_global_key_value_heads`` (``Gemma4DecoderLayer``; newer transformers re-saves may
  write ``per_layer_config`` instead). K = V shares a projection, not the cache: both are
  stored. The last ``num_kv_shared_layers`` layers reuse an earlier layer's K and V and
  allocate nothing (``kv_sharing_target_layer_name``).
- gemma3n_text (Gemma-3n): one geometry, ``layer_types`` windows, the same KV sharing.
- mimo_v2_flash (MiMo-V2-Flash): ``hybrid_layer_pattern`` 1 = sliding window
  (``swa_num_key_value_heads``, ``swa_head_dim``, ``swa_v_head_dim``, window
  ``sliding_window_size``), 0 = full (``num_key_value_heads``, ``head_dim``, ``v_head_dim``);
  vLLM's MiMo config convertor drops ``attention_chunk_size`` (the model does not use it).
- nemotron-nas (DeciLM: Llama-3.x-Nemotron Super / Ultra): ``block_configs[i].attention``:
  ``no_op`` layers have no attention and no cache; the others have
  ``num_attention_heads / n_heads_in_group`` KV heads of ``hidden_size / num_attention_heads``.
"""

from __future__ import annotations

from ..core.layers import FullAttention, SlidingWindow
from .attention_families import layer_kinds
from .fields import Fields


def _shared(f: Fields, num_layers: int, default: int = 0,
            why: str = "no KV sharing unless the config says so") -> int:
    n = f.integer("num_kv_shared_layers", default=default, minimum=0, why=why)
    if n >= num_layers:
        raise f.error("num_kv_shared_layers", f"{n} shared layers leave none of the "
                      f"{num_layers} layers to hold the cache")
    return n


def _gemma_kinds(f: Fields, model_type: str, num_layers: int) -> list[str]:
    if not f.has("layer_types"):
        raise f.error("layer_types", f"missing: {model_type} configs list each layer's attention "
                      "type")
    kinds = layer_kinds(f, model_type, num_layers)
    bad = [i for i, k in enumerate(kinds) if k not in ("full", "sliding")]
    if bad:
        raise f.error(f"layer_types[{bad[0]}]", f"{model_type} has no {kinds[bad[0]]} layers")
    return kinds


def _with_sharing(f: Fields, blocks: list[tuple], kinds: list[str], shared: int) -> list[tuple]:
    """The last ``shared`` layers read the K and V of the last earlier layer of their own type
    and hold no cache; each needs such a layer (vLLM ``kv_sharing_target_layer_name``)."""
    first = len(blocks) - shared
    own = set(kinds[:first])
    missing = next((i for i in range(first, len(blocks)) if kinds[i] not in own), None)
    if missing is not None:
        raise f.error("num_kv_shared_layers", f"{shared} shared layers leave no {kinds[missing]} "
                      f"layer before layer {first} for layer {missing} to share")
    return blocks[:first] + [()] * shared


def parse_gemma4(f: Fields, model_type: str) -> list[tuple]:
    blocks, kinds = gemma4_blocks(f, model_type)
    return _with_sharing(f, blocks, kinds, _shared(f, len(blocks)))


def gemma4_blocks(f: Fields, model_type: str) -> tuple[list[tuple], list[str]]:
    """Every layer's own attention geometry, KV-sharing layers included (before
    ``_with_sharing`` empties their cache), and the layer kinds: vLLM's ``Gemma4DecoderLayer``
    builds a sharing layer's q_proj / o_proj from its own ``per_layer_config`` entry."""
    num_layers = f.num_layers()
    kinds = _gemma_kinds(f, model_type, num_layers)
    heads = f.integer("num_attention_heads")
    kv, head_dim = f.integer("num_key_value_heads"), f.integer("head_dim")
    sliding = SlidingWindow(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=head_dim,
                            head_dim_v=head_dim, window_tokens=f.integer("sliding_window"))
    k_eq_v = f.flag("attention_k_eq_v")
    per_layer = f.mapping("per_layer_config")
    if per_layer and (f.has("global_head_dim") or f.has("num_global_key_value_heads")):
        raise f.error("per_layer_config", "given beside global_head_dim / "
                      "num_global_key_value_heads: the config must say one or the other")
    full_kv = f.integer("num_global_key_value_heads") if k_eq_v and not per_layer else kv
    if not k_eq_v:
        f.get("num_global_key_value_heads")  # unused without attention_k_eq_v (vLLM, HF)
    full_dim = f.integer("global_head_dim", default=512, why="Gemma4TextConfig default") \
        if not per_layer else head_dim
    full = FullAttention(num_attention_heads=heads, num_kv_heads=full_kv, head_dim_k=full_dim,
                         head_dim_v=full_dim)
    for key in per_layer:
        if not str(key).isdigit() or int(key) >= num_layers or kinds[int(key)] != "full":
            raise f.error(f"per_layer_config.{key}", "names no full-attention layer (the overrides "
                          "are for the global layers' head_dim and KV heads)")
    blocks: list[tuple] = []
    for i, k in enumerate(kinds):
        if k == "sliding":
            blocks.append((sliding,))
            continue
        override = per_layer.get(str(i))
        if override is None:
            blocks.append((full,))
            continue
        if not isinstance(override, dict):
            raise f.error(f"per_layer_config.{i}", "expected an object with head_dim and "
                          "num_key_value_heads")
        sub = f.sub(f"per_layer_config.{i}", override)
        d = sub.integer("head_dim")
        blocks.append((FullAttention(num_attention_heads=heads,
                                     num_kv_heads=sub.integer("num_key_value_heads"),
                                     head_dim_k=d, head_dim_v=d),))
    f.get("hidden_size_per_layer_input")  # per-layer embeddings: weights, not cache
    return blocks, kinds


def parse_gemma3n(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    kinds = _gemma_kinds(f, model_type, num_layers)
    heads, kv, head_dim = (f.integer("num_attention_heads"), f.integer("num_key_value_heads"),
                           f.integer("head_dim"))
    common = dict(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=head_dim,
                  head_dim_v=head_dim)
    sliding = SlidingWindow(window_tokens=f.integer("sliding_window"), **common)
    full = FullAttention(**common)
    f.get("hidden_size_per_layer_input")  # per-layer embeddings: weights, not cache
    blocks = [(sliding,) if k == "sliding" else (full,) for k in kinds]
    return _with_sharing(f, blocks, kinds, _shared(f, num_layers, 15,
                                                   "Gemma3nTextConfig default"))


def parse_mimo_v2(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    pattern = f.layer_values("hybrid_layer_pattern", num_layers, (0, 1), "0 (full) or 1 (sliding)")
    window = f.integer("sliding_window_size")
    other = f.opt_int("sliding_window")
    if other is not None and other != window:
        raise f.error("sliding_window", f"{other} disagrees with sliding_window_size {window} "
                      "(vLLM's MiMo-V2 reads sliding_window_size)")
    if f.has("attention_chunk_size"):
        f.assume(f"{f.prefix}attention_chunk_size ignored: MiMo-V2 does not use chunked attention "
                 "(vLLM's config convertor removes it)")
    dk = f.integer("head_dim")
    full = FullAttention(num_attention_heads=f.integer("num_attention_heads"),
                         num_kv_heads=f.integer("num_key_value_heads"), head_dim_k=dk,
                         head_dim_v=f.integer("v_head_dim", default=dk, why="V as wide as K"))
    sk = f.integer("swa_head_dim")
    swa = SlidingWindow(num_attention_heads=f.integer("swa_num_attention_heads"),
                        num_kv_heads=f.integer("swa_num_key_value_heads"), head_dim_k=sk,
                        head_dim_v=f.integer("swa_v_head_dim", default=sk, why="V as wide as K"),
                        window_tokens=window)
    for key in ("add_swa_attention_sink_bias", "add_full_attention_sink_bias"):
        f.get(key)  # attention sinks: one bias per head, a parameter and no cache
    return [(swa,) if v == 1 else (full,) for v in pattern]


#: Attention keys of a DeciLM block that change what it caches and are not modelled; any of
#: them set (not null / false) is refused.
_NAS_UNMODELLED = ("replace_with_linear", "window_length", "num_sink_tokens", "sparsify",
                   "unshifted_sink", "use_prefill_window_in_sink_attention")


def parse_nemotron_nas(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    configs = f.array("block_configs")
    if configs is None:
        raise f.error("block_configs", "missing: one block description per layer")
    if len(configs) != num_layers:
        raise f.error("block_configs", f"has {len(configs)} entries for {num_layers} layers")
    heads = f.integer("num_attention_heads")
    hidden = f.integer("hidden_size")
    if hidden % heads:
        raise f.error("hidden_size", f"{hidden} is not divisible by {heads} attention heads")
    head_dim = hidden // heads
    f.assume(f"head_dim = hidden_size / num_attention_heads = {hidden} / {heads} = {head_dim} "
             "(DeciLM has no head_dim key)")
    specs: dict[int, FullAttention] = {}
    blocks: list[tuple] = []
    for i, block in enumerate(configs):
        if not isinstance(block, dict):
            raise f.error(f"block_configs[{i}]", "expected an object")
        for part in ("attention", "ffn"):
            if not isinstance(block.get(part), dict):
                raise f.error(f"block_configs[{i}].{part}", "expected an object")
        unknown = sorted(set(block) - {"attention", "ffn"})
        if unknown:
            raise f.error(f"block_configs[{i}].{unknown[0]}", "not a DeciLM block part kvplan reads")
        att = f.sub(f"block_configs[{i}].attention", block["attention"])
        f.sub(f"block_configs[{i}].ffn", block["ffn"]).read.update(
            block["ffn"].keys())  # the FFN shapes weights (kvplan.loaders.hf_params)
        for key in _NAS_UNMODELLED:
            if att.raw(key) not in (None, False):
                raise att.error(key, f"{att.raw(key)!r} is not modelled (vLLM's DeciLM builds plain "
                                "attention for it)")
        if att.flag("no_op"):
            blocks.append(())
            continue
        group = att.integer("n_heads_in_group")
        if heads % group:
            raise att.error("n_heads_in_group", f"{group} does not divide {heads} attention heads")
        kv = heads // group
        spec = specs.setdefault(kv, FullAttention(num_attention_heads=heads, num_kv_heads=kv,
                                                  head_dim_k=head_dim, head_dim_v=head_dim))
        blocks.append((spec,))
    return blocks


#: Step-3.5 layer types vLLM's ``Step3p5DecoderLayer`` distinguishes (any other string would be
#: built as full attention there; kvplan refuses it rather than guess).
_STEP3P5_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def parse_step3p5(f: Fields, model_type: str) -> list[tuple]:
    """Step-3.5-Flash (vLLM ``step3p5.py``): GQA on every layer with ``num_attention_groups`` KV
    heads of ``head_dim`` (vLLM passes both to every layer, sliding ones included);
    ``layer_types`` (followed by ``mtp_layer_types``, indexed by layer) makes a layer
    ``sliding_attention`` with the window ``sliding_window``, else full. The query heads differ
    per type: sliding layers take ``num_sliding_attention_heads``, else
    ``attention_other_setting.num_attention_heads`` when its ``attention_type`` is
    sliding_attention, else ``num_attention_heads`` (``_get_num_attention_heads``). The
    trailing MTP entries of ``layer_types`` belong to the draft layers, not counted here."""
    num_layers = f.num_layers()
    # getattr(config, "att_impl_type", "GQA"): an explicit null is not GQA, and vLLM raises
    impl = f.get("att_impl_type") if "att_impl_type" in f.config else "GQA"
    if impl != "GQA":
        raise f.error("att_impl_type", f"{impl!r}: vLLM's step3p5 serves GQA only")
    if f.flag("is_heterogeneous"):
        raise f.error("is_heterogeneous", "per-layer head counts (per_layer_config) are not "
                      "modelled")
    types = f.array("layer_types")
    if types is None:
        raise f.error("layer_types", "missing: vLLM's step3p5 reads each layer's attention type")
    mtp_types = f.array("mtp_layer_types") or []
    listed = [*types, *mtp_types]
    if len(listed) < num_layers:
        raise f.error("layer_types", f"has {len(listed)} entries for {num_layers} layers")
    kinds = []
    for i, t in enumerate(listed[:num_layers]):
        if t not in _STEP3P5_TYPES:
            raise f.error(f"layer_types[{i}]", f"expected full_attention or sliding_attention, "
                          f"got {t!r}")
        kinds.append(_STEP3P5_TYPES[t])
    kv = f.integer("num_attention_groups")
    hidden = f.integer("hidden_size")
    full_heads = f.integer("num_attention_heads")
    other = f.sub("attention_other_setting") if f.has("attention_other_setting") else None
    swa_heads = f.opt_int("num_sliding_attention_heads")
    other_sliding = other is not None and other.get("attention_type") == "sliding_attention"
    if swa_heads is None and other_sliding and other is not None:
        swa_heads = other.integer("num_attention_heads")
    if other is not None:
        other.get("num_attention_heads")
        for key, top in (("num_attention_groups", kv), ("head_dim", f.opt_int("head_dim"))):
            value = other.opt_int(key)
            if value is not None and value != top:
                raise other.error(key, f"{value} differs from the top-level {key} {top}, which "
                                  "vLLM's step3p5 builds every layer with")
    swa_heads = swa_heads or full_heads
    window = f.integer("sliding_window") if "sliding" in kinds else None
    f.get("sliding_window")

    def geometry(heads: int) -> dict:
        given = f.opt_int("head_dim")  # vLLM: head_dim, else hidden_size / that layer's heads
        if given is None and hidden % heads:
            raise f.error("head_dim", f"missing, and hidden_size {hidden} is not divisible by "
                          f"{heads} attention heads")
        d = given or hidden // heads
        return dict(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=d, head_dim_v=d)

    full = FullAttention(**geometry(full_heads))
    for key in ("use_head_wise_attn_gate", "use_rope_layers", "mtp_mlp_layer_types"):
        f.get(key)  # a per-head output gate, rope on/off, the draft's MLPs: no cache
    if window is None:
        return [(full,)] * num_layers
    sliding = SlidingWindow(window_tokens=window, **geometry(swa_heads))
    return [(sliding,) if k == "sliding" else (full,) for k in kinds]
