"""Tensor- and pipeline-parallel splitting rules. Pure.

Tensor parallelism (Megatron-style, as vLLM and SGLang shard attention):
- query heads are split evenly, so ``num_attention_heads % tp == 0`` is required;
- KV heads are split when ``kv_heads >= tp`` (needs ``kv_heads % tp == 0``), and each rank
  holds one replicated KV head when ``kv_heads < tp`` (needs ``tp % kv_heads == 0``):
  vLLM ``QKVParallelLinear``: ``num_kv_heads_per_rank = max(1, total_num_kv_heads // tp)``;
- an MLA latent is not split: every rank caches the whole latent;
- Mamba-2 groups follow the KV-head rule (vLLM replicates groups when ``n_groups < tp``), and
  Mamba heads / channels and linear-attention heads must divide.

Pipeline parallelism splits the layer stack into ``pp`` contiguous stages with vLLM's
``get_pp_indices`` rule: every stage gets ``num_layers // pp`` layers and the remainder goes one
each to the stages just before the last (the last stage also holds the LM head), e.g. 61 layers
on 4 stages -> 15, 15, 16, 15; 10 layers on 4 -> 2, 3, 3, 2; 80 layers on 3 -> 27, 27, 26.
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import ParallelismError


class Shard(NamedTuple):
    """How many of ``total`` units one rank holds, and how many ranks hold each unit."""

    per_rank: int
    replicas: int  # ranks that hold a copy of each unit (1 = no replication)


def split_heads(total: int, tp: int, what: str, *, replicate: bool) -> Shard:
    """Split ``total`` heads (or groups) over ``tp`` ranks, replicating if allowed."""
    if total % tp == 0:
        return Shard(total // tp, 1)
    if replicate and total < tp and tp % total == 0:
        return Shard(1, tp // total)
    rule = f"{what} ({total}) must divide by tp ({tp})"
    if replicate:
        rule += f", or tp must be a multiple of {what} ({total}) to replicate them"
    raise ParallelismError(f"tp={tp} cannot split this model: {rule}", field="tp")


def check_degree(value: int, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ParallelismError(f"{name} must be a positive integer, got {value!r}", field=name)


def pp_stage_sizes(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, vLLM ``get_pp_indices`` default partition."""
    check_degree(pp, "pp")
    if pp > num_layers:
        raise ParallelismError(
            f"pp={pp} is more than the model's {num_layers} layers; each stage needs a layer",
            field="pp",
        )
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes


def pp_stages(num_layers: int, pp: int) -> list[range]:
    """Layer index ranges of each pipeline stage."""
    out, start = [], 0
    for size in pp_stage_sizes(num_layers, pp):
        out.append(range(start, start + size))
        start += size
    return out
