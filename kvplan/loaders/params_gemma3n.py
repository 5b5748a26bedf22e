"""Gemma-3n's parameter inventory (``model_type: gemma3n_text``, alone or under a ``gemma3n``
wrapper), as vLLM 0.34 allocates it (``vllm/model_executor/models/gemma3n.py``,
``gemma3n_mm.py``), with the two towers vLLM builds through transformers' ``AutoModel``
(transformers 5.24 ``models/gemma3n/modeling_gemma3n.py``; the vision tower is timm 1.0.31's
``mobilenetv5_300m_enc``, ``timm/models/mobilenetv5.py`` and ``_efficientnet_blocks.py``).

Text model (``Gemma3nTextModel``; h = hidden_size, L = num_hidden_layers, p =
hidden_size_per_layer_input, n = altup_num_inputs):

- ``embed_tokens`` [vocab_size, h] and the per-layer embeddings ``embed_tokens_per_layer``
  [vocab_size_per_layer_input, L x p] (both ``VocabParallelEmbedding``: vocab split);
  ``per_layer_model_projection`` [L x p, h] (column, output gathered) and
  ``per_layer_projection_norm`` [p]; n - 1 ``altup_projections`` and n - 1
  ``altup_unembed_projections`` [h, h] (column, gathered); the final ``norm`` [h]. The LM head
  is ``embed_tokens`` (``compute_logits`` reads it): tied, whatever the config says.
- every layer: AltUp (``Gemma3nAltUp``, replicated): ``correction_coefs`` [n, n],
  ``prediction_coefs`` [n^2, n], ``modality_router`` [n, h], ``router_norm`` [h] and an fp32
  ``correct_output_scale`` [h]; attention: ``q_proj`` [heads x head_dim, h] (column), on the
  first L - num_kv_shared_layers layers also ``k_proj`` / ``v_proj`` [kv_heads x head_dim, h]
  (split by KV head) and ``k_norm`` [head_dim], ``o_proj`` [h, heads x head_dim] (row),
  ``q_norm`` [head_dim]; biases on q / k / v / o when ``attention_bias``; ``v_norm`` has no
  weight. A KV-sharing layer builds q_proj only: vLLM drops the k / v / k_norm tensors the
  original checkpoints still ship for it (``_kv_sharing_weights_mapper``). The MLP: gate / up
  [intermediate_size[i], h] (column) and down (row), the width per layer (a list, or one int
  for all as ``Gemma3nTextConfig`` broadcasts it); ``activation_sparsity_pattern`` picks the
  activation kernel only. LAuReL: ``linear_left`` [laurel_rank, h] (column), ``linear_right``
  [h, laurel_rank] (row), ``post_laurel_norm`` [h]. Per-layer input: ``per_layer_input_gate``
  [p, h] and ``per_layer_projection`` [h, p] (both replicated: vLLM's ``ReplicatedLinear``);
  five norms [h] (input, post-attention, pre- and post-feedforward, post-per-layer-input).

E4B (h 2048, L 35, 15 sharing, p 256, n 4, rank 64, MLP 16,384): a full layer 112,484,944,
a sharing layer 112,484,944 - 2 x 512 x 2048 - 256 = 110,387,536, the per-layer embedding
262,144 x 8,960 = 2,348,810,240; text model 6,835,235,568 (transformers' Gemma3nForCausalLM).

Under the wrapper, ``Gemma3nForConditionalGeneration`` also builds (all on the first stage):

- ``embed_vision`` and ``embed_audio`` (``Gemma3nMultimodalEmbedder``): ``embedding``
  [vocab_size, tower width] (vocab split), ``hard_embedding_norm`` and ``soft_embedding_norm``
  [tower width], ``embedding_projection`` [h, tower width] (row, built without the quant
  config: kept in the model dtype); the post-projection norm has no weight. E4B: 4,460,544 and
  3,345,408.
- the audio tower (``Gemma3nAudioEncoder``, replicated, model dtype), d = hidden_size, H =
  conf_num_attention_heads: two bias-free Conv2d (1 -> c0 -> c1 channels, ``sscp_conv_*``
  kernels) each with a cumulative group norm [c], ``input_proj_linear`` [d, c1 x f1] where
  f_out = (f_in + 2 - kernel_w) // stride_w + 1 from ``input_feat_size``; per Conformer block
  (``conf_num_hidden_layers``) two feed-forwards (two norms, [4d, d] and [d, 4d]), attention
  (two norms, ``pos_proj`` / q / k / v [H x d / H, d], ``per_dim_scale`` [d / H], ``post``
  [d, d]), the light conv (two norms, ``linear_start`` [2d, d], a depthwise conv [d,
  conf_conv_kernel_size], ``linear_end`` [d, d]) and a norm. E4B: 12 x 56,644,800 + 1,611,040 =
  681,348,640.
- the vision tower (transformers' ``TimmWrapperModel`` of timm's ``mobilenetv5_300m_enc``, no
  classifier, replicated, model dtype): a 3 x 3 stem conv (with bias) and norm, the blocks of
  ``MOBILENETV5_300M`` below (bias-free convs, RMSNorm2d weights, a layer scale per UIR and
  attention block) and the multi-scale fusion adapter over the last two stages (640 + 1280 in,
  3840 wide, 2048 out, and a norm). 294,126,912 (timm's count).

The wrapper's total for E4B is 7,818,517,072, transformers' Gemma3nForConditionalGeneration;
Google's E4B-it checkpoint holds 7,849,978,192 (the Hub's safetensors total): the 31,461,120
more are the 15 sharing layers' k / v / k_norm tensors (15 x (2 x 512 x 2048 + 256)), which
vLLM drops.

The wrapper's ``per_layer_embeddings`` buffer [max_num_batched_tokens, L, p] in the model
dtype (17,920 B per batched token for E4B) is no checkpoint tensor: ``kvplan fit`` adds it to
the weights (planning/fit.py ``_model_buffers``). Not modelled: ``--kv-sharing-fast-prefill``'s
static copies; the scalar embed scales. Other timm architectures, timm ``model_args``, and vision / audio
configs left to their defaults are refused.
"""

