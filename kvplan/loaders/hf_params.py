"""Model -> ``Weights``: every parameter tensor, counted from config.json.

The mixers come from the parsed layer specs (attention shape, MLA ranks, Mamba widths); the
feed-forward blocks, norms, biases and embeddings from the family's config fields, following
the transformers modelling code of each family (vLLM loads the same tensors). Vision towers of
multimodal wrappers are not counted (a note says so).
"""

from __future__ import annotations

from ..core.dtypes import STATE_DTYPES, canonical_dtype
from ..core.errors import ConfigError
from ..core.layers import (
    ChunkedLocal,
    FullAttention,
    KimiDeltaAttention,
    LightningIndexer,
    LinearAttention,
    Mamba,
    MultiHeadLatent,
    SlidingWindow,
)
from ..core.model import Model
from ..core.units import cdiv
from ..core.weights import Tensor, Weights
from .fields import Fields
from .hf_config import text_fields
from .params_stages import vllm_every_stage
from .weight_keys import unread_weight_keys

#: transformers config-class defaults for ``tie_word_embeddings`` where the file may omit it.
TIE_DEFAULTS = {"gemma": True, "gemma2": True, "gemma3": True, "gemma3_text": True,
                "gemma4_text": True, "cohere": True,
                "cohere2": True, "falcon": True, "RefinedWeb": True, "RefinedWebModel": True,
                "mamba": True, "falcon_mamba": True, "mamba_ssm": True, "zamba2": True,
                "granitemoehybrid": True}
#: model types whose vLLM class has no lm_head and computes the logits from embed_tokens
#: whatever tie_word_embeddings says (0.10.2-0.28.0 assert it true; 0.29.0+: commandr.py maps
#: lm_head away, ``orig_to_new_prefix={"lm_head": None}``; gemma2.py loads none): no lm_head
LOGITS_FROM_EMBEDDING = {
    **dict.fromkeys(("cohere", "cohere2"), "vLLM's CohereForCausalLM builds no lm_head and "
                    "computes the logits from embed_tokens (commandr.py), counted tied"),
    "gemma2": "vLLM's Gemma2ForCausalLM builds no lm_head and computes the logits from "
              "embed_tokens (gemma2.py), counted tied"}
#: Config-class vocab defaults where that default is the real vocabulary (JambaConfig: 65536).
VOCAB_DEFAULTS = {"jamba": 65536}
LAYERNORM_BIAS = {"gpt_neox", "falcon", "RefinedWeb", "RefinedWebModel", "phi"}
QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"}
QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "qwen3_next", "qwen3_5_text",
           "qwen3_5_moe_text", "qwen3_vl_text", "qwen3_vl_moe_text"}
FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text", "gemma4_text"}
PARALLEL_BLOCK = {"cohere", "cohere2", "gpt_neox", "falcon", "RefinedWeb", "RefinedWebModel"}
UNGATED_MLP = {"gpt_neox", "falcon", "RefinedWeb", "RefinedWebModel", "nemotron_h"}
SUPPORTED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3",
             "gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "cohere2", "gpt_neox", "llama4",
             "llama4_text", "gpt_oss", "falcon", "RefinedWeb", "RefinedWebModel", "qwen2_vl",
             "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text", "deepseek_v2", "deepseek_v3",
             "kimi_k2", "mamba", "falcon_mamba", "mamba2", "mamba_ssm", "jamba", "falcon_h1",
             "nemotron_h", "bamba", "granitemoehybrid", "qwen3_next", "deepseek_v32", "glm_moe_dsa",
             "glm4_moe_lite", "minimax_m2", "nemotron-nas", "kimi_linear", "qwen3_5_text",
             "qwen3_5_moe_text", "mimo_v2_flash", "qwen3_vl_text", "qwen3_vl_moe_text",
             "glm4_moe", "gemma4_text", "deepseek_v4"}
#: Qwen3-VL style vision towers (``model.visual``) under these text configs
QWEN_VL_TOWER = {"qwen3_5_text", "qwen3_5_moe_text", "qwen3_vl_text", "qwen3_vl_moe_text"}
QWEN35 = {"qwen3_5_text", "qwen3_5_moe_text"}
#: MTP blocks whose checkpoint keeps no embed_tokens / shared_head.head copies of their own
#: (GLM-5.x: the published totals count the MTP block's decoder layer and eh_proj only).
MTP_SHARES_EMBEDDINGS = {"glm_moe_dsa"}
#: DeepSeek-style MoE decoders (first_k_dense_replace, moe_layer_freq, shared experts).
DEEPSEEK_MOE = {"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite",
                "glm4_moe"}


