"""Decode context parallelism (DCP): the KV cache of every sequence split by tokens over
``dcp`` of the ``tp`` GPUs of an attention rank, instead of replicated on them. Pure.

vLLM (read in 0.34.0; ``--decode-context-parallel-size``, from 0.10.2 for MLA and from 0.11.1
for GQA/MQA; ``vllm/config/parallel.py``, ``vllm/config/model.py``,
``vllm/v1/kv_cache_interface.py``, ``vllm/v1/core/single_type_kv_cache_manager.py``):
- DCP adds no GPUs: it reuses the TP ranks, and ``tp_size`` must be divisible by ``dcp_size``.
- The page of a block is unchanged (``block_size`` slots on each rank), but the scheduler's
  block is ``block_size x dcp`` tokens ("virtual block", the same block id on every DCP rank;
  token i on rank ``i % dcp`` with the default interleave of 1), and a request's blocks are
  ``cdiv(cdiv(max_model_len, dcp), block_size)`` (``FullAttentionSpec.max_memory_usage_bytes``),
  so a sequence of n tokens holds ``ceil(n / (block x dcp))`` pages per layer on each GPU.
  DeepSeek-V3 (MLA latent 576 x 2 B = 1,152 B per token per layer, replicated on TP 8), 32k
  tokens, 16-token blocks, DCP 8: 32,768 / 128 = 256 pages of 16 x 1,152 B per layer per GPU,
  61 layers: 287,834,112 B, 1/8 of TP 8's 2,302,672,896 B.
- GQA/MQA: ``tp > num_key_value_heads``, ``dcp <= tp // num_key_value_heads`` and the query
  heads per KV head divisible by dcp (DCP only removes the KV heads' TP replication).
- Refused: sliding-window and chunked-local layers ("DCP not support sliding window"),
  hybrids with recurrent state before 0.26 ("DCP not support hybrid attn now"); GQA on ROCm
  (its decode backends lack ``supports_dcp``; ``kvplan.planning.fit``). vLLM also refuses the
  ``nvfp4_ds_mla`` KV format under DCP (0.34 ``validate_nvfp4_kv_cache_with_mla``); kvplan
  refuses DCP on the sparse-MLA models that format serves (their indexer cache).
Not modelled by kvplan (refused with that reason): DCP on Mamba / linear-attention hybrids
(vLLM >= 0.26 keeps the state replicated and takes the LCM of the groups' scheduler blocks),
sparse-MLA indexer caches, and every other engine (SGLang's ``--dcp-size`` is not yet read).
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import ParallelismError
from ..core.layers import MultiHeadLatent
from . import EngineLayout
from .base import version_tuple
from .costs import LayerCost


def _refuse(message: str) -> None:
    raise ParallelismError(message, field="dcp")


def check_dcp(layout: EngineLayout, costs: list[LayerCost], tp: int, dcp: int) -> None:
    """One ``ParallelismError`` line naming the rule when ``layout`` does not run (or kvplan
    does not model) DCP ``dcp`` on these layers at ``tp``."""
    if not isinstance(dcp, int) or isinstance(dcp, bool) or dcp < 1:
        _refuse(f"dcp must be a positive integer, got {dcp!r}")
    if dcp == 1:
        return
    if layout.name != "vllm":
        _refuse(f"decode context parallelism is modelled for vLLM only ({layout.name}'s is not "
                "read by kvplan)")
    v = version_tuple(layout.version)
    mla = any(isinstance(c.spec, MultiHeadLatent) for c in costs)
    if v < (0, 10, 2):
        _refuse(f"vLLM {layout.version} has no decode context parallelism (from 0.10.2)")
    if not mla and v < (0, 11, 1):
        _refuse(f"vLLM {layout.version} runs decode context parallelism for MLA only (GQA from "
                "0.11.1)")
    if tp % dcp:
        _refuse(f"vLLM: tp_size={tp} must be divisible by dcp_size={dcp} (DCP reuses the TP "
                "ranks)")
    kinds = {c.kind for c in costs}
    if kinds & {"sliding_window", "chunked_local"}:
        _refuse("vLLM: DCP not support sliding window (nor chunked local attention)")
    if any(c.state_bytes_per_rank for c in costs):
        _refuse("vLLM: DCP not support hybrid attn now" if v < (0, 26, 0) else
                "DCP on a model with recurrent state (vLLM >= 0.26 replicates the state and "
                "takes the LCM of the groups' blocks) is not modelled by kvplan")
    if "indexer" in kinds:
        _refuse("DCP with a sparse-MLA indexer cache is not modelled by kvplan")
    for c in costs:
        if isinstance(c.spec, MultiHeadLatent) or not c.kv_heads:
            continue
        kv, q = c.kv_heads, getattr(c.spec, "num_attention_heads", 0)
        if tp <= kv:
            _refuse(f"vLLM: decode context parallelism for GQA/MQA requires tp ({tp}) greater "
                    f"than the {kv} KV heads (it removes their TP replication)")
        if dcp > tp // kv:
            _refuse(f"vLLM: dcp={dcp} is more than tp // num_key_value_heads = {tp // kv}")
        if (q // kv) % dcp:
            _refuse(f"vLLM: the {q // kv} query heads per KV head must divide by dcp={dcp}")


def shard_tokens(cost: LayerCost, dcp: int) -> LayerCost:
    """``cost`` with its tokens split over ``dcp`` GPUs: blocks of ``dcp`` x the block's tokens,
    each GPU holding 1/dcp of them (``rank_bytes_for_tokens`` divides by ``token_shards``)."""
    if dcp == 1 or cost.state_bytes_per_rank:
        return cost
    return replace(cost, token_shards=dcp, block_multiple=cost.block_multiple * dcp,
                   bytes_per_token_per_rank=cost.bytes_per_token_per_rank / dcp,
                   notes=())  # the TP replication notes: the DCP note says what remains


def exchange_bytes_per_token(cost: LayerCost, tp: int, dcp: int, element_bytes: int = 2) -> float:
    """Bytes one decode token moves per layer under vLLM's default ``ag_rs`` DCP backend
    (``vllm/v1/attention/ops/dcp.py``): the query all-gathered over the DCP group (Hg heads of
    width Dq), the softmax LSE all-gathered (fp32 per head) and the output reduce-scattered
    (Hg x Dv), Hg = the rank's query heads x dcp; each x (dcp - 1) / dcp on the wire. MLA:
    Dq = kv_lora_rank + rope, Dv = kv_lora_rank (DeepSeek-V3, TP 8, DCP 8: Hg = 128,
    (128 x 576 x 2 + 128 x 4 + 128 x 512 x 2) x 7/8 = 244,160 B per token per layer)."""
    spec = cost.spec
    heads = getattr(spec, "num_attention_heads", 0) // tp * dcp
    if isinstance(spec, MultiHeadLatent):
        dq, dv = spec.latent_dim, spec.kv_lora_rank
    else:
        dq, dv = cost.head_dim_k or 0, cost.head_dim_v or cost.head_dim_k or 0
    return heads * ((dq + dv) * element_bytes + 4) * (dcp - 1) / dcp
