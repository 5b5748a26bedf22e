"""One spec class per layer kind: what a layer caches, independent of any engine. Pure.

Every class is a frozen, keyword-only, hashable dataclass, so a model's layers group by
``dict[spec, count]``. Attention kinds give the cached vectors per token
(``kv_heads`` x ``head_dim_k`` for K, ``kv_heads`` x ``head_dim_v`` for V); state kinds give
the shapes of their constant per-sequence state. How an engine stores them (paging, window
bookkeeping, conv-state width, dtypes, sharding) lives in ``kvplan.engines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, kw_only=True)
class FullAttention:
    """Full causal attention (MHA, MQA, GQA): every token's K and V are kept.

    bytes/token/layer = kv_heads * (head_dim_k + head_dim_v) * bytes_per_element.
    Llama-3-70B: 8 KV heads x (128 + 128) x 2 B (bf16) = 4096 B per layer; x 80 layers
    = 327,680 B per token.
    """

    kind: ClassVar[str] = "full_attention"
    grows: ClassVar[bool] = True
    num_attention_heads: int
    num_kv_heads: int
    head_dim_k: int
    head_dim_v: int


@dataclass(frozen=True, kw_only=True)
class SlidingWindow:
    """Attention over the last ``window_tokens`` positions (the query included).

    A sequence keeps at most ``window_tokens - 1`` past tokens. Mistral-7B-v0.1: window 4096,
    8 KV heads x 128 x 2 (K, V) x 2 B = 4096 B per token per layer, so at most
    4095 x 4096 B per layer however long the sequence.
    """

    kind: ClassVar[str] = "sliding_window"
    grows: ClassVar[bool] = False
    num_attention_heads: int
    num_kv_heads: int
    head_dim_k: int
    head_dim_v: int
    window_tokens: int


@dataclass(frozen=True, kw_only=True)
class ChunkedLocal:
    """Attention within fixed chunks of ``chunk_tokens`` positions (Llama-4 iRoPE layers).

    The next token at position n attends to the ``n mod chunk_tokens`` cached tokens of its
    own chunk; Llama-4-Scout: chunk 8192, so at most 8191 tokens x 8 heads x 128 x 2 x 2 B.
    """

    kind: ClassVar[str] = "chunked_local"
    grows: ClassVar[bool] = False
    num_attention_heads: int
    num_kv_heads: int
    head_dim_k: int
    head_dim_v: int
    chunk_tokens: int


@dataclass(frozen=True, kw_only=True)
class MultiHeadLatent:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2).

    Engines that cache the latent keep one vector of ``kv_lora_rank + qk_rope_head_dim``
    elements per token per layer, shared by all heads (no K/V pair, no head count).
    DeepSeek-V3: (512 + 64) x 2 B = 1152 B per layer; x 61 layers = 70,272 B per token.
    Engines that decompress keep per-head K of ``qk_nope_head_dim + qk_rope_head_dim`` and V of
    ``v_head_dim``: 128 x (192 + 128) x 2 B = 81,920 B per layer, 71.1x the latent.
    """

    kind: ClassVar[str] = "mla"
    grows: ClassVar[bool] = True
    num_attention_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, kw_only=True)
class LightningIndexer:
    """The lightning indexer of DeepSeek sparse attention (DeepSeek-V3.2, GLM-5.x): beside the
    MLA latent, a layer with an indexer caches one key of ``index_head_dim`` elements per token
    (a single head, replicated on every TP rank), used to pick the top-k tokens to attend to.

    vLLM and SGLang store it as fp8 with one fp32 scale per 128 values whatever the KV format:
    index_head_dim + index_head_dim / 128 x 4 B. DeepSeek-V3.2: 128 + 4 = 132 B per token per
    layer, so 61 x (1,152 B latent + 132 B) = 78,324 B per token in bf16.
    """

    kind: ClassVar[str] = "indexer"
    grows: ClassVar[bool] = True
    index_head_dim: int
    #: the indexer's query heads and the tokens each query then attends to (time only: the
    #: indexer scores every cached token, 2 x index_n_heads x index_head_dim FLOPs each, and
    #: sparse MLA reads the latents of the top ``index_topk``); 0 / None where not stated
    index_n_heads: int = 0
    index_topk: int | None = None


@dataclass(frozen=True, kw_only=True)
class CompressedAttention:
    """DeepSeek-V4 attention: one ``head_dim`` latent per token serves as K and V (MQA-like),
    kept three ways. Every layer holds a window of the last ``window_tokens`` raw tokens; a
    layer with ``compress_ratio`` r > 1 also holds one compressed entry per r tokens (floor(n/r)
    entries) and the compressor's running state (the last 2r raw tokens' projections for r = 4,
    the last r for r = 128, in fp32); r = 4 layers add a lightning-indexer key per entry.

    vLLM stores latents as fp8_ds_mla (448 fp8 NoPE values + 64 bf16 RoPE values + 7 UE8M0
    scales + 1 pad = 584 B). DeepSeek-V4-Flash at 128k tokens: 21 r=4 layers x 32,768 entries x
    (584 + 132) B + 20 r=128 layers x 1,024 x 584 B + 43 windows x 128 x 584 B + states.
    """

    kind: ClassVar[str] = "compressed_attention"
    grows: ClassVar[bool] = True
    compress_ratio: int  # 1: window only; 4: compressed sparse (with an indexer); 128: heavy
    head_dim: int
    rope_dim: int
    window_tokens: int
    index_head_dim: int = 0  # the indexer key's width on r = 4 layers

    @property
    def overlap(self) -> int:
        """Groups the compressor state spans: 2 for r = 4 (overlapping groups), else 1."""
        return 2 if self.compress_ratio == 4 else 1


