"""LFM2's parameter inventory (``model_type: lfm2``, LiquidAI LFM2-350M/700M/1.2B/2.6B), as
vLLM 0.34 allocates it (``vllm/model_executor/models/lfm2.py``, the short conv in
``vllm/model_executor/layers/mamba/short_conv.py``), checked against transformers 5.24's
``models/lfm2/modeling_lfm2.py`` and ``configuration_lfm2.py``.

Every decoder layer (``layer_types``, or the older ``full_attn_idxs``: parsed by
``linear_families.parse_lfm2``) holds one mixer, then the feed-forward and two RMSNorms:

- a conv layer (``ShortConv`` over ``conv_dim`` = hidden channels): ``conv.in_proj``
  [3 x hidden, hidden] (column; B, C and x gates), the depthwise ``conv.conv`` [hidden,
  conv_L_cache] (column; vLLM holds it as an unquantised ColumnParallelLinear of input
  conv_L_cache, the checkpoint as [hidden, 1, L]) and ``conv.out_proj`` [hidden, hidden] (row);
  each with a bias when ``conv_bias`` (in_proj's and the conv's split with their rows,
  out_proj's replicated). LFM2-1.2B: 3 x 2048 x 2048 + 2048 x 3 + 2048 x 2048 = 16,783,360.
- an attention layer (``Lfm2Attention``): q [heads x head_dim, hidden] (column), k and v
  [kv_heads x head_dim, hidden] (by KV head), ``out_proj`` [hidden, heads x head_dim] (row), no
  biases, and the QK norms ``q_layernorm`` / ``k_layernorm`` [head_dim] (replicated). vLLM's
  head_dim is hidden / heads (a config's head_dim must agree). LFM2-1.2B: 2048 x 2048 + 2 x
  512 x 2048 + 2048 x 2048 + 2 x 64 = 10,485,888.
- the SwiGLU feed-forward (``Lfm2MLP``): ``w1`` and ``w3`` [ff, hidden] (column), ``w2``
  [hidden, ff] (row), over ``block_dim`` (which must be hidden_size); ``operator_norm`` and
  ``ffn_norm`` [hidden].

The feed-forward width ``ff`` (``ffn_width``): transformers' Lfm2Config takes ``block_ff_dim``
over ``intermediate_size`` (``kwargs.pop("block_ff_dim", intermediate_size)``) and vLLM reads
that attribute; with ``block_auto_adjust_ff_dim`` (default true), ff = int(2 x ff / 3), then
int(block_ffn_dim_multiplier x ff) when the multiplier is set (default 1.0), then rounded up to
a multiple of ``block_multiple_of`` (default 256). LFM2-1.2B: int(2 x 12288 / 3) = 8192, x 1.0
= 8192, 256 x cdiv(8192, 256) = 8192; LFM2-700M: int(2 x 10240 / 3) = 6826 -> 256 x 27 = 6912.
An explicit null multiplier is followed as vLLM 0.34 reads it (no multiplier, still rounded;
transformers 5.24 then skips the rounding too).

Around them: ``embed_tokens`` [vocab, hidden] (built on every pipeline stage: vLLM 0.34's
``Lfm2Model`` / ``Lfm2MoeModel`` make it whatever the PP rank, unlike llama.py's first-rank
embedding; LFM2-8B-A1B at pp 8: 65536 x 2048 x 2 B = 268,435,456 B on each stage) and the
final ``embedding_norm`` [hidden] (on the last pipeline stage). vLLM 0.34 always ties the LM
head to the embedding (``lm_head.tie_weights(embed_tokens)``), so a config that unties it
(``tie_word_embeddings`` / ``tie_embedding`` false) is refused. LFM2-1.2B in all: 65536 x
2048 + 10 x 16,783,360 + 6 x 10,485,888 + 16 x (3 x 2048 x 8192 + 2 x 2048) + 2048 =
1,170,340,608, LiquidAI's published count.

Files read: config.json only. Not modelled (refused): ``block_use_swiglu`` false, block_dim or
a conv width other than hidden_size. LFM2-MoE (``model_type: lfm2_moe``) shares the mixers and
norms and replaces the feed-forward: ``lfm2_moe_tensors`` below.
Bidirectional (pooling) LFM2 builds the same tensors (``Lfm2BidirectionalShortConv``).
"""

