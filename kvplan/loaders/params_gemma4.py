"""Gemma-4's E models (gemma-4-E2B, gemma-4-E4B: ``model_type: gemma4`` with a ``gemma4_text``
``text_config``), as vLLM 0.34 allocates them (``vllm/model_executor/models/gemma4.py``,
``gemma4_mm.py``), with the towers vLLM builds through transformers' ``AutoModel``
(transformers 5.24 ``models/gemma4/modeling_gemma4.py``, ``configuration_gemma4.py``).

This module takes a ``gemma4_text`` model that uses any of the E-model features: per-layer
embeddings (``hidden_size_per_layer_input`` > 0; ``Gemma4TextConfig`` defaults it to 256),
KV sharing (``num_kv_shared_layers`` > 0), ``use_double_wide_mlp``, or an ``audio_config``.
The others (26B-A4B, 31B) keep ``hf_params``' rules. h = hidden_size, L =
num_hidden_layers, p = hidden_size_per_layer_input, S = L - num_kv_shared_layers (the layers
that compute K and V).

Text model (``Gemma4Model``):

- ``embed_tokens`` [vocab_size, h] and the per-layer embeddings ``embed_tokens_per_layer``
  [vocab_size_per_layer_input, L x p] (both ``VocabParallelEmbedding``: vocab split),
  ``per_layer_model_projection`` [L x p, h] (``ColumnParallelLinear``, output gathered; run on
  every token) and ``per_layer_projection_norm`` [p]. vLLM builds these, the final ``norm``
  [h] and the LM head on every pipeline stage (no first / last rank test in gemma4.py); the LM
  head is ``embed_tokens`` when ``tie_word_embeddings`` (the E checkpoints), else its own
  [vocab_size, h].
- every layer (``Gemma4DecoderLayer``), with its layer type's geometry (``per_layer_config``:
  sliding layers ``head_dim`` / ``num_key_value_heads``, full layers ``global_head_dim`` and,
  with ``attention_k_eq_v``, ``num_global_key_value_heads``): ``q_proj`` [heads x d, h]
  (column), ``o_proj`` [h, heads x d] (row), ``q_norm`` [d]; the first S layers also ``k_proj``
  / ``v_proj`` [kv_heads x d, h] (split by KV head; under ``attention_k_eq_v`` the V slot of
  the fused QKV is loaded with K and still held) and ``k_norm`` [d]; ``v_norm`` has no weight.
  A KV-sharing layer (index >= S) builds q_proj only: vLLM's ``_gemma4_layer_weights_mapper``
  drops the k_proj / v_proj / k_norm tensors the released checkpoints still ship for it. The
  MLP: gate / up [w, h] (column) and down [h, w] (row), w = intermediate_size, doubled on the
  KV-sharing layers when ``use_double_wide_mlp`` (``layer_idx >= first_kv_shared_layer_idx >
  0``; transformers' ``Gemma4TextMLP`` doubles the same layers). Four norms [h] (input,
  post-attention, pre- and post-feedforward); per-layer input ``per_layer_input_gate`` [p, h]
  and ``per_layer_projection`` [h, p] (``ReplicatedLinear``) and ``post_per_layer_input_norm``
  [h]; the loaded ``layer_scalar`` [1].

E2B (h 1536, L 35, S 15, p 256, 8 heads, 1 KV head, 256 / 512, MLP 6144, double-wide): a
sliding layer 0..14 holds (8 + 1 + 1) x 256 x 1536 + 1536 x 2048 + 2 x 256 = 7,078,400 in
attention and 3 x 6144 x 1536 = 28,311,552 in the MLP; a sliding sharing layer 8 x 256 x 1536
+ 1536 x 2048 + 256 = 6,291,712 and 3 x 12,288 x 1536 = 56,623,104; every layer 4 x 1536 +
2 x 256 x 1536 + 1536 + 1 = 794,113 more; the per-layer embedding 262,144 x 8,960 =
2,348,810,240.

Under the ``gemma4`` wrapper (``Gemma4ForConditionalGeneration``, towers on the first pipeline
stage, replicated, in the model dtype as kvplan counts every tower):

- the vision tower (``hf_params._gemma4_vision_tower``, with the clipped linears' four loaded
  bounds each) and ``embed_vision.embedding_projection`` [h, vision hidden_size]; E models:
  167,364,608 + 16 x 7 x 4 bounds + 768 x h.
- the audio tower (``Gemma4AudioModel``, a Conformer; d = hidden_size, H = heads, c0 / c1 =
  ``subsampling_conv_channels``, k = ``conv_kernel_size``): two bias-free 3 x 3 convs (1 -> c0
  -> c1) each with a bias-free LayerNorm, ``input_proj_linear`` [d, (c0 // 4) x c1] (the
  formula transformers uses); per layer two feed-forwards (two norms, [4d, d], [d, 4d]),
  attention (q / k / v / post and ``relative_k_proj`` [d, d], ``per_dim_scale`` [d / H]), the
  light conv (two norms, ``linear_start`` [2d, d], a depthwise conv [d, k], ``linear_end``
  [d, d]) and three norms; the ten clipped linears of a layer hold four bounds each; then
  ``output_proj`` [output_proj_dims, d] with its bias, and ``embed_audio.embedding_projection``
  [h, output_proj_dims]. E models: 12 x (24 x 1024^2 + 13,312) + 1,086,752 + 1,574,400 =
  304,824,608 + 480 bounds, and 1536 x h.

Totals (transformers 5.24 ``Gemma4ForConditionalGeneration`` on the meta device counts the
parameters; kvplan adds the loaded buffers: 232 clipped linears x 4 bounds and one layer
scalar per layer): E2B 5,104,297,504 + 928 + 35 = 5,104,298,467; E4B 7,941,100,832 + 928 + 42
= 7,941,101,802. The Hub checkpoints hold the sharing layers' k / v / k_norm too (E2B 20
layers: 16 x (2 x 256 x 1536 + 256) + 4 x (2 x 512 x 1536 + 512) = 18,880,512 more), which
vLLM drops.

The wrapper's ``per_layer_embeddings`` buffer [max_num_batched_tokens, L, p] in the model
dtype is no checkpoint tensor: ``kvplan fit`` adds it to the weights (planning/fit.py
``_model_buffers``). Not counted: computed buffers (embed scales, the audio tower's
``inv_timescales`` and ``softcap``, rotary tables), ``--kv-sharing-fast-prefill``'s static
copies, and the towers under a quantized weight format: vLLM hands the E towers the quant
config (their widths divide by 64: ``_get_tower_quant_config``), kvplan keeps every tower in
the model dtype (the note says so), which overstates them under fp8. Refused: a MoE block
beside these features (no released Gemma-4 has both), a missing or non-Gemma-4
``vision_config`` under the wrapper, audio configs that are not integers where the tower needs
them.
"""

