"""How a paged engine turns a KV pool of N bytes into blocks, tokens and concurrency. Pure.

vLLM (``vllm/v1/core/kv_cache_utils.py``, read for releases 0.10 - 0.19):

- Each attention layer has a spec (kind, page bytes per block on one rank, window); a Mamba
  layer's page is its whole state (padded up to the attention page for hybrids, see
  ``vllm_hybrid_block_size``).
- ``get_kv_cache_groups``: all specs equal -> one group of every layer
  (``_get_kv_cache_groups_uniform_spec``); one kind whose pages differ -> one group whose
  block holds every layer's page (``UniformTypeKVCacheSpecs``); several kinds with one page
  size -> ``_get_kv_cache_groups_uniform_page_size``: ``group_size`` = the fewest layers of
  any kind (the most, when that is < 1.5x the fewest: "gpt-oss-20b + eagle, 12 sliding + 13
  full, is padded to 13 + 13"; the rule by release: ``vllm_group_size``); each kind is cut into
  ``cdiv(layers, group_size)`` groups, the last one padded (vLLM warns "Add N padding
  layers").
- One shared pool of blocks, each ``page x group_size`` bytes:
  ``num_blocks = available // page // group_size`` (``get_num_blocks``); every rank (and
  pipeline stage) then takes the minimum.
- Logged ``GPU KV cache size: N tokens`` = ``num_blocks // num_groups * min block size``.
- Logged ``Maximum concurrency for L tokens per request: X`` = ``num_blocks /
  cdiv(sum over groups of one layer's max_memory_usage_bytes, page)``
  (``get_max_concurrency_for_kv_cache_config``) with per-layer maxima: full / MLA
  ``cdiv(L, B)`` pages; sliding ``cdiv(min(W - 1 + max_num_batched_tokens, L), B) + 1``;
  chunked ``cdiv(min(C + max_num_batched_tokens, L), B)``; Mamba one page.

Worked example (real vLLM 0.19 log, gpt-oss-20b, TP 2, H100): 12 sliding (W 128) + 12 full
layers, 4 KV heads per rank x 64 x 2 (K, V) x 2 B x 16 tokens = 16,384 B pages, group_size 12,
2 groups; 59.32 GiB // (16,384 x 12) = 323,972 blocks -> 323,972 // 2 x 16 = 2,591,776 tokens
(logged: 2,591,776); per request 512 + 513 = 1,025 blocks -> 316.07x (logged: 316.07x).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..core.units import cdiv
from .base import version_tuple


@dataclass(frozen=True)
class PoolLayer:
    """One cache layer on one rank as a paged engine sees it."""

    key: Hashable  # equal keys group together (the spec, as vLLM hashes KVCacheSpec)
    kind: str  # "full", "sliding", "chunked", "state"
    page_bytes: int  # one block of this layer on one rank
    block_tokens: int  # tokens per block (a state layer: its block covers any length)
    window_tokens: int | None = None  # sliding window W or chunk C


@dataclass(frozen=True)
class PoolGroups:
    groups: tuple[tuple[int, ...], ...]  # layer indices of each KV cache group
    group_size: int  # layers (real or padding) per group
    block_bytes: int  # one block across a group (what num_blocks divides)
    padding_layers: int
    page_bytes: int  # the per-layer page (uniform page-size case) or the block's bytes
    uniform_type: bool  # one kind, unequal pages: every layer in one group


def vllm_group_size(sizes: Sequence[int], version: str) -> int:
    """``group_size`` of ``_get_kv_cache_groups_uniform_page_size`` from the layer count of each
    kind, by release: up to 0.11.2 always the fewest (0.11.2 ``kv_cache_utils.py``:
    ``group_size = min(...)``); 0.12.0 - 0.17.x the most when it is under 1.25x the fewest
    (0.12.0, 0.17.1: ``max_num_layers < min_num_layers * 1.25``); from 0.18.0 under 1.5x (0.18.0
    ``kv_cache_utils.py``, 0.34 ``kv_cache_planning.py``). gpt-oss-20b with an EAGLE draft,
    12 sliding + 13 full layers (13 < 1.25 x 12 = 15): 12 up to 0.11.2 (the full layers cut
    into 2 groups, 11 padding layers), 13 after (one group each, 1 padding layer)."""
    v = version_tuple(version)
    fewest, most = min(sizes), max(sizes)
    if v < (0, 12, 0):
        return fewest
    return most if most < fewest * (1.25 if v < (0, 18, 0) else 1.5) else fewest


def vllm_groups(layers: Sequence[PoolLayer], version: str = "main") -> PoolGroups:
    """vLLM's KV cache groups for one rank's layers (see the module docstring) under vLLM
    ``version`` (``"main"``: the newest)."""
    if not layers:
        raise ValueError("no cache layers")
    kinds = {lay.kind for lay in layers}
    pages = {lay.page_bytes for lay in layers}
    keys = {lay.key for lay in layers}
    all_idx = tuple(range(len(layers)))
    if len(keys) == 1:
        page = layers[0].page_bytes
        return PoolGroups((all_idx,), len(layers), page * len(layers), 0, page, False)
    if len(kinds) == 1 and len({(lay.kind, lay.window_tokens, lay.block_tokens) for lay in layers}) == 1:
        total = sum(lay.page_bytes for lay in layers)
        return PoolGroups((all_idx,), len(layers), total, 0, total, True)
    if len(pages) != 1:
        raise ValueError("cache layers of different kinds with different page sizes: vLLM has "
                         "no KV cache grouping for this model")
    by_key: dict[Hashable, list[int]] = {}
    for i, lay in enumerate(layers):
        by_key.setdefault(lay.key, []).append(i)
    group_size = vllm_group_size([len(v) for v in by_key.values()], version)
    groups: list[tuple[int, ...]] = []
    padding = 0
    for idx in by_key.values():
        n = cdiv(len(idx), group_size)
        padding += n * group_size - len(idx)
        groups.extend(tuple(idx[i::n]) for i in range(n))
    page = pages.pop()
    return PoolGroups(tuple(groups), group_size, page * group_size, padding, page, False)


def vllm_stage_groups(groups: PoolGroups, layers: Sequence[PoolLayer],
                      stage: Sequence[int], version: str = "main") -> PoolGroups:
    """The whole model's KV cache groups as one pipeline stage holds them (vLLM >= 0.11).

    ``get_kv_cache_configs`` (0.11 ``vllm/v1/core/kv_cache_utils.py``; 0.34
    ``vllm/v1/core/kv_cache_planning.py``, ``_project_kv_cache_groups_to_worker``) groups the
    layers of the whole model (every worker's specs merged), then gives each stage every group
    with only its own layers in it (possibly none). A stage's block is its largest group there:
    ``max over groups of the pages of its layers on the stage`` (0.34
    ``_get_kv_cache_bytes_per_block``; 0.11 ``group_size = max(len(group.layer_names))`` x the
    page), and its pool holds ``available // block`` blocks; the scheduler takes the smallest
    count over the stages, and every sequence draws blocks for every group from that one pool.
    ``stage``: the indices (into ``layers``, the whole model's) of the stage's layers; the
    result's ``groups`` index the stage's own layers, one entry per whole-model group.

    LFM2-8B-A1B (24 layers, attention on 2, 6, 10, 14, 18, 21): 6 attention + 18 short-conv
    layers -> groups of 6: one attention group and three conv groups (every third conv layer);
    at pp 8 stage 1 (layers 3-5, conv only) holds one layer of each conv group, so its block is
    one 32,768 B page (not 3 pages, as grouping its own three layers would give).

    One group of per-layer specs (``uniform_type``: one kind, unequal pages, e.g. MLA beside a
    lightning indexer's cache) keeps the whole model's spec on every stage up to 0.16.x (0.14.0
    ``get_kv_cache_configs`` passes ``group.kv_cache_spec`` unprojected;
    ``get_kv_cache_config_from_groups`` divides by its ``page_size_bytes``, every layer's page):
    the block is the whole model's pages; 0.17.0 (``_project_kv_cache_groups_to_worker``)
    restricts it to the stage's layers."""
    local = {g: i for i, g in enumerate(stage)}
    projected = tuple(tuple(local[i] for i in grp if i in local) for grp in groups.groups)
    block = max(sum(layers[stage[i]].page_bytes for i in grp) for grp in projected)
    if groups.uniform_type and version_tuple(version) < (0, 17, 0):
        block = groups.block_bytes
    size = max(len(grp) for grp in projected)
    return PoolGroups(projected, size, block, groups.padding_layers,
                      block if groups.uniform_type else groups.page_bytes, groups.uniform_type)


def vllm_num_blocks(available_bytes: int, groups: PoolGroups) -> int:
    """``get_num_blocks``: whole blocks of every group's layers that fit the pool."""
    if available_bytes <= 0:
        return 0
    if groups.uniform_type:
        return available_bytes // groups.block_bytes
    return available_bytes // groups.page_bytes // groups.group_size


def vllm_pool_tokens(num_blocks: int, groups: PoolGroups, layers: Sequence[PoolLayer]) -> int:
    """The ``GPU KV cache size: N tokens`` figure."""
    block = min(layers[g[0]].block_tokens for g in groups.groups)
    return num_blocks // len(groups.groups) * block


def layer_max_usage_bytes(lay: PoolLayer, max_model_len: int, max_num_batched_tokens: int) -> int:
    """``KVCacheSpec.max_memory_usage_bytes`` of one layer for one request."""
    b = lay.block_tokens
    if lay.kind == "state":
        return lay.page_bytes
    if lay.kind == "sliding" and lay.window_tokens:
        n = min(lay.window_tokens - 1 + max_num_batched_tokens, max_model_len)
        return (cdiv(n, b) + 1) * lay.page_bytes
    if lay.kind == "chunked" and lay.window_tokens:
        n = min(lay.window_tokens + max_num_batched_tokens, max_model_len)
        return cdiv(n, b) * lay.page_bytes
    return cdiv(max_model_len, b) * lay.page_bytes


def vllm_groups_request_bytes(groups: PoolGroups, layers: Sequence[PoolLayer], max_model_len: int,
                              max_num_batched_tokens: int) -> int:
    """``_max_memory_usage_bytes_from_groups`` (vLLM 0.14 - 0.16 ``kv_cache_utils.py``), the
    memory the start-up check wants for one ``max_model_len`` request: one group of per-layer
    specs (``UniformTypeKVCacheSpecs``) the sum of its layers' maxima; otherwise ``group_size x
    page x cdiv(the first group's spec's maximum, page)``, the first group's only, as vLLM
    writes it. Llama-3.1-8B bf16, 16-token pages of 65,536 B, 131,072 tokens: 32 x 65,536 x
    8,192 = 17,179,869,184 B (16 GiB)."""
    if groups.uniform_type:
        return sum(layer_max_usage_bytes(lay, max_model_len, max_num_batched_tokens)
                   for lay in layers)
    first = layer_max_usage_bytes(layers[groups.groups[0][0]], max_model_len,
                                  max_num_batched_tokens)
    return groups.group_size * groups.page_bytes * cdiv(first, groups.page_bytes)


#: MoE architectures vLLM 0.26 - 0.28 still run on the V2 model runner by default
#: (``VllmConfig._is_default_v2_model_runner_model``; 0.28 adds DeepSeek-V4 and Kimi-K3)
V2_MOE_MODEL_TYPES = {"deepseek_v2": (0, 26, 0), "granitemoe": (0, 26, 0),
                      "qwen2_moe": (0, 26, 0), "deepseek_v4": (0, 28, 0), "kimi_k3": (0, 28, 0)}


def vllm_v2_runner_default(version: str, model_type: str, moe: bool, hybrid: bool) -> bool:
    """Whether vLLM runs the model on its V2 model runner by default: 0.26 - 0.28 a generate
    model that is neither hybrid nor attention-free, and dense or one of the listed MoE
    architectures; from 0.29 every model on CUDA (``use_v2_model_runner`` no longer asks the
    architecture)."""
    v = version_tuple(version)
    if v >= (0, 29, 0):
        return True
    listed = v >= V2_MOE_MODEL_TYPES.get(model_type, (10**6,))
    return not hybrid and (not moe or listed)


def vllm_in_flight_tokens(version: str, max_num_batched_tokens: int, pp: int,
                          draft_model: bool, v2_runner: bool) -> int:
    """The tokens a sliding or chunked layer's reservation spans past its window: up to 0.25
    ``max_num_batched_tokens`` (``SlidingWindowSpec.max_memory_usage_bytes``); from 0.26
    ``VllmConfig.max_in_flight_tokens`` = ``max_concurrent_batches x max_num_batched_tokens``,
    in-flight batches keeping their blocks until they settle. ``max_concurrent_batches`` with
    async scheduling (on by default; 0.26 - 0.27 turn it off for a separate draft model): pp + 1
    on the V2 model runner (always in 0.34), on the V1 runner 2 at pp 1 and pp beyond; without
    it pp. vLLM 0.34, 8,192-token batches, pp 1: 2 x 8,192 = 16,384."""
    v = version_tuple(version)
    if v < (0, 26, 0):
        return max_num_batched_tokens
    if draft_model and v < (0, 28, 0):
        batches = pp  # async scheduling off: "not supported with draft_model-based" drafts
    elif v2_runner or v >= (0, 34, 0):
        batches = pp + 1
    else:
        batches = 2 if pp <= 1 else pp
    return batches * max_num_batched_tokens


def vllm_start_shortfall(version: str, stage_groups: PoolGroups, stage_layers: Sequence[PoolLayer],
                         whole_groups: PoolGroups, whole_layers: Sequence[PoolLayer],
                         available_bytes: int, max_model_len: int,
                         max_num_batched_tokens: int) -> tuple[int, int] | None:
    """vLLM's start-up check on one worker (pipeline stage) that its KV memory holds one
    ``max_model_len`` request: None when it passes, else (bytes the check wants, bytes it
    grants). By release, as each writes it:

    - up to 0.13 (``check_enough_kv_cache_memory`` per worker): the sum of the worker's layers'
      ``max_memory_usage_bytes`` against its memory;
    - 0.14 - 0.16: the whole model's groups against the smallest worker
      (``vllm_groups_request_bytes``; made by the caller, which sees every stage);
    - 0.17 - 0.18 (groups projected onto the worker): ``group_size x page x cdiv(the first
      group's maximum, page)``, the first group's only (0.17.1, 0.18.0 ``kv_cache_utils.py``);
      one group of per-layer specs: the sum of its layers' maxima;
    - 0.19 - 0.28: the same with every group's pages summed (0.19.0 - 0.28.0: ``blocks_needed =
      sum(cdiv(...))``);
    - from 0.29: ``bytes_per_block x`` every group's pages (one of per-layer specs: its largest
      layer's) against the memory less one block, the null block the pool holds back (0.29.0,
      0.30.0 ``kv_cache_utils.py``, 0.34 ``kv_cache_planning.py``).
    A one-group model passes exactly when the worker holds ``cdiv(max_model_len, block)``
    blocks (+ 1 from 0.29). Llama-3.1-8B bf16 at 131,072 tokens on a 4 GiB pool: it wants
    32 x 65,536 x 8,192 = 16 GiB."""
    v = version_tuple(version)

    def usage(lay: PoolLayer) -> int:
        return layer_max_usage_bytes(lay, max_model_len, max_num_batched_tokens)

    def pages(lay: PoolLayer) -> int:
        return cdiv(usage(lay), lay.page_bytes)

    if v < (0, 14, 0) or (v < (0, 29, 0) and stage_groups.uniform_type):
        need, grant = sum(usage(lay) for lay in stage_layers), available_bytes
    elif v < (0, 17, 0):
        return None  # the whole model's check: the caller's
    elif v < (0, 29, 0):
        first = [whole_groups.groups[0]] if v < (0, 19, 0) else whole_groups.groups
        need = stage_groups.block_bytes * sum(pages(whole_layers[g[0]]) for g in first)
        grant = available_bytes
    else:
        blocks = (max(pages(lay) for lay in stage_layers) if stage_groups.uniform_type
                  else sum(pages(whole_layers[g[0]]) for g in whole_groups.groups))
        need, grant = stage_groups.block_bytes * blocks, available_bytes - stage_groups.block_bytes
    return None if need <= grant else (need, grant)


def vllm_blocks_per_request(groups: PoolGroups, layers: Sequence[PoolLayer], max_model_len: int,
                            max_num_batched_tokens: int) -> int:
    """Blocks of the shared pool one request of ``max_model_len`` tokens may need."""
    if groups.uniform_type:
        usage = sum(layer_max_usage_bytes(lay, max_model_len, max_num_batched_tokens)
                    for lay in layers)
        return cdiv(usage, groups.block_bytes)
    usage = sum(layer_max_usage_bytes(layers[g[0]], max_model_len, max_num_batched_tokens)
                for g in groups.groups)
    return cdiv(usage * groups.group_size, groups.page_bytes * groups.group_size)


def vllm_max_concurrency(num_blocks: int, groups: PoolGroups, layers: Sequence[PoolLayer],
                         max_model_len: int, max_num_batched_tokens: int) -> float:
    """The ``Maximum concurrency for L tokens per request: X`` figure."""
    per = vllm_blocks_per_request(groups, layers, max_model_len, max_num_batched_tokens)
    return num_blocks / per if per else float("inf")


def vllm_hybrid_block_size(attn_page_bytes_per_token: int, state_page_bytes: int,
                           block_size_tokens: int | None, alignment_tokens: int = 16) -> int:
    """``HybridAttentionMambaModelConfig.verify_and_update_config``: the attention block is
    raised to the smallest multiple of ``alignment_tokens`` whose page covers a Mamba page
    (unless the user's block is already larger). Nemotron-H-56B, TP 1, vLLM main: Mamba page =
    conv 3 x (16,384 + 2 x 8 x 256) x 2 B (bf16) + SSM 256 heads x 64 x 256 x 4 B (fp32) =
    122,880 + 16,777,216 = 16,900,096 B; attention 8 heads x 128 x 2 (K, V) x 2 B = 4,096 B
    per token -> 16 x cdiv(16,900,096, 16 x 4,096) = 16 x 258 = 4,128 tokens."""
    need = alignment_tokens * cdiv(state_page_bytes, alignment_tokens * attn_page_bytes_per_token)
    if block_size_tokens is None or block_size_tokens < need:
        return need
    return block_size_tokens
