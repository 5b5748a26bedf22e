"""Kimi-K3's parameter inventory (``model_type: kimi_k3``, text_config ``kimi_linear``), as
vLLM 0.34 allocates it on NVIDIA GPUs (``vllm/models/kimi_k3``: nvidia/model.py, nvidia/kda.py,
nvidia/mla.py, nvidia/mtp.py, nvidia/latent_moe_runner.py, nvidia/low_latency_gemm.py, the
amd/ variants and common/ read for comparison; ``vllm/transformers_utils/configs/kimi_k3.py``
and ``kimi_linear.py``; the vision tower in ``vllm/model_executor/models/kimi_k25_vit.py``;
``KimiK3MergedQKVGateLinear`` in ``vllm/model_executor/layers/linear.py``).

Shapes are [out, in]; h = hidden_size, heads = linear_attn_config.num_heads, d = its head_dim,
p = heads x d. Kimi-K3: h 7168, p 96 x 128 = 12,288.

Every decoder layer (``KimiDecoderLayer``):

- a KDA layer (``KimiK3DeltaAttention``, ``use_full_rank_gate`` true) packs q, k, v and the
  output gate g [p, h] each (column), the forget gate's f_a [d, h] (replicated: every rank holds
  it whole) and the beta b [heads, h] (column) into one ``in_proj_qkvgfab``; then f_b [p, d]
  (column), an fp32 ``dt_bias`` [p] and ``A_log`` [heads] (column), the q/k/v short convs held
  as one fp32 ``conv1d`` [3p, kernel] (column), the gated ``o_norm`` [d] and ``o_proj`` [h, p]
  (row). 443,740,384 parameters. Without the full-rank gate vLLM builds Kimi-Linear's low-rank
  gate (``_Inventory.kda``: g_a [d, h] and g_b [p, d] instead of g).
- an MLA layer (``MultiHeadLatentAttention``; NoPE, ``mla_use_nope``) holds ``_Inventory.mla``'s
  tensors (q_a [q_lora_rank, h] and kv_a [kv_lora_rank + qk_rope_head_dim, h] replicated, the
  two latent norms, q_b [heads x (nope + rope), q_lora_rank], kv_b [heads x (nope + v),
  kv_lora_rank], o_proj [h, heads x v]) plus, under ``mla_use_output_gate``, the gate g_proj
  [heads x v_head_dim, h] (column; shard 2 of vLLM's fused q_a | kv_a | g projection).
  232,196,096 parameters.
- the MoE (``KimiMoE``) on layers i >= first_k_dense_replace with i % moe_layer_freq == 0: the
  router ``gate`` [num_experts, h] (``GateLinear``, built without a quantization config, model
  dtype), the fp32 ``e_score_correction_bias`` [num_experts], the shared experts (one gated MLP
  of num_shared_experts x moe_intermediate_size over h: column / row), and the routed experts
  w1 / w3 [moe_intermediate_size, m] and w2 [m, moe_intermediate_size] over the expert width m.
  With ``routed_expert_hidden_size`` (the latent MoE) m is that width and the block adds
  ``routed_expert_down_proj`` [m, h], the RMSNorm ``routed_expert_norm`` [m] (under
  ``latent_moe_use_norm``) and ``routed_expert_up_proj`` [h, m], all three replicated (vLLM's
  ``ReplicatedLinear``: the up projection runs locally after one fused all-reduce); without it
  m = h and there is no projection. Kimi-K3: 896 x 3 x 3072 x 3584 = 29,595,009,024 expert
  parameters a layer and 189,927,808 others. The other layers hold a gated MLP of
  intermediate_size (``mlp``).
- input_layernorm and post_attention_layernorm [h]; with ``attn_res_block_size`` (Attention
  Residuals) also self_attention_res_norm and mlp_res_norm [h] and the unquantised
  self_attention_res_proj and mlp_res_proj [1, h].

Around them: embed_tokens and lm_head [vocab, h] (vLLM's Kimi-K3 has no tying), the final
norm, and with AttnRes the model's output_attn_res_norm [h] and output_attn_res_proj [1, h].
The vision tower (``MoonViT3dPretrainedModel``, vLLM's Kimi-K2.5 class fed K3's vision config:
RMSNorms, no biases, a 1536-wide qkv over 1024-wide blocks) and the ``patchmergerv2``
projector, in the model dtype (vLLM hands the tower no compressed-tensors config): a patch
conv [vt_hidden_size, 3 x patch^2], the learned position table [height x width, vt_hidden_size]
and the fp32 sin-cos time table [init_pos_emb_time, vt_hidden_size] (a buffer, counted as
Kimi-K2.5's is), per block norm0 / norm1, wqkv [3 x qkv_hidden_size, vt_hidden_size] and wo
[vt_hidden_size, qkv_hidden_size], fc0 / fc1 (split over TP when the heads divide by it, else
whole: vLLM's data-parallel fallback), a final norm; the projector's linear_1 [4h_v, 4h_v] and
linear_2 [h, 4h_v] over the 2 x 2 merged patches and its post_norm [h] (replicated). Kimi-K3:
401,214,464 tower + 46,144,512 projector + 4,096 time-table values.

Each MTP layer (``KimiK3MultiTokenPredictorLayer``, reported apart; the layer at index
num_hidden_layers + j) is a decoder layer built without AttnRes (an MLA layer: no KDA layer
number lies past num_hidden_layers) with the MoE when its index is a MoE index, plus enorm,
hnorm, the unquantised eh_proj [h, 2h] (replicated) and shared_head.norm; its embedding and
head are the target's: ``KimiK3MTP`` declares both (mtp.py), but vLLM 0.34's spec-decode
loader (eagle/utils.py) drops them and points them at the target's at pp = 1 (with pp > 1
``maybe_share_target_embed`` returns early and the draft keeps its own embedding, not counted).

Quantisation: vLLM 0.34 rewrites the checkpoint's compressed-tensors ``mxfp4-pack-quantized``
config to ``quant_method: mxfp4`` (model_executor/models/config.py,
KimiK3ForConditionalGenerationConfig), and ``Mxfp4Config.get_quant_method`` gives every Linear
layer ``UnquantizedLinearMethod`` (quantization/mxfp4.py): only the routed experts are mxfp4.
So the latent projections, attention, shared experts, the dense MLP and lm_head stay in the
model dtype (``quantized=False`` for the latent pair, the ``ignore`` list for the rest). The
published checkpoint agrees: a public census of its safetensors headers (search-index file ids
57694383931 and 70111876762) holds 57,179,884,544 BF16 elements, which this inventory
reproduces exactly (with mxfp4 latent projections it would hold 4,726,980,608 fewer).

Not modelled (bytes only, no checkpoint parameter): the padding rows vLLM adds to each rank's
packed KDA projection to a multiple of 16 (at TP 8: 6,284 -> 6,288 rows, 4 x 7168 x 2 B =
57,344 B per KDA layer); the fp32 copies of the conv weights [3, kernel, p / tp] and o_norm [d]
that the fused KDA decode kernels keep beside the originals when selected; vLLM's zero padding
of a rank's expert width to 256 when moe_intermediate_size / tp < 256 without expert
parallelism (Kimi-K3: above TP 12); the replicated shared experts under sequence parallelism
(expert parallelism with data parallelism or MegaMoE); the ROCm build's column-split,
unquantised up projection (amd/linear.py); the K3.1 DSA indexer (``dsa_config``: refused).
Against the checkpoint (the census above: 2,779,931,837,184 elements) this inventory holds
2,208 fewer, 69 x 32 F32 elements, one set per KDA layer, that no vLLM 0.34 kimi_k3 file
allocates (not identified), and 4,096 more (the time table, a buffer); the checkpoint keeps
o_norm in F32, vLLM in the model dtype.
"""

