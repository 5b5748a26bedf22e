"""MiniMax-M1's parameter inventory (``model_type: minimax_m1``; MiniMax-Text-01's
``minimax_text_01`` builds the same class), as vLLM allocated it before removing the family:
``vllm/model_executor/models/minimax_text_01.py`` (``MiniMaxText01ForCausalLM``, which the
registry maps ``MiniMaxM1ForCausalLM`` to) and ``MiniMaxText01LinearAttention`` in
``vllm/model_executor/layers/mamba/linear_attn.py``, read in vLLM 0.13.0 (the newest sdist
kept here that has the file; kvplan's engine table names 0.23.0 as the last release serving
it). Checked against transformers 5.24's ``models/minimax/modeling_minimax.py``
(``MiniMaxForCausalLM``; its config spells the layer pattern ``layer_types``).

Every decoder layer (``attn_type_list``: 0 lightning, 1 softmax; parsed by
``linear_families.parse_minimax_lightning``):

- a lightning layer (inner width = heads x head_dim): ``self_attn.qkv_proj`` [3 x inner,
  hidden] and ``self_attn.output_gate`` [inner, hidden] (column), ``self_attn.out_proj``
  [hidden, inner] (row), and the TP-split RMSNorm ``self_attn.norm`` [inner]
  (``MiniMaxText01RMSNormTP``: inner / tp per rank). The ALiBi-style decay slopes are plain
  tensors built at start-up, not parameters. M1: 3 x 8192 x 6144 + 8192 x 6144 + 6144 x 8192
  + 8192 = 251,666,432.
- a softmax layer: q [heads x head_dim, hidden] (column), k and v [kv_heads x head_dim,
  hidden] (by KV head), o [hidden, heads x head_dim] (row), no biases, no QK norms. M1: 64 x
  128 x 6144 x 2 + 2 x 8 x 128 x 6144 = 113,246,208.
- the MoE (``MiniMaxText01MoE``, ``num_local_experts`` > 1): the router
  ``block_sparse_moe.gate`` [experts, hidden], fp32 and unquantised (``params_dtype`` fp32,
  ``quant_config=None``), replicated; the fused experts w1 / w3 [intermediate_size, hidden]
  and w2 [hidden, intermediate_size]. With one expert vLLM builds a dense ``mlp``
  (gate_up / down) instead. M1 per layer: 32 x 3 x 6144 x 9216 = 5,435,817,984 + 196,608.
- a shared MLP when ``shared_intermediate_size`` (an integer, or a list by layer) is above 0:
  ``shared_mlp`` gate_up / down and the fp32 ``coefficient`` [1, hidden] that mixes it in (M1:
  0, none).
- ``input_layernorm`` and ``post_attention_layernorm`` [hidden]. The residual scales
  (``layernorm_*_alpha`` / ``_beta``, transformers' ``*_alpha_factor`` / ``*_beta_factor``)
  and ``postnorm`` are Python floats and a switch of the forward pass: no tensors.

Around them: ``embed_tokens`` [vocab, hidden] (model dtype), the final ``norm`` and a separate
``lm_head`` [vocab, hidden] that vLLM casts to fp32 (``self.lm_head.float()``) and never ties.
M1 in all: 70 x 251,666,432 + 10 x 113,246,208 + 80 x (5,435,817,984 + 196,608 + 2 x 6144)
+ 2 x 200064 x 6144 + 6144 = 456,089,655,296 (published: 456B); active, 2 of 32 experts:
48,403,306,496 (the published 45.9B is that less the two vocab matrices, 45,944,920,064).

Files read: config.json only. Not modelled (refused): ``num_local_experts`` as a per-layer
list, a non-silu ``hidden_act``, a tied LM head (vLLM builds its own). The fp32 LM head and
router are counted in fp32 whatever the checkpoint's format.
"""

from __future__ import annotations

from ..core.layers import FullAttention, LightningAttention
from ..core.model import Model
from .fields import Fields

#: the residual scales vLLM reads (both spellings): floats of the forward pass, no tensors
RESIDUAL_SCALES = ("layernorm_full_attention_alpha", "layernorm_full_attention_beta",
                   "layernorm_linear_attention_alpha", "layernorm_linear_attention_beta",
                   "layernorm_mlp_alpha", "layernorm_mlp_beta", "full_attn_alpha_factor",
                   "full_attn_beta_factor", "linear_attn_alpha_factor", "linear_attn_beta_factor",
                   "mlp_alpha_factor", "mlp_beta_factor")