from __future__ import annotations

from ..core.errors import ConfigError
from ..core.model import Model
from .fields import Fields
from .geometry_families import gemma4_blocks

#: Gemma4TextConfig defaults (transformers 5.24) for the keys an E config may leave out
PLE_DIM_DEFAULT = 256
PLE_VOCAB_DEFAULT = 262_144
#: Gemma4ClippableLinear: input_min, input_max, output_min, output_max, loaded from the checkpoint
CLIP_BOUNDS = 4
#: clipped linears per audio layer: 2 x 2 feed-forward, q / k / v / post, linear_start / end
AUDIO_CLIPPED_PER_LAYER = 10


def ple_dim(f: Fields) -> int:
    """``hidden_size_per_layer_input``: absent means Gemma4TextConfig's 256 (vLLM reads the
    transformers config object, which carries the default); 0 turns the embeddings off."""
    return f.integer("hidden_size_per_layer_input", default=PLE_DIM_DEFAULT, minimum=0,
                     why="Gemma4TextConfig default")


def is_gemma4_e(f: Fields, model: Model) -> bool:
    """Whether the model uses a feature only the E models have (see the module docstring)."""
    return bool(model.kv_shared_layers or ple_dim(f) or f.flag("use_double_wide_mlp")
                or model.config.get("audio_config") is not None)


def _refuse_moe(f: Fields) -> None:
    experts = f.opt_int("num_experts")
    if experts or f.flag("enable_moe_block"):
        raise f.error("num_experts" if experts else "enable_moe_block",
                      "a MoE block beside per-layer embeddings (hidden_size_per_layer_input), "
                      "KV sharing (num_kv_shared_layers), use_double_wide_mlp or an audio_config "
                      "is not counted (no released Gemma-4 has both); pass --weight-memory")
    for key in ("top_k_experts", "moe_intermediate_size", "expert_intermediate_size"):
        f.get(key)  # MoE sizes: unused without experts


