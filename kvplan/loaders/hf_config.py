"""Hugging Face ``config.json`` (a dict) -> ``Model``: one adapter per family, keyed by
``model_type``. Never imports or runs model code: ``auto_map`` is ignored.

Multimodal wrappers (llava, gemma3, llama4, qwen2_vl, ...) keep the language model under
``text_config``; its fields are read from there (the wrapper's dtype is used when the text
config has none). A config with no ``model_type`` but ``d_model``/``n_layer`` is the
``mamba_ssm`` package format. An unknown ``model_type`` is read with the standard decoder
fields and a warning listing what was assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import ConfigError
from ..core.layers import FullAttention
from ..core.model import Model
from .attention_families import parse_deepseek_v4, parse_mla, parse_sparse_mla, parse_standard
from .context_limit import context_limit
from .fields import Fields
from .geometry_families import (
    parse_gemma3n,
    parse_gemma4,
    parse_mimo_v2,
    parse_nemotron_nas,
    parse_step3p5,
)
from .kv_keys import RULE_KEYS, uninterpreted
from .linear_families import (
    parse_bailing_hybrid,
    parse_kimi_linear,
    parse_lfm2,
    parse_minimax_lightning,
    parse_minimax_m2,
)
from .ssm_families import (
    parse_bamba,
    parse_falcon_h1,
    parse_granitemoehybrid,
    parse_jamba,
    parse_mamba1,
    parse_mamba2,
    parse_mamba_ssm,
    parse_nemotron_h,
    parse_qwen3_next,
    parse_zamba2,
)

Adapter = Callable[[Fields, str], list[tuple]]

STANDARD_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "phi",
    "gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "cohere2", "gpt_neox", "llama4",
    "llama4_text", "gpt_oss", "falcon", "RefinedWeb", "RefinedWebModel", "qwen2_vl",
    "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text", "starcoder2", "olmo",
    "olmo2", "granite", "granitemoe", "internlm2", "exaone", "gpt_bigcode", "chatglm", "glm",
    # 2025-2026 plain GQA decoders, each read in its vLLM model file (docs/architectures.md)
    "qwen3_vl_moe_text", "glm4_moe", "ernie4_5", "ernie4_5_moe", "apertus", "arcee", "exaone4",
    "bailing_moe",
)
ADAPTERS: dict[str, Adapter] = {t: parse_standard for t in STANDARD_TYPES}
ADAPTERS.update({
    "deepseek_v2": parse_mla,
    "deepseek_v3": parse_mla,
    "kimi_k2": parse_mla,
    "glm4_moe_lite": parse_mla,  # GLM-4.7-Flash: DeepseekV2MLAAttention (vLLM glm4_moe_lite.py)
    "deepseek_v32": parse_sparse_mla,
    "deepseek_v4": parse_deepseek_v4,
    "glm_moe_dsa": parse_sparse_mla,  # GLM-5.x (vLLM GlmMoeDsaForCausalLM in deepseek_v2.py)
    "mamba": parse_mamba1,
    "falcon_mamba": parse_mamba1,
    "mamba2": parse_mamba2,
    "mamba_ssm": parse_mamba_ssm,
    "jamba": parse_jamba,
    "zamba2": parse_zamba2,
    "falcon_h1": parse_falcon_h1,
    "nemotron_h": parse_nemotron_h,
    "bamba": parse_bamba,
    "granitemoehybrid": parse_granitemoehybrid,
    "qwen3_next": parse_qwen3_next,
    "qwen3_5_text": parse_qwen3_next,  # Qwen3.5 / 3.6: the same gated-DeltaNet keys
    "qwen3_5_moe_text": parse_qwen3_next,
    "kimi_linear": parse_kimi_linear,
    "lfm2": parse_lfm2,
    "lfm2_moe": parse_lfm2,
    "minimax_m1": parse_minimax_lightning,
    "minimax_text_01": parse_minimax_lightning,
    "minimax": parse_minimax_lightning,
    "minimax_m2": parse_minimax_m2,
    "bailing_hybrid": parse_bailing_hybrid,  # Ling-3.0 (vLLM bailing_moe_v3.py)
    "gemma4_text": parse_gemma4,
    "gemma3n_text": parse_gemma3n,
    "mimo_v2_flash": parse_mimo_v2,
    "nemotron-nas": parse_nemotron_nas,
    "step3p5": parse_step3p5,  # Step-3.5-Flash (vLLM step3p5.py)
})

#: transformers config-class defaults for fields a nested ``text_config`` may leave out: a
#: composite config saves its sub-configs as a diff against the sub-config class (llava's
#: text_config names only what differs from ``LlamaConfig``). Top-level configs carry every
#: field, so a missing one there is an error. Each default used is listed as an assumption.
LIBRARY_DEFAULTS: dict[str, dict[str, object]] = {
    "llama": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "vocab_size": 32000, "intermediate_size": 11008},
    "mistral": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 32000,
                "intermediate_size": 14336},
    "gemma3_text": {"hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "vocab_size": 262208},
    "llama4_text": {"hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "attention_chunk_size": 8192,
                    "vocab_size": 202048},
}

def parse_olmo(f: Fields, model_type: str) -> list[tuple]:
    """OLMo-2 / OLMo-3 (vLLM ``olmo2.py``): the head width is hidden_size / num_attention_heads
    whatever ``head_dim`` says; a config whose ``head_dim`` differs is refused."""
    heads, hidden = f.integer("num_attention_heads"), f.integer("hidden_size")
    given = f.opt_int("head_dim")
    if given is not None and hidden % heads == 0 and given != hidden // heads:
        raise f.error("head_dim", f"{given} differs from hidden_size / num_attention_heads = "
                      f"{hidden // heads}, which vLLM's OLMo uses")
    return parse_standard(f, model_type)


def parse_hunyuan(f: Fields, model_type: str) -> list[tuple]:
    """Hunyuan v1 (vLLM ``hunyuan_v1.py``): plain GQA unless ``use_cla`` makes layers reuse
    the previous layer's K and V (cross-layer attention), which is not modelled."""
    if f.flag("use_cla"):
        raise f.error("use_cla", "cross-layer attention (layers reusing another layer's K and V) "
                      "is not modelled")
    f.get("cla_share_factor")  # only with use_cla
    f.get("attention_head_dim")  # vLLM: head_dim, else attention_head_dim, else hidden / heads
    return parse_standard(f, model_type)


