"""Attention families: MHA/MQA/GQA decoders, Falcon's legacy keys, MLA, and which layers slide.

Layer patterns follow the transformers config classes (v4.5x / v5), which vLLM mirrors:
- ``layer_types`` wins when present (gpt-oss, gemma3, qwen3-next and newer configs).
- Qwen2/Qwen2-MoE/Qwen3/Qwen3-MoE: layers with ``i >= max_window_layers`` (default 28) slide,
  and only when ``use_sliding_window`` is true (default false: otherwise the window is
  ignored).
- Gemma-2 and gpt-oss (without ``layer_types``): even layers (``(i + 1) % 2 != 0``) slide;
  Gemma-3 and Cohere-2: layer i is full
  when ``(i + 1) % sliding_window_pattern == 0`` (defaults 6 and 4), the rest slide.
- Llama-4: with ``attention_chunk_size``, layers whose ``no_rope_layers[i]`` is 1 (RoPE layers)
  are chunked and the NoPE layers are global; the default marks every 4th layer NoPE.
- Everything else: a non-null ``sliding_window`` makes every layer slide (Mistral-7B-v0.1,
  Phi-3), unless ``use_sliding_window`` is false.
"""

from __future__ import annotations

from ..core.layers import (
    ChunkedLocal,
    CompressedAttention,
    FullAttention,
    LightningIndexer,
    MultiHeadLatent,
    SlidingWindow,
)
from .fields import Fields

QWEN_FAMILY = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text",
               "qwen2_5_vl_text", "qwen3_vl_text", "qwen3_vl_moe_text"}
PATTERN_DEFAULTS = {"gemma3_text": 6, "gemma3": 6, "cohere2": 4}
#: Even layers slide, odd ones are global, when the config has no layer_types (Gemma2Config,
#: GptOssConfig).
ALTERNATING = {"gemma2", "gpt_oss"}

#: ``layer_types`` values and the kind each means.
LAYER_TYPE_KINDS = {
    "full_attention": "full",
    "attention": "full",
    "global_attention": "full",
    "sliding_attention": "sliding",
    "local_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "mamba": "mamba",
}


def attention_shape(f: Fields, model_type: str) -> tuple[int, int, int, int]:
    """(query heads, KV heads, K head dim, V head dim) of a standard attention layer.

    ``head_dim`` (or ``attention_head_dim``) when the config has it, else
    ``hidden_size / num_attention_heads``; ``v_head_dim`` when present gives V its own width.
    """
    heads = f.integer("num_attention_heads", "n_head", "n_heads")
    if model_type in ("falcon", "RefinedWeb", "RefinedWebModel"):
        kv = falcon_kv_heads(f, model_type, heads)
    else:
        kv = kv_heads(f, heads)
    if kv > heads or heads % kv:
        raise f.error("num_key_value_heads", f"{kv} KV heads must divide {heads} attention heads")
    head_dim = f.opt_int("head_dim") or f.opt_int("attention_head_dim")
    if head_dim is None:
        hidden = f.integer("hidden_size", "d_model", "n_embd")
        if hidden % heads:
            raise f.error("hidden_size", f"{hidden} is not divisible by {heads} heads; "
                          "the config needs an explicit head_dim")
        head_dim = hidden // heads
        f.assume(f"head_dim = hidden_size / num_attention_heads = {hidden} / {heads} = {head_dim} "
                 "(no head_dim in config)")
    # vLLM's standard attention stores V as wide as K; a different v_head_dim is refused here
    # (MiMo-V2-Flash, whose V is narrower, has its own reader)
    v = f.opt_int("v_head_dim")
    if v is not None and v != head_dim:
        raise f.error("v_head_dim", f"{v} differs from the head_dim {head_dim} vLLM's "
                      f"{model_type} attention stores V with")
    return heads, kv, head_dim, head_dim


