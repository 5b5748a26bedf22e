"""DeepSeek-V4's parameter inventory (``model_type: deepseek_v4``), as vLLM 0.34 allocates it
(``vllm/models/deepseek_v4``: attention.py, compressor.py, nvidia/model.py, nvidia/mtp.py).

Every decoder layer, whatever its ``compress_ratios`` entry:

- attention (``DeepseekV4Attention``): an fp32 sink per head (split with the heads);
  ``fused_wqa_wkv`` [q_lora_rank + head_dim, hidden] (wq_a and wkv fused, replicated);
  ``q_norm`` [q_lora_rank]; ``wq_b`` [heads x head_dim, q_lora_rank] (column); ``kv_norm``
  [head_dim]; the grouped output projection ``wo_a`` [o_groups x o_lora_rank, heads x head_dim /
  o_groups] (column: o_groups / tp groups a rank) and ``wo_b`` [hidden, o_groups x o_lora_rank]
  (row). The four projections are fp8 block linears.
- ratio 4 and 128 layers add a compressor (``DeepseekCompressor`` over head_dim; overlap
  ``coff`` = 2 for ratio 4, else 1): an fp32 ``ape`` [ratio, coff x head_dim], the unquantised
  ``fused_wkv_wgate`` [2 x coff x head_dim, hidden] (model dtype) and a ``norm`` [head_dim], all
  replicated. Ratio 4 layers add the indexer (``DeepseekV4Indexer``, replicated): ``wq_b``
  [index_n_heads x index_head_dim, q_lora_rank] (fp8), ``weights_proj`` [index_n_heads, hidden]
  (unquantised) and its own ratio 4 compressor over index_head_dim. No wk / k_norm (V3.2 has).
- the MoE (``DeepseekV4MoE``), on every layer: the router ``gate`` [n_routed_experts, hidden]
  (model dtype, replicated); on the first ``num_hash_layers`` layers the hash table ``tid2eid``
  [vocab, num_experts_per_tok] (int32), on the others the fp32 ``e_score_correction_bias``
  (``topk_method`` noaux_tc); routed experts w1 / w3 [moe_intermediate_size, hidden] and w2;
  shared experts (one MLP n_shared_experts x moe_intermediate_size wide, fp8).
- ``attn_norm`` and ``ffn_norm`` [hidden]; two manifold hyper-connections, each an fp32
  ``fn`` [(2 + hc_mult) x hc_mult, hc_mult x hidden], ``base`` [(2 + hc_mult) x hc_mult] and
  ``scale`` [3].

Around them: the embedding and LM head (no tying in vLLM's DeepSeek-V4), the final norm and
the fp32 hyper-head (``hc_head_fn`` [hc_mult, hc_mult x hidden], ``hc_head_base`` [hc_mult],
``hc_head_scale`` [1]). Each MTP layer (``DeepSeekV4MultiTokenPredictorLayer``, reported
apart) is a decoder layer with ratio 1 (no compressor, no indexer; vLLM ignores its
compress_ratios entry) and a non-hash MoE, plus enorm, hnorm, fp8 ``e_proj`` and ``h_proj``
[hidden, hidden] (replicated), its own hyper-head and shared_head.norm. Its embedding and LM
head are the target's: DeepSeekV4MTP declares no embedding of its own and vLLM 0.34's
``share_target_lm_head`` replaces every MTP layer's shared_head.head by the target's LM head.

Not modelled (bytes only, no parameter of the checkpoint): FlashMLA pads each rank's sink to 64
(or 128) heads (Flash at TP 8: 56 x 4 B more per layer); the first layer's fp32
``hc_attn_fn_broadcast`` [(2 + hc_mult) x hc_mult, hidden], derived after loading; the mxfp4 MoE
kernels' and the shared MLP's rounding of a rank's expert width up to 128 when
moe_intermediate_size / tp is not a multiple of 128 (not at tp <= 8 for Flash or Pro).
"""

from __future__ import annotations

from ..core.errors import ConfigError
from ..core.layers import CompressedAttention
from ..core.model import Model
from .fields import Fields

#: compress_ratios entries -> transformers' layer_types names (DeepseekV4Config)
LAYER_TYPES = {1: "sliding_attention", 4: "compressed_sparse_attention",
               128: "heavily_compressed_attention"}
#: the expert formats vLLM's DeepseekV4FP8Config accepts (its default: fp4)
EXPERT_DTYPES = ("fp4", "fp8")


def expert_dtype(f: Fields) -> str:
    """``expert_dtype`` as vLLM resolves it (``getattr(hf_config, "expert_dtype", "fp4")``)."""
    value = f.get("expert_dtype")
    if value is None:
        return "fp4"
    if value not in EXPERT_DTYPES:
        raise f.error("expert_dtype", f"{value!r}: vLLM's DeepSeek-V4 serves fp4 or fp8 experts")
    return value


