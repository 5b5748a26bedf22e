"""Tensor- and pipeline-parallel splitting rules. Pure.

Tensor parallelism (Megatron-style, as vLLM and SGLang shard attention):
- query heads are split evenly, so ``num_attention_heads % tp == 0`` is required;
- KV heads are split when ``kv_heads >= tp`` (needs ``kv_heads % tp == 0``), and each rank
  holds one replicated KV head when ``kv_heads < tp`` (needs ``tp % kv_heads == 0``):
  vLLM ``QKVParallelLinear``: ``num_kv_heads_per_rank = max(1, total_num_kv_heads // tp)``;
- an MLA latent is not split: every rank caches the whole latent;
- Mamba-2 groups follow the KV-head rule (vLLM replicates groups when ``n_groups < tp``), and
  Mamba heads / channels and linear-attention heads must divide.

Data and expert parallelism (MoE serving as engines run it in 2026): ``dp`` attention ranks each
hold their own sequences and KV pool, with ``tp`` GPUs per rank; the routed experts of a MoE
layer are spread over ``ep`` of the ``tp x dp`` GPUs of a stage, each expert's matrices split over
``moe_tp = tp x dp / ep`` of them (``MoeSplit``). Which combinations an engine accepts, and how it
places embeddings and dense layers, is the engine's rule (``kvplan.engines.parallel_rules``).

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


class MoeSplit(NamedTuple):
    """How one pipeline stage's ``tp x dp`` GPUs hold a model. ``tp`` GPUs split the attention
    of each of ``dp`` attention ranks; the other roles say over how many GPUs each kind of
    tensor is split (0: the attention ``tp``; 1: replicated whole): dense MLPs (``mlp_tp``),
    shared experts (``shared_tp``), the embedding (``embed_tp``), the LM head (``head_tp``),
    each routed expert (``moe_tp``); routed experts are spread over ``ep`` GPUs, with
    ``redundant`` extra expert slots per MoE layer (EPLB's redundant experts)."""

    tp: int
    dp: int = 1
    ep: int = 1
    moe_tp: int = 1
    mlp_tp: int = 0
    shared_tp: int = 0
    embed_tp: int = 0
    head_tp: int = 0
    redundant: int = 0

    def role_tp(self, role: str) -> int:
        """GPUs one tensor of ``role`` (attention, mlp, shared, embed, head, expert) is split over."""
        value = {"mlp": self.mlp_tp, "shared": self.shared_tp, "embed": self.embed_tp,
                 "head": self.head_tp, "expert": self.moe_tp}.get(role, 0)
        return value or self.tp


def plain_split(tp: int) -> MoeSplit:
    """Tensor parallelism alone: every tensor, experts included, split over ``tp``."""
    return MoeSplit(tp=tp, moe_tp=tp)


def experts_on_busiest_rank(num_experts: int, ep: int) -> int:
    """Routed experts the busiest of ``ep`` ranks holds: vLLM ``determine_expert_map`` ("linear"
    placement) gives every rank ``num_experts // ep`` and one more to the first
    ``num_experts % ep``, e.g. 256 experts on 8 ranks -> 32; 128 on 12 -> 11."""
    return -(-num_experts // ep)


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


def layout_words(tp: int, pp: int, dp: int = 1, ep: int = 1, dcp: int = 1) -> str:
    """``tp 8 x pp 1``, with ``x dp 8``, ``, ep 8`` and ``, dcp 8`` where they are not 1."""
    return (f"tp {tp} x pp {pp}" + (f" x dp {dp}" if dp > 1 else "")
            + (f", ep {ep}" if ep > 1 else "") + (f", dcp {dcp}" if dcp > 1 else ""))
