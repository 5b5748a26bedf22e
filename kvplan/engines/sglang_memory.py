"""SGLang's memory budget (``ModelRunner.profile_max_num_token``, late 2025 main).

- ``mem_fraction_static`` f is "(weights + KV pool) / GPU memory". Its default
  (``ServerArgs._handle_gpu_memory_settings``): ``round((gpu_MiB - reserved_MiB) / gpu_MiB, 3)``
  with reserved = 512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs
  + tp x pp / 8 x 1024, at least 10,240 MiB on GPUs over 60 GiB, where the GPU size is
  nvidia-smi's ``memory.total`` (H100 80 GB: 81,559 MiB, TP 1: 0.835).
  chunked_prefill_size / cuda_graph_max_bs by GPU memory: < 20 GiB 2048 / 8; < 35 GiB 2048 /
  24 (80 with tp >= 4); < 60 GiB 4096 / 32 (160); < 90 GiB and < 160 GiB 8192 / 256 (512);
  else 16384 / 512.
- KV pool = free after weights - (1 - f) x free before weights = f x free_before - weights,
  where free_before is the driver total less the CUDA context and NCCL buffers (runtime
  overhead). Activations and CUDA graphs must fit in the (1 - f) reserve; they are shown, not
  subtracted.
- Tokens = pool // cell bytes (every layer's K + V per token on one rank), floored to the
  page size; the minimum over pipeline stages.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.budget import Budget, BudgetInputs, assemble
from ..core.errors import InputError
from ..core.units import GiB, MiB


def gpu_defaults(total_bytes: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) for a GPU of ``total_bytes``."""
    gib = total_bytes / GiB
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def default_mem_fraction(total_bytes: int, tp: int, pp: int,
                         smi_total_mib: int | None = None, dp: int = 1, deepep_mib: int = 0,
                         cuda_graphs: bool = True) -> tuple[Fraction, str]:
    """SGLang reads the GPU size from ``nvidia-smi --query-gpu=memory.total`` (MiB); without
    that figure the driver total is used (a few hundred MiB less: 0.001 lower on an H100).
    ``tp`` is SGLang's (every GPU of a stage); with DP attention over ``dp`` ranks SGLang
    reserves ``cuda_graph_max_bs x dp x 3`` MiB more (x 1.5 more when max_bs > 300) "for
    padding" (PR #10975), before the 10 GiB floor. With DeepEP, ``deepep_mib`` more after the
    floor (0.5.23 ``reserve_for_deepep_a2a_mb``); without CUDA graphs (DeepEP normal mode) no
    ``2 x cuda_graph_max_bs`` graph reserve."""
    chunk, graph_bs = gpu_defaults(total_bytes, tp)
    gpu_mib = smi_total_mib or total_bytes // MiB
    if gpu_mib < 1:
        raise InputError(f"a GPU of {total_bytes:,} B has no whole MiB for SGLang's "
                         "mem_fraction_static", field="--total-memory")
    reserved = (Fraction(512) + Fraction(3, 2) * max(chunk, 2048)
                + (2 * graph_bs if cuda_graphs else 0) + Fraction(tp * pp * 1024, 8))
    if dp > 1:
        reserved += graph_bs * dp * 3 + (Fraction(3, 2) * graph_bs * dp if graph_bs > 300 else 0)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, Fraction(10 * 1024))
    reserved += deepep_mib
    f = Fraction(round((gpu_mib - reserved) / gpu_mib, 3)).limit_denominator(1000)
    how = (f"round(({gpu_mib:,} MiB - {float(reserved):,.0f} MiB reserved) / {gpu_mib:,} MiB, 3) "
           f"(chunked_prefill {chunk}, cuda_graph_max_bs {graph_bs}"
           + ("" if cuda_graphs else " without CUDA graphs")
           + (f", DP attention over {dp} ranks" if dp > 1 else "")
           + (f", {deepep_mib:,} MiB for DeepEP" if deepep_mib else "") + ")")
    return f, how


def context_overhead(tp: int) -> int:
    """CUDA context (+ NCCL with TP) allocated before SGLang reads its free memory."""
    return GiB // 2 + (GiB if tp > 1 else 0)


def sglang_budget(i: BudgetInputs, version: str, activation: tuple[int, str]) -> Budget:
    if i.utilization is not None:
        f, how = Fraction(i.utilization).limit_denominator(1000), "given"
    else:
        f, how = default_mem_fraction(i.total_bytes, i.tp, i.pp, i.smi_total_mib, i.attention_dp,
                                      i.deepep_reserve_mib, i.cuda_graphs)
    overhead = (i.runtime_overhead_bytes if i.runtime_overhead_bytes is not None
                else context_overhead(i.tp))
    free_before = i.total_bytes - overhead
    static = int(free_before * f)
    notes = []
    reserve = free_before - static
    act = i.activation_bytes if i.activation_bytes is not None else activation[0]
    later = act + i.ep_buffers_bytes + i.ep_transient_bytes
    overflow = ""
    if later > reserve and later > act:  # buffers SGLang makes after sizing its pool
        overflow = (f"does not fit: SGLang's reserve (1 - mem_fraction_static) = "
                    f"{reserve / GiB:.2f} GiB cannot hold the activation peak "
                    f"({act / GiB:.2f} GiB) and the expert-parallel buffers made after the pool "
                    f"({(i.ep_buffers_bytes + i.ep_transient_bytes) / GiB:.2f} GiB); lower "
                    "--gpu-memory-utilization (mem_fraction_static)")
    elif act > reserve:
        notes.append(f"the activation estimate ({act / GiB:.2f} GiB) exceeds SGLang's reserve "
                     f"(1 - mem_fraction_static) = {reserve / GiB:.2f} GiB: lower "
                     "--mem-fraction-static or --chunked-prefill-size")
    return assemble(
        i, engine=f"sglang {version}",
        rules=f"SGLang {version}: pool = mem_fraction_static x (total - CUDA context) - weights",
        usable=static, usable_label=f"x mem_fraction_static {float(f):g}",
        usable_how=f"(total - overhead) x {float(f):g}; f = {how}", act=activation,
        overhead=(overhead, "CUDA context 0.5 GiB" + (" + NCCL 1 GiB" if i.tp > 1 else "")),
        pool=(static - i.weights_bytes, "usable - weights"), subtracts_activation=False,
        subtracts_ep=False, notes=tuple(notes), overflow=overflow)


SWA_FULL_TOKENS_RATIO = Fraction(4, 5)  # --swa-full-tokens-ratio default


def sglang_pool_tokens(pool_bytes: int, cell_bytes: int, page_tokens: int, full_layers: int,
                       swa_layers: int) -> tuple[int, int]:
    """(full-layer tokens, sliding-layer tokens) of SGLang's pools.

    ``max_total_num_tokens = pool // cell`` (cell: K + V of every layer for one token), floored
    to the page size. A hybrid sliding-window model splits that into two pools
    (``set_num_tokens_hybrid_swa``): ``total = max_total x layers``, ``full = int(total /
    (ratio x swa_layers + full_layers))``, ``swa = int(full x ratio)``, both page-floored, with
    ``--swa-full-tokens-ratio`` 0.8."""
    tokens = pool_bytes // cell_bytes // page_tokens * page_tokens if cell_bytes else 0
    if not swa_layers or not full_layers:
        return tokens, tokens
    total = tokens * (full_layers + swa_layers)
    full = int(total / (SWA_FULL_TOKENS_RATIO * swa_layers + full_layers))
    swa = int(full * SWA_FULL_TOKENS_RATIO)
    return full // page_tokens * page_tokens, swa // page_tokens * page_tokens