from __future__ import annotations

from ..core.layers import FullAttention, ShortConv
from ..core.model import Model
from ..core.units import cdiv
from .fields import Fields


def ffn_width(f: Fields, notes: list[str] | None = None) -> int:
    """The feed-forward width vLLM 0.34's ``Lfm2MLP`` builds (see the module docstring); a
    disagreeing intermediate_size (which block_ff_dim overrides) is said in ``notes``."""
    stated = [k for k in ("block_ff_dim", "intermediate_size") if f.has(k)]
    if not stated:
        raise f.error("block_ff_dim", "missing (or intermediate_size): the feed-forward width")
    width = f.integer(stated[0])  # block_ff_dim wins, as transformers' Lfm2Config pops it
    if len(stated) == 2:
        other = f.integer("intermediate_size")
        if other != width and notes is not None:
            notes.append(f"{f.prefix}intermediate_size = {other} ignored: transformers' "
                         f"Lfm2Config and vLLM take block_ff_dim = {width}")
    if not f.present("block_auto_adjust_ff_dim"):
        f.assume(f"{f.prefix}block_auto_adjust_ff_dim = true (Lfm2Config default)")
    if not f.flag("block_auto_adjust_ff_dim", True):
        f.get("block_ffn_dim_multiplier"), f.get("block_multiple_of")  # unused without it
        return width
    multiple = f.integer("block_multiple_of", default=256, why="Lfm2Config default")
    width = int(2 * width / 3)
    if not f.present("block_ffn_dim_multiplier"):
        f.assume(f"{f.prefix}block_ffn_dim_multiplier = 1.0 (Lfm2Config default)")
        multiplier = 1.0
    else:
        multiplier = f.get("block_ffn_dim_multiplier")
    if multiplier is not None:
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) \
                or not 0 < multiplier <= 64:
            raise f.error("block_ffn_dim_multiplier", f"expected a positive number, got "
                          f"{multiplier!r}")
        width = int(multiplier * width)
    if width < 1:
        raise f.error("block_ff_dim", "the adjusted feed-forward width is below 1")
    return multiple * cdiv(width, multiple)


def _tied(f: Fields, model_file: str = "lfm2.py") -> None:
    """vLLM ties the LM head whatever the config says: an untied config is refused."""
    for key in ("tie_word_embeddings", "tie_embedding"):
        if f.present(key) and not f.flag(key, True):
            raise f.error(key, f"false: vLLM 0.34's {model_file} always ties the LM head to the "
                          "embedding (an untied checkpoint's lm_head would not be served as "
                          "stored); pass --weight-memory")


def _refuse(f: Fields, hidden: int) -> None:
    if not f.flag("block_use_swiglu", True):
        raise f.error("block_use_swiglu", "false: vLLM's and transformers' LFM2 feed-forward "
                      "is SwiGLU only (w1, w3, w2)")
    if not f.has("block_dim"):
        raise f.error("block_dim", "missing: vLLM 0.34's lfm2.py sizes the feed-forward by "
                      "block_dim (the published configs state it); pass --weight-memory")
    for key in ("block_dim", "conv_dim_out"):
        if f.has(key) and f.integer(key) != hidden:
            raise f.error(key, f"{f.integer(key)} differs from hidden_size {hidden}: the "
                          "residual stream is hidden_size wide; not counted")
    f.get("block_mlp_init_scale"), f.get("block_norm_eps")  # initialisation, an epsilon


