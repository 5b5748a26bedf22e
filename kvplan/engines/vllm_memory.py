"""vLLM's memory budget (V1 ``gpu_worker.determine_available_memory``), by release.

Modelled (sources and real logs in docs/budget-research.md):
- ``requested = total x gpu_memory_utilization`` where total is ``cudaMemGetInfo``'s
  (the GPU's driver-reported total); the default utilisation is 0.9 up to 0.19.1 and 0.92
  from 0.20.0 (``CacheConfig.gpu_memory_utilization``'s ``Field(default=...)`` in the PyPI
  sdists of 0.19.1 and 0.20.0, ``vllm/config/cache.py``).
- ``available = requested - weights - torch peak increase - non-torch increase`` and, from
  0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to "1" in that sdist's
  ``vllm/envs.py``, "0" in 0.19.1's; its log line says "default since v0.21.0"), minus the
  estimated CUDA graph memory; before that graphs live in the ``1 - utilisation`` headroom.
  On ROCm the estimate is subtracted only from 0.26.0 (``subtracts_cuda_graphs``).
  Memory in use before the init snapshot (the CUDA context) is not charged.
- ``--kv-cache-memory-bytes`` replaces the whole computation (profiling still runs).
- Estimates (empirical fits to vLLM 0.19 H100 logs, each overridable):
  torch peak = max(forward, sampler): forward = ``max_num_batched_tokens x (3 x
  intermediate/tp + 6 x hidden) x 2 B`` (gate/up, activation and residual tensors in bf16);
  sampler warm-up = ``15.45 B x max_num_seqs x vocab`` on the last pipeline stage (fp32
  logits, sort values and int64 indices, probabilities; 39 B up to 0.16);
  non-torch = 0.25 GiB on one GPU, 2.1 GiB per GPU with TP (NCCL / custom all-reduce buffers);
  CUDA graphs = 768 MiB + 5 MiB per layer (+ 384 MiB with TP).
- Defaults for ``vllm serve`` (``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``):
  from 0.28.0 GPUs with >= 160 GiB (B200, B300, GB200, MI300X and up) get
  ``max_num_batched_tokens`` 16384 and ``max_num_seqs`` 1024 (no such tier in 0.27.1's sdist);
  other GPUs with >= 70 GiB that are not A100s get 8192 and 1024; others 2048 and 256.
  Block size 16 (64 for MLA on Hopper: FlashMLA; 128 on Blackwell: CUTLASS MLA).
- 0.34.0 sizes the pool after warmup by default (the extensible KV cache, on CUDA and ROCm:
  ``VllmConfig._resolve_extensible_kv_cache``); an unset utilisation then means 1.0 and the pool
  is what is physically free after CUDA-graph capture less ``max(1 GiB, 0.75 x transient
  peak)`` and the transient peak (``extensible_kv_cache.py``), which charges memory in use
  before start-up (the CUDA context) - not computable before a run. kvplan plans 0.92 and its
  launch lines pass it, where the budget bound holds and has this module's form; vLLM then
  floors the blocks to whole 2 MiB commit granules per layer segment, which kvplan does not
  model (Llama-3.1-8B on one H100: 28,064 blocks, not 28,090; not measured).
"""

from __future__ import annotations

from fractions import Fraction

from ..core.budget import Budget, BudgetInputs, assemble
from ..core.units import GiB, MiB
from .base import version_tuple


def default_utilization(version: str) -> Fraction:
    return Fraction(9, 10) if version_tuple(version) < (0, 20) else Fraction(92, 100)


def subtracts_cuda_graphs(version: str, rocm: bool = False) -> bool:
    """Whether ``determine_available_memory`` subtracts the CUDA-graph estimate: from 0.20.0
    on CUDA; on ROCm from 0.26.0 (``vllm/v1/worker/gpu_worker.py`` profiles the graphs only
    ``if not current_platform.is_rocm()`` in 0.20.0 - 0.20.2 and ``if
    current_platform.is_cuda()`` in 0.21.0 - 0.25.1, ``is_cuda_alike()`` from 0.26.0's sdist).
    Llama-3.1-8B on one MI300X under ``vllm@0.25.0``: no graph term, overhead 0.25 GiB."""
    return version_tuple(version) >= ((0, 26) if rocm else (0, 20))


