"""Measured serving runs as data: one ``MeasuredRun`` per benchmark row, whatever file format
it came from (``kvplan.loaders.benchmarks`` reads them). Pure.

A row is one closed-loop (``concurrency`` users, each sending its next request when the last
one ends) or open-loop (``request_rate`` requests/s) run at fixed prompt and output lengths,
with what was measured: mean TTFT, mean TPOT and output throughput, in seconds and tokens/s.
``assumptions`` lists what the reader had to assume for this row (a format that omits the KV
dtype, say); every report that uses the row repeats them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class MeasuredRun:
    source: str  # "file:row" of the row
    model: str  # Hub id or kvplan model name
    gpu: str  # kvplan GPU key or alias
    engine: str  # vllm | sglang | trtllm
    engine_version: str = ""
    measured_on: str = ""  # ISO day the run was measured, where the file records it
    tp: int = 1
    pp: int = 1
    dp: int = 1  # attention data-parallel ranks (each tp GPUs, its own sequences)
    ep: int = 1  # GPUs the routed experts are spread over
    weight_dtype: str | None = None  # None: the checkpoint's own format
    kv_dtype: str = "auto"
    prompt_tokens: int
    output_tokens: int
    concurrency: int | None = None  # closed loop
    request_rate_per_s: float | None = None  # open loop (not re-predicted yet: see validate)
    num_prompts: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s: float | None = None
    throughput_derived: bool = False  # True: from TTFT, TPOT and concurrency (Little's law)
    tolerance: float | None = None  # |error| allowed on each measured value (None: report only)
    group: str = ""  # one measured sweep (source file, workflow run, config): the split unit
    assumptions: tuple[str, ...] = ()
    #: disaggregated serving: tp / pp / dp / ep above are the decode workers' layout, of which
    #: there are ``decode_workers``; ``prefill`` is the prefill workers' (tp, pp, dp, ep) and
    #: ``prefill_workers`` their count (None: aggregated serving)
    prefill: tuple[int, int, int, int] | None = None
    prefill_workers: int = 0
    decode_workers: int = 1

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def family(self) -> str:
        """The model's name without its organisation, for grouping."""
        return self.model.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class RowProblem:
    """A row that could not be read or re-predicted: file and row, the field, why."""

    source: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.field}: {self.message}"