def kv_heads(f: Fields, heads: int) -> int:
    """KV heads with vLLM's ``get_total_num_kv_heads`` keys: ``multi_query`` true means one
    (gpt_bigcode style); else ``num_key_value_heads``, ``num_kv_heads``, ``n_head_kv`` or
    ``multi_query_group_num`` (ChatGLM), whichever the config has; none of them means MHA."""
    if f.flag("multi_query"):
        return 1
    return f.integer("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num",
                 default=heads, why="absent: one KV head per query head (MHA)")


def falcon_kv_heads(f: Fields, model_type: str, heads: int) -> int:
    """Falcon (transformers ``FalconAttention``): with ``new_decoder_architecture``,
    ``num_kv_heads`` (falcon-40b/180B: 8); else ``multi_query`` (FalconConfig default true)
    means one KV head (falcon-7b); else ``num_kv_heads``, which defaults to the query heads."""
    if f.flag("new_decoder_architecture", model_type == "RefinedWeb"):
        f.get("multi_query")  # FalconAttention ignores it under the new decoder architecture
        return f.integer("num_kv_heads", "n_head_kv", default=heads, why="FalconConfig default")
    if not f.present("multi_query"):
        f.assume("multi_query = true (FalconConfig default)")
    if f.flag("multi_query", True):
        return 1
    return f.integer("num_kv_heads", "n_head_kv", default=heads, why="FalconConfig default")


def layer_kinds(f: Fields, model_type: str, num_layers: int) -> list[str]:
    """Per-layer attention kind: "full", "sliding" or "chunked" (or a hybrid kind from
    ``layer_types``)."""
    if model_type in QWEN_FAMILY:  # both are read (and ignored unless the window is on)
        f.get("use_sliding_window"), f.get("max_window_layers")
    if model_type in PATTERN_DEFAULTS:  # transformers derives layer_types from the pattern
        f.get("sliding_window_pattern"), f.get("_sliding_window_pattern")
    types = f.str_list("layer_types", num_layers)
    if types is not None:
        kinds = []
        for i, t in enumerate(types):
            if t not in LAYER_TYPE_KINDS:
                raise f.error(f"layer_types[{i}]", f"unknown layer type {t!r}; known: "
                              f"{', '.join(LAYER_TYPE_KINDS)}")
            kinds.append(LAYER_TYPE_KINDS[t])
        return kinds
    window = f.opt_int("sliding_window")
    if model_type.startswith("llama4"):
        return _llama4_kinds(f, num_layers)
    # Qwen configs default use_sliding_window to false (Qwen2Config); others have no such flag.
    if window is None or not f.flag("use_sliding_window", model_type not in QWEN_FAMILY):
        return ["full"] * num_layers
    if model_type in QWEN_FAMILY:
        first = f.integer("max_window_layers", default=28, why="Qwen2Config default")
        return ["sliding" if i >= first else "full" for i in range(num_layers)]
    if model_type in ALTERNATING:
        return ["sliding" if (i + 1) % 2 else "full" for i in range(num_layers)]
    if model_type in PATTERN_DEFAULTS:
        pattern = f.integer("sliding_window_pattern", "_sliding_window_pattern",
                        default=PATTERN_DEFAULTS[model_type], why=f"{model_type} default")
        return ["sliding" if (i + 1) % pattern else "full" for i in range(num_layers)]
    return ["sliding"] * num_layers


def _llama4_kinds(f: Fields, num_layers: int) -> list[str]:
    if not f.has("attention_chunk_size"):
        return ["full"] * num_layers
    rope = f.array("no_rope_layers")
    if rope:
        if len(rope) != num_layers:
            raise f.error("no_rope_layers", f"has {len(rope)} entries for {num_layers} layers")
        for i, r in enumerate(rope):
            if isinstance(r, bool) or r not in (0, 1):
                raise f.error(f"no_rope_layers[{i}]", f"expected 0 or 1, got {r!r}")
    else:
        interval = f.integer("no_rope_layer_interval", default=4, why="Llama4TextConfig default")
        rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
        f.assume(f"no_rope_layers: every {interval}th layer is NoPE global attention")
    return ["chunked" if r else "full" for r in rope]


