"""The per-GPU memory budget: which bytes an engine keeps for weights, activations and its
runtime, and what is left for the KV pool. Pure; each engine's rules live in
``kvplan.engines.<engine>_memory`` and fill in a ``Budget``.

Every term is an exact integer of bytes on the busiest GPU, says how it was formed, and names
the flag that overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gpu import GpuSpec
    from .model import Model


@dataclass(frozen=True)
class Term:
    key: str  # stable JSON name, e.g. "weights_bytes"
    label: str
    bytes: int
    how: str  # the derivation, with its source
    flag: str = ""  # the CLI option that overrides it
    overridden: bool = False
    subtracted: bool = True  # False: shown for information, not taken from the pool


@dataclass(frozen=True)
class Budget:
    engine: str  # label with version, e.g. "vllm 0.19"
    rules: str  # one line: how the engine sizes its pool
    total_bytes: int
    usable_bytes: int  # what the engine allows itself (total x utilisation, ...)
    weights_bytes: int
    activation_bytes: int
    runtime_overhead_bytes: int  # non-torch memory (CUDA context share, NCCL) + CUDA graphs
    kv_pool_bytes: int
    terms: tuple[Term, ...]
    notes: tuple[str, ...] = field(default=())
    ep_buffers_bytes: int = 0  # DeepEP buffers and EPLB staging (kvplan.engines.expert_buffers)
    overflow: str = ""  # why buffers allocated after the pool cannot be (the plan does not fit)

    @property
    def memory(self) -> dict[str, int]:
        """The public ``memory`` JSON object."""
        return {"total_bytes": self.total_bytes, "usable_bytes": self.usable_bytes,
                "weights_bytes": self.weights_bytes, "activation_bytes": self.activation_bytes,
                "runtime_overhead_bytes": self.runtime_overhead_bytes,
                "ep_buffers_bytes": self.ep_buffers_bytes, "kv_pool_bytes": self.kv_pool_bytes}


@dataclass(frozen=True)
class BudgetInputs:
    """What every engine's budget starts from (per GPU; ``None`` = estimate it)."""

    total_bytes: int
    weights_bytes: int
    tp: int
    pp: int
    hidden_size: int
    intermediate_per_rank: int  # widest MLP/expert activation per token on one rank
    vocab_size: int
    num_layers: int
    max_num_batched_tokens: int
    max_num_seqs: int
    utilization: float | None = None  # gpu_memory_utilization / mem_fraction_static / ...
    activation_bytes: int | None = None
    runtime_overhead_bytes: int | None = None
    kv_cache_memory_bytes: int | None = None  # plan a pool of exactly this size
    weights_overridden: bool = False
    total_overridden: bool = False
    smi_total_mib: int | None = None  # nvidia-smi's memory.total (SGLang's default fraction)
    attention_dp: int = 1  # attention data-parallel ranks in the stage (SGLang DP attention)
    ep_buffers_bytes: int = 0  # expert-parallel buffers per GPU (DeepEP, EPLB staging)
    ep_buffers_how: str = ""
    ep_transient_bytes: int = 0  # allocated later from the engine's reserve (SGLang EPLB)
    deepep_reserve_mib: int = 0  # SGLang's default mem_fraction_static sets this aside
    cuda_graphs: bool = True  # False: the engine captures none (SGLang DeepEP normal mode)
    #: the planned model and GPU, for rules that read them (SGLang 0.5.23's CUDA-graph reserve:
    #: MLA or not, multimodal, the model path, CUDA or ROCm); None where a caller has neither
    model: Model | None = None
    gpu: GpuSpec | None = None


def assemble(i: BudgetInputs, *, engine: str, rules: str, usable: int, usable_label: str,
             usable_how: str, act: tuple[int, str], overhead: tuple[int, str],
             pool: tuple[int, str], subtracts_activation: bool = True,
             subtracts_overhead: bool = True, subtracts_ep: bool = True,
             notes: tuple[str, ...] = (), overflow: str = "") -> Budget:
    """One engine's budget from its computed terms, applying the user's overrides:
    ``--kv-cache-memory`` replaces the pool (every other term is then shown, not used). The
    expert-parallel buffers (``i.ep_buffers_bytes``) get a term of their own when present."""
    fixed = i.kv_cache_memory_bytes is not None
    computed, pool_how = pool
    kv = i.kv_cache_memory_bytes if i.kv_cache_memory_bytes is not None else max(computed, 0)
    act_bytes, act_how = (i.activation_bytes, "given") if i.activation_bytes is not None else act
    over_bytes, over_how = ((i.runtime_overhead_bytes, "given") if i.runtime_overhead_bytes
                            is not None else overhead)
    terms = (
        Term("total_bytes", "GPU memory (driver total)", i.total_bytes,
             "given" if i.total_overridden else "cudaMemGetInfo total of this GPU",
             "--total-memory", i.total_overridden, subtracted=False),
        Term("usable_bytes", usable_label, usable, usable_how, "--gpu-memory-utilization",
             i.utilization is not None, subtracted=False),
        Term("weights_bytes", "- weights", i.weights_bytes,
             "given" if i.weights_overridden else "exact parameter bytes on this GPU",
             "--weight-memory", i.weights_overridden, subtracted=not fixed),
        Term("activation_bytes", "- activation peak" if subtracts_activation else
             "  activation peak (in the reserve)", act_bytes, act_how, "--activation-memory",
             i.activation_bytes is not None, subtracted=subtracts_activation and not fixed),
        Term("runtime_overhead_bytes", "- runtime overhead" if subtracts_overhead else
             "  runtime overhead (in the reserve)", over_bytes, over_how, "--overhead-memory",
             i.runtime_overhead_bytes is not None, subtracted=subtracts_overhead and not fixed),
    ) + ((
        Term("ep_buffers_bytes", "- expert-parallel buffers" if subtracts_ep else
             "  expert-parallel buffers (in the reserve)", i.ep_buffers_bytes, i.ep_buffers_how,
             "--all2all / --eplb", subtracted=subtracts_ep and not fixed),
    ) if i.ep_buffers_bytes else ()) + (
        Term("kv_pool_bytes", "= KV cache pool", kv,
             "given by --kv-cache-memory (the engine's own sizing is skipped)" if fixed else pool_how,
             "--kv-cache-memory", fixed),
    )
    extra = list(notes)
    if fixed and computed < kv:
        extra.append(f"the requested KV pool is larger than the {computed / 2**30:.2f} GiB the "
                     "engine's own sizing leaves; make sure the GPU really has it free")
    return Budget(engine=engine, rules=rules, total_bytes=i.total_bytes, usable_bytes=usable,
                  weights_bytes=i.weights_bytes, activation_bytes=act_bytes,
                  runtime_overhead_bytes=over_bytes, kv_pool_bytes=kv, terms=terms,
                  notes=tuple(extra), ep_buffers_bytes=i.ep_buffers_bytes, overflow=overflow)
