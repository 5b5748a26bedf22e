"""The parameters in which engines differ when they store a cache. Pure.

One ``EngineLayout`` value describes one engine at one version; each engine's module builds it
and cites the engine code each value was read from. The footprint code asks the layout three
things: how many token slots a layer holds at context n (``held_tokens``), how an MLA layer is
stored (``mla_geometry``), and which dtypes recurrent states use (``state_dtypes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..tokens import (
    chunked_blocks_peak,
    fixed_cache_blocks,
    full_blocks,
    sliding_blocks_peak,
    window_page_blocks,
)

#: How a windowed (sliding or chunked) layer holds tokens:
#: ``window``  the last W - 1 tokens, whole blocks freed (vLLM sliding, transformers)
#: ``window_page``  the last W + one page (SGLang's eviction bound)
#: ``chunk``  the tokens of the current chunk (vLLM chunked local attention)
#: ``fixed``  a cache of W + ``swa_extra_tokens`` cells allocated up front (llama.cpp iSWA)
#: ``all``  every token, as a full layer (an engine without a windowed pool)
POLICIES = ("window", "window_page", "chunk", "fixed", "all")


@dataclass(frozen=True, kw_only=True)
class EngineLayout:
    """How one engine (at one version) lays out KV caches and recurrent states.

    - ``paged`` / ``default_block_size_tokens``: whether slots come in blocks (vLLM blocks,
      SGLang pages, llama.cpp's 256-cell padding) and the default block size.
    - ``sliding_policy`` / ``chunked_policy``: one of ``POLICIES``; ``swa_extra_tokens`` is the
      ``fixed`` policy's extra cells (llama.cpp ``n_ubatch``).
    - ``mla_latent_model_types``: model types whose MLA layers cache the latent
      (``kv_lora_rank + qk_rope_head_dim``); None means all. Others cache per-head K and V.
      ``mla_separate_v``: the latent engine also stores V (``kv_lora_rank`` wide) as its own
      tensor (llama.cpp) instead of reading it from K.
    - ``conv_state_columns_dropped``: 1 where the conv state keeps ``d_conv - 1`` columns.
    - ``auto_kv_dtype_fixed`` / ``auto_dtype_from_fp32``: what ``--kv-dtype auto`` means:
      a fixed type (llama.cpp f16), or the model dtype with fp32 checkpoints run in another.
    - ``conv_state_dtype`` / ``ssm_state_dtype``: state dtypes when not the model dtype;
      ``ssm_dtype_by_model_type`` per-model defaults; ``config_ssm_dtype_model_types``: model
      types whose config-declared SSM dtype the engine reads (None: every model).
    - ``max_tp``: the largest tensor-parallel degree the engine supports (None: no limit).
    """

    name: str
    version: str
    default_version: str
    paged: bool
    default_block_size_tokens: int
    sliding_policy: str
    chunked_policy: str
    swa_extra_tokens: int = 0
    mla_latent_model_types: frozenset[str] | None = None
    mla_separate_v: bool = False
    conv_state_columns_dropped: int = 0
    auto_kv_dtype_fixed: str | None = None
    auto_dtype_from_fp32: str | None = None
    conv_state_dtype: str | None = None
    ssm_state_dtype: str | None = None
    ssm_dtype_by_model_type: dict[str, str] = field(default_factory=dict, hash=False)
    config_ssm_dtype_model_types: frozenset[str] | None = frozenset()
    max_tp: int | None = None

    @property
    def label(self) -> str:
        """``vllm``, ``hf`` for the default version; ``hf@4`` (as passed) otherwise."""
        if self.version == self.default_version:
            return self.name
        return f"{self.name}@{self.version}"

    def auto_kv_dtype(self, model_dtype: str) -> str:
        """What ``--kv-dtype auto`` means for a model whose dtype is ``model_dtype``."""
        if self.auto_kv_dtype_fixed:
            return self.auto_kv_dtype_fixed
        return self.run_dtype(model_dtype)

    def run_dtype(self, model_dtype: str) -> str:
        """The dtype the engine runs the model in (vLLM runs fp32 checkpoints in bf16)."""
        if model_dtype == "fp32" and self.auto_dtype_from_fp32:
            return self.auto_dtype_from_fp32
        return model_dtype

    def held_tokens(self, kind: str, window: int | None, n: int, block: int) -> int:
        """Token slots (whole blocks) a layer of ``kind`` holds at context ``n``, worst case
        up to ``n``."""
        policy = {"sliding_window": self.sliding_policy,
                  "chunked_local": self.chunked_policy}.get(kind, "all")
        if policy == "all" or window is None:
            blocks = full_blocks(n, block)
        elif policy == "window":
            blocks = sliding_blocks_peak(n, window - 1, block)
        elif policy == "window_page":
            blocks = window_page_blocks(n, window, block)
        elif policy == "chunk":
            blocks = chunked_blocks_peak(n, window, block)
        else:  # fixed
            blocks = fixed_cache_blocks(n, window + self.swa_extra_tokens, block)
        return blocks * block

    def mla_geometry(self, model_type: str, spec) -> tuple[int, int, int, bool]:
        """(cached heads, K dim, V dim, latent?) of an MLA layer."""
        if self.mla_latent_model_types is None or model_type in self.mla_latent_model_types:
            return 1, spec.latent_dim, spec.kv_lora_rank if self.mla_separate_v else 0, True
        return (spec.num_attention_heads, spec.qk_nope_head_dim + spec.qk_rope_head_dim,
                spec.v_head_dim, False)

    def state_dtypes(self, model_type: str, model_dtype: str, config_ssm_dtype: str | None,
                     override: str | None = None) -> tuple[str, str]:
        """(conv dtype, recurrent-state dtype); ``override`` (``--state-dtype``) wins."""
        if override:
            return override, override
        conv = self.conv_state_dtype or self.run_dtype(model_dtype)
        reads_config = (self.config_ssm_dtype_model_types is None
                        or model_type in self.config_ssm_dtype_model_types)
        ssm = ((config_ssm_dtype if reads_config else None)
               or self.ssm_dtype_by_model_type.get(model_type) or self.ssm_state_dtype or conv)
        return conv, ssm


def parse_version(text: str | None, default: str, engine: str, allow_main: bool) -> str:
    """``None`` -> default; ``"0.11"``, ``"4.57.1"`` or ``"main"``; anything else is an error
    naming the option."""
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
