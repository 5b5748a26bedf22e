"""``quantization_config`` (config.json) or ``--weight-dtype`` -> ``WeightFormat``.

Recognised ``quant_method`` values and what they store (see ``kvplan.core.weights.WeightFormat``
for the bytes): ``fp8`` (per-tensor, or ``weight_block_size`` blocks as DeepSeek-V3),
``fbgemm_fp8`` (per channel), ``compressed-tensors`` (float8 tensor/channel/block, int4/int8
groups), ``awq`` and ``gptq`` (int4 with group size), ``mxfp4`` (gpt-oss: routed experts
only), ``bitsandbytes`` (nf4/fp4 4-bit, LLM.int8). Modules the config leaves unquantised
(``modules_to_not_convert``, ``ignored_layers``, ``ignore``) keep the model dtype; embeddings,
norms and the LM head are never quantised by these methods here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..core.errors import ConfigError, InputError
from ..core.model import Model
from ..core.module_match import SkipList
from ..core.weights import WeightFormat

#: ``--weight-dtype`` names -> (scheme, extra settings). Dense names take the dtype itself.
CLI_FORMATS: dict[str, dict[str, Any]] = {
    "bf16": {}, "fp16": {}, "fp32": {},
    "fp8": {"scheme": "fp8"},
    "fp8_block": {"scheme": "fp8_block"},
    "fp8_channel": {"scheme": "fp8_channel"},
    "awq": {"scheme": "awq", "group_size": 128},
    "gptq": {"scheme": "gptq", "group_size": 128},
    "int4": {"scheme": "int4", "group_size": 128, "zero_point": False},
    "mxfp4": {"scheme": "mxfp4", "experts_only": True},
    "nvfp4": {"scheme": "nvfp4"},
    "nf4": {"scheme": "bnb_nf4", "double_quant": False},
    "int8": {"scheme": "bnb_int8"},
}
def _skips(q: dict, keys: tuple[str, ...], rule: str, source: str) -> SkipList:
    """The first of ``keys`` the config sets (a list of module names), matched by ``rule``
    (``kvplan.core.module_match``)."""
    for key in keys:
        value = q.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError("expected a list of module names", source=source,
                              field=f"quantization_config.{key}")
        for i, v in enumerate(value):
            if v.startswith("re:"):
                try:
                    re.compile(v[3:])
                except re.error as e:
                    raise ConfigError(f"bad regular expression {v!r}: {e}", source=source,
                                      field=f"quantization_config.{key}[{i}]") from None
        return SkipList(tuple(value), rule)
    return SkipList((), rule)


def _int(q: dict, keys: tuple[str, ...], default: int, source: str, prefix: str = "") -> int:
    """An integer setting of ``quantization_config`` (first key present), or one error line."""
    for key in keys:
        value = q.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
            raise ConfigError(f"expected a positive integer (or -1), got {value!r}", source=source,
                              field=f"quantization_config.{prefix}{key}")
        return value
    return default


def _block(value: Any, source: str, field: str) -> tuple[int, int]:
    if value is None:
        return (128, 128)
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ConfigError(f"expected two positive integers such as [128, 128], got {value!r}",
                          source=source, field=f"quantization_config.{field}")
    return (value[0], value[1])


def _base_dtype(model: Model) -> str:
    """The dtype the engines hold unquantised weights in: the model's, except that fp32
    checkpoints run in 16 bits (vLLM and TRT-LLM bf16, SGLang fp16: 2 bytes either way);
    ``--weight-dtype fp32`` keeps 4 bytes."""
    return model.dtype if model.dtype in ("bf16", "fp16") else "bf16"


def _has_experts(model: Model) -> bool:
    from .hf_config import text_fields

    f, _ = text_fields(model.config, model.source)
    return any(f.config.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts"))


def normalize_weight_dtype(name: str) -> str:
    """``--weight-dtype`` spelling -> its key (``bfloat16`` -> ``bf16``); may not be known."""
    key = name.strip().lower().replace("-", "_")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8_e4m3": "fp8",
            "int4_awq": "awq", "int4_gptq": "gptq", "bnb_nf4": "nf4"}.get(key, key)


def from_cli(name: str, model: Model) -> WeightFormat:
    key = normalize_weight_dtype(name)
    if key not in CLI_FORMATS:
        raise InputError(f"unknown weight dtype {name!r}; use {', '.join(CLI_FORMATS)}",
                         field="--weight-dtype")
    if key in ("bf16", "fp16", "fp32"):
        return WeightFormat(name=key, base_dtype=key)
    if key == "mxfp4" and not _has_experts(model):
        raise InputError("mxfp4 quantises routed experts only (as gpt-oss ships) and "
                         f"{model.name} has none; use fp8, awq, gptq, int4 or nf4",
                         field="--weight-dtype")
    return WeightFormat(name=key, base_dtype=_base_dtype(model), **CLI_FORMATS[key])


def _compressed_tensors(q: dict, base: str, source: str) -> WeightFormat:
    groups = q.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise ConfigError("expected an object", source=source, field="quantization_config.config_groups")
    all_weights: list[dict] = [g["weights"] for g in groups.values() if isinstance(g, dict)
                               and isinstance(g.get("weights"), dict)]
    if len({repr(sorted(w.items())) for w in all_weights}) > 1:
        raise ConfigError("config_groups with different weight schemes (mixed precision) are not "
                          "modelled; pass --weight-dtype or --weight-memory", source=source,
                          field="quantization_config.config_groups")
    weights = all_weights[0] if all_weights else None
    if weights is None:
        raise ConfigError("compressed-tensors config has no config_groups.*.weights",
                          source=source, field="quantization_config.config_groups")
    bits, kind, strategy = weights.get("num_bits"), weights.get("type"), weights.get("strategy")
    skip = _skips(q, ("ignore",), "compressed_tensors", source)
    if kind == "float" and bits == 8:
        if strategy == "block":
            block = _block(weights.get("block_structure"), source, "config_groups.*.weights.block_structure")
            return WeightFormat(name="fp8_block", base_dtype=base, scheme="fp8_block",
                                block=block, skip=skip)
        scheme = "fp8_channel" if strategy == "channel" else "fp8"
        return WeightFormat(name=scheme, base_dtype=base, scheme=scheme, skip=skip)
    if kind == "float" and bits == 4:
        group = _int(weights, ("group_size",), 16, source, "config_groups.*.weights.")
        if group == 16:  # nvfp4-pack-quantized: fp8 scale per 16, fp32 global scales
            return WeightFormat(name="nvfp4", base_dtype=base, scheme="nvfp4", skip=skip)
        if group == 32:  # mxfp4-pack-quantized: e8m0 scale per 32
            return WeightFormat(name="mxfp4", base_dtype=base, scheme="mxfp4", skip=skip)
    if kind == "int" and bits == 4:
        group = _int(weights, ("group_size",), -1, source, "config_groups.*.weights.")
        return WeightFormat(name=f"int4 group {group}", base_dtype=base,
                            scheme="int4", group_size=group,
                            zero_point=not weights.get("symmetric", True), skip=skip)
    raise ConfigError(f"compressed-tensors weights type={kind!r} num_bits={bits!r} are not "
                      "modelled; pass --weight-dtype", source=source,
                      field="quantization_config.config_groups")


#: ModelOpt quant_algo -> (kvplan scheme, the format's name); vLLM modelopt.py QUANT_ALGOS.
MODELOPT_ALGOS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_w4a16", "FP8": "fp8_modelopt",
                  "FP8_PER_CHANNEL_PER_TOKEN": "fp8_channel", "FP8_PB_WO": "fp8_block",
                  "MXFP8": "mxfp8"}


def _modelopt(q: dict, base: str, source: str) -> WeightFormat:
    """ModelOpt checkpoints: ``quant_algo`` with ``ignore`` (config.json) or, in the older form
    merged from hf_quant_config.json, ``exclude_modules``; matched by vLLM's ModelOpt rule."""
    algo = str(q.get("quant_algo", "")).upper()
    scheme = MODELOPT_ALGOS.get(algo)
    if scheme is None:
        raise ConfigError(f"ModelOpt quant_algo {q.get('quant_algo')!r} is not modelled (known: "
                          f"{', '.join(MODELOPT_ALGOS)}); pass --weight-dtype or --weight-memory",
                          source=source, field="quantization_config.quant_algo")
    skip = _skips(q, ("ignore", "exclude_modules"), "modelopt", source)
    if q.get("nvfp4_embed"):
        raise ConfigError("NVFP4 embeddings (nvfp4_embed) are not modelled", source=source,
                          field="quantization_config.nvfp4_embed")
    return WeightFormat(name=f"modelopt {algo.lower()}", base_dtype=base, scheme=scheme,
                        block=(128, 128), skip=skip)