from __future__ import annotations

from ..core.errors import ConfigError
from ..core.model import Model
from .fields import Fields

#: timm 1.0.31 ``_gen_mobilenet_v5`` arch_def for ``mobilenetv5_300m_enc``, one string per
#: block (``_decode_block_str``: type, r repeats, a / k depthwise start / middle kernels, s
#: stride, e expansion, c out channels; mqa: k kv down-conv kernel, h heads, v kv stride, d
#: key = value width). Stem 64 channels.
MOBILENETV5_300M: tuple[tuple[str, ...], ...] = (
    ("er_r1_k3_s2_e4_c128", "er_r1_k3_s1_e4_c128", "er_r1_k3_s1_e4_c128"),
    ("uir_r1_a3_k5_s2_e6_c256", "uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256",
     "uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256"),
    ("uir_r1_a5_k5_s2_e6_c640",) + ("uir_r1_a5_k0_s1_e4_c640",) * 7
    + ("uir_r1_a0_k0_s1_e1_c640",)
    + ("mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640") * 14,
    ("uir_r1_a5_k5_s2_e6_c1280",)
    + ("mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280") * 19,
)
MOBILENETV5_ARCH = "mobilenetv5_300m_enc"
MOBILENETV5_STEM = 64
#: ``MobileNetV5Encoder.num_features``: the fusion adapter's output width (fixed in timm)
MOBILENETV5_OUT = 2048
#: the fusion adapter's expansion (``MobileNetV5MultiScaleFusionAdapter`` default)
MSFA_EXPANSION = 2