class _Inventory:
    def __init__(self, f: Fields, model_type: str, hidden: int):
        self.f, self.mt, self.hidden = f, model_type, hidden
        self.tensors: list[Tensor] = []
        self.place, self.layer = "layer", 0
        self.num_experts = self.top_k = 0

    def add(self, name: str, rows: int, cols: int = 1, **kw) -> None:
        self.tensors.append(Tensor(name=name, rows=rows, cols=cols, place=self.place,
                                   layer=self.layer if self.place in ("layer", "extra") else None,
                                   **kw))

    def norm(self, name: str, width: int, bias: bool = False, **kw) -> None:
        self.add(name + ".weight", width, **kw)
        if bias:
            self.add(name + ".bias", width, **kw)

    def linear(self, name: str, out: int, inp: int, shard: str, bias: bool = False,
               quantized: bool = True, **kw) -> None:
        """A Linear layer; ``quantized=False`` for ones quantization methods keep in the model
        dtype (MoE routers, DeepSeek's MTP eh_proj: bf16 in the fp8 checkpoints)."""
        self.add(name + ".weight", out, inp, shard=shard, linear=quantized, **kw)
        if bias:
            self.add(name + ".bias", out, shard=shard if shard != "row" else "replicated",
                     **{k: v for k, v in kw.items() if k in ("count", "expert", "kv_heads")})

    def vit_linear(self, name: str, rows: int, cols: int, shard: str, count: int = 1,
                   split_heads: int = 0) -> None:
        """A vision tower's linear with its bias, in the model dtype, split over TP as vLLM's
        ViTs split it: column (rows and bias) or row (columns; the bias whole)."""
        column = shard == "column"
        self.add(f"{name}.weight", rows, cols, shard=shard, count=count, split_heads=split_heads)
        self.add(f"{name}.bias", rows, shard=shard if column else "replicated", count=count,
                 split_heads=split_heads if column else 0)

    # --- mixers --------------------------------------------------------------------------
    def attention(self, spec, prefix: str = "self_attn") -> None:
        f, h = self.f, self.hidden
        if self.mt in QKV_BIAS:  # Qwen2: q/k/v biases always, none on o_proj
            qkv_bias, o_bias = True, False
        elif self.mt == "gpt_neox":
            qkv_bias = o_bias = True
        elif self.mt in ("falcon", "RefinedWeb", "RefinedWebModel"):
            qkv_bias = o_bias = f.flag("bias", False)
        elif self.mt == "mimo_v2_flash":  # vLLM mimo_v2.py: o_proj bias-free
            qkv_bias, o_bias = f.flag("attention_bias"), False
        elif self.mt == "glm4_moe":  # vLLM glm4_moe.py: qkv bias per attention_bias, o_proj none
            qkv_bias, o_bias = _stated_flag(f, "attention_bias"), False
        else:  # llama-style attention_bias; GptOssConfig defaults it to True
            qkv_bias = o_bias = f.flag("attention_bias", self.mt == "gpt_oss")
        if self.mt == "gemma4_text":
            self.gemma4_attention(spec, qkv_bias)
            return
        gated = self.mt == "qwen3_next" or (self.mt in QWEN35 and f.flag("attn_output_gate"))
        q_rows = spec.num_attention_heads * spec.head_dim_k * (2 if gated else 1)
        self.linear(f"{prefix}.q_proj", q_rows, h, "column", qkv_bias)
        kv = spec.num_kv_heads
        self.linear(f"{prefix}.k_proj", kv * spec.head_dim_k, h, "kv", qkv_bias, kv_heads=kv)
        self.linear(f"{prefix}.v_proj", kv * spec.head_dim_v, h, "kv", qkv_bias, kv_heads=kv)
        self.linear(f"{prefix}.o_proj", h, spec.num_attention_heads * spec.head_dim_v, "row", o_bias)
        if self.mt in QK_NORM or (self.mt == "glm4_moe" and _stated_flag(f, "use_qk_norm")):
            self.norm(f"{prefix}.q_norm", spec.head_dim_k)
            self.norm(f"{prefix}.k_norm", spec.head_dim_k)
        if self.mt in ("cohere", "cohere2") and f.flag("use_qk_norm"):
            self.norm(f"{prefix}.q_norm", spec.num_attention_heads * spec.head_dim_k)
            self.norm(f"{prefix}.k_norm", kv * spec.head_dim_k)
        if self.mt == "gpt_oss":
            self.add(f"{prefix}.sinks", spec.num_attention_heads, shard="column")
        if self.mt == "mimo_v2_flash":
            if f.flag("add_full_attention_sink_bias", False):
                raise f.error("add_full_attention_sink_bias", "true: vLLM's mimo_v2.py builds "
                              "sinks on the sliding-window layers only; pass --weight-memory")
            if isinstance(spec, SlidingWindow) and f.flag("add_swa_attention_sink_bias", False):
                self.add(f"{prefix}.attention_sink_bias", spec.num_attention_heads, shard="column")
        if self.mt == "minimax_m2" and f.flag("use_qk_norm"):  # per_layer: over every head
            if f.raw("qk_norm_type", "per_layer") != "per_layer":
                raise f.error("qk_norm_type", f"{f.raw('qk_norm_type')!r} is not counted (vLLM's "
                              "MiniMax-M2 norms q and k over all heads: per_layer)")
            self.norm(f"{prefix}.q_norm", spec.num_attention_heads * spec.head_dim_k)
            self.norm(f"{prefix}.k_norm", kv * spec.head_dim_k)

    def gemma4_attention(self, spec, bias: bool) -> None:
        """Gemma-4 (vLLM gemma4.py ``Gemma4Attention``): q/k/v/o with the layer type's own
        heads and head size, q and k norms with weights (v's has none). Full-attention layers
        under ``attention_k_eq_v`` ship k_proj only, but vLLM's QKVParallelLinear still holds a
        V slot (loaded with K): counted, as it takes memory. 26B-A4B, a full layer: 2 KV heads
        x 512 x 2816 = 2,883,584 more."""
        f, h = self.f, self.hidden  # KV-sharing layers (E models): params_gemma4
        f.flag("attention_k_eq_v")
        heads, kv = spec.num_attention_heads, spec.num_kv_heads
        d = spec.head_dim_k
        self.linear("self_attn.q_proj", heads * d, h, "column", bias)
        self.linear("self_attn.k_proj", kv * d, h, "kv", bias, kv_heads=kv)
        self.linear("self_attn.v_proj", kv * spec.head_dim_v, h, "kv", bias, kv_heads=kv)
        self.linear("self_attn.o_proj", h, heads * spec.head_dim_v, "row", bias)
        self.norm("self_attn.q_norm", d)
        self.norm("self_attn.k_norm", d)

    def mla(self, spec: MultiHeadLatent) -> None:
        f, h = self.f, self.hidden
        if f.flag("attention_bias"):  # vLLM's DeepseekV2 MLA builds its projections bias-free
            raise f.error("attention_bias", "true: MLA projections with biases are not counted "
                          "(vLLM's MLA has none); pass --weight-memory")
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        heads = spec.num_attention_heads
        q_lora = f.opt_int("q_lora_rank")
        if q_lora:
            self.linear("self_attn.q_a_proj", q_lora, h, "replicated")
            self.norm("self_attn.q_a_layernorm", q_lora)
            self.linear("self_attn.q_b_proj", heads * qk, q_lora, "column")
        else:
            self.linear("self_attn.q_proj", heads * qk, h, "column")
        self.linear("self_attn.kv_a_proj_with_mqa", spec.kv_lora_rank + spec.qk_rope_head_dim, h,
                    "replicated")
        self.norm("self_attn.kv_a_layernorm", spec.kv_lora_rank)
        self.linear("self_attn.kv_b_proj", heads * (spec.qk_nope_head_dim + spec.v_head_dim),
                    spec.kv_lora_rank, "column")
        self.linear("self_attn.o_proj", h, heads * spec.v_head_dim, "row")

    def indexer(self, spec: LightningIndexer) -> None:
        """DeepSeek sparse attention's indexer (vLLM ``Indexer``; every tensor replicated):
        wq_b [index_n_heads x index_head_dim, q_lora_rank], wk [index_head_dim, hidden], a
        LayerNorm k_norm (weight and bias), weights_proj [index_n_heads, hidden] (bf16 in the
        fp8 checkpoints). DeepSeek-V3.2: 12,582,912 + 917,504 + 256 + 458,752 = 13,959,424."""
        f, h, d = self.f, self.hidden, spec.index_head_dim
        heads = f.integer("index_n_heads")
        self.linear("self_attn.indexer.wq_b", heads * d, f.integer("q_lora_rank"), "replicated")
        self.linear("self_attn.indexer.wk", d, h, "replicated")
        self.norm("self_attn.indexer.k_norm", d, bias=True)
        self.linear("self_attn.indexer.weights_proj", heads, h, "replicated", quantized=False)

    def mamba(self, spec: Mamba) -> None:
        f, h, d = self.f, self.hidden, spec.d_inner
        proj_bias = f.flag("use_bias", False) or f.flag("mamba_proj_bias", False)
        conv_bias = f.flag("use_conv_bias", True) and f.flag("mamba_conv_bias", True)
        if spec.version == 1:
            if f.raw("time_step_rank", f.raw("mamba_dt_rank", "auto")) == "auto":
                dt_rank = cdiv(h, 16)  # MambaConfig / JambaConfig: ceil(hidden_size / 16)
            else:  # a positive integer no wider than the inner dimension it projects from
                dt_rank = f.integer("time_step_rank", "mamba_dt_rank", maximum=d)
            self.linear("mamba.in_proj", 2 * d, h, "column", proj_bias)
            self.add("mamba.conv1d.weight", d, spec.d_conv, shard="column")
            if conv_bias:
                self.add("mamba.conv1d.bias", d, shard="column")
            self.linear("mamba.x_proj", dt_rank + 2 * spec.d_state, d, "row")
            self.linear("mamba.dt_proj", d, dt_rank, "column", True)
            # vLLM keeps A in fp32 (0.34 mamba_mixer.py / mamba_mixer2.py: dtype=torch.float32)
            self.add("mamba.A_log", d, spec.d_state, shard="column", dtype="fp32")
            self.add("mamba.D", d, shard="column")
            if self.mt == "jamba" and f.flag("mamba_inner_layernorms", True):  # JambaConfig default
                self.norm("mamba.dt_layernorm", dt_rank)
                self.norm("mamba.b_layernorm", spec.d_state)
                self.norm("mamba.c_layernorm", spec.d_state)
            self.linear("mamba.out_proj", h, d, "row", proj_bias)
            return
        gs = spec.n_groups * spec.d_state
        self.linear("mamba.in_proj", 2 * d + 2 * gs + spec.num_heads, h, "column", proj_bias)
        self.add("mamba.conv1d.weight", d + 2 * gs, spec.d_conv, shard="column")
        if conv_bias:
            self.add("mamba.conv1d.bias", d + 2 * gs, shard="column")
        for name in ("dt_bias", "A_log", "D"):
            self.add(f"mamba.{name}", spec.num_heads, shard="column",
                     dtype="fp32" if name == "A_log" else None)
        if self.mt != "falcon_h1" or f.flag("mamba_rms_norm", False):
            self.add("mamba.norm.weight", d, shard="column")
        self.linear("mamba.out_proj", h, d, "row", proj_bias)

    def linear_attention(self, spec: LinearAttention) -> None:
        h = self.hidden
        key = spec.num_k_heads * spec.head_k_dim
        value = spec.num_v_heads * spec.head_v_dim
        self.linear("linear_attn.in_proj_qkvz", 2 * key + 2 * value, h, "column")
        self.linear("linear_attn.in_proj_ba", 2 * spec.num_v_heads, h, "column")
        self.add("linear_attn.conv1d.weight", 2 * key + value, spec.conv_kernel, shard="column")
        self.add("linear_attn.dt_bias", spec.num_v_heads, shard="column")
        self.add("linear_attn.A_log", spec.num_v_heads, shard="column", dtype="fp32")
        self.add("linear_attn.norm.weight", spec.head_v_dim, dtype="fp32" if self.mt in QWEN35 else None)
        self.linear("linear_attn.out_proj", h, value, "row")

    def kda(self, spec: KimiDeltaAttention) -> None:
        """Kimi delta attention (Kimi-Linear ``KimiDeltaAttention``; vLLM ``kda.py``): q/k/v
        projections and depthwise convs (vLLM holds the convs in fp32), low-rank forget and
        output gates (f_a/g_a replicated, f_b/g_b split), a per-head beta, fp32 A_log and
        dt_bias, a gated norm over one head, the output projection. Kimi-Linear-48B: 39,514,272
        per layer."""
        h, d = self.hidden, spec.head_k_dim
        p = spec.num_k_heads * d
        for name in ("q", "k", "v"):
            self.linear(f"self_attn.{name}_proj", p, h, "column")
            self.add(f"self_attn.{name}_conv1d.weight", p, spec.conv_kernel, shard="column", dtype="fp32")
        for gate in ("f", "g"):
            self.linear(f"self_attn.{gate}_a_proj", d, h, "replicated")
            self.linear(f"self_attn.{gate}_b_proj", p, d, "column")
        self.linear("self_attn.b_proj", spec.num_k_heads, h, "column")
        self.add("self_attn.A_log", spec.num_k_heads, shard="column", dtype="fp32")
        self.add("self_attn.dt_bias", p, shard="column", dtype="fp32")
        self.norm("self_attn.o_norm", d)
        self.linear("self_attn.o_proj", h, p, "row")

    def mixer(self, spec) -> None:
        if isinstance(spec, (FullAttention, SlidingWindow, ChunkedLocal)):
            self.attention(spec)
        elif isinstance(spec, MultiHeadLatent):
            self.mla(spec)
        elif isinstance(spec, LightningIndexer):
            self.indexer(spec)
        elif isinstance(spec, Mamba):
            self.mamba(spec)
        elif isinstance(spec, KimiDeltaAttention):
            self.kda(spec)
        elif isinstance(spec, LinearAttention):
            self.linear_attention(spec)

    # --- feed-forward --------------------------------------------------------------------
    def mlp(self, name: str, inter: int, *, gated: bool = True, bias: bool = False,
            count: int = 1, expert: bool = False) -> None:
        h = self.hidden
        if gated:
            self.linear(f"{name}.gate_proj", inter, h, "column", bias, count=count, expert=expert)
        self.linear(f"{name}.up_proj", inter, h, "column", bias, count=count, expert=expert)
        self.linear(f"{name}.down_proj", h, inter, "row", bias, count=count, expert=expert)

    def moe(self, experts: int, top_k: int, inter: int, *, shared: int = 0,
            shared_gate: bool = False, router_bias: bool = False, expert_bias: bool = False,
            score_bias: bool = False, score_bias_dtype: str | None = "fp32",
            router_dtype: str | None = None) -> None:
        self.num_experts, self.top_k = experts, top_k
        self.linear("mlp.router", experts, self.hidden, "replicated", router_bias, quantized=False,
                    **({"dtype": router_dtype} if router_dtype else {}))
        if score_bias:  # an fp32 buffer in most checkpoints and in vLLM (bf16 in Kimi-Linear's)
            self.add("mlp.router.e_score_correction_bias", experts, dtype=score_bias_dtype)
        self.mlp("mlp.experts", inter, bias=expert_bias, count=experts, expert=True)
        if shared:  # DeepSeek-style checkpoints name them shared_experts, Qwen shared_expert
            deepseek = self.mt in DEEPSEEK_MOE or self.mt == "kimi_linear"
            self.mlp("mlp.shared_experts" if deepseek else "mlp.shared_expert", shared)
        if shared_gate:
            self.linear("mlp.shared_expert_gate", 1, self.hidden, "replicated", quantized=False)


