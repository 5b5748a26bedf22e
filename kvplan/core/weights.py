"""Parameter inventories and weight bytes per GPU. Pure.

A model's weights are a list of ``Tensor`` rows (built from its config by
``kvplan.loaders.hf_params``): shape, how many identical copies (experts), which decoder
layer holds it, how tensor parallelism splits it, and whether a weight-quantization method
compresses it. Sharding follows vLLM's layers:

- ``column`` (``ColumnParallelLinear``/``QKVParallelLinear`` q part, MLP gate/up, experts'
  w1/w3): rows split over TP ranks; ``row`` (``RowParallelLinear``: o_proj, down_proj): columns
  split; bias of a row-parallel layer and every norm is replicated;
- ``kv``: the K/V rows of ``QKVParallelLinear``, split by KV head, one head per rank replicated
  when tp > KV heads (``max(1, kv_heads // tp)`` heads per rank);
- ``vocab`` (``VocabParallelEmbedding``/``ParallelLMHead``): vocab padded to a multiple of 64
  (``DEFAULT_VOCAB_PADDING_SIZE``), then split;
- ``replicated``: norms, MoE routers and MLA's ``q_a_proj``/``kv_a_proj_with_mqa``
  (``ReplicatedLinear`` in vLLM's DeepSeek-V2 model).

Under pipeline parallelism the decoder layers split by ``pp_stage_sizes``; the embedding goes
to the first stage and the final norm + LM head to the last (a tied LM head makes the last
stage hold its own copy of the embedding, as vLLM does), except tensors marked
``every_stage`` (built on every pipeline rank by the engine). The busiest GPU is the maximum over
stages. Extra layers (DeepSeek-V3's MTP module) are counted apart and not loaded by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .dtypes import dtype_bytes
from .module_match import SkipList, module_names
from .parallel import MoeSplit, experts_on_busiest_rank, plain_split, pp_stage_sizes
from .units import cdiv, ceil_bytes

VOCAB_PADDING = 64
SHARDS = ("column", "row", "kv", "vocab", "replicated")
PLACES = ("embed", "layer", "head", "extra")


@dataclass(frozen=True, kw_only=True)
class Tensor:
    name: str
    rows: int  # out_features for a Linear (vectors: their length, cols = 1)
    cols: int = 1  # in_features
    count: int = 1  # identical copies, e.g. routed experts
    place: str = "layer"
    layer: int | None = None  # decoder layer index for place == "layer"
    shard: str = "replicated"
    linear: bool = False  # a Linear weight matrix (what weight quantization compresses)
    expert: bool = False  # a routed-expert weight (active per token: top_k / num_experts)
    kv_heads: int = 0  # shard == "kv": heads this tensor's rows hold
    dtype: str | None = None  # a fixed storage dtype (fp32 buffers), else the format's
    #: split only when this many heads divide by tp, else whole on every rank (vLLM's ViTs
    #: fall back to data parallelism: ``is_vit_use_data_parallel``); 0: always split
    split_heads: int = 0
    #: a tensor placed with the embedding that every token still runs through (Gemma-3n's
    #: per-layer and AltUp projections): read by every decode step, unlike a lookup or a tower
    per_token: bool = False
    #: a tensor every pipeline stage allocates under vLLM (0.34 lfm2.py / gemma4.py /
    #: mixtral.py / qwen3_moe.py and others build embed_tokens on every PP rank, not only the
    #: first and, tied, the last; many also the final norm and an untied lm_head: the table in
    #: ``kvplan.loaders.params_stages``); ``weight_bytes(every_stage=False)`` for engines that
    #: place them by the first / last rule
    every_stage: bool = False

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count

    def shape_on_rank(self, tp: int) -> tuple[int, int]:
        """(rows, cols) one TP rank holds."""
        if self.split_heads and self.split_heads % tp:
            return self.rows, self.cols
        if self.shard == "column":
            return cdiv(self.rows, tp), self.cols
        if self.shard == "row":
            return self.rows, cdiv(self.cols, tp)
        if self.shard == "kv":
            per_head = self.rows // self.kv_heads
            return per_head * max(1, self.kv_heads // tp), self.cols
        if self.shard == "vocab":
            return cdiv(cdiv(self.rows, VOCAB_PADDING) * VOCAB_PADDING, tp), self.cols
        return self.rows, self.cols


@dataclass(frozen=True, kw_only=True)
class Weights:
    """Every tensor of a model plus its MoE routing (for active parameters)."""

    tensors: tuple[Tensor, ...]
    num_experts: int = 0
    experts_per_token: int = 0
    tied_embeddings: bool = False
    extra_name: str = ""  # what place == "extra" holds, e.g. "MTP layer (num_nextn_predict_layers=1)"
    notes: tuple[str, ...] = ()

    def _sum(self, places: tuple[str, ...]) -> int:
        return sum(t.params for t in self.tensors if t.place in places)

    @property
    def params_total(self) -> int:
        """Parameters the serving model loads (extra layers excluded)."""
        return self._sum(("embed", "layer", "head"))

    @property
    def params_extra(self) -> int:
        return self._sum(("extra",))

    @property
    def params_expert(self) -> int:
        return sum(t.params for t in self.tensors if t.expert and t.place != "extra")

    @property
    def params_active(self) -> int:
        """Parameters one token runs through: routed experts scaled by top_k / num_experts."""
        if not self.num_experts:
            return self.params_total
        routed = Fraction(self.params_expert * self.experts_per_token, self.num_experts)
        return self.params_total - self.params_expert + int(routed)

    @property
    def params_lookup(self) -> int:
        """Parameters a token only gathers a row of: the vocabulary tables placed with the
        embedding (an untied input embedding; Gemma-3n's per-layer tables), not a tied one
        (the LM head multiplies by it), nor the towers and projections placed with them."""
        return sum(t.params for t in self.tensors
                   if t.place == "embed" and t.shard == "vocab" and not t.per_token
                   and not (self.tied_embeddings and t.name == "embed_tokens"))

    @property
    def params_active_without_lookup(self) -> int:
        """``params_active`` less the lookups: the weights a token multiplies through, the
        figure model cards quote (gpt-oss-120b: 5.71B active with its 201,088 x 2,880
        embedding, 5.13B without)."""
        return self.params_active - self.params_lookup

    def by_group(self) -> dict[str, int]:
        """Parameters per tensor name (summed over layers), for the breakdown table."""
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.name] = out.get(t.name, 0) + t.params
        return out


@dataclass(frozen=True, kw_only=True)
class WeightFormat:
    """How weights are stored. Linear weights (optionally routed experts only) use ``scheme``;
    everything else (embeddings, norms, routers, biases, skipped modules) uses ``base_dtype``.

    Schemes and their exact bytes for a (rows=out, cols=in) matrix of n = rows*cols elements:
    - ``dense``: n * bytes(base_dtype)
    - ``fp8``: n + 4 (one fp32 per-tensor scale; vLLM ``Fp8LinearMethod``)
    - ``fp8_channel``: n + 4 * rows (fp32 scale per output channel)
    - ``fp8_block``: n + 4 * ceil(rows/b0) * ceil(cols/b1) (DeepSeek-V3 ``weight_block_size``
      [128, 128], fp32 ``weight_scale_inv``); ``scale_bytes`` 1: ue8m0 scales (DeepSeek-V4's fp4
      checkpoints)
    - ``awq`` / ``gptq`` (int4, group g along the input): n/2 packed + rows*cols/g fp16 scales
      (2 bytes) + 4-bit zeros packed in int32 (rows*cols/(2g) bytes); GPTQ adds ``g_idx``
      (4 bytes per input column); ``int4`` (compressed-tensors pack-quantized) stores zeros only
      when asymmetric, and a 16-byte int64 ``weight_shape``
    - ``mxfp4``: n/2 + n/32 (an e8m0 scale per 32 elements; gpt-oss experts)
    - ``nvfp4`` (ModelOpt NVFP4, compressed-tensors nvfp4-pack-quantized): n/2 packed e2m1 +
      n/16 fp8 block scales + 8 (fp32 weight_scale_2 and input_scale of the tensor); ``nvfp4_w4a16``
      + 4 (no input scale). Llama-70B-shaped q_proj [8192, 8192]: 33,554,432 + 4,194,304 + 8
    - ``fp8_modelopt``: n + 8 (fp32 weight_scale and input_scale); ``mxfp8``: n + n/32 (e8m0)
    - ``bnb_nf4``: n/2 + absmax per 64 (fp32, or uint8 + fp32 per 256 blocks when double
      quantised)
    - ``bnb_int8``: n + 4 * rows (LLM.int8 fp32 row scale ``SCB``)
    """

    name: str
    base_dtype: str = "bf16"
    scheme: str = "dense"
    group_size: int = 128
    block: tuple[int, int] = (128, 128)
    experts_only: bool = False
    double_quant: bool = False
    zero_point: bool = True  # int4 (compressed-tensors): asymmetric schemes store zeros
    #: routed experts' own scheme where it differs from ``scheme`` (DeepSeek-V4: mxfp4 experts
    #: beside fp8 block linears); "" for the same
    expert_scheme: str = ""
    scale_bytes: int = 4  # bytes per fp8_block scale: fp32, or 1 for ue8m0 (e8m0fnu)
    skip: SkipList = SkipList()  # modules the checkpoint leaves unquantised, and the match rule

    def quantizes(self, t: Tensor) -> bool:
        if self.scheme == "dense" or not t.linear:
            return False
        if self.experts_only and not t.expert:
            return False
        names, fused = module_names(t.name, t.layer, t.place, t.expert)
        return not self.skip.skips(names, fused)

    def matrix_bytes(self, rows: int, cols: int, t: Tensor) -> Fraction:
        n = rows * cols
        if t.dtype is not None:
            return Fraction(n * dtype_bytes(t.dtype))
        if not self.quantizes(t):
            return Fraction(n * dtype_bytes(self.base_dtype))
        s = self.expert_scheme if t.expert and self.expert_scheme else self.scheme
        if s == "fp8":
            return Fraction(n + 4)
        if s == "fp8_channel":
            return Fraction(n + 4 * rows)
        if s == "fp8_block":
            return Fraction(n + self.scale_bytes * cdiv(rows, self.block[0])
                            * cdiv(cols, self.block[1]))
        if s in ("awq", "gptq", "int4"):
            group = self.group_size if self.group_size > 0 else cols  # -1: one group per row
            groups = rows * cdiv(cols, group)
            zeros = Fraction(groups, 2) if s != "int4" or self.zero_point else Fraction(0)
            extra = 4 * cols if s == "gptq" else 16 if s == "int4" else 0  # g_idx; weight_shape
            return Fraction(n, 2) + 2 * groups + zeros + extra
        if s == "mxfp4":
            return Fraction(n, 2) + Fraction(n, 32)
        if s in ("nvfp4", "nvfp4_w4a16"):
            return Fraction(n, 2) + Fraction(n, 16) + (8 if s == "nvfp4" else 4)
        if s == "fp8_modelopt":
            return Fraction(n + 8)
        if s == "mxfp8":
            return n + Fraction(n, 32)
        if s == "bnb_nf4":
            blocks = cdiv(n, 64)
            scale = blocks + 4 * cdiv(blocks, 256) if self.double_quant else 4 * blocks
            return Fraction(n, 2) + scale
        if s == "bnb_int8":
            return Fraction(n + 4 * rows)
        raise ValueError(f"unknown weight scheme {s!r}")

    def tensor_bytes(self, t: Tensor, tp: int = 1) -> Fraction:
        rows, cols = t.shape_on_rank(tp)
        return self.matrix_bytes(rows, cols, t) * t.count


@dataclass(frozen=True)
class WeightBytes:
    per_gpu_bytes: int  # the busiest GPU (max over pipeline stages)
    total_bytes: int  # the whole model once (tp = pp = 1)
    per_stage_bytes: tuple[int, ...]
    extra_bytes: int  # extra layers (MTP), not loaded by default
    replicated_bytes: int = 0  # of the busiest stage: tensors every TP rank holds whole


def tensor_role(t: Tensor) -> str:
    """Which placement rule of ``MoeSplit`` a tensor follows: expert, embed, head, shared (a
    shared expert's MLP), mlp (a dense MLP) or attention (the mixer, norms, routers)."""
    if t.expert:
        return "expert"
    if t.place in ("embed", "head"):
        return t.place
    if ".shared_expert" in t.name:
        return "shared"
    if t.name.startswith("mlp.") and t.shard != "replicated":
        return "mlp"
    return "attention"


def expert_width(weights: Weights | None) -> int:
    """A routed expert's intermediate size (the rows of its gate / up projection), 0 if none."""
    for t in weights.tensors if weights else ():
        if t.expert and t.shard == "column" and t.linear:
            return t.rows
    return 0


def rank_tensor_bytes(t: Tensor, fmt: WeightFormat, split: MoeSplit) -> Fraction:
    """Bytes of ``t`` on the busiest GPU of a stage under ``split``: a routed expert's
    matrices split over ``moe_tp``, its copies spread over ``ep`` ranks; every other tensor
    split over the GPUs its role gets."""
    role = tensor_role(t)
    if role == "expert":
        rows, cols = t.shape_on_rank(split.moe_tp)
        slots = t.count + split.redundant
        return fmt.matrix_bytes(rows, cols, t) * experts_on_busiest_rank(slots, split.ep)
    return fmt.tensor_bytes(t, split.role_tp(role))


def expert_layer_bytes(w: Weights, fmt: WeightFormat, split: MoeSplit) -> int:
    """Bytes of the first MoE layer's routed experts on the busiest GPU (what vLLM's EPLB
    stages: ``model.expert_weights[0]``), 0 without routed experts."""
    layers = [t.layer for t in w.tensors if t.expert and t.place == "layer" and t.layer is not None]
    if not layers:
        return 0
    first = min(layers)
    return ceil_bytes(sum((rank_tensor_bytes(t, fmt, split) for t in w.tensors
                           if t.expert and t.place == "layer" and t.layer == first), Fraction(0)))


def weight_bytes(w: Weights, fmt: WeightFormat, *, tp: int = 1, pp: int = 1,
                 split: MoeSplit | None = None, every_stage: bool = True) -> WeightBytes:
    """Exact weight bytes per GPU under ``tp`` x ``pp`` (ceil to whole bytes per stage); with
    ``split``, under data / expert parallelism as one engine places the tensors.

    Pipeline placement: layers on their stage, the embedding on the first (and, tied, on the
    last: the LM head reads it), the head on the last; a tensor marked ``every_stage`` on every
    stage, as vLLM 0.34 builds it (lfm2.py / gemma4.py: embed_tokens and, in gemma4.py, the
    norm and lm_head have no first / last rank test). ``every_stage=False`` places those by
    the first / last rule instead (SGLang 0.5.23 gemma4_causal.py builds embed_tokens on the
    first rank and lm_head on the last)."""
    split = split or plain_split(tp)
    tp = split.tp
    num_layers = 1 + max((t.layer for t in w.tensors if t.layer is not None), default=-1)
    sizes = pp_stage_sizes(num_layers, pp) if num_layers else [0] * pp
    stage_of: list[int] = [s for s, n in enumerate(sizes) for _ in range(n)]
    stages = [Fraction(0)] * pp
    replicated = [Fraction(0)] * pp
    total = Fraction(0)
    extra = Fraction(0)
    for t in w.tensors:
        if t.place == "extra":
            extra += fmt.tensor_bytes(t)
            continue
        total += fmt.tensor_bytes(t)
        b = rank_tensor_bytes(t, fmt, split)
        if t.every_stage and every_stage:
            where = list(range(pp))
        elif t.place == "embed":
            tied = pp > 1 and w.tied_embeddings and t.name == "embed_tokens"
            where = [0, pp - 1] if tied else [0]
        elif t.place == "head":
            where = [pp - 1]
        else:
            where = [stage_of[t.layer] if t.layer is not None else 0]
        for s in where:
            stages[s] += b
            if t.shard == "replicated" and tp > 1:
                replicated[s] += b
    per_stage = tuple(ceil_bytes(s) for s in stages)
    busiest = per_stage.index(max(per_stage))
    return WeightBytes(per_gpu_bytes=max(per_stage), total_bytes=ceil_bytes(total),
                       per_stage_bytes=per_stage, extra_bytes=ceil_bytes(extra),
                       replicated_bytes=ceil_bytes(replicated[busiest]))
