"""The scenario YAML schema (``kvplan: 1``): pydantic models with ``extra="forbid"``, the
value types of ``kvplan.loaders.scenario_values``, and the closest valid key for an unknown one."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..core.scenario_spec import SEARCH_PP, SEARCH_TP
from . import scenario_values as v

Tokens = Annotated[int, BeforeValidator(v.tokens)]
PosTokens = Annotated[int, BeforeValidator(v.positive_tokens)]
LengthIn = Annotated[Any, BeforeValidator(v.length)]
Real = BeforeValidator(v.real)
Size = Annotated[int, BeforeValidator(v.size)]
Bandwidth = Annotated[float, BeforeValidator(v.bandwidth)]
DistIn = Annotated[Any, BeforeValidator(v.dist)]
Names = Annotated[Any, BeforeValidator(v.names)]
PosInt = Annotated[int, Field(strict=True, gt=0, le=2**31 - 1)]  # a C int, as engines take it
MAX_SAMPLES = 1_000_000  # requests sampled per plan: about 15 s on a 2-core machine
MAX_TURNS = 1_000
Fraction01 = Annotated[float, Real, Field(gt=0, le=1)]
PosReal = Annotated[float, Real, Field(gt=0, allow_inf_nan=False)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DraftIn(_M):
    model: str
    speculative_tokens: PosInt
    acceptance_length: PosReal | None = None  # mean tokens emitted per verify step, in [1, K + 1]


class HardwareIn(_M):
    gpu: Names
    gpus_per_node: PosInt = 8
    nodes: Annotated[Any, BeforeValidator(v.nodes)] = None
    price_usd_per_gpu_hour: PosReal | dict[str, PosReal] | None = None


class ServingIn(_M):
    engine: Names = ("vllm",)
    tp: Annotated[Any, BeforeValidator(v.search_ints(SEARCH_TP))] = (1,)
    pp: Annotated[Any, BeforeValidator(v.search_ints(SEARCH_PP))] = (1,)
    dp: Annotated[Any, BeforeValidator(v.search_ints(None))] = (1,)  # None: "search"
    ep: Annotated[Any, BeforeValidator(v.search_ints(None))] = (1,)  # None: "search"
    dcp: Annotated[Any, BeforeValidator(v.search_ints((1, 2, 4, 8)))] = (1,)
    eplb: Annotated[bool, Field(strict=True)] = False
    redundant_experts: Annotated[int, Field(strict=True, ge=0, le=1023)] | None = None
    all2all: Literal["default", "deepep_high_throughput", "deepep_low_latency",
                     "deepep_auto"] = "default"
    kv_dtype: Names = ("auto",)
    weight_dtype: str | None = None
    block_size: PosInt | None = None
    gpu_memory_utilization: Fraction01 | None = None
    max_num_batched_tokens: PosTokens | None = None
    max_num_seqs: PosInt | None = None
    max_model_len: PosTokens | None = None
    allow_emulated: Annotated[bool, Field(strict=True)] = False
    allow_long_max_model_len: Annotated[bool, Field(strict=True)] = False
    kv_cache_memory: Size | None = None  # vLLM --kv-cache-memory-bytes: a pool of exactly this size


class WorkloadIn(_M):
    request_rate: PosReal | None = None
    concurrent_requests: PosInt | None = None
    prompt_tokens: LengthIn | None = None
    output_tokens: LengthIn | None = None
    trace: str | None = None
    shared_prefix_tokens: Tokens = 0
    prefix_cache_hit_rate: Annotated[float, Real, Field(ge=0, lt=1)] = 0.0
    turns: Annotated[int, Field(strict=True, gt=0, le=MAX_TURNS)] = 1
    tokens_per_turn: LengthIn | None = None
    thinking_tokens: DistIn | None = None
    images_per_request: Annotated[int, Field(strict=True, ge=0, le=10_000)] = 0
    tokens_per_image: Annotated[int, Field(strict=True, ge=0, le=2**20)] = 0


class SloIn(_M):
    ttft_ms: PosReal | None = None
    tpot_ms: PosReal | None = None
    percentile: Annotated[float, Real, Field(gt=0, le=100)] = 95.0


class TierIn(_M):
    bytes: Size
    bandwidth: Bandwidth


class OffloadIn(_M):
    cpu: TierIn | None = None
    nvme: TierIn | None = None


class PreemptionIn(_M):
    mode: Literal["recompute", "swap"]


class RoleIn(_M):
    """The prefill instances' own layout (each a number or a list; default: the decode's)."""

    tp: Annotated[Any, BeforeValidator(v.search_ints(SEARCH_TP))] = None
    pp: Annotated[Any, BeforeValidator(v.search_ints(SEARCH_PP))] = None
    dp: Annotated[Any, BeforeValidator(v.search_ints((1, 2, 4, 8)))] = (1,)
    ep: Annotated[Any, BeforeValidator(v.search_ints(None))] = None  # None: 1 and tp x dp


class DisaggregatedIn(_M):
    link_bandwidth: Bandwidth
    prefill: RoleIn | None = None


class ScenarioIn(_M):
    kvplan: Annotated[int, Field(strict=True, ge=1, le=1)]  # not true or 1.0
    name: str | None = None
    description: str | None = None
    model: str
    draft_model: DraftIn | None = None
    hardware: HardwareIn
    serving: ServingIn = ServingIn()
    workload: WorkloadIn
    slo: SloIn = SloIn()
    offload: OffloadIn | None = None
    preemption: PreemptionIn | None = None
    disaggregated: DisaggregatedIn | None = None
    samples: Annotated[int, Field(strict=True, gt=0, le=MAX_SAMPLES)] = 10_000
    assume_standard_attention: Annotated[bool, Field(strict=True)] = False
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model whose fields sit at ``loc`` (for unknown-key suggestions)."""
    cls: type[BaseModel] = ScenarioIn
    for part in loc:
        f = cls.model_fields.get(str(part))
        if f is None:
            return None
        nxt = [a for a in typing.get_args(f.annotation) or (f.annotation,)
               if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nxt:
            return None
        cls = nxt[0]
    return cls


def unknown_key_hint(loc: tuple, kind: str) -> str:
    if kind != "extra_forbidden" or not loc:
        return ""
    cls = _model_at(loc[:-1])
    return v.hint(str(loc[-1]), list(cls.model_fields)) if cls else ""
