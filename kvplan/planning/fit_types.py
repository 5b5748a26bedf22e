"""What ``plan_fit`` is asked (``FitRequest``, with an optional speculative ``Draft``) and what
it answers (``FitResult``, one ``StagePlan`` per pipeline stage). Pure data; launch lines are
built from a finished result by whoever asks for them (``kvplan.planning.launch``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.budget import Budget
from ..core.gpu import GpuSpec
from ..core.model import Model
from ..core.parallel import MoeSplit
from ..core.weights import WeightFormat, Weights
from ..engines import EngineLayout
from ..engines.expert_buffers import ExpertParallelMemory
from ..engines.kvpool import PoolGroups, PoolLayer
from .footprint import Footprint

if TYPE_CHECKING:
    from .fit_dsv4 import Dsv4Pool


@dataclass(frozen=True)
class Draft:
    """A speculative-decoding draft model: its own KV layers join the pool (last stage)."""

    model: Model
    weights: Weights | None
    weight_format: WeightFormat
    num_speculative_tokens: int


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    model: Model
    weights: Weights | None  # None: --weight-memory must be given
    weight_format: WeightFormat
    gpu: GpuSpec
    engine: str = "vllm"
    tp: int = 1
    pp: int = 1
    dp: int = 1  # attention data-parallel ranks, each with its own sequences and KV pool
    ep: int = 1  # GPUs of a stage the routed experts are spread over (1: none)
    dcp: int = 1  # decode context parallel: GPUs of a rank's tp each sequence's tokens split over
    eplb: bool = False  # expert-parallel load balancing (redundant expert slots, staging copy)
    redundant_experts: int | None = None  # EPLB's extra slots per MoE layer (None: the engine's)
    all2all: str = "default"  # kvplan.engines.expert_buffers.ALL2ALL
    kv_dtype: str = "auto"
    context_tokens: int = 8192
    max_model_len: int | None = None
    utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size_tokens: int | None = None
    shared_prefix_tokens: int = 0
    draft: Draft | None = None
    concurrency: int | None = None
    kv_cache_memory_bytes: int | None = None
    weight_memory_bytes: int | None = None
    activation_memory_bytes: int | None = None
    overhead_memory_bytes: int | None = None
    total_memory_bytes: int | None = None
    allow_emulated: bool = False
    search: bool = True
    allow_long_max_model_len: bool = False  # plan past the model's context limit (stated)
    checkpoint: dict | None = None  # safetensors summary of a Hub model (params/bytes by dtype)

    @property
    def num_experts(self) -> int:
        """Routed experts of the model (0: dense, or no parameter inventory)."""
        return self.weights.num_experts if self.weights else 0

    @property
    def gpus(self) -> int:
        """GPUs the deployment uses: tp x pp per attention rank, times dp ranks."""
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class StagePlan:
    stage: int
    layers: int
    budget: Budget
    pool_layers: tuple[PoolLayer, ...]
    num_blocks: int | None  # paged engines with vLLM grouping
    pool_groups: PoolGroups | None = None  # vLLM's KV cache groups of this stage
    dsv4: Dsv4Pool | None = None  # DeepSeek-V4's packed pool (kvplan.planning.fit_dsv4)

    @property
    def groups(self) -> int:
        if self.dsv4 is not None:
            return len(self.dsv4.groups)
        return len(self.pool_groups.groups) if self.pool_groups else 1

    @property
    def padding_layers(self) -> int:
        return self.pool_groups.padding_layers if self.pool_groups else 0


@dataclass(frozen=True)
class FitResult:
    request: FitRequest
    layout: EngineLayout
    footprint: Footprint
    kv_format: str
    block_size_tokens: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    params_total: int | None
    params_active: int | None
    budget: Budget  # the busiest stage's
    stages: tuple[StagePlan, ...]
    kv_pool_tokens: int
    per_sequence_bytes: int
    max_concurrency: int  # the whole deployment: every DP rank's sequences
    engine_max_concurrency: float  # the engine's own figure, per DP rank
    fits: bool
    verdict: str
    notes: tuple[str, ...] = ()
    suggestion: tuple[int, int, int, int] | None = None  # (tp, pp, dp, ep)
    suggestion_concurrency: int | None = None
    draft_footprint: Footprint | None = None  # the draft model's cache layers (last stage)
    split: MoeSplit | None = None  # how a stage's GPUs hold the tensors (None: plain TP)
    expert_memory: ExpertParallelMemory | None = None  # EPLB / DeepEP (None: not planned)
    suggested: FitResult | None = None  # the plan of ``suggestion`` (its launch lines)
    #: the attention block before a hybrid's unification raised it (the ``--block-size`` a
    #: vLLM line passes, so that every release starts from the planned block)
    start_block_size_tokens: int = 0

    @property
    def busiest_stage(self) -> int:
        """The stage whose budget the result reports (``budget``)."""
        return next((s.stage for s in self.stages if s.budget is self.budget),
                    min(self.stages, key=lambda s: s.budget.kv_pool_bytes).stage)

    @property
    def concurrency_per_rank(self) -> int:
        """Whole sequences one DP rank holds (the deployment's when dp = 1)."""
        return self.max_concurrency // self.request.dp
