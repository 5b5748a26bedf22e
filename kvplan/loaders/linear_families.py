"""Linear-attention hybrids of 2025-2026 whose recurrent layers are not Mamba.

Field names are those of the published configs; the layer rules are vLLM's (research notes in
docs/architectures.md):
- kimi_linear (Kimi-Linear, Kimi-K3's text_config): ``linear_attn_config`` names the KDA layers
  (``kda_layers``) and the MLA layers (``full_attn_layers``) with 1-based numbers (vLLM
  ``KimiLinearConfig.is_kda_layer(i) = (i + 1) in kda_layers``); without ``kda_layers`` every
  layer not in ``full_attn_layers`` is KDA. KDA heads and width are ``linear_attn_config``'s
  ``num_heads`` / ``head_dim`` (the top-level ``head_dim`` is hidden / heads and unused).
- lfm2 / lfm2_moe (LiquidAI): ``layer_types`` "conv" / "full_attention" (transformers and
  vLLM), or, without it, the older ``full_attn_idxs`` (0-based; lfm2 only: vLLM's
  lfm2_moe.py reads layer_types alone); short-conv state of ``conv_L_cache - 1`` x
  hidden_size (LFM2-8B-A1B: 18 conv layers x 2 x 2048 x 2 B = 147,456 B per sequence); the
  attention head size is hidden_size / num_attention_heads, as vLLM computes it.
- minimax_m1 / minimax_text_01 (MiniMax-M1, MiniMax-Text-01): ``attn_type_list`` 0 =
  lightning attention (``num_attention_heads`` x ``head_dim`` state), 1 = softmax GQA.
- minimax_m2: every layer is full attention. vLLM's ``minimax_m2.py`` (0.34) and transformers'
  ``MiniMaxM2Config`` never read ``attn_type_list``; where a config has one it must say so
  (all 1), and a config without one (AIConfigurator's MiniMax-M2.5) means the same.
- bailing_hybrid (inclusionAI Ling / Ring 2.5+): one model_type, two architectures.
  ``BailingMoeV3ForCausalLM`` (Ling-3.0; vLLM ``bailing_moe_v3.py``, in the registry from
  0.28.0): layer i is MLA when ``(i + 1) % layer_group_size == 0`` or i is in the trailing
  partial group (``i >= num_hidden_layers // layer_group_size * layer_group_size``), else KDA
  with ``num_attention_heads`` heads of ``head_dim`` (conv over q, k and v of
  ``short_conv_kernel_size`` taps, a float32 heads x head_dim x head_dim state: vLLM
  ``kda_state_shape`` / ``kda_state_dtype``). Ling-3.0-flash: 42 layers, groups of 6, so 7
  MLA layers of (512 + 64) latent and 35 KDA layers of 32 heads x 128.
  ``BailingMoeV2_5ForCausalLM`` (Ling-2.5 / 2.6, Ring-2.5; vLLM ``bailing_moe_linear.py``,
  from 0.17.0) is refused: no published config.json of it has been read (its vLLM rule, for
  when one is: lightning attention where ``(i + 1) % layer_group_size != 0``, MLA on the rest,
  a ``num_attention_heads x head_dim x head_dim`` state in the model dtype, TP at most and
  dividing ``group_norm_size``).
"""

from __future__ import annotations

from ..core.layers import KimiDeltaAttention, LightningAttention, MultiHeadLatent, ShortConv
from .attention_families import attention_shape, attention_spec
from .fields import Fields


def _one_based(f: Fields, key: str, num_layers: int) -> list[int] | None:
    values = f.array(key)
    if values is None:
        return None
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= num_layers:
            raise f.error(f"{key}[{i}]", f"expected a layer number 1..{num_layers} (1-based), "
                          f"got {v!r}")
    if len(set(values)) != len(values):
        raise f.error(key, "names a layer twice")
    return values


def _mla(f: Fields) -> MultiHeadLatent:
    return MultiHeadLatent(
        num_attention_heads=f.integer("num_attention_heads"),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_rope_head_dim=f.integer("qk_rope_head_dim"),
        qk_nope_head_dim=f.integer("qk_nope_head_dim"),
        v_head_dim=f.integer("v_head_dim"),
    )