def serve_defaults(total_bytes: int, gpu_name: str, version: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks on this GPU in this
    release (``total_bytes``: what the platform reports, the driver's total)."""
    if total_bytes >= 160 * GiB and version_tuple(version) >= (0, 28):
        return 16384, 1024
    if total_bytes >= 70 * GiB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def mla_block_size(architecture: str) -> int:
    return 128 if architecture == "blackwell" else 64


def sampler_bytes_per_element(version: str) -> Fraction:
    return Fraction(3945, 100) if version_tuple(version) <= (0, 16, 99) else Fraction(1545, 100)


def forward_peak_bytes(i: BudgetInputs) -> int:
    return i.max_num_batched_tokens * (3 * i.intermediate_per_rank + 6 * i.hidden_size) * 2


def activation_estimate(i: BudgetInputs, version: str, last_stage: bool = True) -> tuple[int, str]:
    forward = forward_peak_bytes(i)
    sampler = int(sampler_bytes_per_element(version) * i.max_num_seqs * i.vocab_size) if last_stage else 0
    how = (f"max(forward {i.max_num_batched_tokens:,} tokens x (3 x {i.intermediate_per_rank:,} + 6 x "
           f"{i.hidden_size:,}) x 2 B = {forward:,}, sampler {float(sampler_bytes_per_element(version))}"
           f" B x {i.max_num_seqs:,} seqs x {i.vocab_size:,} vocab = {sampler:,})")
    return max(forward, sampler), how


def non_torch_estimate(tp: int) -> int:
    return (21 * GiB) // 10 if tp > 1 else GiB // 4


def cuda_graph_estimate(num_layers: int, tp: int) -> int:
    return 768 * MiB + 5 * MiB * num_layers + (384 * MiB if tp > 1 else 0)


EXTENSIBLE_NOTE = ("vLLM 0.34 with no --gpu-memory-utilization sizes the pool after warmup "
                   "(the extensible KV cache) at utilisation 1.0, less max(1 GiB, 0.75 x the "
                   "transient peak) and memory in use before start-up, which only a run shows; "
                   "this plan uses 0.92, which its launch line passes")


def vllm_budget(i: BudgetInputs, version: str, *, last_stage: bool = True) -> Budget:
    util = (Fraction(i.utilization).limit_denominator(10**6) if i.utilization is not None
            else default_utilization(version))
    notes = (EXTENSIBLE_NOTE,) if (i.utilization is None and i.kv_cache_memory_bytes is None
                                   and version_tuple(version) >= (0, 34)) else ()
    requested = int(i.total_bytes * util)
    act = activation_estimate(i, version, last_stage)
    non_torch = non_torch_estimate(i.tp)
    rocm = i.gpu is not None and i.gpu.vendor == "amd"
    since = "0.26 on ROCm" if rocm else "0.20"
    subtracted = subtracts_cuda_graphs(version, rocm)
    graphs = cuda_graph_estimate(i.num_layers, i.tp) if subtracted else 0
    where = "NCCL / all-reduce buffers with TP" if i.tp > 1 else "one GPU"
    over_how = (f"non-torch {non_torch:,} B ({where})"
                + (f" + CUDA graphs {graphs:,} B (subtracted since {since})" if graphs else
                   f"; CUDA graphs use the 1 - utilisation headroom before {since}"))
    a = i.activation_bytes if i.activation_bytes is not None else act[0]
    o = i.runtime_overhead_bytes if i.runtime_overhead_bytes is not None else non_torch + graphs
    graphs_rule = " - CUDA graphs" if subtracted else ""
    ep_rule = " - expert-parallel buffers" if i.ep_buffers_bytes else ""
    return assemble(
        i, engine=f"vllm {version}",
        rules=f"vLLM {version}: pool = total x gpu_memory_utilization - weights - activation "
              f"peak - non-torch{graphs_rule}{ep_rule}",
        usable=requested, usable_label=f"x gpu_memory_utilization {float(util):g}",
        usable_how=f"int(total x {float(util):g})", act=act, overhead=(non_torch + graphs, over_how),
        pool=(requested - i.weights_bytes - a - o - i.ep_buffers_bytes,
              "usable - weights - activation - overhead" + (" - expert-parallel buffers (made "
                                                            "at load, after the memory snapshot)"
                                                            if ep_rule else "")), notes=notes)