def make_divisible(v: float, divisor: int = 8) -> int:
    """timm ``make_divisible`` (round to the nearest multiple, never 10 % below ``v``)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _block(spec: str) -> tuple[str, dict[str, int]]:
    kind, *ops = spec.split("_")
    return kind, {op[0]: int(op[1:]) for op in ops}


def mobilenetv5_tensors(stages=MOBILENETV5_300M) -> list[tuple[str, int, int]]:
    """(name, rows, cols) of every tensor of timm's MobileNetV5 encoder: convs as [out, in x
    kernel area] (depthwise: in 1), norms and layer scales as [width]."""
    out = [("vision_tower.conv_stem.conv", MOBILENETV5_STEM, 3 * 3 * 3 + 1),  # + bias
           ("vision_tower.conv_stem.norm", MOBILENETV5_STEM, 1)]
    chs, ends = MOBILENETV5_STEM, []
    for stage in stages:
        for spec in stage:
            kind, o = _block(spec)
            c, pre = o["c"], f"vision_tower.{kind}"
            if kind == "er":  # EdgeResidual: k x k expansion conv, 1 x 1 projection
                mid = make_divisible(chs * o["e"])
                out += [(f"{pre}.conv_exp", mid, chs * o["k"] ** 2), (f"{pre}.norm", mid + c, 1),
                        (f"{pre}.conv_pwl", c, mid)]
            elif kind == "uir":  # optional depthwise start / middle, 1 x 1 expand and project
                mid = make_divisible(chs * o["e"])
                if o["a"]:
                    out += [(f"{pre}.dw_start", chs, o["a"] ** 2), (f"{pre}.norm", chs, 1)]
                out += [(f"{pre}.pw_exp", mid, chs), (f"{pre}.norm", mid, 1)]
                if o["k"]:
                    out += [(f"{pre}.dw_mid", mid, o["k"] ** 2), (f"{pre}.norm", mid, 1)]
                out += [(f"{pre}.pw_proj", c, mid), (f"{pre}.norm", c, 1),
                        (f"{pre}.layer_scale", c, 1)]
            else:  # mqa: MobileAttention over MultiQueryAttention2d (one K and one V head)
                qd, kd = o["h"] * o["d"], o["d"]
                out += [(f"{pre}.norm", chs, 1), (f"{pre}.query", qd, chs)]
                for part in ("key", "value"):
                    if o.get("v", 1) > 1:  # a strided depthwise conv and norm first
                        out += [(f"{pre}.{part}.down_conv", chs, o["k"] ** 2),
                                (f"{pre}.norm", chs, 1)]
                    out.append((f"{pre}.{part}", kd, chs))
                out += [(f"{pre}.output", c, qd), (f"{pre}.layer_scale", c, 1)]
            chs = c
        ends.append(chs)
    fused = sum(ends[-2:])  # msfa_indices (-2, -1): the last two stages' outputs
    mid = make_divisible(fused * MSFA_EXPANSION)
    out += [("vision_tower.msfa.pw_exp", mid, fused), ("vision_tower.msfa.norm", mid, 1),
            ("vision_tower.msfa.pw_proj", MOBILENETV5_OUT, mid),
            ("vision_tower.msfa.norm", 2 * MOBILENETV5_OUT, 1)]
    return out


def _widths(f: Fields, num_layers: int) -> list[int]:
    """``intermediate_size``: one width per layer, or one for all (Gemma3nTextConfig)."""
    value = f.get("intermediate_size")
    if value is None:
        raise f.error("intermediate_size", "missing: needed to count the MLP parameters")
    if not isinstance(value, list):
        return [f.integer("intermediate_size")] * num_layers
    if len(value) != num_layers:
        raise f.error("intermediate_size", f"has {len(value)} entries for {num_layers} layers "
                      "(vLLM reads one per layer)")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise f.error(f"intermediate_size[{i}]", f"expected a positive integer, got {v!r}")
    return value


def _checks(f: Fields, num_layers: int) -> None:
    """Settings vLLM's Gemma-3n refuses, or builds with tensors not counted here."""
    if f.raw("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise f.error("hidden_activation", f"{f.raw('hidden_activation')!r}: vLLM's Gemma-3n "
                      "MLP runs gelu_pytorch_tanh only")
    if not f.flag("altup_correct_scale", True):  # Gemma3nTextConfig default; vLLM asserts it
        raise f.error("altup_correct_scale", "false: vLLM's Gemma-3n requires it")
    if not f.flag("tie_word_embeddings", True):
        raise f.error("tie_word_embeddings", "false: vLLM's Gemma-3n reads the logits from "
                      "embed_tokens (no LM head of its own); refused rather than guessed")
    pattern = f.array("activation_sparsity_pattern")  # the activation kernel, no tensor
    if pattern is not None and len(pattern) != num_layers:
        raise f.error("activation_sparsity_pattern", f"has {len(pattern)} entries for "
                      f"{num_layers} layers (vLLM reads one per layer)")
    f.get("altup_coef_clip"), f.get("final_logit_softcapping")  # computation only