def _ffn(inv: _Inventory, i: int, block: tuple, pattern: str | None) -> None:
    """The feed-forward part of decoder layer ``i`` (none for pure SSM layers)."""
    f, mt = inv.f, inv.mt
    inter = f.opt_int("intermediate_size")
    if mt in ("mamba", "falcon_mamba", "mamba2", "mamba_ssm"):
        return
    if mt == "nemotron_h":
        if f.raw("mlp_hidden_act", "relu2") != "relu2":
            raise f.error("mlp_hidden_act", f"{f.raw('mlp_hidden_act')!r}: Nemotron-H's MLP is "
                          "counted as vLLM builds it for relu2 (up and down, no gate)")
        if pattern and pattern[i] == "-":
            inv.mlp("mixer", f.integer("intermediate_size"), gated=False, bias=f.flag("mlp_bias"))
        elif pattern and pattern[i] == "E":
            raise ConfigError("parameter count for Nemotron-H MoE layers (E) is not modelled; "
                              "pass --weight-memory", source=f.source, field="hybrid_override_pattern")
        return
    if mt == "mixtral":
        inv.moe(f.integer("num_local_experts"), f.integer("num_experts_per_tok"),
                f.integer("intermediate_size"))
    elif mt == "kimi_linear":
        latent = f.opt_int("routed_expert_hidden_size")
        if latent not in (None, inv.hidden) or f.has("latent_moe_use_norm"):
            raise f.error("routed_expert_hidden_size", "a latent MoE (experts narrower than "
                          "hidden_size, Kimi-K3) is not counted; pass --weight-memory")
        first = f.integer("first_k_dense_replace", default=0, minimum=0, why="KimiLinearConfig default")
        freq = f.integer("moe_layer_freq", default=1, why="KimiLinearConfig default")
        if f.opt_int("num_experts") and i >= first and i % freq == 0:
            inter_moe = f.integer("moe_intermediate_size")
            inv.moe(f.integer("num_experts"), f.integer("num_experts_per_token"), inter_moe,
                    shared=inter_moe * (f.opt_int("num_shared_experts", minimum=0) or 0),
                    score_bias=True, score_bias_dtype=None)
        else:
            inv.mlp("mlp", f.integer("intermediate_size"))
    elif mt in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_vl_moe_text"):
        step = f.integer("decoder_sparse_step", default=1, why="Qwen MoE config default")
        dense_layers = set(f.array("mlp_only_layers") or [])
        if i in dense_layers or (i + 1) % step:
            inv.mlp("mlp", f.integer("intermediate_size"))
        else:
            shared = f.opt_int("shared_expert_intermediate_size", minimum=0) or 0
            inv.moe(f.integer("num_experts"), f.integer("num_experts_per_tok"),
                    f.integer("moe_intermediate_size"), shared=shared, shared_gate=bool(shared))
    elif mt == "nemotron-nas":
        ffn = (f.array("block_configs") or [{}])[i].get("ffn") or {}
        if not ffn.get("no_op"):
            width = ffn.get("intermediate_size") or _nas_intermediate(ffn, inv.hidden, f, i)
            inv.mlp("mlp", width, bias=f.flag("mlp_bias"))  # vLLM's LlamaMLP under DeciLM
    elif mt == "minimax_m2":
        if f.opt_int("shared_intermediate_size", minimum=0):
            raise f.error("shared_intermediate_size", "shared experts are not counted for "
                          "MiniMax-M2 (vLLM's minimax_m2.py builds none); pass --weight-memory")
        inv.moe(f.integer("num_local_experts"), f.integer("num_experts_per_tok"),
                f.integer("intermediate_size"), score_bias=f.flag("use_routing_bias"))
    elif mt in DEEPSEEK_MOE:
        first_dense = f.integer("first_k_dense_replace", default=0, minimum=0, why="DeepSeek default")
        freq = f.integer("moe_layer_freq", default=1, why="DeepSeek default")
        if mt == "glm4_moe" and freq != 1:  # glm4_moe.py: every layer from first_k_dense_replace
            raise f.error("moe_layer_freq", f"{freq}: vLLM's glm4_moe.py ignores it (every layer "
                          "from first_k_dense_replace is MoE); refused rather than guessed")
        sparse = bool(f.opt_int("n_routed_experts")) and i >= first_dense and i % freq == 0
        types = f.str_list("mlp_layer_types", f.num_layers())  # transformers' GLM-5.2 spelling
        if types is not None and types[i] != ("sparse" if sparse else "dense"):
            experts = f.opt_int("n_routed_experts")
            raise f.error(f"mlp_layer_types[{i}]", f"{types[i]!r} disagrees with "
                          f"first_k_dense_replace = {first_dense}, moe_layer_freq = {freq} and "
                          f"n_routed_experts = {experts} (vLLM follows those)")
        if sparse:
            moe_inter = f.integer("moe_intermediate_size")
            inv.moe(f.integer("n_routed_experts"), f.integer("num_experts_per_tok"), moe_inter,
                    shared=moe_inter * (f.opt_int("n_shared_experts", minimum=0) or 0),
                    score_bias=mt == "glm4_moe" or f.raw(  # glm4_moe.py: always the fp32 bias
                        "topk_method", "greedy" if mt == "deepseek_v2" else "noaux_tc")
                    == "noaux_tc",  # DeepseekV3Config default
                    router_dtype="fp32" if mt == "glm4_moe" else None)  # glm4_moe.py GateLinear
        else:
            inv.mlp("mlp", f.integer("intermediate_size"))
    elif mt == "gemma4_text":  # vLLM gemma4.py Gemma4DecoderLayer (E models: params_gemma4)
        f.get("hidden_size_per_layer_input"), f.get("use_double_wide_mlp")  # 0 and false here
        f.opt_int("vocab_size_per_layer_input")  # only with per-layer inputs (none here)
        inv.mlp("mlp", f.integer("intermediate_size"))
        experts = f.opt_int("num_experts")
        if f.raw("enable_moe_block") is not None and f.flag("enable_moe_block") != bool(experts):
            raise f.error("enable_moe_block", f"{f.raw('enable_moe_block')} disagrees with "
                          f"num_experts = {experts} (vLLM builds the MoE block when num_experts "
                          "is set)")
        if experts:  # the router (scale, per-expert scale, projection) and the experts, beside
            # the dense MLP, with three more norms
            inv.moe(experts, f.integer("top_k_experts"), f.integer("moe_intermediate_size"))
            inv.add("router.scale", inv.hidden)
            inv.add("router.per_expert_scale", experts)
            for name in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                         "pre_feedforward_layernorm_2"):
                inv.norm(name, inv.hidden)
        inv.add("layer_scalar", 1)  # a loaded buffer
    elif mt == "mimo_v2_flash":  # vLLM mimo_v2.py is_moe_layer: moe_layer_freq[i] truthy
        freq = f.raw("moe_layer_freq")
        if not isinstance(freq, list) or len(freq) != f.num_layers() or any(
                x not in (0, 1) for x in freq):
            raise f.error("moe_layer_freq", "must be a list of 0 / 1 per layer (vLLM's "
                          "MiMo-V2 reads it so)")
        if f.raw("n_shared_experts") not in (None, 0):
            raise f.error("n_shared_experts", "shared experts are not counted for MiMo-V2 "
                          "(vLLM's mimo_v2.py builds none); pass --weight-memory")
        if freq[i]:
            inv.moe(f.integer("n_routed_experts"), f.integer("num_experts_per_tok"),
                    f.integer("moe_intermediate_size"), score_bias=True,
                    router_dtype=_torch_dtype(f.raw("moe_router_dtype", "float32"), f,
                                              "moe_router_dtype"))
        else:
            inv.mlp("mlp", f.integer("intermediate_size"))
    elif mt == "gpt_oss":
        inv.moe(f.integer("num_local_experts"), f.integer("num_experts_per_tok",
                "experts_per_token"), f.integer("intermediate_size"), router_bias=True,
                expert_bias=True)
    elif mt in ("llama4", "llama4_text"):
        step = f.integer("interleave_moe_layer_step", default=1, why="Llama4TextConfig default")
        f.get("use_qk_norm")  # an L2 norm without weights (vLLM Llama4Attention)
        if step == 1:
            f.get("intermediate_size_mlp")  # the dense MLP width: no dense layer here
        if (i + 1) % step == 0:
            inv.moe(f.integer("num_local_experts"), f.integer("num_experts_per_tok"),
                    f.integer("intermediate_size"), shared=f.integer("intermediate_size"))
        else:
            inv.mlp("mlp", f.integer("intermediate_size_mlp"))
    elif mt == "jamba":
        period = f.integer("expert_layer_period", default=2, why="JambaConfig default")
        offset = f.integer("expert_layer_offset", default=1, minimum=0, why="JambaConfig default")
        experts = f.integer("num_experts", default=16, why="JambaConfig default")
        if experts > 1 and i % period == offset:
            inv.moe(experts, f.integer("num_experts_per_tok", default=2, why="JambaConfig default"),
                    f.integer("intermediate_size"))
        else:
            inv.mlp("mlp", f.integer("intermediate_size"))
    elif mt == "granitemoehybrid":
        experts = f.opt_int("num_local_experts", minimum=0) or 0
        if experts:
            inv.moe(experts, f.integer("num_experts_per_tok"), f.integer("intermediate_size"))
        shared = f.opt_int("shared_intermediate_size", minimum=0) or 0
        if shared:
            inv.mlp("shared_mlp", shared)
    elif mt in UNGATED_MLP:
        width = f.opt_int("ffn_hidden_size") or inter or 4 * inv.hidden
        bias = mt == "gpt_neox" or (mt != "nemotron_h" and f.flag("bias", False))
        inv.mlp("mlp", width, gated=False, bias=bias)
    else:
        if inter is None:
            raise f.error("intermediate_size", "missing: needed to count the MLP parameters")
        f.get("mlp_only_layers")  # dense models: every layer is MLP-only already
        inv.mlp("mlp", inter, bias=f.flag("mlp_bias", False))