def _ratios(f: Fields, model: Model) -> list[int]:
    """Each decoder layer's compress ratio (1, 4 or 128), from the parsed cache layers, checked
    against the transformers spellings (layer_types, compress_rates) when a config has them."""
    ratios = []
    for i, block in enumerate(model.layers):
        spec = block[0] if len(block) == 1 else None
        if not isinstance(spec, CompressedAttention):
            raise ConfigError(f"layer {i} is not a DeepSeek-V4 compressed-attention layer",
                              source=f.source, field=f.prefix + "compress_ratios")
        ratios.append(spec.compress_ratio)
    rates = f.get("compress_rates")
    if rates is not None and rates != {LAYER_TYPES[4]: 4, LAYER_TYPES[128]: 128}:
        raise f.error("compress_rates", f"{rates!r}: only ratios 4 and 128 are counted (those "
                      "compress_ratios spells)")
    for key, ratio in (("compress_rate_csa", 4), ("compress_rate_hca", 128)):
        if f.get(key) not in (None, ratio):
            raise f.error(key, f"{f.get(key)!r}: only {ratio} is counted")
    types = f.str_list("layer_types", len(ratios))
    if types is not None:
        for i, (t, r) in enumerate(zip(types, ratios, strict=True)):
            if t != LAYER_TYPES[r]:
                raise f.error(f"layer_types[{i}]", f"{t!r} disagrees with compress_ratios[{i}] "
                              f"= {0 if r == 1 else r}")
    return ratios


def _hash_layers(f: Fields, num_layers: int) -> int:
    """How many leading layers route by the ``tid2eid`` table: ``num_hash_layers`` (or
    transformers' ``mlp_layer_types``, whose hash_moe entries must lead, as vLLM counts them)."""
    types = f.str_list("mlp_layer_types", num_layers)
    stated = f.opt_int("num_hash_layers", minimum=0, maximum=num_layers) \
        if f.has("num_hash_layers") else None
    if types is None:
        if stated is None:
            return f.integer("num_hash_layers", default=3, minimum=0,
                             why="transformers DeepseekV4Config default")
        return stated
    count = types.count("hash_moe")
    for i, t in enumerate(types):
        if t != ("hash_moe" if i < count else "moe"):
            raise f.error(f"mlp_layer_types[{i}]", f"{t!r}: expected {count} hash_moe layers "
                          "first, then moe (vLLM routes layers below the hash_moe count by hash)")
    if stated is not None and stated != count:
        raise f.error("num_hash_layers", f"{stated} disagrees with mlp_layer_types ({count} "
                      "hash_moe)")
    return count


def _refuse(f: Fields) -> None:
    """Settings vLLM's DeepSeek-V4 does not build, or builds with tensors not counted here."""
    for key in ("attention_bias", "mlp_bias"):
        if f.flag(key):
            raise f.error(key, "true: vLLM's DeepSeek-V4 projections are bias-free; pass "
                          "--weight-memory")
    if f.flag("tie_word_embeddings"):
        raise f.error("tie_word_embeddings", "true: vLLM's DeepSeek-V4 builds its own LM head "
                      "(no tying); refused rather than guessed")
    if f.raw("hidden_act", "silu") != "silu":
        raise f.error("hidden_act", f"{f.raw('hidden_act')!r}: vLLM's DeepSeek-V4 MLPs are "
                      "silu only")
    if f.opt_int("vision_n_layers", minimum=0):
        raise f.error("vision_n_layers", "the vision variant (its tower and bias_vl router "
                      "biases) is not counted; pass --weight-memory")
    if f.has("first_k_dense_replace") and f.integer("first_k_dense_replace", minimum=0):
        raise f.error("first_k_dense_replace", "DeepSeek-V4 is MoE on every layer (vLLM builds "
                      "no dense layer)")
    if f.has("moe_layer_freq") and f.integer("moe_layer_freq") != 1:
        raise f.error("moe_layer_freq", "DeepSeek-V4 is MoE on every layer (vLLM builds no "
                      "dense layer)")


