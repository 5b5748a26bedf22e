"""State-space, linear-attention and hybrid families.

Field names and defaults are those of the transformers config classes (and, for the
``mamba_ssm`` package's own config format, of ``mamba_ssm``'s ``Mamba``/``Mamba2`` modules):
- mamba / falcon_mamba: ``intermediate_size`` (d_inner), ``state_size``, ``conv_kernel``.
- mamba2: ``num_heads`` x ``head_dim``, ``state_size``, ``n_groups``, ``conv_kernel``,
  d_inner = ``expand * hidden_size``.
- mamba_ssm format (no ``model_type``): ``d_model``, ``n_layer``, ``ssm_cfg.layer``
  ("Mamba1"/"Mamba2"), module defaults d_state 16 (Mamba1) or 128 (Mamba2), d_conv 4, expand 2,
  headdim 64, ngroups 1; ``attn_layer_idx`` lists MHA layers configured by ``attn_cfg``.
- jamba: attention at layers with ``i % attn_layer_period == attn_layer_offset``, Mamba-1
  elsewhere (d_inner = ``mamba_expand * hidden_size``).
- zamba2: ``layers_block_type`` "mamba" / "hybrid"; a hybrid layer runs the shared attention
  block (its own KV cache per call site) beside its Mamba-2 mixer.
- falcon_h1: attention and Mamba-2 side by side in every layer (``attn_layer_indices`` null),
  d_inner = ``mamba_d_ssm``.
- nemotron_h: ``hybrid_override_pattern``: M = Mamba-2, * = attention, - and E = MLP / MoE only
  (no cache); d_inner = ``mamba_num_heads * mamba_head_dim``.
- bamba: attention at ``attn_layer_indices``; granitemoehybrid: ``layer_types``
  "mamba"/"attention"; both Mamba-2 with d_inner = ``mamba_expand * hidden_size``.
- qwen3_next: ``layer_types`` (or every ``full_attention_interval``-th layer full) with gated
  DeltaNet linear attention elsewhere.
"""

from __future__ import annotations

from ..core.layers import FullAttention, LinearAttention, Mamba
from .attention_families import attention_shape, attention_spec, layer_kinds
from .fields import Fields

#: Config keys that declare a recurrent-state dtype: vLLM's NemotronH reads
#: ``mamba_ssm_cache_dtype``, SGLang (and vLLM's Qwen3.5) ``mamba_ssm_dtype``.
SSM_DTYPE_KEYS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")


def _mamba2(f: Fields, *, d_inner: int, heads: str, head_dim: str | None, state: str,
            groups: str, conv: str, defaults: dict[str, int], family: str) -> Mamba:
    """A Mamba-2 spec. ``head_dim`` None: the head dim is always ``d_inner / heads`` (Zamba2);
    a config value ``"auto"`` means the same (Bamba, Falcon-H1)."""
    def get(key: str, name: str) -> int:
        return f.integer(key, default=defaults[name], why=f"{family} default") if name in defaults \
            else f.integer(key)

    raw_head_dim = "auto" if head_dim is None else f.raw(head_dim)
    head_dim = head_dim or "head_dim"
    if f.has(heads) or "heads" in defaults:
        n_heads = get(heads, "heads")
        if raw_head_dim == "auto" or (raw_head_dim is None and "head_dim" not in defaults):
            if d_inner % n_heads:
                raise f.error(heads, f"d_inner {d_inner} does not divide into {n_heads} heads")
            hd = d_inner // n_heads
            f.assume(f"{f.prefix}{head_dim} = d_inner / {heads} = {d_inner} / {n_heads} = {hd}")
        else:
            hd = get(head_dim, "head_dim")
    else:
        hd = get(head_dim, "head_dim")
        if d_inner % hd:
            raise f.error(head_dim, f"d_inner {d_inner} does not divide into heads of {hd}")
        n_heads = d_inner // hd
        f.assume(f"{f.prefix}{heads} = d_inner / {head_dim} = {d_inner} / {hd} = {n_heads}")
    if n_heads * hd != d_inner:
        raise f.error(heads, f"{n_heads} heads x {hd} head dim != d_inner {d_inner}")
    return Mamba(
        version=2, d_inner=d_inner, d_state=get(state, "state"), d_conv=get(conv, "conv"),
        num_heads=n_heads, head_dim=hd, n_groups=get(groups, "groups"),
        ssm_dtypes=f.declared_dtypes(*SSM_DTYPE_KEYS),
    )


