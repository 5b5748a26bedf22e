"""Zamba2's parameter inventory (``model_type: zamba2``), as vLLM 0.34 builds it:
``vllm/model_executor/models/zamba2.py`` (``Zamba2ForCausalLM``) with
``layers/mamba/mamba_mixer2.py`` (``MambaMixer2``). Checked against transformers 5.25's
``models/zamba2`` (``Zamba2Config`` defaults, ``modeling_zamba2.py``).

- Every decoder layer, "mamba" or "hybrid", holds a Mamba-2 decoder (``Zamba2MambaDecoderLayer``):
  ``MambaMixer2`` (inner width ``mamba_expand x hidden_size``, head dim inner / n_mamba_heads,
  conv bias by ``use_conv_bias``, projection biases by ``add_bias_linear``, the gated RMSNorm
  on) and its ``input_layernorm`` [hidden]. ``hf_params._Inventory.mamba`` counts the mixer.
- A hybrid layer (``Zamba2HybridLayer``) adds its own ``linear`` [hidden, hidden]
  (``ReplicatedLinear``, no bias) and runs one of ``num_mem_blocks`` shared transformer blocks,
  cycled over ``hybrid_layer_ids`` (hybrid layer k uses block k mod num_mem_blocks).
- A shared block (``Zamba2AttentionDecoderLayer``), built once: ``qkv_proj`` over the
  concatenated [hidden, embeddings] input (``attention_hidden_size`` = 2 x hidden wide;
  ``QKVParallelLinear`` with as many KV heads as heads), ``o_proj`` [hidden,
  attention_hidden_size], the gated GELU MLP ``gate_up_proj`` [2 x intermediate, hidden] and
  ``down_proj`` [hidden, intermediate] (biases by ``add_bias_linear``), ``input_layernorm``
  [2 x hidden] and ``pre_ff_layernorm`` [hidden]. Rotary embeddings hold no parameters.
- Per hybrid layer, inside its block (``Zamba2LoRA``: A [rank, in] then B [out, rank], both
  column-parallel, no bias): the MLP adapter ``gate_up_proj_adapter_list`` (in hidden, out
  2 x intermediate), built whatever ``use_shared_mlp_adapter`` says (neither vLLM nor
  transformers reads that key), and, under ``use_shared_attention_adapter``, q / k / v adapters
  (in and out attention_hidden_size).
- ``embed_tokens`` [vocab, hidden], ``final_layernorm`` [hidden]; the LM head is always tied
  (``self.lm_head.tie_weights(self.model.embed_tokens)``, whatever ``tie_word_embeddings``).

A shared block's tensors are placed on the first hybrid layer that runs it, an adapter on the
hybrid layer it serves. Not modelled (refused): ``add_bias_linear`` true, a non-gelu
``hidden_act`` (vLLM refuses it), ``num_key_value_heads`` other than ``num_attention_heads``
(vLLM's shared attention is MHA), a ``hybrid_layer_ids`` that disagrees with
``layers_block_type``.
"""

from __future__ import annotations

from ..core.layers import FullAttention, Mamba
from ..core.model import Model
from .params_stages import vllm_every_stage

WHY = "Zamba2Config default"


def _assumed_flag(f, key: str, default: bool) -> bool:
    """A boolean the count depends on; the config-class default is recorded when absent."""
    if not f.has(key):
        f.assume(f"{f.prefix}{key} = {str(default).lower()} ({WHY})")
        return default
    return f.flag(key)


def _refuse(f, heads: int, kv: int) -> None:
    if _assumed_flag(f, "add_bias_linear", False):
        raise f.error("add_bias_linear", "true: the biases vLLM's zamba2.py then gives the MLP "
                      "and the Mamba projections are not counted; pass --weight-memory")
    if f.raw("hidden_act", "gelu") != "gelu":
        raise f.error("hidden_act", f"{f.raw('hidden_act')!r}: vLLM's Zamba2MLP is gelu only")
    if kv != heads:
        raise f.error("num_key_value_heads", f"{kv} differs from num_attention_heads = {heads}: "
                      "vLLM's Zamba2Attention builds as many KV heads as heads")