def _mixer(inv, i: int, block: tuple, bias: bool) -> None:
    """Layer ``i``'s short conv or attention (the module docstring's shapes), as vLLM 0.34's
    lfm2.py and lfm2_moe.py build them alike."""
    f, h = inv.f, inv.hidden
    spec = block[0] if len(block) == 1 else None
    if isinstance(spec, ShortConv):
        if spec.channels != h:
            raise f.error("conv_dim", f"{spec.channels} differs from hidden_size {h}: "
                          "vLLM's ShortConv maps hidden_size to conv_dim and back; not "
                          "counted")
        inv.linear("conv.in_proj", 3 * h, h, "column", bias)
        inv.add("conv.conv.weight", h, spec.conv_kernel, shard="column")
        if bias:
            inv.add("conv.conv.bias", h, shard="column")
        inv.linear("conv.out_proj", h, h, "row", bias)
    elif isinstance(spec, FullAttention):
        heads, kv, d = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim_k
        if h % heads or d != h // heads:
            raise f.error("head_dim", f"{d} is not hidden_size / num_attention_heads = "
                          f"{h} / {heads}, the head size vLLM's Lfm2Attention uses")
        inv.linear("self_attn.q_proj", heads * d, h, "column")
        inv.linear("self_attn.k_proj", kv * d, h, "kv", kv_heads=kv)
        inv.linear("self_attn.v_proj", kv * d, h, "kv", kv_heads=kv)
        inv.linear("self_attn.out_proj", h, heads * d, "row")
        inv.norm("self_attn.q_layernorm", d)
        inv.norm("self_attn.k_layernorm", d)
    else:
        raise f.error("layer_types", f"layer {i} is neither a conv nor an attention layer")


def lfm2_tensors(inv, model: Model) -> list[str]:
    """Add every LFM2 tensor to ``inv`` (an ``hf_params._Inventory``); returns the notes."""
    f, h = inv.f, inv.hidden
    _refuse(f, h)
    _tied(f)
    vocab = f.integer("vocab_size")
    notes: list[str] = []
    ff = ffn_width(f, notes)
    bias = f.flag("conv_bias", False)
    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab", every_stage=True)
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        _mixer(inv, i, block, bias)
        inv.linear("feed_forward.w1", ff, h, "column")
        inv.linear("feed_forward.w3", ff, h, "column")
        inv.linear("feed_forward.w2", h, ff, "row")
        inv.norm("operator_norm", h)
        inv.norm("ffn_norm", h)
    inv.place = "head"
    inv.norm("embedding_norm", h)  # the final norm, despite its name
    return notes


# --------------------------------------------------------------------------------------------
# LFM2-MoE
# --------------------------------------------------------------------------------------------

def _moe_layout(f: Fields, num_layers: int) -> tuple[int, int, int]:
    """(num_dense_layers, num_experts, num_experts_per_tok), checked as vLLM 0.34's
    lfm2_moe.py needs them: at least one MoE layer (``Lfm2MoeForCausalLM`` raises "No
    Lfm2MoeSparseMoeBlock layer found" otherwise) and top-k within the experts."""
    dense = f.integer("num_dense_layers", default=2, minimum=0, why="Lfm2MoeConfig default")
    if dense >= num_layers:
        raise f.error("num_dense_layers", f"{dense} is not below num_hidden_layers "
                      f"{num_layers}: vLLM 0.34's lfm2_moe.py needs at least one MoE layer "
                      "(layers from num_dense_layers on)")
    experts = f.integer("num_experts")
    top_k = f.integer("num_experts_per_tok")
    if top_k > experts:
        raise f.error("num_experts_per_tok", f"{top_k} is more than num_experts {experts}: "
                      "the router picks top-k of the experts")
    return dense, experts, top_k