def _falcon_h1_keys(f: Fields) -> None:
    """Falcon-H1's weight-named keys as vLLM 0.34's falcon_h1.py reads them. Every layer
    (``FalconH1ParallelHybrid``) holds attention, Mamba-2 and a ``FalconH1MLP`` of
    intermediate_size, bias-free qkv / o_proj and gate_up / down_proj whatever
    attention_bias / mlp_bias say, and the Mamba in / out projections' biases both follow
    mamba_proj_bias (``MambaMixer2(use_bias=...)``). Settings under which the checkpoint holds
    tensors vLLM does not build (or lacks ones it builds) are refused. Falcon-H1-0.5B:
    521,411,104 parameters, the published checkpoint's count."""
    # scalars, no tensor: the logits scale (LogitsProcessor(scale=...)), the MLP's gate and
    # down multipliers (two floats vLLM unpacks); the gated norm's order (vLLM's
    # Mixer2RMSNormGated fixes norm_before_gate false; its weight follows mamba_rms_norm)
    f.get("lm_head_multiplier"), f.get("mlp_multipliers"), f.get("mamba_norm_before_gate")
    # read by neither vLLM 0.34 nor transformers' FalconH1Config: the MLP is intermediate_size
    # wide (Falcon-H1-0.5B: mlp_expansion_factor 8, intermediate_size 2048 = 2 x hidden_size)
    f.get("mlp_expansion_factor")
    if not f.flag("mamba_use_mlp", True):
        raise f.error("mamba_use_mlp", "false: vLLM 0.34's falcon_h1.py builds the MLP on every "
                      "layer whatever it says (a checkpoint without one does not load); pass "
                      "--weight-memory")
    for key in ("attention_bias", "mlp_bias"):
        if f.flag(key):
            raise f.error(key, "true: vLLM's falcon_h1.py builds its attention and MLP "
                          "projections bias-free, so the checkpoint's biases would not load; "
                          "pass --weight-memory")
    proj_bias = f.flag("mamba_proj_bias", False)
    if f.flag("projectors_bias", False) != proj_bias:
        raise f.error("projectors_bias", f"{f.flag('projectors_bias')} with mamba_proj_bias "
                      f"{proj_bias}: transformers gives the Mamba out_proj a bias by "
                      "projectors_bias, vLLM's MambaMixer2 by mamba_proj_bias, so one holds a "
                      "tensor the other lacks; pass --weight-memory")