from __future__ import annotations

from ..core.errors import ConfigError
from ..core.layers import KimiDeltaAttention, MultiHeadLatent
from ..core.model import Model
from .fields import Fields

#: the vision_config values vLLM's KimiK3VisionConfig supplies when the file omits them
VISION_DEFAULTS = {"patch_embed_proj_bias": False, "attn_bias": False, "linear_bias": False,
                   "norm_type": "rmsnorm", "mlp_type": "mlp2", "mm_projector_type": "patchmergerv2",
                   "pos_emb_type": "divided_fixed", "video_attn_type": "spatial_temporal"}


def kda_mla_layers(inv, model: Model, f: Fields, kda, mla, after, family: str,
                   field: str) -> MultiHeadLatent | None:
    """Each decoder layer of a KDA + MLA hybrid (Kimi-K3, Ling-3.0): ``kda`` or ``mla`` for its
    attention, then ``after(i)`` (norms, feed-forward); the first MLA spec (for the MTP layer),
    a layer of any other kind an error naming ``field``."""
    first = None
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        for spec in block:
            if isinstance(spec, KimiDeltaAttention):
                kda(spec)
            elif isinstance(spec, MultiHeadLatent):
                mla(spec)
                first = first or spec
            else:
                raise ConfigError(f"layer {i}: a {spec.kind} layer in a {family} config",
                                  source=f.source, field=f.prefix + field)
        after(i)
    return first