def lfm2_moe_tensors(inv, model: Model) -> list[str]:
    """Add every LFM2-MoE tensor (``model_type: lfm2_moe``, LiquidAI LFM2-8B-A1B) to ``inv``.

    vLLM 0.34 ``vllm/model_executor/models/lfm2_moe.py``, checked against transformers 5.24
    ``models/lfm2_moe/modeling_lfm2_moe.py``: the mixers, the two RMSNorms per layer, the tied
    embedding and ``embedding_norm`` are LFM2's (``_mixer``); the feed-forward is
    - dense on layers i < ``num_dense_layers`` (``Lfm2MoeMlp``): w1 and w3 [intermediate_size,
      hidden] (column; vLLM fuses them as w13), w2 [hidden, intermediate_size] (row), taken as
      written: no LFM2 auto-adjust (transformers' ``Lfm2MoeMLP`` and vLLM read
      intermediate_size as is). LFM2-8B-A1B: 3 x 7168 x 2048 = 44,040,192.
    - routed on the rest (``Lfm2MoeSparseMoeBlock``): the router ``gate`` [num_experts, hidden]
      (``GateLinear``, replicated, no bias), with ``use_expert_bias`` the fp32 routing bias
      ``expert_bias`` [num_experts] (vLLM's ``e_score_correction_bias`` parameter; a buffer in
      transformers), and num_experts SwiGLU experts w1, w3 [moe_intermediate_size, hidden] and
      w2 [hidden, moe_intermediate_size], top ``num_experts_per_tok`` per token, sigmoid
      scores; no shared expert. LFM2-8B-A1B: 32 x 2048 + 32 x 3 x 1792 x 2048 = 352,387,072
      (+ 32 fp32).

    LFM2-8B-A1B (24 layers, attention at 2, 6, 10, 14, 18, 21; dense layers 0 and 1): 65536 x
    2048 + 18 x 16,783,360 + 6 x 10,485,888 + 24 x 2 x 2048 + 2 x 44,040,192 + 22 x
    (352,387,072 + 32) + 2048 = 8,339,930,560 (transformers' Lfm2MoeForCausalLM: 8,339,929,856
    parameters + the 22 x 32 expert_bias buffers); active (4 of 32 experts): 8,339,930,560 -
    22 x 28 x 3 x 1792 x 2048 = 1,557,740,992 with the embedding. LiquidAI: 8.3B total, 1.5B
    active. Returns the notes."""
    f, h = inv.f, inv.hidden
    _tied(f, "lfm2_moe.py")
    vocab = f.integer("vocab_size")
    dense, experts, top_k = _moe_layout(f, len(model.layers))
    inter = f.integer("intermediate_size")
    moe_inter = f.integer("moe_intermediate_size")
    if not f.present("use_expert_bias"):
        f.assume(f"{f.prefix}use_expert_bias = true (Lfm2MoeConfig default)")
    expert_bias = f.flag("use_expert_bias", True)
    bias = f.flag("conv_bias", False)
    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab", every_stage=True)
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        _mixer(inv, i, block, bias)
        if i < dense:
            inv.linear("feed_forward.w1", inter, h, "column")
            inv.linear("feed_forward.w3", inter, h, "column")
            inv.linear("feed_forward.w2", h, inter, "row")
        else:
            inv.num_experts, inv.top_k = experts, top_k
            inv.linear("feed_forward.gate", experts, h, "replicated", quantized=False)
            if expert_bias:
                inv.add("feed_forward.expert_bias", experts, dtype="fp32")
            for name, rows, cols, shard in (("w1", moe_inter, h, "column"),
                                            ("w3", moe_inter, h, "column"),
                                            ("w2", h, moe_inter, "row")):
                inv.linear(f"feed_forward.experts.{name}", rows, cols, shard, count=experts,
                           expert=True)
        inv.norm("operator_norm", h)
        inv.norm("ffn_norm", h)
    inv.place = "head"
    inv.norm("embedding_norm", h)
    return []


def check_vllm_parallel(model: Model, tp: int, pp: int) -> None:
    """What vLLM 0.34's lfm2_moe.py refuses at load: tp above num_experts
    (``Lfm2MoeSparseMoeBlock``: "Tensor parallel size ... is greater than the number of
    experts"), and a pipeline stage whose layers are all dense (``Lfm2MoeForCausalLM`` finds no
    MoE layer among its own: RuntimeError). LFM2-8B-A1B (24 layers, 2 dense): pp 12 gives stage
    0 layers 0-1 only, refused; pp 8 (3 layers a stage) loads."""
    from ..core.errors import ParallelismError
    from ..core.parallel import pp_stages
    from .hf_config import text_fields

    f, _ = text_fields(model.config, model.source)
    dense, experts, _ = _moe_layout(f, len(model.layers))
    if tp > experts:
        raise ParallelismError(f"vLLM's lfm2_moe.py refuses tp={tp} above the model's {experts} "
                               "experts (Lfm2MoeSparseMoeBlock)", field="tp")
    for stage in pp_stages(len(model.layers), pp):
        if stage.stop <= dense:
            raise ParallelismError(f"pp={pp}: stage layers {stage.start}-{stage.stop - 1} are all "
                                   f"dense (num_dense_layers = {dense}), and vLLM's "
                                   "Lfm2MoeForCausalLM raises when a stage holds no MoE layer",
                                   field="pp")