@dataclass(frozen=True, kw_only=True)
class Mamba:
    """A selective state-space layer (Mamba-1 or Mamba-2); its state is constant per sequence.

    Mamba-1 (``version`` 1): conv state over ``d_inner`` channels, SSM state
    ``d_inner x d_state``. Mamba-2: conv over ``d_inner + 2 * n_groups * d_state`` channels
    (x, B and C pass through the conv), SSM state ``num_heads x head_dim x d_state``.
    The conv state holds ``d_conv`` columns in transformers and ``d_conv - 1`` in vLLM.
    Mamba2-2.7B: d_inner 5120, d_state 128, n_groups 1, 80 heads x 64: conv 5376 x 4,
    SSM 80 x 64 x 128 = 655,360 elements.
    """

    kind: ClassVar[str] = "mamba"
    grows: ClassVar[bool] = False
    version: int
    d_inner: int
    d_state: int
    d_conv: int
    num_heads: int = 0  # Mamba-2 only
    head_dim: int = 0  # Mamba-2 only
    n_groups: int = 1  # Mamba-2 only
    #: (config key, dtype) pairs the config declares for the SSM state, e.g.
    #: (("mamba_ssm_cache_dtype", "fp32"),); each engine reads only its own key.
    ssm_dtypes: tuple[tuple[str, str], ...] = ()

    @property
    def conv_channels(self) -> int:
        if self.version == 1:
            return self.d_inner
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def ssm_elements(self) -> int:
        if self.version == 1:
            return self.d_inner * self.d_state
        return self.num_heads * self.head_dim * self.d_state


@dataclass(frozen=True, kw_only=True)
class LinearAttention:
    """Linear attention with a fixed recurrent state (Qwen3-Next gated DeltaNet).

    Conv state over ``2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim`` channels (q, k
    and v pass through a short causal conv), recurrent state ``num_v_heads x head_k_dim x
    head_v_dim``. Qwen3-Next-80B: conv 2*16*128 + 32*128 = 8192 channels, state
    32 x 128 x 128 = 524,288 elements per layer.
    """

    kind: ClassVar[str] = "linear_attention"
    grows: ClassVar[bool] = False
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    #: (config key, dtype) pairs the config declares for the recurrent state.
    state_dtypes: tuple[tuple[str, str], ...] = ()

    @property
    def conv_channels(self) -> int:
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim

    @property
    def state_elements(self) -> int:
        return self.num_v_heads * self.head_k_dim * self.head_v_dim


@dataclass(frozen=True, kw_only=True)
class KimiDeltaAttention(LinearAttention):
    """Kimi delta attention (KDA: Kimi-Linear, Kimi-K3, Ling-3.0): gated-DeltaNet state with one
    head count and one head dim for q, k and v.

    Conv state over ``3 * num_heads * head_dim`` channels (q, k and v each pass a short conv of
    ``conv_kernel`` taps), recurrent state ``num_heads x head_dim x head_dim``. The kind is its
    own because engines keep its recurrent state in float32 whatever the model dtype (vLLM
    ``MambaStateDtypeCalculator.kda_state_dtype``). Kimi-Linear-48B: 32 heads x 128: conv
    12,288 channels x 3 columns x 2 B (bf16) = 73,728 B and state 32 x 128 x 128 x 4 B =
    2,097,152 B, so 2,170,880 B per KDA layer per sequence (x 20 layers = 43,417,600 B).
    """

    kind: ClassVar[str] = "kda"


@dataclass(frozen=True, kw_only=True)
class LightningAttention:
    """Lightning (linear) attention with a decayed ``num_heads x head_dim x head_dim`` state and
    no conv (MiniMax-Text-01 / M1, Ling-2.5 / Ring-linear's linear layers).

    state bytes per layer = num_heads * head_dim * head_dim * bytes(state dtype).
    MiniMax-M1: 64 heads x 128 x 128 x 2 B (bf16) = 2,097,152 B per layer per sequence.
    """

    kind: ClassVar[str] = "lightning_attention"
    grows: ClassVar[bool] = False
    num_heads: int
    head_dim: int

    @property
    def state_elements(self) -> int:
        return self.num_heads * self.head_dim * self.head_dim


@dataclass(frozen=True, kw_only=True)
class ShortConv:
    """A gated short convolution (LFM2's conv layers): its state is the last ``conv_kernel - 1``
    inputs of ``channels`` (= hidden_size) channels; no recurrent state.

    vLLM: (conv_kernel - 1) x channels x bytes (``short_conv_state_shape``). LFM2-1.2B style,
    hidden 2048 and ``conv_L_cache`` 3: 2 x 2048 x 2 B = 8,192 B per layer per sequence.
    """

    kind: ClassVar[str] = "short_conv"
    grows: ClassVar[bool] = False
    channels: int
    conv_kernel: int


LayerSpec = (FullAttention | SlidingWindow | ChunkedLocal | MultiHeadLatent | LightningIndexer | Mamba
             | LinearAttention | LightningAttention | ShortConv | CompressedAttention)