def attention_spec(f: Fields, model_type: str, kind: str, shape=None):
    """The spec of one attention layer of ``kind`` ("full", "sliding", "chunked")."""
    heads, kv, dk, dv = shape or attention_shape(f, model_type)
    common = dict(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=dk, head_dim_v=dv)
    if kind == "sliding":
        window = f.integer("sliding_window", "attention_window")
        legacy = f.opt_int("sliding_window_size")  # Gemma2Config's older name of the same value
        if legacy is not None and legacy != window:
            f.assume(f"{f.prefix}sliding_window_size {legacy} ignored: vLLM and transformers read "
                     f"sliding_window ({window})")
        return SlidingWindow(window_tokens=window, **common)
    if kind == "chunked":
        return ChunkedLocal(chunk_tokens=f.integer("attention_chunk_size"), **common)
    return FullAttention(**common)


def parse_standard(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers("num_hidden_layers", "n_layer", "num_layers")
    shape = attention_shape(f, model_type)
    kinds = layer_kinds(f, model_type, num_layers)
    specs = {k: attention_spec(f, model_type, k, shape) for k in set(kinds)
             if k in ("full", "sliding", "chunked")}
    bad = [i for i, k in enumerate(kinds) if k not in specs]
    if bad:
        raise f.error(f"layer_types[{bad[0]}]", f"{model_type} has no {kinds[bad[0]]} layers")
    return [(specs[k],) for k in kinds]


def parse_mla(f: Fields, model_type: str) -> list[tuple]:
    """DeepSeek-V2/V3, Kimi-K2: every layer caches the MLA latent.

    The MTP layers (``num_nextn_predict_layers``) are used only for speculative decoding and are
    not counted.
    """
    num_layers = f.num_layers()
    f.get("num_key_value_heads")  # MLA caches one latent; the query-side head count is unused
    spec = MultiHeadLatent(
        num_attention_heads=f.integer("num_attention_heads"),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_rope_head_dim=f.integer("qk_rope_head_dim"),
        qk_nope_head_dim=f.integer("qk_nope_head_dim"),
        v_head_dim=f.integer("v_head_dim"),
    )
    qk = f.opt_int("qk_head_dim")
    if qk is not None and qk != spec.qk_nope_head_dim + spec.qk_rope_head_dim:
        raise f.error("qk_head_dim", f"{qk} is not qk_nope_head_dim + qk_rope_head_dim = "
                      f"{spec.qk_nope_head_dim} + {spec.qk_rope_head_dim}")
    f.get("head_dim")  # vLLM's MLA rule sizes the cache from kv_lora_rank + qk_rope_head_dim
    return [(spec,)] * num_layers


def indexer_layers(f: Fields, num_layers: int) -> list[bool]:
    """Which layers hold a lightning-indexer cache (vLLM ``DeepseekV2MLAAttention``): with
    ``index_topk_pattern`` (one F or S per layer) the F layers; else the layers where
    ``max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0`` (defaults 1 and 2: every
    layer). The others reuse an earlier layer's top-k and cache no indexer key. GLM-5.2:
    freq 4, offset 3 -> layers 0, 1, 2, 6, 10, ..., 74 (21 of 78)."""
    freq = f.integer("index_topk_freq", default=1, why="every layer computes its own top-k")
    offset = f.integer("index_skip_topk_offset", default=2, minimum=0, why="vLLM's default")
    pattern = f.raw("index_topk_pattern")
    if pattern is not None:  # a string or a list of one-letter strings: vLLM indexes either
        if (not isinstance(pattern, (str, list)) or len(pattern) != num_layers
                or any(c not in ("F", "S") for c in pattern)):
            raise f.error("index_topk_pattern", f"expected {num_layers} characters F or S (a "
                          "string or a list)")
        full = [c == "F" for c in pattern]
    else:
        full = [max(i - offset + 1, 0) % freq == 0 for i in range(num_layers)]
    if not any(full):
        raise f.error("index_topk_pattern" if pattern is not None else "index_topk_freq",
                      "selects no layer for an indexer")
    types = f.str_list("indexer_types", num_layers)
    if types is not None:
        bad = [i for i, t in enumerate(types) if t not in ("full", "shared")]
        if bad:
            raise f.error(f"indexer_types[{bad[0]}]", f"expected full or shared, got {types[bad[0]]!r}")
        declared = [t == "full" for t in types]
        if declared != full:
            i = next(i for i in range(num_layers) if declared[i] != full[i])
            raise f.error("indexer_types", f"layer {i} is {types[i]!r} but index_topk_freq / "
                          "index_skip_topk_offset say otherwise (vLLM follows those, transformers "
                          "and llama.cpp indexer_types)")
    return full


def parse_sparse_mla(f: Fields, model_type: str) -> list[tuple]:
    """DeepSeek-V3.2, GLM-5.x: MLA on every layer, plus a lightning-indexer key cache on the
    layers ``indexer_layers`` selects. ``index_topk`` (its presence makes vLLM treat the model
    as sparse) and ``index_n_heads`` size the top-k and the indexer's query weights: they shape
    time (``kvplan.planning.perf_model``), not the cache."""
    layers = parse_mla(f, model_type)
    topk, index_heads = f.integer("index_topk"), f.integer("index_n_heads")
    for key in ("indexer_rope_interleave", "index_share_for_mtp_iteration"):
        f.get(key)  # rope layout, MTP reuse: no cache of their own
    index_dim = f.integer("index_head_dim")
    if index_dim % 128:
        raise f.error("index_head_dim", f"{index_dim} is not a multiple of 128 (the indexer keeps "
                      "one fp32 scale per 128 values; vLLM and SGLang assume 128)")
    indexer = LightningIndexer(index_head_dim=index_dim, index_n_heads=index_heads,
                               index_topk=topk)
    full = indexer_layers(f, len(layers))
    return [(mla, indexer) if has else (mla,) for (mla,), has in zip(layers, full, strict=True)]


def parse_deepseek_v4(f: Fields, model_type: str) -> list[tuple]:
    """DeepSeek-V4: ``compress_ratios`` gives each layer's ratio (0: window only, 4: compressed
    sparse with an indexer, 128: heavily compressed), one entry per layer plus one per MTP layer
    (not counted); ``sliding_window`` every layer's window; one ``head_dim`` latent per token
    (``num_key_value_heads`` 1, K = V), ``qk_rope_head_dim`` of it RoPE'd."""
    num_layers = f.num_layers()
    ratios = f.array("compress_ratios")
    mtp = f.opt_int("num_nextn_predict_layers", minimum=0) or 0
    if ratios is None or len(ratios) not in (num_layers, num_layers + mtp):
        raise f.error("compress_ratios", f"expected {num_layers} entries (one per layer, plus "
                      f"{mtp} for the MTP layers), got {len(ratios or [])}")
    for i, r in enumerate(ratios):
        if isinstance(r, bool) or r not in (0, 4, 128):
            raise f.error(f"compress_ratios[{i}]", f"expected 0, 4 or 128, got {r!r}")
    kv = f.integer("num_key_value_heads")
    if kv != 1:
        raise f.error("num_key_value_heads", f"DeepSeek-V4 keeps one latent per token; got {kv}")
    head, rope, window = f.integer("head_dim"), f.integer("qk_rope_head_dim"), f.integer("sliding_window")
    index = f.integer("index_head_dim")
    f.integer("index_topk"), f.integer("index_n_heads")  # top-k and the indexer's query weights
    for key in ("compress_rope_theta", "num_hash_layers", "expert_dtype", "o_lora_rank"):
        f.get(key)  # rope base, hash routing, expert weights, output projection: no cache
    specs = {r: CompressedAttention(compress_ratio=max(r, 1), head_dim=head, rope_dim=rope,
                                    window_tokens=window, index_head_dim=index if r == 4 else 0)
             for r in set(ratios[:num_layers])}
    return [(specs[r],) for r in ratios[:num_layers]]