def _text(inv, f: Fields, model: Model) -> None:
    h = inv.hidden
    layers = f.num_layers()
    _checks(f, layers)
    widths = _widths(f, layers)
    vocab, ple_vocab = f.integer("vocab_size"), f.integer("vocab_size_per_layer_input")
    ple = f.integer("hidden_size_per_layer_input")
    n = f.integer("altup_num_inputs", maximum=64)
    f.integer("altup_active_idx", default=0, minimum=0, maximum=n - 1,
              why="Gemma3nTextConfig default")  # which AltUp stream is computed: no tensor
    rank = f.integer("laurel_rank")
    heads, kv = f.integer("num_attention_heads"), f.integer("num_key_value_heads")
    d = f.integer("head_dim")
    bias = f.flag("attention_bias")
    f.get("num_kv_shared_layers")
    first_shared = layers - model.kv_shared_layers  # parsed with the cache (default 0)

    inv.place = "embed"
    inv.add("embed_tokens", vocab, h, shard="vocab")
    inv.add("embed_tokens_per_layer", ple_vocab, layers * ple, shard="vocab")
    inv.linear("per_layer_model_projection", layers * ple, h, "column", per_token=True)
    inv.norm("per_layer_projection_norm", ple)
    if n > 1:
        inv.linear("altup_projections", h, h, "column", count=n - 1, per_token=True)
        # vLLM keeps these on the text model (not the LM head); Gemma-3n declares no pipeline
        # support, so the first stage is where they sit (and their quantisation-skip names
        # stay their own, not lm_head's)
        inv.linear("altup_unembed_projections", h, h, "column", count=n - 1,
                   per_token=True)
    for i in range(layers):
        inv.place, inv.layer = "layer", i
        inv.linear("altup.correction_coefs", n, n, "replicated")
        inv.linear("altup.prediction_coefs", n * n, n, "replicated")
        inv.linear("altup.modality_router", n, h, "replicated")
        inv.norm("altup.router_norm", h)
        inv.add("altup.correct_output_scale", h, dtype="fp32")  # fp32 in vLLM's Gemma3nAltUp
        inv.linear("self_attn.q_proj", heads * d, h, "column", bias)
        if i < first_shared:
            inv.linear("self_attn.k_proj", kv * d, h, "kv", bias, kv_heads=kv)
            inv.linear("self_attn.v_proj", kv * d, h, "kv", bias, kv_heads=kv)
            inv.norm("self_attn.k_norm", d)
        inv.linear("self_attn.o_proj", h, heads * d, "row", bias)
        inv.norm("self_attn.q_norm", d)
        inv.mlp("mlp", widths[i])
        inv.linear("laurel.linear_left", rank, h, "column")
        inv.linear("laurel.linear_right", h, rank, "row")
        inv.norm("laurel.post_laurel_norm", h)
        inv.linear("per_layer_input_gate", ple, h, "replicated")
        inv.linear("per_layer_projection", h, ple, "replicated")
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm", "post_per_layer_input_norm"):
            inv.norm(name, h)
    inv.place = "head"
    inv.norm("final_norm", h)


def _embedder(inv, name: str, m: Fields, text_hidden: int) -> None:
    """``Gemma3nMultimodalEmbedder``: token table, two norms, the projection to the text."""
    width = m.integer("hidden_size")
    m.integer("vocab_offset", minimum=0)  # where its ids start: no tensor
    inv.add(f"{name}.embedding", m.integer("vocab_size"), width, shard="vocab")
    inv.add(f"{name}.hard_soft_embedding_norms", 2 * width)
    inv.add(f"{name}.embedding_projection", text_hidden, width, shard="row")


def _vision_tower(inv, v: Fields) -> None:
    if v.raw("architecture") != MOBILENETV5_ARCH:
        raise v.error("architecture", f"{v.raw('architecture')!r}: only timm's "
                      f"{MOBILENETV5_ARCH} (Gemma-3n's released encoder) is counted; pass "
                      "--weight-memory")
    if v.get("model_args") is not None:
        raise v.error("model_args", "timm model_args change the encoder; not counted, pass "
                      "--weight-memory")
    if v.integer("hidden_size") != MOBILENETV5_OUT:
        raise v.error("hidden_size", f"{v.raw('hidden_size')}: {MOBILENETV5_ARCH} outputs "
                      f"{MOBILENETV5_OUT} channels")
    v.get("do_pooling")  # pooling of the output: no tensor
    merged: dict[tuple[str, int, int], int] = {}
    for key in mobilenetv5_tensors():
        merged[key] = merged.get(key, 0) + 1
    for (name, rows, cols), count in merged.items():
        inv.add(name, rows, cols, count=count)