def parse_step3_text(f: Fields, model_type: str) -> list[tuple]:
    """Step-3's text model (vLLM ``step3_text.py``): multi-matrix factorised attention with ONE
    KV head of ``head_dim`` on every rank (the model file hard-codes it and refuses another
    ``num_attention_groups``); 64 query heads. 1 x (256 + 256) x 2 B = 1,024 B per layer."""
    groups = f.integer("num_attention_groups")
    if groups != 1:
        raise f.error("num_attention_groups", f"vLLM's step3_text serves one KV head, got {groups}")
    f.get("share_q_dim")  # the low-rank query width: weights only
    head_dim = f.integer("head_dim")
    spec = FullAttention(num_attention_heads=f.integer("num_attention_heads"), num_kv_heads=1,
                         head_dim_k=head_dim, head_dim_v=head_dim)
    return [(spec,)] * f.num_layers()


ADAPTERS.update({"olmo2": parse_olmo, "olmo3": parse_olmo, "hunyuan_v1_dense": parse_hunyuan,
                 "hunyuan_v1_moe": parse_hunyuan, "step3_text": parse_step3_text})

#: The text model_type of a multimodal wrapper whose text_config names none.
WRAPPER_TEXT_TYPES = {"llava": "llama", "llava_next": "llama", "gemma3": "gemma3_text",
                      "llama4": "llama4_text", "mistral3": "mistral"}


def _text_config(config: dict, source: str) -> tuple[dict, Any, str]:
    """(text config, its model_type as found (checked by the caller), key prefix for errors)."""
    top_type = config.get("model_type")
    key = "text_config"
    if config.get(key) is None and config.get("llm_config") is not None:
        key = "llm_config"  # InternVL: vLLM copies llm_config to text_config
    text = config.get(key)
    if text is not None and not isinstance(text, dict):
        raise ConfigError("expected an object", source=source, field=key)
    if text and not config.get("num_hidden_layers"):
        mtype = text.get("model_type") or (
            WRAPPER_TEXT_TYPES.get(top_type, top_type) if isinstance(top_type, str) else top_type)
        return text, mtype, f"{key}."
    if top_type is None and "d_model" in config and "n_layer" in config:
        return config, "mamba_ssm", ""
    return config, top_type, ""