def _text(inv, f: Fields, model: Model, model_type: str) -> bool:
    """The language model's tensors; returns whether the LM head is tied."""
    h = inv.hidden
    blocks, _ = gemma4_blocks(f, model_type)
    layers = len(blocks)
    first_shared = layers - model.kv_shared_layers  # parsed with the cache (default 0)
    f.get("num_kv_shared_layers")
    _refuse_moe(f)
    vocab = f.integer("vocab_size")
    ple = ple_dim(f)
    inter = f.integer("intermediate_size")
    double = f.flag("use_double_wide_mlp")
    bias = f.flag("attention_bias")
    f.flag("attention_k_eq_v")  # read with the geometry; the V slot stays (see the docstring)
    tied = f.flag("tie_word_embeddings", True)  # Gemma4TextConfig default

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab", every_stage=True)
    if ple:
        ple_vocab = f.integer("vocab_size_per_layer_input", default=PLE_VOCAB_DEFAULT,
                              why="Gemma4TextConfig default")
        inv.add("embed_tokens_per_layer", ple_vocab, layers * ple, shard="vocab",
                every_stage=True)
        inv.linear("per_layer_model_projection", layers * ple, h, "column", per_token=True,
                   every_stage=True)
        inv.add("per_layer_projection_norm.weight", ple, every_stage=True, per_token=True)
    else:
        f.get("vocab_size_per_layer_input")  # only with per-layer embeddings
    inv.add("final_norm.weight", h, every_stage=True, per_token=True)
    for i, block in enumerate(blocks):
        inv.place, inv.layer = "layer", i
        spec = block[0]
        heads, kv, d, dv = (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim_k,
                            spec.head_dim_v)
        inv.linear("self_attn.q_proj", heads * d, h, "column", bias)
        if i < first_shared:
            inv.linear("self_attn.k_proj", kv * d, h, "kv", bias, kv_heads=kv)
            inv.linear("self_attn.v_proj", kv * dv, h, "kv", bias, kv_heads=kv)
            inv.norm("self_attn.k_norm", d)
        inv.linear("self_attn.o_proj", h, heads * dv, "row", bias)
        inv.norm("self_attn.q_norm", d)
        inv.mlp("mlp", inter * (2 if double and i >= first_shared else 1))
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            inv.norm(name, h)
        if ple:
            inv.linear("per_layer_input_gate", ple, h, "replicated")
            inv.linear("per_layer_projection", h, ple, "replicated")
            inv.norm("post_per_layer_input_norm", h)
        inv.add("layer_scalar", 1)  # a loaded buffer
    if not tied:  # Gemma4ForCausalLM's own ParallelLMHead, built on every stage, read each step
        inv.place = "head"
        inv.add("lm_head", vocab, h, shard="vocab", every_stage=True)
    return tied


