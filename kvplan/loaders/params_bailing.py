"""Ling-3.0's parameter inventory (``model_type: bailing_hybrid``, ``architectures:
BailingMoeV3ForCausalLM``), as vLLM 0.34 allocates it (``vllm/model_executor/models/
bailing_moe_v3.py``, the MTP draft in ``bailing_moe_v3_mtp.py``, the router in
``layers/fused_moe/router/gate_linear.py``, the gated output norm ``FusedRMSNormGated`` in
``third_party/flash_linear_attention/ops/kda.py``, the draft's shared embedding and head in
``v1/worker/gpu/spec_decode/eagle/utils.py``), checked against the published modelling code
(``modeling_bailing_moe_v3.py``: the same tensors, q/k/v/b unfused).

Shapes are [out, in]; h = hidden_size, heads = num_attention_heads, d = head_dim, p = heads x d.
Ling-3.0-flash: h 2560, p 32 x 128 = 4096. Layer i is MLA when (i + 1) % layer_group_size == 0
or it lies in a trailing partial group, KDA otherwise (``linear_families.parse_bailing_hybrid``).

Every decoder layer (``BailingMoeV3DecoderLayer``):

- a KDA layer (``BailingMoeV3KimiDeltaAttention``; vLLM serves the full-rank gates only,
  ``no_kda_lora`` true): q, k, v [p, h] and the beta b [heads, h] fused in ``qkvb_proj``
  (column), the forget gate f_proj [p, h] and output gate g_proj [p, h] (column), an fp32
  ``dt_bias`` [p] and ``A_log`` [heads] (column), three fp32 short convs q/k/v_conv1d [p,
  kernel] (unquantised ColumnParallelLinears of input ``short_conv_kernel_size``), the gated
  ``o_norm`` [d] and o_proj [h, p] (row). Ling-3.0-flash: 12,320 x 2560 + 3 x 4096 x 2560 + 4096
  + 3 x 4096 x 4 + 32 + 128 = 63,049,888.
- an MLA layer (``BailingMoeV3MLAAttention``): without ``q_lora_rank`` q_proj [heads x (nope +
  rope), h] (column); with it q_a [q_lora_rank, h] (fused with kv_a, ``disable_tp``: replicated),
  q_a_layernorm and q_b [heads x (nope + rope), q_lora_rank] (column); kv_a_proj_with_mqa
  [kv_lora_rank + rope, h] (replicated), kv_a_layernorm, kv_b [heads x (nope + v), kv_lora_rank]
  (column), the output gate g_proj [heads, h] (``gated_attention_proj_granularity_type``
  head_wise) or [heads x v, h] (element_wise; none when null), and ``dense`` [h, heads x v]
  (row; counted under the DeepSeek name o_proj). Ling-3.0-flash: 6144 x 2560 + 576 x 2560 + 512
  + 8192 x 512 + 32 x 2560 + 2560 x 4096 = 31,965,696.
- the feed-forward: a gated MLP of intermediate_size on layers i < first_k_dense_replace (all
  layers without num_experts), else the MoE (``BailingMoeV3MoE``): the router ``gate`` [E, h]
  (``GateLinear`` built with ``params_dtype=float32`` and no quantisation config: fp32, where
  the checkpoint stores bf16), its fp32 ``expert_bias`` [E] (always built), the shared experts
  (one gated MLP of moe_shared_expert_intermediate_size x num_shared_experts) and E routed
  experts of moe_intermediate_size (gate / up [m, h], down [h, m]). Ling-3.0-flash: 512 x 3 x
  768 x 2560 + 3 x 768 x 2560 + 512 x 2560 + 512 = 3,027,108,352.
- input_layernorm and post_attention_layernorm [h].

Around them: word_embeddings [vocab, h] (first pipeline rank), the final norm and lm_head
[vocab, h] (last rank). vLLM's BailingMoeV3ForCausalLM never ties the head (no
``tie_weights``), so ``tie_word_embeddings`` true is refused.

Each MTP layer (``BailingMoeV3MultiTokenPredictorLayer``, reported apart; the layer at index
num_hidden_layers + j) holds enorm, hnorm, eh_proj [h, 2h] (replicated; built with the
quantisation config), input / post-attention / final layernorms, an MLA block (always MLA) and
the MoE (always MoE). Its embed_tokens and shared_head.head are loaded from the target's
word_embeddings and lm_head, and the spec-decode loader points both at the target's at pp = 1
(``maybe_share_target_embed``, ``share_target_lm_head``): not counted again. Ling-3.0-flash:
13,107,200 + 31,965,696 + 3,027,108,352 + 5 x 2560 = 3,072,194,048.

Ling-3.0-flash in all: 124,414,211,552 parameters without the MTP layer, 127,486,405,600 with
it: the Hugging Face API's safetensors total for inclusionAI/Ling-3.0-flash (F32 165,472 =
35 x (4096 + 32) dt_bias / A_log + 41 x 512 expert_bias; BF16 127,486,240,128). Active:
5,505,693,152, 5,103,302,112 without the embedding lookup (the card's "5.1B activated").

Not modelled (bytes only): block-FP8 checkpoints' zero padding of the shared experts'
intermediate width to whole quant blocks per TP rank
(``_get_block_fp8_mlp_padded_intermediate_size``), the MLA g_proj replicated on every rank
under block FP8 when a rank's heads do not fill a quant block, a separate b_proj when FP8
excludes it (same parameters), the MLA kernels' decompressed copies of kv_b_proj.
Refused: ``use_bias`` / ``use_qkv_bias`` true (vLLM's MLP biases are absent from the
checkpoint, the published MLA biases are absent from vLLM), ``up_proj_norm`` / ``value_norm``
true and ``mtp_use_kda`` true (no vLLM tensor), tie_word_embeddings true, an MTP layer without
experts (vLLM builds the MoE there unconditionally).
"""