def text_fields(config: dict, source: str) -> tuple[Fields, Any]:
    """The text model's fields (nested library defaults filled in) and its model_type."""
    text, model_type, prefix = _text_config(config, source)
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"expected a string, got {model_type!r}", source=source,
                          field=prefix + "model_type")
    f = Fields(text, source, prefix)
    f.read.add("model_type")
    nested_defaults = LIBRARY_DEFAULTS.get(model_type, {}) if prefix and model_type else {}
    for key, value in nested_defaults.items():
        if key not in text:  # absent, not an explicit null (Mistral-3: sliding_window null)
            text = {**text, key: value}
            f.config = text
            f.read.add(key)  # kvplan's own default, not a key of the file
            f.assume(f"{prefix}{key} = {value} (transformers {model_type} config default)")
    return f, model_type


#: The flag that accepts the standard-decoder reading of a config kvplan cannot establish.
ASSUME_FLAG = "--assume-standard-attention"
#: What that reading is (``attention_families.parse_standard``)
STANDARD_READING = ("K and V of num_key_value_heads x head_dim on every layer, full attention "
                    "or, where layer_types / sliding_window / attention_chunk_size say so, "
                    "windowed or chunked")
#: The geometry keys of a standard attention layer (read, and unused, by a model without one).
ATTENTION_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "attention_head_dim",
                  "sliding_window", "attention_window")
#: Keys every model is read for (``parse_config``'s own, beside the adapter's).
MODEL_KEYS = ("torch_dtype", "dtype", "hidden_size", "d_model", "n_embd", "num_attention_heads",
              "n_head", "vocab_size")
#: A bound on MTP layer counts (a few in every published model), checked before any work.
MAX_MTP_LAYERS = 64
#: Multi-token-prediction layer counts: no cache in normal serving (a draft's only when used).
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "mtp_transformer_layers")


def _mtp(f: Fields) -> None:
    for key in MTP_KEYS:
        n = f.opt_int(key, minimum=0, maximum=MAX_MTP_LAYERS)
        if n:
            f.assume(f"{f.prefix}{key} = {n}: the MTP layer(s) are not counted (they cache KV "
                     "only when used as a speculative draft)")


def _by_keys(f: Fields) -> tuple[Adapter, str] | None:
    """An adapter an unknown model_type's own keys establish, with the keys that say so."""
    if f.has("kv_lora_rank") and f.has("index_topk"):  # vLLM: index_topk makes MLA sparse
        return parse_sparse_mla, ("sparse multi-head latent attention with a lightning-indexer "
                                  "cache (kv_lora_rank, index_topk, index_head_dim)")
    if f.has("kv_lora_rank"):
        return parse_mla, "multi-head latent attention (kv_lora_rank, qk_rope_head_dim)"
    return None


def _uninterpreted_by_standard(f: Fields, model_type: str) -> list[str]:
    """The keys a standard-decoder reading would leave uninterpreted (a scratch parse)."""
    scratch = Fields(f.config, f.source, f.prefix)
    scratch.read = set(f.read) | set(MODEL_KEYS)
    try:
        parse_standard(scratch, model_type)
        _mtp(scratch)
    except ConfigError:
        pass
    return uninterpreted(scratch)


def _layers(f: Fields, model_type: str, assume_standard: bool) -> tuple[list[tuple], bool]:
    """(per-layer caches, whether the standard-decoder reading was assumed)."""
    adapter = ADAPTERS.get(model_type)
    if adapter is not None:
        return adapter(f, model_type), False
    inferred = _by_keys(f)
    if inferred is not None:
        f.assume(f"model_type {model_type!r} has no kvplan rule: read as {inferred[1]} from its "
                 "keys")
        return inferred[0](f, model_type), False
    if not assume_standard:
        left = _uninterpreted_by_standard(f, model_type)
        keys = f" and kvplan cannot interpret its keys {', '.join(left)}" if left else ""
        raise f.error("model_type", f"unknown model_type {model_type!r}: kvplan has no rule for "
                      f"this architecture{keys}; pass {ASSUME_FLAG} to read it as a standard "
                      f"decoder ({STANDARD_READING})")
    f.assume(f"{ASSUME_FLAG}: model_type {model_type!r} read as a standard decoder "
             f"({STANDARD_READING})")
    return parse_standard(f, model_type), True


