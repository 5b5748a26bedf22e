"""The parameters in which engines differ when they store a cache. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class EngineLayout:
    """How one engine (at one version) lays out KV caches and recurrent states.

    - ``paged``: whether the cache is allocated in fixed blocks of tokens;
      ``default_block_size_tokens`` is the block size used when none is given.
    - ``mla_latent``: True when an MLA layer caches the compressed latent (one vector of
      ``kv_lora_rank + qk_rope_head_dim``); False when it caches decompressed per-head K and V.
    - ``conv_state_columns_dropped``: vLLM keeps ``d_conv - 1`` conv columns, transformers
      ``d_conv``.
    - ``chunk_aligned_local``: True when a chunked-local layer keeps only the tokens of the
      current chunk (vLLM); False when it keeps the last ``chunk - 1`` tokens like a sliding
      window (transformers' ``DynamicSlidingWindowLayer``).
    - ``auto_dtype_from_fp32``: the dtype an fp32 checkpoint runs in under ``--kv-dtype auto``
      (vLLM downcasts fp32 configs to bf16); None keeps fp32.
    - ``ssm_dtype_by_model_type`` / ``linear_state_dtype``: engine defaults for recurrent
      state dtypes where they differ from the model dtype.
    """

    name: str
    version: str
    paged: bool
    default_block_size_tokens: int
    mla_latent: bool
    conv_state_columns_dropped: int
    chunk_aligned_local: bool
    auto_dtype_from_fp32: str | None
    ssm_dtype_by_model_type: dict[str, str] = field(default_factory=dict, hash=False)
    linear_state_dtype: str | None = None
    citations: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    def auto_kv_dtype(self, model_dtype: str) -> str:
        """What ``--kv-dtype auto`` means: the model dtype, after the engine's fp32 rule."""
        if model_dtype == "fp32" and self.auto_dtype_from_fp32:
            return self.auto_dtype_from_fp32
        return model_dtype