def _shared_block(inv, b: int, heads: int, d: int, inter: int) -> None:
    """Shared transformer block ``b`` (``Zamba2AttentionDecoderLayer``), built once."""
    h = inv.hidden
    pre = f"shared_transformer.{b}"
    inv.linear(f"{pre}.self_attn.q_proj", heads * d, 2 * h, "column")
    inv.linear(f"{pre}.self_attn.k_proj", heads * d, 2 * h, "kv", kv_heads=heads)
    inv.linear(f"{pre}.self_attn.v_proj", heads * d, 2 * h, "kv", kv_heads=heads)
    inv.linear(f"{pre}.self_attn.o_proj", h, heads * d, "row")
    inv.linear(f"{pre}.feed_forward.gate_up_proj", 2 * inter, h, "column")
    inv.linear(f"{pre}.feed_forward.down_proj", h, inter, "row")
    inv.norm(f"{pre}.input_layernorm", 2 * h)
    inv.norm(f"{pre}.pre_ff_layernorm", h)


def zamba2_tensors(inv, model: Model) -> list[str]:
    """Add every Zamba2 tensor to ``inv`` (an ``hf_params._Inventory``); returns notes."""
    f, h = inv.f, inv.hidden
    hybrid = [i for i, block in enumerate(model.layers) if len(block) == 2]
    given = f.index_list("hybrid_layer_ids", len(model.layers))
    if given is not None and list(given) != hybrid:
        raise f.error("hybrid_layer_ids", f"{given} disagrees with the hybrid layers of "
                      f"layers_block_type {hybrid} (Zamba2Config derives it from them)")
    attn = next((b[0] for b in model.layers if len(b) == 2), None)
    if attn is not None and not isinstance(attn, FullAttention):
        raise f.error("layers_block_type", "a hybrid layer without full attention")
    heads = attn.num_attention_heads if attn else f.integer("num_attention_heads")
    d = attn.head_dim_k if attn else 2 * h // heads  # Zamba2Config: 2 x hidden_size / heads
    _refuse(f, heads, attn.num_kv_heads if attn else heads)
    _assumed_flag(f, "use_conv_bias", True)  # read again by _Inventory.mamba
    vocab = f.integer("vocab_size", default=32000, why=WHY)
    # no default: the shared blocks are weights (Zamba2Config's 1 is not Zamba2-2.7B's 2)
    if not f.has("num_mem_blocks"):
        raise f.error("num_mem_blocks", "missing: the number of shared transformer blocks "
                      "decides the parameter count (transformers' default 1 is not every "
                      "Zamba2's: the 2.7B has 2)")
    blocks = f.integer("num_mem_blocks", minimum=1)
    attn_adapter = _assumed_flag(f, "use_shared_attention_adapter", False)
    f.get("use_shared_mlp_adapter")  # read by neither: the MLP adapters are always built
    rank = f.integer("adapter_rank", default=128, why=WHY)
    inter = f.integer("intermediate_size", default=4 * h, why=f"{WHY}: 4 x hidden_size")
    f.get("ffn_hidden_size")  # Zyphra's own name; vLLM builds intermediate_size
    f.get("attention_hidden_size")  # Zamba2Config derives it: 2 x hidden_size
    every = vllm_every_stage(inv.mt)

    home = {b: hybrid[b] if b < len(hybrid) else (hybrid[-1] if hybrid else 0)
            for b in range(blocks)}  # vLLM builds every block, run or not

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab", every_stage="embed" in every)
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        mamba = block[-1]
        if not isinstance(mamba, Mamba):
            raise f.error("layers_block_type", f"layer {i} holds no Mamba-2 mixer")
        inv.mamba(mamba)
        inv.norm("input_layernorm", h)
        for b in (b for b, at in home.items() if at == i):
            _shared_block(inv, b, heads, d, inter)
        if len(block) != 2:
            continue
        inv.linear("linear", h, h, "replicated")
        inv.linear("shared_transformer.feed_forward.gate_up_proj_adapter.A", rank, h, "column")
        inv.linear("shared_transformer.feed_forward.gate_up_proj_adapter.B", 2 * inter, rank,
                   "column")
        if attn_adapter:
            for name in ("q", "k", "v"):
                inv.linear(f"shared_transformer.self_attn.linear_{name}_adapter.A", rank, 2 * h,
                           "column")
                inv.linear(f"shared_transformer.self_attn.linear_{name}_adapter.B", 2 * h, rank,
                           "column")
    inv.place = "head"
    inv.norm("final_layernorm", h, every_stage="norm" in every)
    notes = []
    if f.get("tie_word_embeddings") is False:
        notes.append("tie_word_embeddings false not applied: vLLM's zamba2.py ties the LM head "
                     "to embed_tokens always, counted tied")
    if blocks > len(hybrid):
        notes.append(f"num_mem_blocks = {blocks} exceeds the {len(hybrid)} hybrid layers: vLLM "
                     "still builds every shared block, all counted")
    return notes