def parse_kimi_linear(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    lac = f.sub("linear_attn_config")
    full = _one_based(lac, "full_attn_layers", num_layers)
    if full is None:
        raise lac.error("full_attn_layers", "missing: the 1-based numbers of the MLA layers")
    kda = _one_based(lac, "kda_layers", num_layers)
    if kda is None:
        kda = [n for n in range(1, num_layers + 1) if n not in full]
        f.assume(f"{lac.prefix}kda_layers absent: the {len(kda)} layers not in "
                 "full_attn_layers are KDA")
    both = set(kda) & set(full)
    if both:
        raise lac.error("kda_layers", f"layer {min(both)} is also in full_attn_layers")
    missing = sorted(set(range(1, num_layers + 1)) - set(kda) - set(full))
    if missing:
        raise lac.error("kda_layers", f"layer {missing[0]} is in neither kda_layers nor "
                        f"full_attn_layers ({num_layers} layers)")
    heads, dim = lac.integer("num_heads"), lac.integer("head_dim")
    state = KimiDeltaAttention(num_k_heads=heads, num_v_heads=heads, head_k_dim=dim,
                               head_v_dim=dim, conv_kernel=lac.integer("short_conv_kernel_size"))
    mla = _mla(f)
    f.get("head_dim"), f.get("num_key_value_heads")  # hidden / heads: neither KDA nor MLA uses them
    kda_set = set(kda)
    return [(state,) if i + 1 in kda_set else (mla,) for i in range(num_layers)]


def parse_lfm2(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    idxs = f.index_list("full_attn_idxs", num_layers)
    types = f.str_list("layer_types", num_layers)
    if types is not None:  # transformers Lfm2Config and vLLM read layer_types
        for i, t in enumerate(types):
            if t not in ("conv", "full_attention"):
                raise f.error(f"layer_types[{i}]", f"unknown layer type {t!r}; known: conv, "
                              "full_attention")
        full = {i for i, t in enumerate(types) if t == "full_attention"}
        if idxs is not None and set(idxs) != full:
            raise f.error("full_attn_idxs", "disagrees with layer_types (transformers and vLLM "
                          "follow layer_types)")
    elif idxs is not None and model_type == "lfm2_moe":
        raise f.error("layer_types", "missing: vLLM 0.34's lfm2_moe.py picks each layer's mixer "
                      "from layer_types only (full_attn_idxs is read by neither it nor "
                      "transformers' Lfm2MoeConfig)")
    elif idxs is not None:  # older checkpoints: the attention layers' indices only
        full = set(idxs)
    else:
        raise f.error("layer_types", "missing (or full_attn_idxs): which layers attend")
    hidden = f.integer("hidden_size")
    if model_type == "lfm2_moe":
        # vLLM 0.34 lfm2_moe.py: ShortConv(dim=hidden_size), state shape from hidden_size;
        # conv_dim is not read. num_dense_layers sets the feed-forward of the first layers
        # (params_lfm2.lfm2_moe_tensors checks it), not the cache.
        f.get("num_dense_layers")
        if f.has("conv_dim") and f.integer("conv_dim") != hidden:
            raise f.error("conv_dim", f"{f.integer('conv_dim')} differs from hidden_size "
                          f"{hidden}: vLLM 0.34's lfm2_moe.py runs the short conv over "
                          "hidden_size and does not read conv_dim")
        channels = hidden
    else:
        channels = f.integer("conv_dim", default=hidden, why="the short conv runs over hidden_size")
    conv = ShortConv(channels=channels, conv_kernel=f.integer("conv_L_cache"))
    # LiquidAI's configs also carry conv_dim_out (the out_proj width: checked against
    # hidden_size by params_lfm2), conv_use_xavier_init (initialisation) and num_heads (a copy
    # of num_attention_heads); vLLM's lfm2.py and transformers' Lfm2Config read none of them
    f.get("conv_dim_out"), f.get("conv_use_xavier_init"), f.get("num_heads")
    shape = attention_shape(f, model_type) if full else None
    if shape is not None and (hidden % shape[0] or shape[2] != hidden // shape[0]):
        # vLLM 0.34 lfm2.py / lfm2_moe.py: head_dim = hidden_size // num_attention_heads,
        # whatever head_dim the config states (2048 / 32 = 64 for LFM2-1.2B and LFM2-8B-A1B)
        raise f.error("head_dim", f"{shape[2]} is not hidden_size / num_attention_heads = "
                      f"{hidden} / {shape[0]}, the head size vLLM's {model_type}.py caches")
    attn = attention_spec(f, model_type, "full", shape) if shape is not None else None
    return [(attn,) if i in full else (conv,) for i in range(num_layers)]


def _attn_types(f: Fields, num_layers: int) -> list[int]:
    return f.layer_values("attn_type_list", num_layers, (0, 1), "0 (lightning) or 1 (softmax)")


def parse_minimax_lightning(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    types = _attn_types(f, num_layers)
    heads, _, head_dim, _ = attention_shape(f, model_type)
    lightning = LightningAttention(num_heads=heads, head_dim=head_dim)
    attn = attention_spec(f, model_type, "full")
    return [(attn,) if t == 1 else (lightning,) for t in types]


def parse_minimax_m2(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    types = _attn_types(f, num_layers) if f.has("attn_type_list") else []
    if 0 in types:
        raise f.error(f"attn_type_list[{types.index(0)}]", "minimax_m2 has no lightning layers "
                      "(every layer is softmax attention, 1)")
    attn = attention_spec(f, model_type, "full")
    return [(attn,)] * num_layers


#: ``bailing_hybrid`` architectures whose vLLM cache rule kvplan reads, and the one it refuses
BAILING_V3 = "BailingMoeV3ForCausalLM"
BAILING_V25 = "BailingMoeV2_5ForCausalLM"


def _bailing_architecture(f: Fields) -> str:
    archs = f.array("architectures")
    names = [a for a in (archs or []) if isinstance(a, str)]
    known = [a for a in names if a in (BAILING_V3, BAILING_V25)]
    if len(set(known)) != 1:
        raise f.error("architectures", f"{names or archs!r}: a bailing_hybrid config must name "
                      f"{BAILING_V3} (Ling-3.0: KDA + MLA) or {BAILING_V25} (Ling-2.5: "
                      "lightning + MLA); the two share the model_type but not the cache")
    return known[0]


def parse_bailing_hybrid(f: Fields, model_type: str) -> list[tuple]:
    """Ling-3.0 (KDA + MLA) as vLLM 0.34's ``bailing_moe_v3.py`` builds it; Ling-2.5 is refused
    (module docstring)."""
    arch = _bailing_architecture(f)
    if arch == BAILING_V25:
        raise f.error("architectures", f"{BAILING_V25} (Ling-2.5 / 2.6, Ring-2.5: lightning "
                      "attention + MLA) is not read yet: no published config.json of it has "
                      "been checked against vLLM's bailing_moe_linear.py")
    num_layers = f.num_layers()
    group = f.integer("layer_group_size")
    whole = num_layers // group * group
    heads, dim = f.integer("num_attention_heads"), f.integer("head_dim")
    if not f.flag("no_kda_lora") or f.flag("use_kda_lora"):
        raise f.error("no_kda_lora", "vLLM's bailing_moe_v3.py serves the full-rank KDA gates "
                      "only (no_kda_lora true; it raises otherwise)")
    k_heads = f.opt_int("num_kv_heads_for_linear_attn", minimum=0)
    if k_heads not in (None, 0, heads):
        raise f.error("num_kv_heads_for_linear_attn", f"{k_heads}: vLLM's bailing_moe_v3.py "
                      f"gives KDA's keys all {heads} num_attention_heads and reads no other "
                      "count")
    kda = KimiDeltaAttention(num_k_heads=heads, num_v_heads=heads, head_k_dim=dim,
                             head_v_dim=dim, conv_kernel=f.integer("short_conv_kernel_size"))
    mla = _mla(f)
    qk = f.opt_int("qk_head_dim")
    if qk is not None and qk != mla.qk_nope_head_dim + mla.qk_rope_head_dim:
        raise f.error("qk_head_dim", f"{qk} is not qk_nope_head_dim + qk_rope_head_dim = "
                      f"{mla.qk_nope_head_dim + mla.qk_rope_head_dim} (vLLM uses the sum)")
    if f.flag("use_mla_nope"):
        raise f.error("use_mla_nope", "an MLA without its rotary part is not what vLLM's "
                      "bailing_moe_v3.py builds (it always caches qk_rope_head_dim)")
    # read and not cache-shaping: the MTP layer's kind (MTP layers are not counted), the
    # KDA gate's bound, the MHA KV-head count of the MLA layers (vLLM's MLA caches the latent),
    # the linear-attention SiLU, group norm and QKV bias of the Ling-2.5 layers V3 does not
    # build, and a Qwen-style max_window_layers with no sliding window to bound (vLLM's
    # bailing_moe_v3.py reads none of these)
    f.get("mtp_use_kda"), f.get("kda_lower_bound"), f.get("kda_safe_gate")
    f.get("num_key_value_heads"), f.get("linear_silu"), f.get("group_norm_size")
    f.get("use_qkv_bias"), f.get("max_window_layers")
    return [(mla,) if (i + 1) % group == 0 or i >= whole else (kda,) for i in range(num_layers)]
