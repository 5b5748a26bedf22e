"""llama.cpp's memory: it allocates the whole cache for ``n_ctx`` cells up front (padded to
256), so there is no pool to size - the plan checks that weights + compute buffers + the cache
for ``-c`` fit. The memory left after weights and buffers is reported as the pool a cache
could use; ``llama-server -np N`` splits ``-c`` into N slots (non-unified KV).
"""

from __future__ import annotations

from ..core.budget import Budget, BudgetInputs, assemble
from ..core.units import MiB


def compute_buffer_estimate(i: BudgetInputs) -> tuple[int, str]:
    """The CUDA compute buffer: no closed form upstream; logits for one 512-token ubatch in
    fp32 plus hidden/intermediate activations (a documented guess; override it)."""
    ubatch = 512
    b = ubatch * (i.vocab_size * 4 + (3 * i.intermediate_per_rank + 6 * i.hidden_size) * 4)
    return b, f"ubatch 512 x (vocab {i.vocab_size:,} x 4 B + (3 x intermediate + 6 x hidden) x 4 B)"


def llama_cpp_budget(i: BudgetInputs, version: str) -> Budget:
    act = compute_buffer_estimate(i)
    over = (256 * MiB, "CUDA context")
    a = i.activation_bytes if i.activation_bytes is not None else act[0]
    o = i.runtime_overhead_bytes if i.runtime_overhead_bytes is not None else over[0]
    return assemble(
        i, engine=f"llama.cpp {version}",
        rules="llama.cpp: the cache for n_ctx cells is allocated up front; it must fit in "
              "total - weights - compute buffer - context",
        usable=i.total_bytes, usable_label="  (no utilisation setting)", usable_how="all of it",
        act=act, overhead=over, pool=(i.total_bytes - i.weights_bytes - a - o,
                                      "total - weights - compute buffer - overhead"),
        notes=("llama.cpp cannot shard by TP; multi-GPU splits layers (--split-mode layer)",)
        if i.tp > 1 else ())

