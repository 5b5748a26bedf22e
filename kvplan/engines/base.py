"""The parameters in which engines differ when they store a cache. Pure.

One ``EngineLayout`` value describes one engine at one version; each engine's module builds it
and cites the engine code each value was read from. The footprint code asks the layout how a
windowed layer holds tokens (``window_policy`` then ``held_tokens``), how an MLA layer is
stored (``mla_geometry``), which dtypes recurrent states use (``state_dtypes``), and whether a
storage format and block size are ones the engine can use (``check_options``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import InputError, ParallelismError
from ..core.model import Model
from ..core.tokens import (
    chunked_blocks_peak,
    fixed_cache_blocks,
    full_blocks,
    sliding_blocks_peak,
    window_page_blocks,
)

#: How a windowed (sliding or chunked) layer holds tokens:
#: ``window``  the last W - 1 tokens, whole blocks freed (vLLM sliding, transformers)
#: ``window_page``  the last W + one page, eviction rounded down to a page (SGLang)
#: ``chunk``  the tokens of the current chunk (vLLM chunked local attention)
#: ``fixed``  a cache of W + ``swa_extra_tokens`` cells allocated up front (llama.cpp iSWA)
#: ``all``  every token, as a full layer (an engine without a windowed pool)
POLICIES = ("window", "window_page", "chunk", "fixed", "all")
#: The recurrent-state layer kinds (``kvplan.core.layers``).
STATE_KINDS = frozenset({"mamba", "linear_attention", "kda", "lightning_attention", "short_conv"})


@dataclass(frozen=True, kw_only=True)
class EngineLayout:
    """How one engine (at one version) lays out KV caches and recurrent states.

    Slots and windows:
    - ``paged`` / ``default_block_size_tokens``: whether slots come in blocks (vLLM blocks,
      SGLang pages, llama.cpp's 256-cell padding) and the default size; ``fixed_block_size``:
      the engine allows no other (llama.cpp).
    - ``sliding_policy`` / ``chunked_policy``: one of ``POLICIES``; ``swa_extra_tokens``: the
      ``fixed`` policy's extra cells (llama.cpp ``n_ubatch``); ``windowed_model_types``: the
      model types whose windows the engine implements (None: all); other models' windowed
      layers are stored as full layers.
    MLA:
    - ``mla_latent_model_types``: model types whose MLA layers cache the latent (None: all);
      others cache per-head K and V. ``mla_latent_layout``: ``"one"`` (one latent vector, V read
      from it), ``"k_and_v"`` (llama.cpp: K = latent, V = ``kv_lora_rank`` stored apart) or
      ``"split"`` (transformers 5: K = ``kv_lora_rank``, V = ``qk_rope_head_dim``).
    Dtypes:
    - ``auto_kv_dtype_fixed``: ``--kv-dtype auto`` is this type whatever the model (llama.cpp
      f16); else the model dtype as the engine runs it: ``fp32_runs_as`` for fp32 checkpoints,
      ``fp32_runs_as_by_prefix`` for model types starting with a prefix (SGLang: gemma -> bf16).
    - ``kv_formats``: the storage formats the engine has (None: any); ``separate_kv_formats``:
      whether K and V may differ.
    - ``conv_state_dtype`` / ``ssm_state_dtype``: state dtypes when not the model dtype;
      ``ssm_dtype_by_model_type``: per-model defaults; ``config_ssm_dtype_keys``: model type
      (``"*"``: every one) -> the config key whose recurrent-state dtype the engine reads;
      ``ssm_dtype_by_kind``: layer kinds whose recurrent state has one dtype whatever the config
      or ``--state-dtype`` say (vLLM's KDA: float32); ``state_dtype_fixed``: states cannot be
      set otherwise.
    Models served: ``removed_model_types``: model type -> the last release that served it (the
    engine refuses it in newer ones); ``unserved_model_types``: model type -> why the engine
    does not serve it at all; ``state_kinds``: the recurrent-state layer kinds whose layout is
    modelled for this engine (None: all).
    Parallelism: ``max_tp`` (None: no limit). ``v_needs_flash_attention``: V formats the engine
    stores only with flash attention on (llama.cpp's quantised V), noted in the output.
    """

    name: str
    version: str
    default_version: str
    paged: bool
    default_block_size_tokens: int
    fixed_block_size: bool = False
    sliding_policy: str
    chunked_policy: str
    swa_extra_tokens: int = 0
    windowed_model_types: frozenset[str] | None = None
    mla_latent_model_types: frozenset[str] | None = None
    mla_latent_layout: str = "one"
    mla_latent_layout_by_model_type: dict[str, str] = field(default_factory=dict, hash=False)
    conv_state_columns_dropped: int = 0
    auto_kv_dtype_fixed: str | None = None
    fp32_runs_as: str | None = None
    fp32_runs_as_by_prefix: tuple[tuple[str, str], ...] = ()
    kv_formats: frozenset[str] | None = None
    separate_kv_formats: bool = True
    conv_state_dtype: str | None = None
    ssm_state_dtype: str | None = None
    ssm_dtype_by_model_type: dict[str, str] = field(default_factory=dict, hash=False)
    config_ssm_dtype_keys: dict[str, str] = field(default_factory=dict, hash=False)
    ssm_dtype_by_kind: dict[str, str] = field(default_factory=dict, hash=False)
    state_dtype_fixed: bool = False
    max_tp: int | None = None
    v_needs_flash_attention: frozenset[str] = frozenset()
    removed_model_types: dict[str, str] = field(default_factory=dict, hash=False)
    first_release: dict[str, str | None] = field(default_factory=dict, hash=False)
    unserved_model_types: dict[str, str] = field(default_factory=dict, hash=False)
    state_kinds: frozenset[str] | None = None
    kv_sharing: bool = True  # layers that read another layer's K and V allocate nothing
    unify_page_sizes: bool = False  # vLLM: smaller pages get larger blocks (costs.unify_pages)
    #: how the lightning indexer's key is stored: "fp8_scaled" (vLLM, SGLang: fp8 + fp32 scale
    #: per 128), "k_format" (llama.cpp: the K cache type), "model_dtype" (transformers)
    indexer_storage: str = "fp8_scaled"
    #: sparse-MLA models (with an indexer) store an fp8 latent in this format (vLLM, SGLang:
    #: fp8_ds_mla); None: the plain format
    sparse_mla_fp8_format: str | None = None
    #: the engine allocates an indexer cache on every layer, so a model whose indexers sit on
    #: some layers only is not established for it (SGLang's NSA pool as read)
    indexer_on_every_layer: bool = False
    #: whether ``--kv-dtype auto`` takes the checkpoint's KV scheme (``quantization_config``'s
    #: ``kv_cache_scheme`` / ``kv_cache_quant_algo``): True (vLLM ``Attention.__init__``), False
    #: (the engine ignores it), None (not established: ``auto`` is refused for such checkpoints)
    applies_checkpoint_kv_scheme: bool | None = None
    #: model type -> why the engine stores its KV in the model dtype whatever --kv-dtype says
    model_dtype_kv_only: dict[str, str] = field(default_factory=dict, hash=False)
    #: KV format -> why the engine refuses it on MLA models
    mla_refused_kv_formats: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def label(self) -> str:
        """``vllm``, ``hf`` for the default version; ``hf@4`` (as passed) otherwise."""
        if self.version == self.default_version:
            return self.name
        return f"{self.name}@{self.version}"

    # ---- dtypes -----------------------------------------------------------------------------

    def run_dtype(self, model_dtype: str, model_type: str = "") -> str:
        """The dtype the engine runs the model in (vLLM runs fp32 checkpoints in bf16)."""
        if model_dtype != "fp32":
            return model_dtype
        for prefix, dtype in self.fp32_runs_as_by_prefix:
            if model_type.startswith(prefix):
                return dtype
        return self.fp32_runs_as or model_dtype

    def auto_kv_dtype(self, model_dtype: str, model_type: str = "") -> str:
        """What ``--kv-dtype auto`` means for a model of ``model_dtype`` / ``model_type``."""
        return self.auto_kv_dtype_fixed or self.run_dtype(model_dtype, model_type)

    def state_dtypes(self, model_type: str, model_dtype: str,
                     config_dtypes: tuple[tuple[str, str], ...] = (),
                     override: str | None = None, kind: str = "mamba") -> tuple[str, str]:
        """(conv dtype, recurrent-state dtype) of a state layer of ``kind``. ``config_dtypes``
        are the (key, dtype) pairs the config declares; ``override`` is ``--state-dtype`` and
        wins where the engine allows."""
        fixed = self.ssm_dtype_by_kind.get(kind)
        if override:
            if self.state_dtype_fixed:
                raise InputError(f"{self.name} keeps recurrent states in "
                                 f"{self.ssm_state_dtype}; it has no setting for their dtype",
                                 field="--state-dtype")
            return override, fixed or override
        conv = self.conv_state_dtype or self.run_dtype(model_dtype, model_type)
        if fixed:
            return conv, fixed
        key = self.config_ssm_dtype_keys.get(model_type) or self.config_ssm_dtype_keys.get("*")
        declared = dict(config_dtypes).get(key or "")
        if declared:
            return conv, declared
        ssm = self.ssm_dtype_by_model_type.get(model_type) or self.ssm_state_dtype or conv
        return conv, ssm

    # ---- tokens -----------------------------------------------------------------------------

    def window_policy(self, kind: str, model_type: str) -> str:
        """How a layer of ``kind`` of a ``model_type`` model holds tokens (``POLICIES``)."""
        if kind not in ("sliding_window", "chunked_local"):
            return "all"
        if self.windowed_model_types is not None and model_type not in self.windowed_model_types:
            return "all"
        return self.sliding_policy if kind == "sliding_window" else self.chunked_policy

    def describe_policy(self, policy: str, window: int | None, block: int) -> str:
        """One line saying how a windowed layer holds tokens, for the table's notes."""
        unit = f" in {block}-token blocks" if block > 1 else ""
        if window is None:
            return ""
        return {
            "window": f"holds the last {window - 1:,} tokens{unit}",
            "window_page": f"holds the last {window:,} tokens + one page{unit}",
            "chunk": f"holds the current {window:,}-token chunk{unit} (peak reported)",
            "fixed": f"own cache of min(context, {window:,} + {self.swa_extra_tokens}) cells{unit}",
            "all": f"{self.name} keeps every token of this windowed layer",
        }[policy]

    def held_tokens(self, policy: str, window: int | None, n: int, block: int) -> int:
        """Token slots (whole blocks) a layer with ``policy`` holds at context ``n``, worst case
        up to ``n``."""
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

    # ---- MLA --------------------------------------------------------------------------------

    def mla_geometry(self, model_type: str, spec) -> tuple[int, int, int, bool]:
        """(cached heads, K dim, V dim, latent?) of an MLA layer."""
        if self.mla_latent_model_types is not None and model_type not in self.mla_latent_model_types:
            return (spec.num_attention_heads, spec.qk_nope_head_dim + spec.qk_rope_head_dim,
                    spec.v_head_dim, False)
        layout = self.mla_latent_layout_by_model_type.get(model_type, self.mla_latent_layout)
        if layout == "k_and_v":
            return 1, spec.latent_dim, spec.kv_lora_rank, True
        if layout == "split":
            return 1, spec.kv_lora_rank, spec.qk_rope_head_dim, True
        return 1, spec.latent_dim, 0, True

    # ---- models -----------------------------------------------------------------------------

    def check_model(self, model: Model) -> None:
        """Refuse a model the engine does not serve (at this version), or one with a layer kind
        (or KV sharing) whose layout kvplan has not established for this engine."""
        model_type, kinds = model.model_type, {spec.kind for spec in model.cache_layers}
        last = self.removed_model_types.get(model_type)
        if last is not None and version_tuple(self.version) > version_tuple(last):
            raise InputError(f"{self.label} does not serve {model_type!r} models: {self.name} removed "
                             f"them after release {last} (plan with --engine {self.name}@{last})",
                             field="--engine")
        if model_type in self.first_release and self.version != self.default_version:
            first = self.first_release[model_type]
            if first is None or version_tuple(self.version) < version_tuple(first):
                since = (f"{self.name} first served {model_type!r} models in {first}" if first
                         else f"kvplan has not established which {self.name} release first "
                         f"served {model_type!r} models")
                raise InputError(f"{self.label}: {since}; plan them with --engine {self.name} "
                                 "(its current rules)", field="--engine")
        why = self.unserved_model_types.get(model_type)
        if why is not None:
            raise InputError(f"{model_type!r} models are not planned on {self.label}: {why}",
                             field="--engine")
        if self.state_kinds is not None:
            missing = sorted(k for k in kinds - self.state_kinds if k in STATE_KINDS)
            if missing:
                raise InputError(f"kvplan has not established how {self.label} stores "
                                 f"{', '.join(missing)} state (layers of {model_type!r}); plan it "
                                 f"with an engine that models it", field="--engine")
        if self.indexer_on_every_layer:
            with_index = sum(any(s.kind == "indexer" for s in b) for b in model.layers)
            latent = sum(any(s.kind == "mla" for s in b) for b in model.layers)
            if with_index and with_index != latent:
                raise InputError(f"kvplan has not established whether {self.label} allocates an "
                                 f"indexer cache on the {latent - with_index} layers of "
                                 f"{model_type!r} that share another layer's indexer; plan it with "
                                 "vllm", field="--engine")
        if model.kv_shared_layers and not self.kv_sharing:
            raise InputError(f"kvplan has not established whether {self.label} allocates cache for "
                             f"the {model.kv_shared_layers} KV-sharing layers of {model_type!r}; "
                             "plan it with vllm, llama.cpp or hf", field="--engine")

    def check_kv_format(self, model: Model, format_name: str) -> None:
        """Refuse a KV format the engine would not apply to this model."""
        why = self.model_dtype_kv_only.get(model.model_type)
        if why and format_name != self.auto_kv_dtype(model.dtype, model.model_type):
            raise InputError(f"{self.label} keeps {model.model_type!r} KV in the model dtype: "
                             f"{why}; plan it with --kv-dtype auto", field="--kv-dtype")
        refused = self.mla_refused_kv_formats.get(format_name.split(":", 1)[0])
        if refused and any(s.kind == "mla" for s in model.cache_layers):
            raise InputError(f"{self.label} refuses KV format {format_name} for MLA models such "
                             f"as {model.name}: {refused}", field="--kv-dtype")

    # ---- options ----------------------------------------------------------------------------

    def check_options(self, k_format: str, v_format: str, block: int, tp: int = 1) -> None:
        """Reject a storage format, block size or TP degree the engine cannot use."""
        if self.max_tp is not None and tp > self.max_tp:
            raise ParallelismError(
                f"{self.name} does not shard the cache by tensor parallelism (tp={tp}); "
                "it splits layers across GPUs: use --pp", field="tp")
        if block > 1 and not self.paged:
            raise InputError(f"{self.name} does not page its cache; use --block-size 1 "
                             f"(got {block})", field="--block-size")
        for fmt in (k_format, v_format):
            base = fmt.split(":", 1)[0]
            if self.kv_formats is not None and base not in self.kv_formats:
                raise InputError(
                    f"{self.label} stores KV as {', '.join(sorted(self.kv_formats))}, not "
                    f"{fmt}; use --engine hf to price any format", field="--kv-dtype")
        if k_format != v_format and not self.separate_kv_formats:
            raise InputError(f"{self.label} stores K and V in one kv_cache_dtype; got "
                             f"K {k_format} and V {v_format}", field="--k-dtype/--v-dtype")
        if self.fixed_block_size and block != self.default_block_size_tokens:
            raise InputError(f"{self.label} always pads its cache to "
                             f"{self.default_block_size_tokens} cells (got {block})",
                             field="--block-size")

    def format_notes(self, v_format: str) -> tuple[str, ...]:
        if v_format.split(":", 1)[0] in self.v_needs_flash_attention:
            return (f"{self.name} needs flash attention (-fa) for a quantised V cache "
                    f"({v_format})",)
        return ()


def parse_version(text: str | None, default: str, engine: str, allow_main: bool,
                  newest: str | None = None) -> str:
    """``None`` -> default; ``"0.11"``, ``"4.57.1"`` or ``"main"``; anything else is an error
    naming the option, and so is a release after ``newest`` (the last one kvplan has read: its
    rules may have changed, and kvplan does not guess them)."""
    if text is None:
        return default
    parts = text.split(".")
    if allow_main and text == "main":
        return text
    if all(p.isdigit() for p in parts) and len(parts) <= 3:
        if newest is not None and version_tuple(text) > version_tuple(newest):
            raise InputError(f"{engine}@{text} is newer than the releases kvplan has read (up to "
                             f"{newest}); plan with --engine {engine}@{newest}, or {engine} (its "
                             "main as kvplan read it)", field="--engine")
        return text
    example = "0.19" if default == "main" else default
    raise InputError(f"bad {engine} version {text!r}: expected numbers such as "
                     f"{example!r}" + (" or 'main'" if allow_main else ""), field="--engine")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.11.2"`` -> (0, 11, 2), ``"0.34"`` -> (0, 34, 0); ``"main"`` sorts after every
    release."""
    if version == "main":
        return (10**6,)
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))  # "0.34" is 0.34.0: (0, 34) would sort before it