def _nas_intermediate(ffn: dict, hidden: int, f: Fields, i: int) -> int:
    """DeciLM's ``_ffn_mult_to_intermediate_size``: int(2 x ffn_mult x hidden / 3) rounded up
    to a multiple of 256."""
    mult = ffn.get("ffn_mult")
    if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not mult > 0:
        raise f.error(f"block_configs[{i}].ffn.ffn_mult", f"expected a positive number, got {mult!r}")
    return cdiv(int(2 * mult * hidden / 3), 256) * 256


def _stated_flag(f: Fields, key: str) -> bool:
    """A true / false key the config must state: GLM-4.x's published configs set
    attention_bias and use_qk_norm, and the transformers defaults (false) would undercount."""
    if f.raw(key) is None:
        raise f.error(key, "missing: the parameter count depends on it (the published configs "
                      "state it; an abbreviated copy does not); pass --weight-memory")
    return f.flag(key)


def _torch_dtype(name, f: Fields, key: str) -> str:
    """A parameter dtype named as torch names it (float32, bfloat16, half, ...)."""
    dtype = canonical_dtype(name) if isinstance(name, str) else None
    if dtype not in STATE_DTYPES:
        raise f.error(key, f"{name!r}: expected float32, bfloat16 or float16")
    return dtype


def _norms(inv: _Inventory, block: tuple) -> None:
    mt, h = inv.mt, inv.hidden
    bias = mt in LAYERNORM_BIAS
    if mt == "nemotron-nas":  # one norm before each part a block has
        ffn = (inv.f.array("block_configs") or [{}])[inv.layer].get("ffn") or {}
        if block:
            inv.norm("input_layernorm", h)
        if not ffn.get("no_op"):
            inv.norm("post_attention_layernorm", h)
        return
    if mt in ("mamba", "falcon_mamba", "mamba2", "mamba_ssm", "nemotron_h"):
        inv.norm("norm", h, _mamba_ssm_layernorm(inv.f, mt))
    elif mt in ("falcon", "RefinedWeb", "RefinedWebModel"):
        new = inv.f.flag("new_decoder_architecture", mt == "RefinedWeb")
        two = new and (inv.f.opt_int("num_ln_in_parallel_attn") or 2) == 2
        inv.norm("ln_attn" if two else "input_layernorm", h, bias)
        if two or not inv.f.flag("parallel_attn", True):
            inv.norm("ln_mlp" if two else "post_attention_layernorm", h, bias)
    elif mt in PARALLEL_BLOCK and mt != "gpt_neox":
        inv.norm("input_layernorm", h)
    else:
        inv.norm("input_layernorm", h, bias)
        inv.norm("post_attention_layernorm", h, bias)
        if mt in FOUR_NORMS:
            inv.norm("pre_feedforward_layernorm", h)
            inv.norm("post_feedforward_layernorm", h)


