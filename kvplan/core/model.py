"""The typed model description the engine works on. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .layers import LayerSpec


@dataclass(frozen=True)
class ContextLimit:
    """The longest context an engine accepts for the model without an override: ``tokens``,
    and ``source``, how it was derived from the config (key, rope scaling, library default)."""

    tokens: int
    source: str


@dataclass(frozen=True)
class Model:
    """An ordered stack of decoder layers plus the dimensions later stages need.

    ``layers[i]`` is the tuple of caches decoder layer ``i`` keeps: usually one spec, none for
    an MLP-only layer (Nemotron-H ``-``), two for a layer that runs attention and a Mamba mixer
    side by side (Falcon-H1, Zamba2's hybrid layers). ``dtype`` is the model's own dtype
    (``torch_dtype``/``dtype`` in config.json) as a short name such as ``bf16``.
    ``assumptions`` records each value that was derived or defaulted rather than read, so the
    CLI can explain it; ``warnings`` are shown to the user.
    """

    name: str
    model_type: str
    layers: tuple[tuple[LayerSpec, ...], ...]
    hidden_size: int
    vocab_size: int | None
    num_attention_heads: int | None
    dtype: str
    source: str = ""
    hub_id: str | None = None
    hub_revision: str | None = None  # the commit a Hub model was read at
    assumptions: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    config: dict = field(default_factory=dict, compare=False, repr=False, hash=False)
    #: the caller accepted the standard-decoder reading of a config kvplan could not establish
    #: (``--assume-standard-attention``); the assumption and what it ignored are in assumptions
    standard_attention_assumed: bool = False
    #: the last N layers read earlier layers' K and V and hold no cache (Gemma-3n / Gemma-4)
    kv_shared_layers: int = 0
    #: the KV format the checkpoint's quantization_config declares (``kv_cache_scheme``,
    #: ``kv_cache_quant_algo``), which engines that apply it use for ``--kv-dtype auto``
    checkpoint_kv_format: str | None = None
    #: every config key (dotted, as the text model's mapping names it) a KV rule read, so later
    #: readers (the parameter inventory) can tell a key nobody interprets from one already used
    keys_read: frozenset[str] = field(default=frozenset(), compare=False, repr=False, hash=False)
    #: the length vLLM derives from the config (None: the config declares none, as Mamba's)
    context_limit: ContextLimit | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def cache_layers(self) -> list[LayerSpec]:
        """Every cache-holding spec, in layer order."""
        return [spec for block in self.layers for spec in block]

    @property
    def sparse_mla(self) -> bool:
        """DeepSeek sparse attention (a lightning indexer on some layer: V3.2, GLM-5.x)."""
        return any(s.kind == "indexer" for s in self.cache_layers)

    @property
    def compressed_attention(self) -> bool:
        """DeepSeek-V4's compressed caches (vLLM's packed block pool plans them)."""
        return any(s.kind == "compressed_attention" for s in self.cache_layers)

    @property
    def lightning_indexers(self) -> bool:
        """Some layer runs a lightning indexer: sparse MLA, or DeepSeek-V4's ratio-4 layers."""
        return self.sparse_mla or any(getattr(s, "index_head_dim", 0) for s in self.cache_layers
                                      if s.kind == "compressed_attention")

    def layer_groups(self) -> list[tuple[LayerSpec, int]]:
        """Distinct layer specs with their counts, in order of first appearance."""
        counts = Counter(self.cache_layers)
        return list({spec: counts[spec] for spec in self.cache_layers}.items())