from __future__ import annotations

from ..core.layers import KimiDeltaAttention, MultiHeadLatent
from ..core.model import Model
from .fields import Fields
from .params_kimi_k3 import kda_mla_layers

#: gated_attention_proj_granularity_type -> the MLA output gate's rows (heads, v_head_dim)
GATE_ROWS = {"head_wise": lambda heads, v: heads, "element_wise": lambda heads, v: heads * v}


def _refuse(f: Fields) -> None:
    """Settings whose tensors vLLM's bailing_moe_v3.py does not build as the checkpoint holds
    them."""
    if f.flag("use_bias"):
        raise f.error("use_bias", "true: vLLM's bailing_moe_v3.py would give every MLP biases "
                      "that the published modelling code (bias-free MLPs) never stores; "
                      "pass --weight-memory")
    if f.flag("use_qkv_bias"):
        raise f.error("use_qkv_bias", "true: the published MLA has q_a / kv_a / dense biases, "
                      "vLLM's bailing_moe_v3.py builds none; pass --weight-memory")
    for key in ("up_proj_norm", "value_norm"):
        if f.flag(key):
            raise f.error(key, "true: a norm vLLM's bailing_moe_v3.py does not build; pass "
                          "--weight-memory")
    if f.flag("tie_word_embeddings"):
        raise f.error("tie_word_embeddings", "true: vLLM's BailingMoeV3ForCausalLM builds its "
                      "own lm_head (no tying); refused rather than guessed")


def _gate_rows(f: Fields, spec: MultiHeadLatent) -> int:
    kind = f.get("gated_attention_proj_granularity_type")
    if kind is None:
        return 0
    if kind not in GATE_ROWS:
        raise f.error("gated_attention_proj_granularity_type", f"{kind!r}: vLLM's "
                      "bailing_moe_v3.py knows head_wise and element_wise (null: no gate)")
    return GATE_ROWS[kind](spec.num_attention_heads, spec.v_head_dim)