def is_kimi_k3(model: Model) -> bool:
    """The Kimi-K3 wrapper (vLLM ``KimiK3ForConditionalGeneration``); its text_config is a
    ``kimi_linear`` config."""
    return model.config.get("model_type") == "kimi_k3"


def _refuse(f: Fields) -> None:
    """Settings vLLM's Kimi-K3 does not build, or builds with tensors not counted here."""
    if f.get("dsa_config") is not None:
        raise f.error("dsa_config", "Kimi-K3.1's DSA indexer is not counted; pass --weight-memory")
    for key in ("attention_bias", "mlp_bias"):
        if f.flag(key):
            raise f.error(key, "true: vLLM's Kimi-K3 projections are bias-free; pass "
                          "--weight-memory")
    if f.flag("tie_word_embeddings"):
        raise f.error("tie_word_embeddings", "true: vLLM's Kimi-K3 builds its own LM head (no "
                      "tying); refused rather than guessed")
    if not f.flag("mla_use_nope"):
        raise f.error("mla_use_nope", "false: vLLM's Kimi-K3 MLA is NoPE only (it asserts "
                      "mla_use_nope)")


def _expert_width(f: Fields, h: int, notes: list[str]) -> int:
    """The routed experts' width: ``routed_expert_hidden_size`` (1..hidden_size), else h."""
    if not f.has("routed_expert_hidden_size"):
        return h
    latent = f.integer("routed_expert_hidden_size", maximum=h)
    if not f.has("latent_moe_use_norm"):
        notes.append(f"{f.prefix}latent_moe_use_norm absent: no routed_expert_norm "
                     "(KimiLinearConfig default false)")
    return latent


def _vision_value(v: Fields, key: str, notes: list[str]):
    value = v.get(key)
    if value is None:
        value = VISION_DEFAULTS[key]
        notes.append(f"{v.prefix}{key} absent: {value!r} (vLLM KimiK3VisionConfig default)")
    return value


def _vision_flag(v: Fields, key: str, notes: list[str]) -> bool:
    value = _vision_value(v, key, notes)
    if not isinstance(value, bool):
        raise v.error(key, f"expected true or false, got {value!r}")
    return value


def _vision(inv, v: Fields, text_hidden: int, notes: list[str]) -> None:
    """MoonViT-V2 and the patch-merger projector (see the module docstring)."""
    h, inter = v.integer("vt_hidden_size"), v.integer("vt_intermediate_size")
    heads, blocks = v.integer("vt_num_attention_heads"), v.integer("vt_num_hidden_layers")
    qkv = v.integer("qkv_hidden_size", default=1536, why="vLLM KimiK3VisionConfig default")
    if qkv % heads:
        raise v.error("qkv_hidden_size", f"{qkv} does not divide by vt_num_attention_heads = "
                      f"{heads}")
    patch = v.integer("patch_size")
    for key, allowed in (("pos_emb_type", "divided_fixed"), ("mlp_type", "mlp2"),
                         ("video_attn_type", "spatial_temporal")):
        if _vision_value(v, key, notes) != allowed:
            raise v.error(key, f"{v.raw(key)!r}: vLLM's MoonViT builds {allowed!r} only")
    norm_type = _vision_value(v, "norm_type", notes)
    if norm_type not in ("rmsnorm", "layernorm"):
        raise v.error("norm_type", f"{norm_type!r}: expected rmsnorm or layernorm")
    norm = h * (1 if norm_type == "rmsnorm" else 2)  # nn.RMSNorm: weight; LayerNorm: + bias
    projector = _vision_value(v, "mm_projector_type", notes)
    if projector not in ("patchmergerv2", "patchmerger"):
        raise v.error("mm_projector_type", f"{projector!r}: only patchmergerv2 and patchmerger "
                      "are counted; pass --weight-memory")
    kernel = v.array("merge_kernel_size")
    if not kernel or len(kernel) != 2 or not all(isinstance(k, int) and not isinstance(k, bool)
                                                 and 0 < k <= 64 for k in kernel):
        raise v.error("merge_kernel_size", "expected two positive integers")
    merged = h * kernel[0] * kernel[1]
    conv_bias = _vision_flag(v, "patch_embed_proj_bias", notes)
    attn_bias = _vision_flag(v, "attn_bias", notes)
    linear_bias = _vision_flag(v, "linear_bias", notes)
    v.opt_int("mm_hidden_size"), v.opt_int("text_hidden_size")  # vLLM: h_v and the text width
    v.get("projector_hidden_act"), v.get("projector_ln_eps"), v.get("merge_type")  # no tensor
    inv.add("vision.patch_embed.proj", h, 3 * patch * patch + (1 if conv_bias else 0))
    inv.add("vision.pos_emb.weight", v.integer("init_pos_emb_height")
            * v.integer("init_pos_emb_width"), h)
    inv.add("vision.pos_emb.time_weight", v.integer("init_pos_emb_time"), h, dtype="fp32")
    for name, rows, cols, shard, bias in (("attn.wqkv", 3 * qkv, h, "column", attn_bias),
                                          ("attn.wo", h, qkv, "row", attn_bias),
                                          ("mlp.fc0", inter, h, "column", linear_bias),
                                          ("mlp.fc1", h, inter, "row", linear_bias)):
        inv.add(f"vision.blocks.{name}.weight", rows, cols, shard=shard, count=blocks,
                split_heads=heads)
        if bias:
            inv.add(f"vision.blocks.{name}.bias", rows, count=blocks, split_heads=heads,
                    shard=shard if shard == "column" else "replicated")
    inv.add("vision.blocks.norms", 2 * norm, count=blocks)
    inv.add("vision.final_layernorm", norm)
    v2 = projector == "patchmergerv2"  # v2: bias-free linears, an RMSNorm after; v1: LayerNorm before
    if not v2:
        inv.add("mm_projector.pre_norm", 2 * h)
    inv.add("mm_projector.linear_1", merged, merged + (0 if v2 else 1))
    inv.add("mm_projector.linear_2", text_hidden, merged + (0 if v2 else 1))
    if v2:
        inv.add("mm_projector.post_norm", text_hidden)


