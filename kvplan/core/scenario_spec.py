"""A scenario: what ``kvplan plan`` is asked (built from a scenario YAML by
``kvplan.loaders.scenario_yaml``). Pure data; "search" axes are lists of candidates here."""

from __future__ import annotations

from dataclasses import dataclass, field

from .workload import Workload

SEARCH_TP = (1, 2, 4, 8)
SEARCH_PP = (1, 2, 4)
SEARCH_DP = (1, 2, 4, 8)  # attention data-parallel ranks (MoE models)


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = 95.0


@dataclass(frozen=True)
class Tier:
    bytes: int
    bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Extras:
    cpu: Tier | None = None
    nvme: Tier | None = None
    preemption: str | None = None  # "recompute" | "swap"
    disagg_link_bytes_per_s: float | None = None
    #: the prefill instances' candidate layouts (tp, pp, dp, ep): tp or pp 0 takes the decode
    #: candidate's, ep 0 both 1 and tp x dp (a dense model: 1); None: the decode's own layout
    prefill_layouts: tuple[tuple[int, int, int, int], ...] | None = None


@dataclass(frozen=True)
class Serving:
    engines: tuple[str, ...] = ("vllm",)
    tps: tuple[int, ...] = (1,)
    pps: tuple[int, ...] = (1,)
    dps: tuple[int, ...] = (1,)
    #: expert-parallel degrees; None ("search"): 1 and tp x dp, the two every engine runs
    eps: tuple[int, ...] | None = (1,)
    dcps: tuple[int, ...] = (1,)  # decode context parallel GPUs (of tp), vLLM
    eplb: bool = False  # expert-parallel load balancing (kvplan.engines.expert_buffers)
    redundant_experts: int | None = None
    all2all: str = "default"
    dp_search: bool = False  # dps came from "search": a dense model plans dp 1 only
    kv_dtypes: tuple[str, ...] = ("auto",)
    weight_dtype: str | None = None
    block_size_tokens: int | None = None
    utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    allow_emulated: bool = False
    allow_long_max_model_len: bool = False  # plan past the model's context limit (stated)


@dataclass(frozen=True)
class Hardware:
    gpus: tuple[str, ...]  # GPU keys, or absolute paths of spec YAMLs
    gpus_per_node: int = 8
    nodes: int | None = None  # None: search
    price_usd_per_gpu_hour: float | None = None  # one price for every GPU
    prices_usd_per_gpu_hour: dict[str, float] = field(default_factory=dict)  # by GPU key


@dataclass(frozen=True)
class Scenario:
    path: str
    name: str
    model: str
    hardware: Hardware
    serving: Serving
    workload: Workload
    slo: Slo = field(default_factory=Slo)
    extras: Extras = field(default_factory=Extras)
    draft_model: str | None = None
    speculative_tokens: int = 0
    acceptance_length: float | None = None  # None: the speed-up is not modelled
    samples: int = 10_000
    assume_standard_attention: bool = False  # read unknown layouts as standard decoders
    seed: int = 0
