"""TensorRT-LLM's memory budget (PyTorch backend ``KvCacheCreator``, 1.x).

``kv bytes = (total - peak) x free_gpu_memory_fraction`` (default 0.9) where the peak of the
estimation run is weights + activations + non-torch memory (NCCL, CUDA graphs); the C++
backend takes the same fraction of the memory free after the engine loads.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.budget import Budget, BudgetInputs, assemble
from ..core.units import GiB

DEFAULT_FRACTION = Fraction(9, 10)


def trtllm_budget(i: BudgetInputs, version: str, activation: tuple[int, str]) -> Budget:
    f = (Fraction(i.utilization).limit_denominator(1000) if i.utilization is not None
         else DEFAULT_FRACTION)
    over = (GiB // 2 + (2 * GiB if i.tp > 1 else 0), "CUDA context 0.5 GiB"
            + (" + NCCL / all-reduce 2 GiB" if i.tp > 1 else ""))
    a = i.activation_bytes if i.activation_bytes is not None else activation[0]
    o = i.runtime_overhead_bytes if i.runtime_overhead_bytes is not None else over[0]
    free = i.total_bytes - i.weights_bytes - a - o
    return assemble(
        i, engine=f"trtllm {version}",
        rules=f"TensorRT-LLM {version}: pool = free_gpu_memory_fraction x (total - weights - "
              "activations - overhead)",
        usable=i.total_bytes, usable_label="  (fraction applies after the peak)",
        usable_how=f"free_gpu_memory_fraction {float(f):g}", act=activation, overhead=over,
        pool=(int(free * f), f"{float(f):g} x (total - weights - activation - overhead)"))