def bailing_v3_tensors(inv, model: Model) -> tuple[list[Fields], str, list[str]]:
    """Add every Ling-3.0 tensor to ``inv`` (an ``hf_params._Inventory``); returns the Fields
    read, the MTP module's name for ``Weights.extra_name`` ("" without one) and the notes."""
    f, h = inv.f, inv.hidden
    _refuse(f)
    notes: list[str] = []
    vocab = f.integer("vocab_size")
    experts = f.opt_int("num_experts")
    first = top_k = inter_moe = shared = 0
    if experts:
        first = f.integer("first_k_dense_replace", minimum=0)
        top_k = f.integer("num_experts_per_tok", maximum=experts)
        inter_moe = f.integer("moe_intermediate_size")
        shared = f.integer("moe_shared_expert_intermediate_size", minimum=0) * f.integer(
            "num_shared_experts", minimum=0)
        inv.num_experts, inv.top_k = experts, top_k
    # no tensor: activation clamps (SwigluStepAndMul), the router's input scale and loss
    # weight, and the q/k norms (KDA L2-normalises q and k in its kernel; the MLA has none)
    f.get("expert_swiglu_limit_list"), f.get("share_expert_swiglu_limit_list")
    f.get("scale_router_input"), f.get("mtp_loss_scaling_factor"), f.get("use_qk_norm")
    f.get("intermediate_size")  # the dense MLP's width: no tensor when every layer is MoE

    def kda(spec: KimiDeltaAttention) -> None:
        d, heads = spec.head_k_dim, spec.num_k_heads
        p = heads * d
        for name in ("q", "k", "v"):
            inv.linear(f"self_attn.{name}_proj", p, h, "column")
        inv.linear("self_attn.b_proj", heads, h, "column")
        inv.linear("self_attn.f_proj", p, h, "column")
        inv.add("self_attn.dt_bias", p, shard="column", dtype="fp32")
        for name in ("q", "k", "v"):
            inv.add(f"self_attn.{name}_conv1d.weight", p, spec.conv_kernel, shard="column",
                    dtype="fp32")
        inv.add("self_attn.A_log", heads, shard="column", dtype="fp32")
        inv.linear("self_attn.g_proj", p, h, "column")
        inv.norm("self_attn.o_norm", d)
        inv.linear("self_attn.o_proj", h, p, "row")

    def mla(spec: MultiHeadLatent) -> None:
        inv.mla(spec)  # q (or q_a / q_a_layernorm / q_b), kv_a, kv_a_layernorm, kv_b, dense
        gate = _gate_rows(f, spec)
        if gate:
            inv.linear("self_attn.g_proj", gate, h, "column")

    def moe() -> None:
        assert experts
        inv.linear("mlp.gate", experts, h, "replicated", quantized=False, dtype="fp32")
        inv.add("mlp.gate.expert_bias", experts, dtype="fp32")
        if shared:
            inv.mlp("mlp.shared_experts", shared)
        inv.mlp("mlp.experts", inter_moe, count=experts, expert=True)

    def norms() -> None:
        inv.norm("input_layernorm", h)
        inv.norm("post_attention_layernorm", h)

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab")
    def after(i: int) -> None:
        norms()
        if experts and i >= first:
            moe()
        else:
            inv.mlp("mlp", f.integer("intermediate_size"))

    mla_spec = kda_mla_layers(inv, model, f, kda, mla, after, "Ling-3.0", "layer_group_size")
    inv.place = "head"
    inv.norm("final_norm", h)
    inv.add("lm_head", vocab, h, shard="vocab")

    from .hf_config import MAX_MTP_LAYERS

    mtp = f.opt_int("num_nextn_predict_layers", minimum=0, maximum=MAX_MTP_LAYERS) or 0
    if mtp and f.flag("mtp_use_kda"):
        raise f.error("mtp_use_kda", "true: vLLM's bailing_moe_v3_mtp.py builds an MLA MTP "
                      "layer whatever this says; pass --weight-memory")
    if mtp and not experts:
        raise f.error("num_nextn_predict_layers", "an MTP layer without num_experts: vLLM's "
                      "bailing_moe_v3_mtp.py always builds the MoE there")
    inv.place = "extra"
    for j in range(mtp):
        inv.layer = len(model.layers) + j
        assert mla_spec is not None  # the last layer is always MLA
        inv.norm("mtp.enorm", h)
        inv.norm("mtp.hnorm", h)
        inv.linear("mtp.eh_proj", h, 2 * h, "replicated")
        norms()
        mla(mla_spec)
        moe()
        inv.norm("mtp.final_layernorm", h)
    extra = (f"MTP module (num_nextn_predict_layers={mtp}), loaded only as a speculative draft; "
             "it shares the target's embedding and LM head") if mtp else ""
    return [f], extra, notes
