"""The parameters in which engines differ when they store a cache. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class EngineLayout:
    """How one engine (at one version) lays out KV caches and recurrent states.

    - ``paged``: whether the cache is allocated in fixed blocks of tokens;
      ``default_block_size_tokens`` is the block size used when none is given.
    - ``mla_latent_model_types``: the model types whose MLA layers cache the compressed latent
      (one vector of ``kv_lora_rank + qk_rope_head_dim``); None means every MLA model. The
      others cache decompressed per-head K and V.
    - ``conv_state_columns_dropped``: vLLM keeps ``d_conv - 1`` conv columns, transformers
      ``d_conv``.
    - ``chunk_aligned_local``: True when a chunked-local layer keeps only the tokens of the
      current chunk (vLLM); False when it keeps the last ``chunk - 1`` tokens like a sliding
      window (transformers' ``DynamicSlidingWindowLayer``).
    - ``auto_dtype_from_fp32``: the dtype an fp32 checkpoint runs in under ``--kv-dtype auto``
      (vLLM downcasts fp32 configs to bf16); None keeps fp32.
    - ``ssm_dtype_by_model_type``: the engine's default SSM-state dtype for some model types;
      ``config_ssm_dtype_model_types``: the model types for which the engine reads the config's
      ``mamba_ssm_cache_dtype``; ``linear_state_dtype``: the recurrent-state dtype of
      linear-attention layers when it is not the model dtype.
    """

    name: str
    version: str
    default_version: str
    paged: bool
    default_block_size_tokens: int
    mla_latent_model_types: frozenset[str] | None
    conv_state_columns_dropped: int
    chunk_aligned_local: bool
    auto_dtype_from_fp32: str | None
    ssm_dtype_by_model_type: dict[str, str] = field(default_factory=dict, hash=False)
    config_ssm_dtype_model_types: frozenset[str] = frozenset()
    linear_state_dtype: str | None = None

    @property
    def label(self) -> str:
        """``vllm``, ``hf`` for the default version; ``hf@4`` (as passed) otherwise."""
        if self.version == self.default_version:
            return self.name
        return f"{self.name}@{self.version}"

    def caches_mla_latent(self, model_type: str) -> bool:
        return self.mla_latent_model_types is None or model_type in self.mla_latent_model_types

    def auto_kv_dtype(self, model_dtype: str) -> str:
        """What ``--kv-dtype auto`` means: the model dtype, after the engine's fp32 rule."""
        if model_dtype == "fp32" and self.auto_dtype_from_fp32:
            return self.auto_dtype_from_fp32
        return model_dtype

    def ssm_dtype(self, model_type: str, config_dtype: str | None) -> str | None:
        """The SSM-state dtype the engine picks, or None for "same as the conv state"."""
        if config_dtype and model_type in self.config_ssm_dtype_model_types:
            return config_dtype
        return self.ssm_dtype_by_model_type.get(model_type)


def parse_version(text: str | None, default: str, engine: str, allow_main: bool) -> str:
    """``None`` -> default; ``"0.11"``, ``"4.57.1"`` or (vLLM) ``"main"``; anything else is an
    error naming the option."""
    from ..errors import InputError

    if text is None:
        return default
    parts = text.split(".")
    if (allow_main and text == "main") or (all(p.isdigit() for p in parts) and len(parts) <= 3):
        return text
    raise InputError(f"bad {engine} version {text!r}: expected numbers such as "
                     f"{default!r}" + (" or 'main'" if allow_main else ""), field="--engine")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.11.2"`` -> (0, 11, 2); ``"main"`` sorts after every release."""
    if version == "main":
        return (10**6,)
    return tuple(int(p) for p in version.split("."))