def _deepseek_v4(model: Model, q: dict, fmt: WeightFormat) -> WeightFormat:
    """DeepSeek-V4's fp8 checkpoints as vLLM's DeepseekV4FP8Config loads them: fp8 block
    linears, and routed experts per ``expert_dtype`` (its default fp4): fp4 experts are mxfp4
    (``Mxfp4MoEMethod``: uint8 pairs + a uint8 e8m0 scale per 32) and the linears' block scales
    e8m0 (1 byte); fp8 experts are fp8 blocks with fp32 scales, as the linears."""
    from .hf_config import text_fields
    from .params_dsv4 import expert_dtype

    f, mt = text_fields(model.config, model.source)
    if mt != "deepseek_v4":
        return fmt
    if fmt.scheme != "fp8_block":
        raise ConfigError("DeepSeek-V4's fp8 checkpoints are block-quantised (weight_block_size); "
                          "per-tensor fp8 is not modelled", source=model.source,
                          field="quantization_config.weight_block_size")
    if q.get("moe_quant_algo"):
        raise ConfigError(f"{q.get('moe_quant_algo')!r}: DeepSeek-V4 experts in another format "
                          "(NVFP4) are not modelled; pass --weight-memory", source=model.source,
                          field="quantization_config.moe_quant_algo")
    dtype = expert_dtype(f)
    if q.get("expert_dtype") not in (None, dtype):  # vLLM reads the top-level key only
        raise ConfigError(f"{q.get('expert_dtype')!r} disagrees with expert_dtype = {dtype!r} "
                          "(vLLM follows the top-level key, default fp4)", source=model.source,
                          field="quantization_config.expert_dtype")
    if dtype == "fp8":
        return fmt
    return replace(fmt, name=f"{fmt.name} (ue8m0 scales) + mxfp4 experts", expert_scheme="mxfp4",
                   scale_bytes=1)