def _shared_widths(f: Fields, num_layers: int) -> list[int]:
    """Each layer's shared-MLP width (0: none), as vLLM reads ``shared_intermediate_size``:
    an integer for every layer, or a list indexed by layer (0 past its end)."""
    value = f.get("shared_intermediate_size")
    if value is None:
        return [0] * num_layers
    if isinstance(value, list):
        widths = []
        for i, v in enumerate(value[:num_layers]):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**40:
                raise f.error(f"shared_intermediate_size[{i}]", f"expected a width >= 0, got {v!r}")
            widths.append(v)
        return widths + [0] * (num_layers - len(widths))
    return [f.integer("shared_intermediate_size", minimum=0)] * num_layers


def _refuse(f: Fields) -> None:
    if f.flag("tie_word_embeddings"):
        raise f.error("tie_word_embeddings", "true: vLLM's minimax_text_01.py builds its own "
                      "fp32 LM head (no tying); refused rather than guessed")
    if f.raw("hidden_act", "silu") != "silu":
        raise f.error("hidden_act", f"{f.raw('hidden_act')!r}: vLLM's MiniMax MLPs are silu "
                      "only")
    if isinstance(f.get("num_local_experts"), list):
        raise f.error("num_local_experts", "a per-layer list of expert counts is not counted; "
                      "pass --weight-memory")
    for key in RESIDUAL_SCALES:
        value = f.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise f.error(key, f"expected a number, got {value!r}")
    f.get("postnorm")  # which tensor the residual carries: no parameter


def minimax_m1_tensors(inv, model: Model) -> list[str]:
    """Add every MiniMax-M1 tensor to ``inv`` (an ``hf_params._Inventory``); returns notes."""
    f, h = inv.f, inv.hidden
    _refuse(f)
    vocab = f.integer("vocab_size")
    inter = f.integer("intermediate_size")
    experts = f.integer("num_local_experts")  # no default: MiniMaxM1Config's (8) is remote code
    if experts > 1:
        top_k = f.integer("num_experts_per_tok")
        if top_k > experts:
            raise f.error("num_experts_per_tok", f"{top_k} exceeds num_local_experts = {experts}")
        inv.num_experts, inv.top_k = experts, top_k
    else:
        f.get("num_experts_per_tok")  # one expert: vLLM's dense MLP routes nothing
    shared = _shared_widths(f, len(model.layers))
    if any(shared) and f.raw("shared_moe_mode", "softmax") not in ("softmax", "sigmoid"):
        raise f.error("shared_moe_mode", f"{f.raw('shared_moe_mode')!r}: vLLM mixes the shared "
                      "MLP by softmax or sigmoid only")
    f.get("shared_moe_mode")
    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab")
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        spec = block[0] if len(block) == 1 else None
        if isinstance(spec, LightningAttention):
            inner = spec.num_heads * spec.head_dim
            inv.linear("self_attn.qkv_proj", 3 * inner, h, "column")
            inv.linear("self_attn.output_gate", inner, h, "column")
            inv.linear("self_attn.out_proj", h, inner, "row")
            inv.add("self_attn.norm.weight", inner, shard="column")
        elif isinstance(spec, FullAttention):
            heads, kv, d = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim_k
            inv.linear("self_attn.q_proj", heads * d, h, "column")
            inv.linear("self_attn.k_proj", kv * d, h, "kv", kv_heads=kv)
            inv.linear("self_attn.v_proj", kv * d, h, "kv", kv_heads=kv)
            inv.linear("self_attn.o_proj", h, heads * d, "row")
        else:
            raise f.error("attn_type_list", f"layer {i} is neither lightning (0) nor softmax "
                          "(1) attention")
        if experts > 1:
            inv.linear("block_sparse_moe.gate", experts, h, "replicated", quantized=False,
                       dtype="fp32")
            for name, rows, cols, shard in (("w1", inter, h, "column"), ("w3", inter, h, "column"),
                                            ("w2", h, inter, "row")):
                inv.linear(f"block_sparse_moe.experts.{name}", rows, cols, shard, count=experts,
                           expert=True)
        else:
            inv.mlp("mlp", inter)
        if shared[i]:
            inv.mlp("shared_mlp", shared[i])
            inv.linear("coefficient", 1, h, "replicated", quantized=False, dtype="fp32")
        inv.norm("input_layernorm", h)
        inv.norm("post_attention_layernorm", h)
    inv.place = "head"
    inv.norm("norm", h)
    inv.add("lm_head", vocab, h, shard="vocab", dtype="fp32")
    return ["the LM head is held in fp32 (vLLM's minimax_text_01.py casts it), as is the MoE "
            "router"]