def kimi_k3_tensors(inv, model: Model) -> tuple[list[Fields], str, list[str]]:
    """Add every Kimi-K3 tensor to ``inv`` (an ``hf_params._Inventory`` over the text config);
    returns the Fields read (for the unread-key check), the MTP module's name for
    ``Weights.extra_name`` ("" without one) and the notes."""
    f, h = inv.f, inv.hidden
    _refuse(f)
    notes: list[str] = []
    vocab = f.integer("vocab_size")
    lac = f.sub("linear_attn_config")
    full_rank = lac.flag("use_full_rank_gate")
    lac.get("gate_lower_bound")  # a clamp on the forget gate: no tensor
    experts = f.opt_int("num_experts")
    first = f.integer("first_k_dense_replace", default=0, minimum=0,
                      why="KimiLinearConfig default")
    freq = f.integer("moe_layer_freq", default=1, why="KimiLinearConfig default")
    block_size = f.opt_int("attn_res_block_size")
    mla_gate = f.flag("mla_use_output_gate")
    top_k = inter_moe = shared = 0
    width, latent, use_norm = h, False, False
    if experts:
        top_k = f.integer("num_experts_per_token", maximum=experts)
        inter_moe = f.integer("moe_intermediate_size")
        shared = inter_moe * f.integer("num_shared_experts", default=0, minimum=0,
                                       why="KimiLinearConfig default")
        width = _expert_width(f, h, notes)
        latent = f.has("routed_expert_hidden_size")
        use_norm = latent and f.flag("latent_moe_use_norm")
        inv.num_experts, inv.top_k = experts, top_k
    elif f.has("routed_expert_hidden_size"):
        raise f.error("routed_expert_hidden_size", "a latent MoE without num_experts")

    def is_moe(i: int) -> bool:
        return bool(experts) and i >= first and i % freq == 0

    def kda(spec: KimiDeltaAttention) -> None:
        if not full_rank:  # Kimi-Linear's low-rank output gate (g_a, g_b)
            inv.kda(spec)
            return
        d, heads = spec.head_k_dim, spec.num_k_heads
        p = heads * d
        for name in ("q", "k", "v", "g"):
            inv.linear(f"self_attn.{name}_proj", p, h, "column")
        inv.linear("self_attn.f_a_proj", d, h, "replicated")
        inv.linear("self_attn.b_proj", heads, h, "column")
        inv.linear("self_attn.f_b_proj", p, d, "column")
        inv.add("self_attn.dt_bias", p, shard="column", dtype="fp32")
        inv.add("self_attn.A_log", heads, shard="column", dtype="fp32")
        inv.add("self_attn.conv1d.weight", 3 * p, spec.conv_kernel, shard="column", dtype="fp32")
        inv.norm("self_attn.o_norm", d)
        inv.linear("self_attn.o_proj", h, p, "row")

    def mla(spec: MultiHeadLatent) -> None:
        inv.mla(spec)
        if mla_gate:
            inv.linear("self_attn.g_proj", spec.num_attention_heads * spec.v_head_dim, h, "column")

    def ffn(i: int) -> None:
        if not is_moe(i):
            inv.mlp("mlp", f.integer("intermediate_size"))
            return
        inv.linear("block_sparse_moe.gate", experts, h, "replicated", quantized=False)
        inv.add("block_sparse_moe.gate.e_score_correction_bias", experts, dtype="fp32")
        if shared:
            inv.mlp("block_sparse_moe.shared_experts", shared)
        if latent:
            inv.linear("block_sparse_moe.routed_expert_down_proj", width, h, "replicated",
                       quantized=False)
            if use_norm:
                inv.norm("block_sparse_moe.routed_expert_norm", width)
            inv.linear("block_sparse_moe.routed_expert_up_proj", h, width, "replicated",
                       quantized=False)
        for name, rows, cols, shard in (("w1", inter_moe, width, "column"),
                                        ("w3", inter_moe, width, "column"),
                                        ("w2", width, inter_moe, "row")):
            inv.linear(f"block_sparse_moe.experts.{name}", rows, cols, shard, count=experts,
                       expert=True)

    def norms(attn_res: bool) -> None:
        inv.norm("input_layernorm", h)
        inv.norm("post_attention_layernorm", h)
        if attn_res:
            for part in ("self_attention", "mlp"):
                inv.norm(f"{part}_res_norm", h)
                inv.linear(f"{part}_res_proj", 1, h, "replicated", quantized=False)

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab")
    def after(i: int) -> None:
        norms(block_size is not None)
        ffn(i)

    mla_spec = kda_mla_layers(inv, model, f, kda, mla, after, "Kimi-K3", "linear_attn_config")
    inv.place = "head"
    inv.norm("final_norm", h)
    if block_size is not None:
        inv.norm("output_attn_res_norm", h)
        inv.linear("output_attn_res_proj", 1, h, "replicated", quantized=False)
    inv.add("lm_head", vocab, h, shard="vocab")

    from .hf_config import MAX_MTP_LAYERS

    mtp = f.opt_int("num_nextn_predict_layers", minimum=0, maximum=MAX_MTP_LAYERS) or 0
    if mtp and mla_spec is None:
        raise f.error("num_nextn_predict_layers", "an MTP layer is an MLA layer, and this "
                      "config has no MLA layer to take its shape from")
    inv.place = "extra"
    for j in range(mtp):
        inv.layer = len(model.layers) + j
        assert mla_spec is not None
        mla(mla_spec)
        norms(False)
        ffn(inv.layer)
        for name in ("enorm", "hnorm", "shared_head.norm"):
            inv.norm(f"mtp.{name}", h)
        inv.linear("mtp.eh_proj", h, 2 * h, "replicated", quantized=False)
    extra = (f"MTP module (num_nextn_predict_layers={mtp}), loaded only as a speculative draft; "
             "it shares the target's embedding and LM head") if mtp else ""

    read = [f]
    vision = model.config.get("vision_config")
    if isinstance(vision, dict):
        v = Fields(vision, model.source, "vision_config.")
        inv.place = "embed"  # vLLM runs the encoder on the first pipeline stage
        _vision(inv, v, h, notes)
        read.append(v)
        notes.append("vision tower (MoonViT) and projector counted; kept in the model dtype")
    elif vision is not None:
        raise ConfigError("vision_config: expected an object", source=model.source,
                          field="vision_config")
    else:  # vLLM's KimiK3Config builds KimiK3VisionConfig() and the model its tower
        raise ConfigError("missing: vLLM builds the vision tower from KimiK3VisionConfig's "
                          "defaults, which are not counted from an absent vision_config; pass "
                          "the checkpoint's vision_config or --weight-memory",
                          source=model.source, field="vision_config")
    if experts and width != h:
        notes.append(f"latent MoE: routed experts over {width} (routed_expert_hidden_size), "
                     "the latent down / up projections kept in bf16 as the checkpoint stores "
                     "them")
    return read, extra, notes