def _mamba_ssm_layernorm(f: Fields, mt: str) -> bool:
    """mamba_ssm's ``rms_norm`` false selects LayerNorm (a bias per norm); the HF Mamba
    classes carry the key along and always use RMSNorm."""
    if mt in ("mamba", "falcon_mamba", "mamba2"):
        f.get("rms_norm")
    return mt == "mamba_ssm" and not f.flag("rms_norm", True)


def _siglip_tower(inv: _Inventory, v: Fields, text_hidden: int) -> None:
    """SigLIP vision encoder + Gemma-3's projector (transformers ``SiglipVisionModel``,
    ``Gemma3MultiModalProjector``): patch conv, position embeddings, per layer q/k/v/o and
    fc1/fc2 with biases and two LayerNorms, a post LayerNorm; then ``mm_input_projection``
    (vision hidden x text hidden) and ``mm_soft_emb_norm``. Gemma-3-27B: 416,866,032 +
    6,194,304 = 423,060,336, the published total minus the text model."""
    h, inter = v.integer("hidden_size"), v.integer("intermediate_size")
    patch, image = v.integer("patch_size"), v.integer("image_size")
    if v.flag("vision_use_head"):  # Gemma-3's checkpoints have no attention-pooling head
        raise v.error("vision_use_head", "true: SigLIP's pooling head is not counted; pass "
                      "--weight-memory")
    inv.add("vision.patch_embedding.weight", h, 3 * patch * patch)
    inv.add("vision.patch_embedding.bias", h)
    inv.add("vision.position_embedding", (image // patch) ** 2, h)
    count = v.integer("num_hidden_layers")
    for name in ("q_proj", "k_proj", "v_proj"):
        inv.add(f"vision.layers.self_attn.{name}", h, h + 1, count=count, shard="column")
    inv.add("vision.layers.self_attn.out_proj", h, h, count=count, shard="row")
    inv.add("vision.layers.self_attn.out_proj.bias", h, count=count)
    inv.add("vision.layers.mlp.fc1", inter, h + 1, count=count, shard="column")
    inv.add("vision.layers.mlp.fc2", h, inter, count=count, shard="row")
    inv.add("vision.layers.mlp.fc2.bias", h, count=count)
    inv.add("vision.layers.layer_norms", 4 * h, count=count)
    inv.add("vision.post_layernorm", 2 * h)
    inv.add("multi_modal_projector.mm_input_projection_weight", text_hidden, h, shard="column")
    inv.add("multi_modal_projector.mm_soft_emb_norm", h)


def _gemma4_vision_tower(inv: _Inventory, v: Fields, text_hidden: int) -> None:
    """Gemma-4's vision encoder (transformers ``Gemma4VisionModel``, which vLLM runs through
    ``AutoModel``, unsharded) and ``embed_vision``: a bias-free patch projection (3 x patch^2 in),
    two position tables (x and y) of ``position_embedding_size`` rows, per layer bias-free
    q/k/v/o, q and k norms, a gated MLP and four norms, the standardize scale and bias, the
    clipped linears' bounds (``use_clipped_linears``), and the projection to the text width (its
    pre-norm has no weight). 26B-A4B: 568,768,560 + 2,304; E2B / E4B: 167,364,608 + 448 bounds
    + 768 x text hidden."""
    h, inter = v.integer("hidden_size"), v.integer("intermediate_size")
    heads, d = v.integer("num_attention_heads"), v.integer("head_dim")
    kv = v.integer("num_key_value_heads")
    if v.flag("attention_bias"):
        raise v.error("attention_bias", "true: vision attention biases are not counted")
    patch, count = v.integer("patch_size"), v.integer("num_hidden_layers")
    if v.flag("use_clipped_linears"):  # Gemma4ClippableLinear: four loaded bounds on each of
        # q / k / v / o and gate / up / down (E models: 16 layers x 28 = 448)
        inv.add("vision.layers.clip_bounds", 7 * 4, count=count)
    v.opt_int("global_head_dim")  # the vision layers are all alike (head_dim)
    inv.add("vision.patch_embedder.input_proj", h, 3 * patch * patch)
    inv.add("vision.patch_embedder.position_embedding_table", 2 * v.integer(
        "position_embedding_size"), h)
    inv.add("vision.layers.self_attn.qkv", (heads + 2 * kv) * d, h, count=count)
    inv.add("vision.layers.self_attn.o_proj", h, heads * d, count=count)
    inv.add("vision.layers.self_attn.qk_norms", 2 * d, count=count)
    inv.add("vision.layers.mlp", 3 * inter, h, count=count)
    inv.add("vision.layers.norms", 4 * h, count=count)
    if v.flag("standardize"):
        inv.add("vision.std_scale_bias", 2 * h)
    inv.add("embed_vision.embedding_projection", text_hidden, h)


def _moonvit_tower(inv: _Inventory, v: Fields, text_hidden: int) -> None:
    """Kimi-K2.5's MoonViT and patch-merger projector (vLLM kimi_k25_vit.py): a patch conv
    with bias, a learned height x width position table (and an fp32 sin-cos time table, one
    row per ``init_pos_emb_time`` frame), per layer two LayerNorms, fused qkv and wo, fc0 and
    fc1, all with biases, split over TP when its heads divide by tp (else whole: vLLM's
    data-parallel fallback); a final LayerNorm; then the projector (LayerNorm, two linears
    with biases over the 2 x 2 merged patches), replicated. 471,143,920 parameters (the
    transformers count) + the 4 x 1152 time table."""
    h, inter = v.integer("vt_hidden_size"), v.integer("vt_intermediate_size")
    heads, layers = v.integer("vt_num_attention_heads"), v.integer("vt_num_hidden_layers")
    patch = v.integer("patch_size")
    if v.raw("mm_projector_type") != "patchmerger":
        raise v.error("mm_projector_type", f"{v.raw('mm_projector_type')!r}: only the "
                      "patchmerger projector is counted; pass --weight-memory")
    kernel = v.array("merge_kernel_size")
    if not kernel or len(kernel) != 2 or not all(isinstance(k, int) and 0 < k <= 64
                                                 for k in kernel):
        raise v.error("merge_kernel_size", "expected two positive integers")
    if v.raw("pos_emb_type") != "divided_fixed":
        raise v.error("pos_emb_type", f"{v.raw('pos_emb_type')!r} is not counted; pass "
                      "--weight-memory")
    merged = h * kernel[0] * kernel[1]
    v.integer("mm_hidden_size"), v.integer("text_hidden_size")
    v.get("projector_hidden_act"), v.get("projector_ln_eps")  # no parameters of their own
    inv.add("vision.patch_embed.proj", h, 3 * patch * patch + 1)
    inv.add("vision.pos_emb.weight", v.integer("init_pos_emb_height")
            * v.integer("init_pos_emb_width"), h)
    inv.add("vision.pos_emb.time_weight", v.integer("init_pos_emb_time"), h, dtype="fp32")
    for name, rows, cols, shard in (("attn.wqkv", 3 * h, h, "column"), ("attn.wo", h, h, "row"),
                                    ("mlp.fc0", inter, h, "column"),
                                    ("mlp.fc1", h, inter, "row")):
        inv.vit_linear(f"vision.layers.{name}", rows, cols, shard, layers, split_heads=heads)
    inv.add("vision.layers.norms", 4 * h, count=layers)
    inv.add("vision.final_layernorm", 2 * h)
    inv.add("mm_projector.pre_norm", 2 * h)
    inv.add("mm_projector.linear_1", merged, merged + 1)
    inv.add("mm_projector.linear_2", text_hidden, merged + 1)


def _qwen_vision_tower(inv: _Inventory, v: Fields) -> None:
    """Qwen3.5's vision encoder (Qwen3-VL style ``model.visual``): a Conv3d patch embedding
    with bias, learned position embeddings, ``depth`` blocks (two LayerNorms, qkv and proj with
    biases, a two-layer MLP with biases) and the patch merger (LayerNorm, fc1 over the merged
    patches, fc2 to the text width), and Qwen3-VL's deepstack mergers. Qwen3.5-27B: 460,730,096;
    Qwen3-VL-30B-A3B: 538,631,408."""
    d, inter, depth = v.integer("hidden_size"), v.integer("intermediate_size"), v.integer("depth")
    patch, temporal = v.integer("patch_size"), v.integer("temporal_patch_size")
    channels = v.integer("in_channels", default=3, why="RGB")
    merged = d * v.integer("spatial_merge_size") ** 2
    out = v.integer("out_hidden_size")
    inv.add("vision.patch_embed.proj.weight", d, channels * temporal * patch * patch)
    inv.add("vision.patch_embed.proj.bias", d)
    inv.add("vision.pos_embed.weight", v.integer("num_position_embeddings"), d)
    # vLLM splits the ViT's linears over TP (mm_encoder_tp_mode "weights", the default):
    # qkv and fc1 by rows (with their biases), proj and fc2 by columns (bias replicated)
    inv.add("vision.blocks.norms", 4 * d, count=depth)
    inv.vit_linear("vision.blocks.attn.qkv", 3 * d, d, "column", depth)
    inv.vit_linear("vision.blocks.attn.proj", d, d, "row", depth)
    inv.vit_linear("vision.blocks.mlp.linear_fc1", inter, d, "column", depth)
    inv.vit_linear("vision.blocks.mlp.linear_fc2", d, inter, "row", depth)
    # the merger, then Qwen3-VL's deepstack mergers (vLLM qwen3_vl.py deepstack_merger_list):
    # one per index, LayerNorm after the shuffle (over the merged width), fc1 and fc2
    stack = len(v.array("deepstack_visual_indexes") or [])
    for name, norm, count in (("vision.merger", 2 * d, 1),
                              ("vision.deepstack_merger", 2 * merged, stack)):
        if count:
            inv.add(f"{name}.norm", norm, count=count)
            inv.vit_linear(f"{name}.linear_fc1", merged, merged, "column", count)
            inv.vit_linear(f"{name}.linear_fc2", out, merged, "row", count)


def _own_module(model: Model, f: Fields, mt: str):
    """The families whose inventory lives in a module of its own: (inventory, (fields read,
    tied head, extra part's name, notes)), or None for the others."""
    inv = _Inventory(f, mt, model.hidden_size)
    if mt == "lfm2":  # short convs, the FFN width rule, an always-tied head
        from .params_lfm2 import lfm2_tensors
        return inv, ([f], True, "", lfm2_tensors(inv, model))
    if mt == "lfm2_moe":  # LFM2's mixers, dense then routed feed-forwards, a tied head
        from .params_lfm2 import lfm2_moe_tensors
        return inv, ([f], True, "", lfm2_moe_tensors(inv, model))
    if mt == "zamba2":  # shared transformer blocks with per-layer adapters, an always-tied head
        from .params_zamba2 import zamba2_tensors
        return inv, ([f], True, "", zamba2_tensors(inv, model))
    if mt in ("minimax_m1", "minimax_text_01"):  # lightning layers, an fp32 LM head
        from .params_minimax_m1 import minimax_m1_tensors
        return inv, ([f], False, "", minimax_m1_tensors(inv, model))
    if mt == "gemma4_text":  # the E models: per-layer embeddings, KV sharing, audio tower
        from .params_gemma4 import gemma4_e_tensors, is_gemma4_e
        if is_gemma4_e(f, model):
            read, tied, notes = gemma4_e_tensors(inv, model)
            return inv, (read, tied, "", notes)
    if mt == "gemma3n_text":  # AltUp, LAuReL, per-layer embeddings, towers
        from .params_gemma3n import gemma3n_tensors
        read, notes = gemma3n_tensors(inv, model)
        return inv, (read, True, "", notes)
    if mt == "deepseek_v4":  # compressors, hyper-connections, hash routing
        from .params_dsv4 import deepseek_v4_tensors
        mtp_name, notes = deepseek_v4_tensors(inv, model)
        return inv, ([f], False, mtp_name, notes)
    if mt == "bailing_hybrid":  # Ling-3.0: KDA + gated MLA, fp32 routers, an MLA MTP layer
        from .params_bailing import bailing_v3_tensors
        read, mtp_name, notes = bailing_v3_tensors(inv, model)
        return inv, (read, False, mtp_name, notes)
    from .params_kimi_k3 import is_kimi_k3, kimi_k3_tensors

    if mt == "kimi_linear" and is_kimi_k3(model):  # latent MoE, full-rank KDA gate, AttnRes
        read, mtp_name, notes = kimi_k3_tensors(inv, model)
        return inv, (read, False, mtp_name, notes)
    return None


def weight_inventory(model: Model) -> Weights:
    """Every parameter tensor of ``model`` (raises ConfigError for families not modelled)."""
    f, mt = text_fields(model.config, model.source)
    prefix = f.prefix
    own = _own_module(model, f, mt)
    if own is not None:
        return _weights(own[0], model, *own[1])
    if mt not in SUPPORTED:
        raise ConfigError(f"parameter count for model_type {mt!r} is not modelled; pass "
                          "--weight-memory", source=model.source, field=prefix + "model_type")
    hidden = model.hidden_size
    if mt in VOCAB_DEFAULTS:
        vocab = f.integer("vocab_size", default=VOCAB_DEFAULTS[mt], why=f"{mt} config class default")
    else:
        vocab = f.integer("vocab_size")
    pad = f.integer("pad_vocab_size_multiple", default=8, why="mamba_ssm MambaConfig default") \
        if mt == "mamba_ssm" else None
    if pad:  # mamba_ssm's MambaLMHeadModel pads the embedding rows (50,277 -> 50,288 by 16)
        vocab = cdiv(vocab, pad) * pad
    elif mt in ("mamba", "falcon_mamba"):
        f.get("pad_vocab_size_multiple")  # HF-format checkpoints carry the padded vocab_size
    if mt == "mamba_ssm" and f.opt_int("d_intermediate", minimum=0):
        raise f.error("d_intermediate", "mamba_ssm blocks with an MLP are not counted; pass "
                      "--weight-memory")
    inv = _Inventory(f, mt, hidden)
    inv.place = "embed"
    # the tensors vLLM 0.34 builds on every pipeline rank (no first / last rank test), with
    # the model file and line of each: params_stages.VLLM_STAGE_RULES (by release:
    # params_stages.vllm_stage_weights re-marks them for the release planned)
    every = vllm_every_stage(mt)
    inv.add("embed_tokens", vocab, hidden, shard="vocab", every_stage="embed" in every)
    pattern = None
    if mt == "nemotron_h":
        from .ssm_families import _nemotron_pattern
        pattern = _nemotron_pattern(f)
    if mt == "falcon_h1":
        _falcon_h1_keys(f)
    for i, block in enumerate(model.layers):
        inv.place, inv.layer = "layer", i
        for spec in block:
            inv.mixer(spec)
        _norms(inv, block)
        _ffn(inv, i, block, pattern)
    inv.place = "head"
    inv.norm("final_norm", hidden, mt in LAYERNORM_BIAS or _mamba_ssm_layernorm(f, mt),
             every_stage="norm" in every)
    if mt == "mamba_ssm":  # mamba_ssm MambaConfig: tie_embeddings, default True
        tied = f.flag("tie_embeddings", True)
    else:
        tied = f.flag("tie_word_embeddings", TIE_DEFAULTS.get(mt, False))
    notes: list[str] = []
    if not tied and mt in LOGITS_FROM_EMBEDDING:
        tied = True
        notes.append(f"tie_word_embeddings false not applied: {LOGITS_FROM_EMBEDDING[mt]}")
    if not tied:
        inv.add("lm_head", vocab, hidden, shard="vocab", every_stage="head" in every)
    extra_name = ""
    from .hf_config import MAX_MTP_LAYERS

    mtp = f.opt_int("num_nextn_predict_layers", minimum=0, maximum=MAX_MTP_LAYERS) or 0
    if mtp and model.layers:
        inv.place = "extra"
        mixers = list(model.layers[-1])
        index = next((s for b in model.layers for s in b if isinstance(s, LightningIndexer)), None)
        if index is not None and index not in mixers:
            mixers.append(index)  # an MTP layer always computes its own top-k (vLLM)
        for j in range(mtp):
            inv.layer = len(model.layers) + j
            for spec in mixers:
                inv.mixer(spec)
            _norms(inv, model.layers[-1])
            _ffn(inv, len(model.layers) - 1, model.layers[-1], pattern)
            for name in ("enorm", "hnorm", "shared_head.norm"):
                inv.norm(f"mtp.{name}", hidden)
            inv.linear("mtp.eh_proj", hidden, 2 * hidden, "replicated", quantized=False)
            if mt not in MTP_SHARES_EMBEDDINGS:
                inv.add("mtp.embed_tokens", vocab, hidden, shard="vocab")
                inv.add("mtp.shared_head.head", vocab, hidden, shard="vocab")
        extra_name = f"MTP module (num_nextn_predict_layers={mtp}), loaded only as a speculative draft"
    qmtp = (f.opt_int("mtp_num_hidden_layers", minimum=0, maximum=MAX_MTP_LAYERS) or 0) \
        if mt in QWEN35 else 0
    if mt in QWEN35 and f.flag("mtp_use_dedicated_embeddings"):
        raise f.error("mtp_use_dedicated_embeddings", "true: an MTP block with its own embeddings "
                      "is not counted; pass --weight-memory")
    if qmtp:  # Qwen3.5: fc + three norms + full-attention decoder layer(s), shared embeddings
        inv.place = "extra"
        full_at = next(i for i, b in enumerate(model.layers) if b and b[0].kind == "full_attention")
        inv.linear("mtp.fc", hidden, 2 * hidden, "replicated", quantized=False)
        for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            inv.norm(f"mtp.{name}", hidden)
        for j in range(qmtp):
            inv.layer = len(model.layers) + j
            inv.mixer(model.layers[full_at][0])
            _norms(inv, model.layers[full_at])
            _ffn(inv, full_at, model.layers[full_at], pattern)
        extra_name = f"MTP module (mtp_num_hidden_layers={qmtp}), loaded only as a speculative draft"
    vision = model.config.get("vision_config")
    read = [f]
    if f.prefix and isinstance(vision, dict) and vision.get("model_type") == "siglip_vision_model" \
            and mt in ("gemma3", "gemma3_text"):
        inv.place = "embed"  # vLLM runs the encoder on the first pipeline stage
        read.append(Fields(vision, model.source, "vision_config."))
        _siglip_tower(inv, read[-1], hidden)
        notes.append("vision tower (SigLIP) and projector counted; kept in the model dtype")
    elif f.prefix and isinstance(vision, dict) and mt == "gemma4_text" \
            and vision.get("model_type") == "gemma4_vision":  # no audio here: params_gemma4
        inv.place = "embed"
        read.append(Fields(vision, model.source, "vision_config."))
        _gemma4_vision_tower(inv, read[-1], hidden)
        notes.append("vision tower (Gemma-4) and its projection counted; kept in the model dtype")
    elif f.prefix and isinstance(vision, dict) and model.config.get("model_type") == "kimi_k25":
        inv.place = "embed"
        read.append(Fields(vision, model.source, "vision_config."))
        _moonvit_tower(inv, read[-1], hidden)
        notes.append("vision tower (MoonViT) and projector counted; kept in the model dtype")
    elif f.prefix and isinstance(vision, dict) and mt in QWEN_VL_TOWER:
        inv.place = "embed"
        read.append(Fields(vision, model.source, "vision_config."))
        _qwen_vision_tower(inv, read[-1])
        notes.append("vision tower (Qwen3-VL style) and mergers counted; kept in the model dtype")
    elif f.prefix or isinstance(vision, dict) or mt in ("qwen2_vl", "qwen2_5_vl"):
        # Qwen2-VL's configs are flat (no text_config), its tower still loaded by vLLM
        notes.append("vision/audio towers of this multimodal model are not counted: the "
                     "weight figure holds the language model only (pass --weight-memory with "
                     "the whole checkpoint's bytes per GPU to include them)")
    if mt == "minimax_m2" and f.flag("use_mtp"):  # vLLM's minimax_m2.py loads no MTP weights
        f.opt_int("num_mtp_modules"), f.get("mtp_transformer_layers")
        notes.append("MTP modules (use_mtp) not counted: the released M2 / M2.5 checkpoints' "
                     "totals hold none, and vLLM loads none")
    return _weights(inv, model, read, tied, extra_name, notes)


def _weights(inv: _Inventory, model: Model, read: list[Fields], tied: bool, extra_name: str,
             notes: list[str]) -> Weights:
    """The inventory as ``Weights``, once no weight-relevant key is left unread."""
    prefix = inv.f.prefix
    left = unread_weight_keys(read, model.keys_read,
                              frozenset({"quantization_config", prefix + "quantization_config"}))
    if left:
        raise ConfigError(f"key(s) {', '.join(left)} shape the parameters of a {inv.mt!r} model "
                          "but no kvplan rule interprets them; pass --weight-memory",
                          source=model.source, field=left[0])
    assumed = [a for fl in read for a in fl.assumptions]  # library defaults the count took
    return Weights(tensors=tuple(inv.tensors), num_experts=inv.num_experts,
                   experts_per_token=inv.top_k, tied_embeddings=tied, extra_name=extra_name,
                   notes=tuple(dict.fromkeys([*notes, *assumed])))