def checkpoint_kv_format(config: dict, text: dict, source: str) -> str | None:
    """The KV format a quantised checkpoint declares: compressed-tensors / ModelOpt
    ``kv_cache_scheme`` {type: float, num_bits: 8} or ModelOpt ``kv_cache_quant_algo`` "FP8"
    (fp8 e4m3 with per-tensor scales, vLLM ``BaseKVCacheMethod``); None when it declares none."""
    q = config.get("quantization_config") or text.get("quantization_config")
    if not isinstance(q, dict):
        return None
    scheme, algo = q.get("kv_cache_scheme"), q.get("kv_cache_quant_algo")
    if scheme is not None:
        if not isinstance(scheme, dict):
            raise ConfigError("expected an object", source=source,
                              field="quantization_config.kv_cache_scheme")
        if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
            return "fp8_e4m3"
        raise ConfigError(f"KV scheme type={scheme.get('type')!r} num_bits={scheme.get('num_bits')!r}"
                          " is not modelled (fp8: type float, num_bits 8)", source=source,
                          field="quantization_config.kv_cache_scheme")
    if algo is not None:
        if str(algo).upper() == "FP8":
            return "fp8_e4m3"
        raise ConfigError(f"kv_cache_quant_algo {algo!r} is not modelled (FP8 is)", source=source,
                          field="quantization_config.kv_cache_quant_algo")
    return None


def parse_config(config: object, *, name: str, source: str, hub_id: str | None = None,
                 assume_standard_attention: bool = False) -> Model:
    """Parse one config.json mapping into a ``Model``. ``assume_standard_attention`` accepts
    the standard-decoder reading of a config whose meaning kvplan cannot establish."""
    if not isinstance(config, dict):
        raise ConfigError(f"expected a JSON object, got {type(config).__name__}", source=source)
    f, model_type = text_fields(config, source)
    prefix = f.prefix
    if model_type is None:
        raise ConfigError("missing required field model_type (and not a mamba_ssm config, "
                          "which has d_model and n_layer)", source=source, field="model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"expected a string, got {model_type!r}", source=source,
                          field=prefix + "model_type")
    try:
        layers, assumed = _layers(f, model_type, assume_standard_attention)
    except ConfigError as e:  # name the keys no rule read too: a renamed key explains a default
        f.read.update(MODEL_KEYS + MTP_KEYS)  # parse_config's own, read after the adapter
        left = [k for k in uninterpreted(f) if not (e.field or "").endswith(k)
                and k.rsplit(".", 1)[-1] not in RULE_KEYS]
        if not left or assume_standard_attention or e.field == prefix + "model_type":
            raise
        raise ConfigError(f"{e.detail} (the config also has key(s) {', '.join(left)} that no "
                          "kvplan rule interprets)", source=e.source, field=e.field) from None
    _mtp(f)
    dtype = f.dtype("torch_dtype", "dtype") or Fields(config, source).dtype("torch_dtype", "dtype")
    if dtype is None:
        dtype = "bf16"
        f.assume("dtype = bf16 (config names no torch_dtype/dtype)")
    hidden = f.integer("hidden_size", "d_model", "n_embd")
    heads = f.opt_int("num_attention_heads") or f.opt_int("n_head")
    vocab = f.opt_int("vocab_size")
    if not any(spec.grows or spec.kind in ("sliding_window", "chunked_local")
               for block in layers for spec in block):
        for key in ATTENTION_KEYS:  # no attention layer: its geometry shapes no cache
            f.get(key)
    left = uninterpreted(f)
    if left and assume_standard_attention:
        f.assume(f"{ASSUME_FLAG}: key(s) no kvplan rule interprets are ignored: "
                 + ", ".join(left))
        assumed = True
    elif left:
        raise ConfigError(f"key(s) {', '.join(left)} shape the KV cache of a {model_type!r} model "
                          f"but no kvplan rule interprets them; pass {ASSUME_FLAG} to ignore "
                          "them", source=source, field=left[0])
    if not any(layers):
        raise ConfigError("no layer holds a KV cache or state", source=source,
                          field=prefix + "num_hidden_layers")
    return Model(
        name=name,
        model_type=model_type,
        layers=tuple(tuple(b) for b in layers),
        hidden_size=hidden,
        vocab_size=vocab,
        num_attention_heads=heads,
        dtype=dtype,
        source=source,
        hub_id=hub_id,
        assumptions=tuple(f.assumptions),
        warnings=(),
        config=config,
        standard_attention_assumed=assumed,
        kv_shared_layers=(f.opt_int("num_kv_shared_layers", minimum=0) or 0) if f.has(
            "num_kv_shared_layers") else (15 if model_type == "gemma3n_text" else 0),  # the class default
        context_limit=context_limit(f, model_type),
        checkpoint_kv_format=checkpoint_kv_format(config, f.config, source),
        keys_read=frozenset(fl.prefix + k for fl in f.all_fields() for k in fl.read),
    )