def _audio_tower(inv, a: Fields, text_hidden: int) -> None:
    """``Gemma4AudioModel`` and ``embed_audio`` (see the module docstring)."""
    d, heads = a.integer("hidden_size"), a.integer("num_attention_heads")
    if d % heads:
        raise a.error("num_attention_heads", f"{heads} does not divide hidden_size = {d}")
    layers, kernel = a.integer("num_hidden_layers"), a.integer("conv_kernel_size")
    channels = a.array("subsampling_conv_channels")
    if channels is None or len(channels) != 2 or not all(
            isinstance(c, int) and not isinstance(c, bool) and 4 <= c <= 65_536 for c in channels):
        raise a.error("subsampling_conv_channels", "expected two channel counts of at least 4 "
                      f"(the two subsampling convs transformers builds), got {channels!r}")
    out = a.integer("output_proj_dims")
    if a.has("use_clipped_linears"):
        clipped = a.flag("use_clipped_linears")
    else:
        clipped = True
        a.assume(f"{a.prefix}use_clipped_linears = True (Gemma4AudioConfig default)")
    for key in ("hidden_act", "residual_weight", "gradient_clipping", "attention_chunk_size",
                "attention_context_left", "attention_context_right", "attention_logit_cap",
                "attention_invalid_logits_value"):
        a.get(key)  # computation only: no tensor
    c0, c1 = channels
    inv.add("audio_tower.subsample.layer0.conv", c0, 3 * 3)
    inv.add("audio_tower.subsample.layer1.conv", c1, c0 * 3 * 3)
    inv.add("audio_tower.subsample.norms", c0 + c1)
    inv.add("audio_tower.subsample.input_proj_linear", d, (c0 // 4) * c1)
    inv.add("audio_tower.layers.feed_forward.ffw_layer_1", 4 * d, d, count=2 * layers)
    inv.add("audio_tower.layers.feed_forward.ffw_layer_2", d, 4 * d, count=2 * layers)
    inv.add("audio_tower.layers.self_attn.q_k_v_post_relative_k", 5 * d, d, count=layers)
    inv.add("audio_tower.layers.self_attn.per_dim_scale", d // heads, count=layers)
    inv.add("audio_tower.layers.lconv1d.linear_start_end", 3 * d, d, count=layers)
    inv.add("audio_tower.layers.lconv1d.depthwise_conv1d", d, kernel, count=layers)
    # 2 per feed-forward, the light conv's pre and conv norms, pre- / post-attention and out
    inv.add("audio_tower.layers.norms", 9 * d, count=layers)
    if clipped:
        inv.add("audio_tower.layers.clip_bounds", AUDIO_CLIPPED_PER_LAYER * CLIP_BOUNDS,
                count=layers)
    inv.add("audio_tower.output_proj.weight", out, d)
    inv.add("audio_tower.output_proj.bias", out)
    inv.add("embed_audio.embedding_projection", text_hidden, out)


def _tower_fields(model: Model, key: str, model_type: str) -> Fields:
    value = model.config.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"{'missing' if value is None else 'not an object'}: vLLM's "
                          "Gemma4ForConditionalGeneration builds this tower from the config; "
                          "state it, or pass --weight-memory", source=model.source, field=key)
    fields = Fields(value, model.source, key + ".")
    if fields.raw("model_type", model_type) != model_type:
        raise fields.error("model_type", f"{fields.raw('model_type')!r}: expected {model_type}")
    return fields


def gemma4_e_tensors(inv, model: Model) -> tuple[list[Fields], bool, list[str]]:
    """Add every tensor of a Gemma-4 E model to ``inv`` (an ``hf_params._Inventory``); returns
    the Fields read (for the unread-key check), whether the LM head is tied, and the notes."""
    from .hf_params import _gemma4_vision_tower

    f = inv.f
    tied = _text(inv, f, model, "gemma4_text")
    read, notes = [f], []
    if f.prefix:  # the gemma4 wrapper: vLLM's Gemma4ForConditionalGeneration
        inv.place, inv.layer = "embed", 0
        v = _tower_fields(model, "vision_config", "gemma4_vision")
        _gemma4_vision_tower(inv, v, inv.hidden)
        read.append(v)
        towers = "vision tower (Gemma-4)"
        if model.config.get("audio_config") is not None:
            a = _tower_fields(model, "audio_config", "gemma4_audio")
            _audio_tower(inv, a, inv.hidden)
            read.append(a)
            towers += " and audio tower (Conformer)"
        notes.append(f"{towers} and their projections counted; kept in the model dtype")
    elif model.config.get("audio_config") is not None:
        raise ConfigError("an audio_config beside a top-level gemma4_text config: vLLM's "
                          "Gemma4ForCausalLM builds no towers; not counted, pass --weight-memory",
                          source=model.source, field="audio_config")
    return read, tied, notes


def check_vllm_pipeline(model: Model, pp: int) -> None:
    """What vLLM 0.34 refuses at load when a KV-sharing layer and the layer whose K and V it
    reads sit on different pipeline stages: each rank builds only its own layers
    (``make_layers``), and ``Attention`` checks the target in its rank's forward context
    (``validate_kv_sharing_target``, vllm/model_executor/layers/attention/attention.py: "is not
    a valid Attention layer in the model"). A sharing layer j >= S reads the last layer below S
    of its own type (gemma4.py ``kv_sharing_target_layer_name``), so the stage holding j must
    also hold that target. E2B (35 layers, S 15, targets 13 sliding / 14 full) at pp 2: stages
    0-17 and 18-34, layer 18 reads layer 13 on stage 0: refused. E4B (42 layers, S 24, targets
    22 / 23) at pp 2: stages 0-20 and 21-41, every sharing layer beside its target: served; at
    pp 3 (28-41 against 22 / 23 on stage 1) refused."""
    if pp <= 1 or not model.kv_shared_layers:
        return
    from ..core.errors import ParallelismError
    from ..core.parallel import pp_stages
    from .hf_config import text_fields

    f, _ = text_fields(model.config, model.source)
    _, kinds = gemma4_blocks(f, "gemma4_text")
    first = len(kinds) - model.kv_shared_layers
    target = {k: max(i for i in range(first) if kinds[i] == k) for k in set(kinds[first:])}
    stages = pp_stages(len(kinds), pp)
    for s, stage in enumerate(stages):
        for j in range(max(stage.start, first), stage.stop):
            t = target[kinds[j]]
            if t < stage.start:
                home = next(i for i, r in enumerate(stages) if t in r)
                raise ParallelismError(
                    f"pp={pp}: stage {s} (layers {stage.start}-{stage.stop - 1}) holds KV-sharing "
                    f"layer {j}, which reads layer {t}'s K and V on stage {home}; vLLM's Attention "
                    "refuses a KV-sharing target outside its own stage "
                    "(validate_kv_sharing_target): use a pp that keeps layers "
                    f"{min(target.values())}-{len(kinds) - 1} on one stage, or --pp 1",
                    field="pp")