def _pair_list(a: Fields, key: str) -> list[list[int]]:
    value = a.array(key)
    if (value is None or len(value) != 2 or not all(
            isinstance(x, list) and len(x) == 2 and all(
                isinstance(y, int) and not isinstance(y, bool) and 0 < y <= 64 for y in x)
            for x in value)):
        raise a.error(key, f"expected two [time, frequency] pairs of positive integers (the "
                      f"two subsampling convs transformers builds), got {value!r}")
    return value


def _audio_tower(inv, a: Fields) -> None:
    d, heads = a.integer("hidden_size"), a.integer("conf_num_attention_heads")
    if d % heads:
        raise a.error("conf_num_attention_heads", f"{heads} does not divide hidden_size = {d}")
    blocks, kernel = a.integer("conf_num_hidden_layers"), a.integer("conf_conv_kernel_size")
    channels = a.array("sscp_conv_channel_size")
    if channels is None or len(channels) != 2 or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels):
        raise a.error("sscp_conv_channel_size", f"expected two positive channel counts (the "
                      f"two subsampling convs transformers builds), got {channels!r}")
    kernels, strides = _pair_list(a, "sscp_conv_kernel_size"), _pair_list(a, "sscp_conv_stride_size")
    freq = a.integer("input_feat_size")
    for (_, kw), (_, sw) in zip(kernels, strides, strict=True):  # padding 1 on each side
        freq = (freq + 2 - kw) // sw + 1
        if freq < 1:
            raise a.error("input_feat_size", "too narrow for the subsampling convs")
    a.get("sscp_conv_group_norm_eps")  # a norm constant
    c0, c1 = channels
    inv.add("audio_tower.subsample.conv_0", c0, kernels[0][0] * kernels[0][1])
    inv.add("audio_tower.subsample.conv_1", c1, c0 * kernels[1][0] * kernels[1][1])
    inv.add("audio_tower.subsample.norms", c0 + c1)
    inv.add("audio_tower.subsample.input_proj_linear", d, c1 * freq)
    inv.add("audio_tower.conformer.ffw_layers", 2 * 2 * 4 * d, d, count=blocks)
    inv.add("audio_tower.conformer.attention.pos_q_k_v_post", 5 * d, d, count=blocks)
    inv.add("audio_tower.conformer.attention.per_dim_scale", d // heads, count=blocks)
    inv.add("audio_tower.conformer.lconv1d.linear_start_end", 3 * d, d, count=blocks)
    inv.add("audio_tower.conformer.lconv1d.depthwise_conv1d", d, kernel, count=blocks)
    inv.add("audio_tower.conformer.norms", 9 * d, count=blocks)  # 4 ffw + 2 attn + 2 lconv + 1


def _tower_fields(model: Model, key: str, model_type: str) -> Fields:
    value = model.config.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"{'missing' if value is None else 'not an object'}: vLLM builds "
                          "Gemma-3n's towers from the config (transformers fills in its own "
                          "defaults); state it, or pass --weight-memory", source=model.source,
                          field=key)
    fields = Fields(value, model.source, key + ".")
    if fields.raw("model_type", model_type) != model_type:
        raise fields.error("model_type", f"{fields.raw('model_type')!r}: expected {model_type}")
    return fields


def gemma3n_tensors(inv, model: Model) -> tuple[list[Fields], list[str]]:
    """Add every Gemma-3n tensor to ``inv`` (an ``hf_params._Inventory``); returns the Fields
    read (for the unread-key check) and the notes. The LM head is always tied."""
    f = inv.f
    _text(inv, f, model)
    read, notes = [f], []
    if f.prefix:  # the gemma3n wrapper: vLLM's Gemma3nForConditionalGeneration
        v = _tower_fields(model, "vision_config", "gemma3n_vision")
        a = _tower_fields(model, "audio_config", "gemma3n_audio")
        inv.place, inv.layer = "embed", 0
        _vision_tower(inv, v)
        _embedder(inv, "embed_vision", v, inv.hidden)
        _audio_tower(inv, a)
        _embedder(inv, "embed_audio", a, inv.hidden)
        read += [v, a]
        notes += ["vision tower (timm MobileNetV5-300M), audio tower (Conformer) and their "
                  "embedders counted; kept in the model dtype"]
    return read, notes