def _expand_inner(f: Fields, expand_key: str, default_expand: int, family: str) -> int:
    hidden = f.integer("hidden_size")
    expand = f.integer(expand_key, default=default_expand, why=f"{family} default")
    return expand * hidden


def parse_mamba1(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers("num_hidden_layers", "n_layer")
    f.kv_words = frozenset({"intermediate_size", "expand"})  # d_inner of a Mamba-1 layer
    for key in ("ssm_cfg", "d_model", "n_layer"):  # mamba_ssm leftovers; MambaConfig ignores them
        f.get(key)
    if f.has("intermediate_size"):
        d_inner = f.integer("intermediate_size")
        f.get("expand")  # MambaConfig derived intermediate_size from it
    else:
        d_inner = _expand_inner(f, "expand", 2, "MambaConfig")
    spec = Mamba(
        version=1, d_inner=d_inner,
        d_state=f.integer("state_size", default=16, why="MambaConfig default"),
        d_conv=f.integer("conv_kernel", default=4, why="MambaConfig default"),
    )
    return [(spec,)] * num_layers


def parse_mamba2(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    d_inner = _expand_inner(f, "expand", 2, "Mamba2Config")
    spec = _mamba2(f, d_inner=d_inner, heads="num_heads", head_dim="head_dim", state="state_size",
                   groups="n_groups", conv="conv_kernel", family="Mamba2Config",
                   defaults={"heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv": 4})
    return [(spec,)] * num_layers


def parse_mamba_ssm(f: Fields, model_type: str) -> list[tuple]:
    """The ``mamba_ssm`` package's config.json (state-spaces/mamba2-2.7b): no model_type."""
    num_layers = f.num_layers("n_layer")
    d_model = f.integer("d_model")
    sub = f.sub("ssm_cfg")
    layer = sub.raw("layer", "Mamba1")
    if layer == "Mamba2":
        d_inner = sub.integer("expand", default=2, why="mamba_ssm Mamba2 default") * d_model
        spec = _mamba2(sub, d_inner=d_inner, heads="nheads", head_dim="headdim", state="d_state",
                       groups="ngroups", conv="d_conv", family="mamba_ssm Mamba2",
                       defaults={"head_dim": 64, "state": 128, "groups": 1, "conv": 4})
    elif layer == "Mamba1":
        spec = Mamba(
            version=1,
            d_inner=sub.integer("expand", default=2, why="mamba_ssm Mamba default") * d_model,
            d_state=sub.integer("d_state", default=16, why="mamba_ssm Mamba default"),
            d_conv=sub.integer("d_conv", default=4, why="mamba_ssm Mamba default"),
        )
    else:
        raise sub.error("layer", f"unknown mamba_ssm layer {layer!r}; expected Mamba1 or Mamba2")
    attn_idx = set(f.index_list("attn_layer_idx", num_layers) or [])
    blocks: list[tuple] = [(spec,)] * num_layers
    f.get("attn_cfg")  # read only when attn_layer_idx names layers
    if attn_idx:
        af = f.sub("attn_cfg")
        heads = af.integer("num_heads")
        kv = af.integer("num_heads_kv", default=heads, why="mamba_ssm MHA default")
        hd = af.integer("head_dim", default=d_model // heads, why="d_model / num_heads")
        attn = FullAttention(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=hd, head_dim_v=hd)
        for i in attn_idx:
            blocks[i] = (attn,)
    return blocks


def parse_jamba(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    period = f.integer("attn_layer_period", default=8, why="JambaConfig default")
    offset = f.integer("attn_layer_offset", default=4, why="JambaConfig default", minimum=0)
    if offset >= period:
        raise f.error("attn_layer_offset", f"{offset} must be less than attn_layer_period {period}")
    attn = attention_spec(f, model_type, "full")
    mamba = Mamba(
        version=1, d_inner=_expand_inner(f, "mamba_expand", 2, "JambaConfig"),
        d_state=f.integer("mamba_d_state", default=16, why="JambaConfig default"),
        d_conv=f.integer("mamba_d_conv", default=4, why="JambaConfig default"),
    )
    return [(attn,) if i % period == offset else (mamba,) for i in range(num_layers)]


def _kinds_list(f: Fields, key: str, num_layers: int, allowed: dict[str, str]) -> list[str]:
    values = f.str_list(key, num_layers)
    if values is None:
        raise f.error(key, "missing: the layer pattern of this hybrid model")
    out = []
    for i, v in enumerate(values):
        if v not in allowed:
            raise f.error(f"{key}[{i}]", f"unknown layer type {v!r}; known: {', '.join(allowed)}")
        out.append(allowed[v])
    return out


def parse_zamba2(f: Fields, model_type: str) -> list[tuple]:
    """Zamba2Config recomputes two widths whatever the file says:
    ``mamba_headdim = mamba_expand * hidden_size // n_mamba_heads`` and
    ``attention_head_dim = 2 * hidden_size // num_attention_heads``."""
    num_layers = f.num_layers()
    kinds = _kinds_list(f, "layers_block_type", num_layers, {"mamba": "mamba", "hybrid": "hybrid"})
    d_inner = _expand_inner(f, "mamba_expand", 2, "Zamba2Config")
    mamba = _mamba2(f, d_inner=d_inner, heads="n_mamba_heads", head_dim=None,
                    state="mamba_d_state", groups="mamba_ngroups", conv="mamba_d_conv",
                    family="Zamba2Config",
                    defaults={"heads": 8, "state": 64, "groups": 1, "conv": 4})
    heads = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", default=heads, why="Zamba2Config default (MHA)")
    hidden = f.integer("hidden_size")
    if (2 * hidden) % heads:
        raise f.error("num_attention_heads", f"2 x hidden_size {2 * hidden} does not divide "
                      f"into {heads} heads")
    hd = 2 * hidden // heads
    for key in ("attention_head_dim", "kv_channels", "mamba_headdim"):
        f.get(key)  # written in the file, recomputed by Zamba2Config from the sizes above
    f.assume(f"attention_head_dim = 2 * hidden_size / num_attention_heads = {hd} "
             "(Zamba2Config derives it)")
    attn = FullAttention(num_attention_heads=heads, num_kv_heads=kv, head_dim_k=hd, head_dim_v=hd)
    return [(attn, mamba) if k == "hybrid" else (mamba,) for k in kinds]


def parse_falcon_h1(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    if f.has("mamba_d_ssm"):
        d_inner = f.integer("mamba_d_ssm")
        f.get("mamba_expand")  # FalconH1Config uses it only when mamba_d_ssm is null
    elif f.present("mamba_d_ssm"):  # explicit null: FalconH1Config uses expand * hidden_size
        d_inner = _expand_inner(f, "mamba_expand", 2, "FalconH1Config")
    else:
        d_inner = f.integer("mamba_d_ssm", default=1024, why="FalconH1Config default")
    mamba = _mamba2(f, d_inner=d_inner, heads="mamba_n_heads", head_dim="mamba_d_head",
                    state="mamba_d_state", groups="mamba_n_groups", conv="mamba_d_conv",
                    family="FalconH1Config",
                    defaults={"heads": 128, "state": 256, "groups": 1, "conv": 4})
    attn = attention_spec(f, model_type, "full")
    idx = f.index_list("attn_layer_indices", num_layers)
    with_attn = set(range(num_layers)) if idx is None else set(idx)
    return [(attn, mamba) if i in with_attn else (mamba,) for i in range(num_layers)]


#: transformers 5 ``layers_block_type`` names (and the older ones it remaps) -> pattern chars.
NEMOTRON_BLOCK_TYPES = {"mamba": "M", "linear_attention": "M", "attention": "*",
                        "full_attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_pattern(f: Fields) -> str:
    """``hybrid_override_pattern`` (M = Mamba-2, * = attention, - = MLP, E = MoE), or the list
    ``layers_block_type`` that transformers 5 saves instead."""
    pattern = f.raw("hybrid_override_pattern")
    if pattern is None and f.has("layers_block_type"):
        types = f.array("layers_block_type") or []
        for i, t in enumerate(types):
            if t not in NEMOTRON_BLOCK_TYPES:
                raise f.error(f"layers_block_type[{i}]", f"unknown block type {t!r}; known: "
                              f"{', '.join(NEMOTRON_BLOCK_TYPES)}")
        return "".join(NEMOTRON_BLOCK_TYPES[t] for t in types)
    if not isinstance(pattern, str):
        raise f.error("hybrid_override_pattern",
                      "missing: expected a string such as 'M-M*-' (or a layers_block_type list)")
    return pattern


def parse_nemotron_h(f: Fields, model_type: str) -> list[tuple]:
    pattern = _nemotron_pattern(f)
    num_layers = f.num_layers() if f.has("num_hidden_layers") else len(pattern)
    if len(pattern) != num_layers:
        raise f.error("hybrid_override_pattern",
                      f"has {len(pattern)} characters for {num_layers} layers")
    defaults = {"heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv": 4}
    heads_n = f.integer("mamba_num_heads", default=128, why="NemotronHConfig default")
    hd = f.integer("mamba_head_dim", default=64, why="NemotronHConfig default")
    mamba = _mamba2(f, d_inner=heads_n * hd, heads="mamba_num_heads", head_dim="mamba_head_dim",
                    state="ssm_state_size", groups="n_groups", conv="conv_kernel",
                    family="NemotronHConfig", defaults=defaults)
    attn = attention_spec(f, model_type, "full") if "*" in pattern else None
    blocks: list[tuple] = []
    for i, ch in enumerate(pattern):
        if ch == "M":
            blocks.append((mamba,))
        elif ch == "*":
            blocks.append((attn,))
        elif ch in "-E":
            blocks.append(())
        else:
            raise f.error("hybrid_override_pattern",
                          f"character {ch!r} at {i}: expected M (mamba), * (attention), - or E")
    return blocks


def _granite_mamba(f: Fields, family: str) -> Mamba:
    d_inner = _expand_inner(f, "mamba_expand", 2, family)
    return _mamba2(f, d_inner=d_inner, heads="mamba_n_heads", head_dim="mamba_d_head",
                   state="mamba_d_state", groups="mamba_n_groups", conv="mamba_d_conv",
                   family=family, defaults={"heads": 128, "state": 256, "groups": 1, "conv": 4})


def parse_bamba(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    mamba = _granite_mamba(f, "BambaConfig")
    attn = attention_spec(f, model_type, "full")
    idx = set(f.index_list("attn_layer_indices", num_layers) or [])
    return [(attn,) if i in idx else (mamba,) for i in range(num_layers)]


def parse_granitemoehybrid(f: Fields, model_type: str) -> list[tuple]:
    """``layer_types`` with the 4.x names (mamba, attention) or the 5.x ones
    (linear_attention, full_attention); none at all means every layer is Mamba-2."""
    num_layers = f.num_layers()
    if f.has("layer_types"):
        kinds = _kinds_list(f, "layer_types", num_layers, {
            "mamba": "mamba", "linear_attention": "mamba", "attention": "full",
            "full_attention": "full"})
    else:
        kinds = ["mamba"] * num_layers
        f.assume("layer_types absent: every layer is Mamba-2 (GraniteMoeHybridConfig)")
    mamba = _granite_mamba(f, "GraniteMoeHybridConfig")
    attn = attention_spec(f, model_type, "full") if "full" in kinds else None
    return [(attn,) if k == "full" else (mamba,) for k in kinds]


def parse_qwen3_next(f: Fields, model_type: str) -> list[tuple]:
    num_layers = f.num_layers()
    f.get("full_attention_interval")  # layer_types, when given, wins (Qwen3NextConfig)
    if f.flag("use_sliding_window") and f.has("sliding_window"):
        raise f.error("use_sliding_window", f"{model_type} with a sliding window is not modelled "
                      "(vLLM's gated-DeltaNet models run full attention layers)")
    if f.has("layer_types"):
        kinds = layer_kinds(f, model_type, num_layers)
    else:
        every = f.integer("full_attention_interval", default=4, why="Qwen3NextConfig default")
        kinds = ["full" if (i + 1) % every == 0 else "linear" for i in range(num_layers)]
    shape = attention_shape(f, model_type)
    attn = attention_spec(f, model_type, "full", shape)
    linear = LinearAttention(
        num_k_heads=f.integer("linear_num_key_heads"),
        num_v_heads=f.integer("linear_num_value_heads"),
        head_k_dim=f.integer("linear_key_head_dim"),
        head_v_dim=f.integer("linear_value_head_dim"),
        conv_kernel=f.integer("linear_conv_kernel_dim", default=4, why="Qwen3NextConfig default"),
        state_dtypes=f.declared_dtypes(*SSM_DTYPE_KEYS),
    )
    out = []
    for i, k in enumerate(kinds):
        if k == "full":
            out.append((attn,))
        elif k == "linear":
            out.append((linear,))
        else:
            raise f.error(f"layer_types[{i}]", f"qwen3_next has no {k} layers")
    return out