def deepseek_v4_tensors(inv, model: Model) -> tuple[str, list[str]]:
    """Add every DeepSeek-V4 tensor to ``inv`` (an ``hf_params._Inventory``); returns the MTP
    module's name for ``Weights.extra_name`` ("" without one) and the notes."""
    f, h = inv.f, inv.hidden
    _refuse(f)
    notes = []
    expert_dtype(f)  # the bytes (kvplan.loaders.quant_config), read here so a bad value fails
    if f.raw("expert_dtype") is None:
        notes.append("expert_dtype not stated: the routed experts are taken as fp4 (mxfp4), "
                     "vLLM's DeepseekV4FP8Config default")
    vocab = f.integer("vocab_size")
    ratios = _ratios(f, model)
    spec = model.layers[0][0]
    assert isinstance(spec, CompressedAttention)
    head_dim = spec.head_dim
    heads = f.integer("num_attention_heads")
    q_lora, o_lora = f.integer("q_lora_rank"), f.integer("o_lora_rank")
    groups = f.integer("o_groups", maximum=heads)
    if heads % groups:
        raise f.error("o_groups", f"{groups} does not divide num_attention_heads = {heads}")
    index_heads, index_dim = f.integer("index_n_heads"), f.integer("index_head_dim")
    hc = f.integer("hc_mult", maximum=64)
    f.get("hc_sinkhorn_iters"), f.get("hc_eps")  # the Sinkhorn projection: no tensor
    experts, top_k = f.integer("n_routed_experts"), f.integer("num_experts_per_tok")
    if top_k > experts:
        raise f.error("num_experts_per_tok", f"{top_k} exceeds n_routed_experts = {experts}")
    inter = f.integer("moe_intermediate_size")
    shared = f.integer("n_shared_experts") * inter
    f.get("swiglu_limit")  # an activation clamp
    hashed = _hash_layers(f, len(ratios))
    if f.raw("topk_method") is None:  # vLLM: getattr(config, "topk_method", None)
        raise f.error("topk_method", "missing: vLLM builds the fp32 score-correction biases only "
                      "under noaux_tc (the published configs state it); pass --weight-memory")
    score_bias = f.raw("topk_method") == "noaux_tc"  # DeepseekV4MoE: only then the fp32 bias
    inv.num_experts, inv.top_k = experts, top_k
    mix = (2 + hc) * hc

    def compressor(prefix: str, dim: int, ratio: int) -> None:
        coff = 2 if ratio == 4 else 1
        inv.add(f"{prefix}.ape", ratio, coff * dim, dtype="fp32")
        inv.linear(f"{prefix}.fused_wkv_wgate", 2 * coff * dim, h, "replicated", quantized=False)
        inv.norm(f"{prefix}.norm", dim)

    def layer(ratio: int, hash_routed: bool) -> None:
        inv.add("attn.attn_sink", heads, shard="column", dtype="fp32")
        inv.linear("attn.fused_wqa_wkv", q_lora + head_dim, h, "replicated")
        inv.norm("attn.q_norm", q_lora)
        inv.linear("attn.wq_b", heads * head_dim, q_lora, "column")
        inv.norm("attn.kv_norm", head_dim)
        inv.linear("attn.wo_a", groups * o_lora, heads * head_dim // groups, "column")
        inv.linear("attn.wo_b", h, groups * o_lora, "row")
        if ratio > 1:
            compressor("attn.compressor", head_dim, ratio)
        if ratio == 4:
            inv.linear("attn.indexer.wq_b", index_heads * index_dim, q_lora, "replicated")
            inv.linear("attn.indexer.weights_proj", index_heads, h, "replicated", quantized=False)
            compressor("attn.indexer.compressor", index_dim, 4)
        inv.linear("ffn.gate", experts, h, "replicated", quantized=False)
        if hash_routed:  # int32 in vLLM (4 bytes, as fp32)
            inv.add("ffn.gate.tid2eid", vocab, top_k, dtype="fp32")
        elif score_bias:
            inv.add("ffn.gate.e_score_correction_bias", experts, dtype="fp32")
        for name, rows, cols, shard in (("w1", inter, h, "column"), ("w3", inter, h, "column"),
                                        ("w2", h, inter, "row")):
            inv.linear(f"ffn.experts.{name}", rows, cols, shard, count=experts, expert=True)
        inv.mlp("ffn.shared_experts", shared)
        inv.norm("attn_norm", h)
        inv.norm("ffn_norm", h)
        for part in ("attn", "ffn"):
            inv.add(f"hc_{part}_fn", mix, hc * h, dtype="fp32")
            inv.add(f"hc_{part}_base", mix, dtype="fp32")
            inv.add(f"hc_{part}_scale", 3, dtype="fp32")

    def hyper_head(prefix: str) -> None:
        # the model's hyper-head: vLLM 0.34 builds it on every pipeline rank
        # (vllm/models/deepseek_v4/nvidia/model.py :895-913, amd/model.py :1177-1195: no rank
        # test, unlike the norm beside it)
        every = not prefix
        inv.add(f"{prefix}hc_head_fn", hc, hc * h, dtype="fp32", every_stage=every)
        inv.add(f"{prefix}hc_head_base", hc, dtype="fp32", every_stage=every)
        inv.add(f"{prefix}hc_head_scale", 1, dtype="fp32", every_stage=every)

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab")
    for i, ratio in enumerate(ratios):
        inv.place, inv.layer = "layer", i
        layer(ratio, i < hashed)
    inv.place = "head"
    inv.norm("final_norm", h)
    hyper_head("")
    inv.add("lm_head", vocab, h, shard="vocab")
    from .hf_config import MAX_MTP_LAYERS

    mtp = f.opt_int("num_nextn_predict_layers", minimum=0, maximum=MAX_MTP_LAYERS) or 0
    inv.place = "extra"
    for j in range(mtp):
        inv.layer = len(ratios) + j
        layer(1, False)
        for name in ("enorm", "hnorm", "shared_head.norm"):
            inv.norm(f"mtp.{name}", h)
        inv.linear("mtp.e_proj", h, h, "replicated")
        inv.linear("mtp.h_proj", h, h, "replicated")
        hyper_head("mtp.")
    extra = (f"MTP module (num_nextn_predict_layers={mtp}), loaded only as a speculative draft; "
             "it shares the target's embedding and LM head") if mtp else ""
    return extra, notes