def from_config(model: Model) -> WeightFormat | None:
    """The config's ``quantization_config`` as a format, or None when it has none."""
    from .hf_config import text_fields

    f, _ = text_fields(model.config, model.source)
    q = model.config.get("quantization_config") or f.config.get("quantization_config")
    if not q:
        return None
    if not isinstance(q, dict):
        raise ConfigError("expected an object", source=model.source, field="quantization_config")
    method = str(q.get("quant_method", "")).lower()
    base = _base_dtype(model)
    src = model.source
    # the module lists and how vLLM matches them (kvplan.core.module_match)
    exact = _skips(q, ("ignored_layers", "modules_to_not_convert"), "exact", src)
    substring = _skips(q, ("modules_to_not_convert",), "substring", src)
    if method == "fp8":
        if q.get("weight_block_size") is not None:
            block = _block(q.get("weight_block_size"), model.source, "weight_block_size")
            return _deepseek_v4(model, q, WeightFormat(
                name=f"fp8 block {block[0]}x{block[1]}", base_dtype=base, scheme="fp8_block",
                block=block, skip=exact))
        return _deepseek_v4(model, q, WeightFormat(name="fp8", base_dtype=base, scheme="fp8",
                                                   skip=exact))
    if method == "fbgemm_fp8":
        return WeightFormat(name="fp8_channel", base_dtype=base, scheme="fp8_channel", skip=exact)
    if method in ("awq", "gptq"):
        bits = q.get("bits", q.get("w_bit", 4))
        if bits != 4:
            raise ConfigError(f"{method} with {bits} bits is not modelled (4 only)",
                              source=model.source, field="quantization_config.bits")
        group = _int(q, ("group_size", "q_group_size"), 128, model.source)
        return WeightFormat(name=f"{method} int4 group {group}", base_dtype="fp16" if method ==
                            "awq" else base, scheme=method, group_size=group, skip=substring)
    if method == "mxfp4":
        # vLLM's Mxfp4Config ignores modules_to_not_convert: every non-expert linear is bf16
        return WeightFormat(name="mxfp4 (experts)", base_dtype=base, scheme="mxfp4",
                            experts_only=True)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return WeightFormat(name=f"bnb {q.get('bnb_4bit_quant_type', 'fp4')}", base_dtype=base,
                                scheme="bnb_nf4", double_quant=bool(q.get("bnb_4bit_use_double_quant")),
                                skip=substring)
        return WeightFormat(name="bnb int8", base_dtype=base, scheme="bnb_int8", skip=substring)
    if method == "compressed-tensors":
        return _compressed_tensors(q, base, model.source)
    if method == "modelopt":
        return _modelopt(q, base, model.source)
    raise ConfigError(f"quant_method {method!r} is not modelled; pass --weight-dtype",
                      source=model.source, field="quantization_config.quant_method")


def weight_format(model: Model, cli_value: str | None) -> WeightFormat:
    """``--weight-dtype`` when given, else the config's quantization, else its dtype."""
    if cli_value:
        return from_cli(cli_value, model)
    fmt = from_config(model)
    if fmt is not None:
        return fmt
    base = _base_dtype(model)
    return WeightFormat(name=base, base_dtype=base)
