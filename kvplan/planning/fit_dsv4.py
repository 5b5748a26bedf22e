"""``kvplan fit`` for DeepSeek-V4 on vLLM 0.34 (and vLLM main as kvplan reads it, planned by
0.34.0's rules): the packed block pool (``kvplan.engines.vllm_dsv4``), the memory budget's
DeepSeek-V4 terms and what the engine reports. Pure.

The pool (vLLM 0.34 ``vllm/v1/core/kv_cache_planning.py`` ``get_kv_cache_configs`` and
``get_kv_cache_config_from_groups``; ``vllm/v1/core/block_pool.py``):

- ``num_blocks = available // bytes_per_block``, one block id costing the widest group's pages
  (``vllm_dsv4.packed_block_bytes``; DeepSeek-V4-Flash 1,002,240 B); no per-group rounding:
  every group draws its block ids from this one pool. ``num_gpu_blocks_override`` replaces the
  count (not planned). One block is the ``BlockPool``'s null block, never handed out, so
  ``num_blocks - 1`` serve sequences.
- vLLM refuses to start unless ``available - bytes_per_block`` covers one ``max_model_len``
  request's reservation, ``bytes_per_block x reserved_blocks(max_model_len)``
  (``_check_enough_kv_cache_memory``).
- "Maximum concurrency for L tokens per request: X" (``kv_cache_utils.py``
  ``get_max_concurrency_for_kv_cache_config``) = ``num_blocks / reserved_blocks(L)``, and
  "GPU KV cache size: N tokens" = ``int(X x L)`` (``get_kv_cache_capacity``).
- A sequence of n tokens holds ``vllm_dsv4.packed_blocks(n)`` block ids (the compressed group's
  ceil(n / 256) and the sliding groups' windows), so ``(num_blocks - 1) // that`` whole
  sequences fit. The scheduler admits a request only while its full-prompt reservation is free
  (``scheduler_reserve_full_isl``), which the notes report.

Worked (DeepSeek-V4-Flash, 8 x B200, 131,072 tokens): a sequence holds 512 + 2 x 3 + 3 + 17 =
538 blocks and reserves 13,850 (vllm serve's 16,384-token budget on a >= 160 GiB GPU, 2 x that
in flight); the pool's blocks are its bytes // 1,002,240
(``tests/test_fit_dsv4.py`` derives the budget term by term).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.budget import Budget
from ..core.errors import InputError, ParallelismError
from ..core.gpu import sm_major
from ..core.layers import CompressedAttention
from ..core.model import Model
from ..core.units import cdiv
from ..engines import EngineLayout
from ..engines import vllm_dsv4 as v4
from ..engines.base import version_tuple
from .fit_types import FitRequest

#: the first vLLM release whose DeepSeek-V4 pool planning, engine figure and profiling
#: workspaces kvplan has read (0.27 - 0.33: the cache layout only, ``kvplan size``)
FIRST_PLANNED = "0.34.0"
#: --kv-dtype values vLLM turns into fp8_ds_mla on its FlashMLA path
FORCED_KV = ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla")


#: why no line is printed for DeepSeek-V4 on the engines kvplan does not plan it on
UNPLANNED = {
    "sglang": "DeepSeek-V4 is not planned on SGLang: 0.5.23 serves it with its own cache pool "
              "(srt/mem_cache/deepseek_v4_memory_pool.py), which kvplan has not modelled",
    "trtllm": "DeepSeek-V4 is not planned on TensorRT-LLM: kvplan's TensorRT-LLM rules (1.1, "
              "read in late 2025) have no DeepSeek-V4 cache layout",
    "llama.cpp": "DeepSeek-V4 is not planned on llama.cpp: kvplan has not read a llama.cpp "
                 "cache layout for its compressed attention",
}


def layers(model: Model) -> list[CompressedAttention]:
    return [s for (s,) in model.layers if isinstance(s, CompressedAttention)]


def check_request(req: FitRequest, layout: EngineLayout) -> list[str]:
    """Refuse what kvplan does not plan for DeepSeek-V4; the notes on what it does."""
    if layout.name != "vllm":
        why = UNPLANNED.get(layout.name, f"DeepSeek-V4 is not planned on {layout.label}")
        raise InputError(f"{why}; kvplan fit plans it on vLLM: --engine vllm", field="--engine")
    if layout.version != "main" and version_tuple(layout.version) < version_tuple(FIRST_PLANNED):
        raise InputError(f"kvplan fit plans DeepSeek-V4's pool by vLLM {FIRST_PLANNED}'s rules "
                         f"(kv_cache_planning.py, the profiling workspaces); {layout.label}'s "
                         "are not read: plan --engine vllm@0.34, or use `kvplan size` for the "
                         "per-sequence bytes", field="--engine")
    kv = req.kv_dtype.strip().lower()
    if kv not in FORCED_KV and not kv.startswith("fp8"):  # every fp8* becomes fp8_ds_mla
        raise InputError(f"vLLM forces DeepSeek-V4's KV cache to fp8_ds_mla on its default "
                         "FlashMLA backend (auto and every fp8 spelling become fp8_ds_mla; any other "
                         "format is refused there: vllm/models/deepseek_v4/attention.py "
                         f"_resolve_dsv4_kv_cache_dtype), so --kv-dtype {req.kv_dtype} is not "
                         "planned; pass auto or fp8", field="--kv-dtype")
    if req.block_size_tokens not in (None, v4.FULL_BLOCK):
        raise InputError(f"vLLM's DeepSeek-V4 kernels take {v4.FULL_BLOCK}-token blocks only "
                         "(FlashMLA sparse and the indexer: get_supported_kernel_block_sizes "
                         "[256]; the compressor-state blocks of 4 and 8 tokens are sized to "
                         f"it): --block-size {req.block_size_tokens} is not planned",
                         field="--block-size")
    major = sm_major(req.gpu.compute_capability)
    if req.gpu.vendor != "nvidia" or major not in (9, 10):
        raise InputError(f"{req.gpu.name}: vLLM runs DeepSeek-V4 on FlashMLA (fp8_ds_mla pages) "
                         "on SM 9.x and 10.x only (nvidia/model.py _select_dsv4_attn_cls; "
                         "DeepseekV4SparseMLABackend.supports_compute_capability); SM 12.x "
                         "takes FlashInfer and AMD the ROCm path, whose pools kvplan has not "
                         "read", field="--gpu")
    cfg = req.model.config
    for key, where in (("num_attention_heads", "deepseek_v4/attention.py asserts n_heads % tp"),
                       ("o_groups", "common/grouped_wo_a.py divide(n_groups, tp)")):
        n = cfg.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0 and n % req.tp:
            raise ParallelismError(f"tp={req.tp} cannot split DeepSeek-V4: {key} ({n}) must "
                                   f"divide by tp (vLLM 0.34 {where})", field="tp")
    if req.pp > 1:
        raise ParallelismError("DeepSeek-V4 under pipeline parallelism is not modelled", field="pp")
    if req.dcp > 1:
        raise ParallelismError("decode context parallelism for DeepSeek-V4 is not modelled",
                               field="dcp")
    if req.draft is not None:
        raise InputError("speculative decoding for DeepSeek-V4 (its MTP layer, DSpark) is not "
                         "modelled", field="--draft-model")
    notes = [f"vLLM forces {v4.FULL_BLOCK}-token blocks and fp8_ds_mla pages for DeepSeek-V4 "
             f"(FlashMLA sparse on {req.gpu.name}, SM {req.gpu.compute_capability})"]
    if layout.version == "main":
        notes.append(f"vLLM main planned by {FIRST_PLANNED}'s DeepSeek-V4 pool rules (the newest "
                     "release kvplan has read)")
    return notes


def model_buffers(model: Model, mnbt: int) -> tuple[int, str]:
    """Buffers vLLM's DeepSeek-V4 allocates at load beside the weights: the top-k indices every
    indexer shares, int32 ``[max_num_batched_tokens, index_topk]`` (``nvidia/model.py``
    ``DeepseekV4Model``). Flash at 8,192 tokens: 8,192 x 512 x 4 = 16,777,216 B."""
    topk = int(model.config["index_topk"])
    extra = mnbt * topk * 4
    return extra, (f"weights include vLLM's DeepSeek-V4 top-k index buffer: {mnbt:,} tokens "
                   f"(max_num_batched_tokens) x {topk} (index_topk) x 4 B = {extra:,} B per GPU")


def with_workspace(b: Budget, model: Model, max_model_len: int, mnbt: int,
                   activation_given: bool) -> Budget:
    """The budget with vLLM's sparse-attention workspace (``vllm_dsv4.sparse_workspace_bytes``,
    reserved in the profiling run and kept) added to the activation peak, which it joins in
    vLLM's measured torch peak. A given ``--activation-memory`` is used as it is; under
    ``--kv-cache-memory`` the pool stays as given."""
    if activation_given:
        return b
    ws, how = v4.sparse_workspace_bytes(layers(model), max_model_len, mnbt,
                                        int(model.config["index_topk"]))
    fixed = any(t.key == "kv_pool_bytes" and t.overridden for t in b.terms)
    pool = b.kv_pool_bytes if fixed else max(b.kv_pool_bytes - ws, 0)
    terms = []
    for t in b.terms:
        if t.key == "activation_bytes":
            t = replace(t, bytes=t.bytes + ws, how=f"{t.how} + DeepSeek-V4 sparse workspace "
                        f"{ws:,} B (max of {how})")
        elif t.key == "kv_pool_bytes" and not fixed:
            t = replace(t, bytes=pool)
        terms.append(t)
    note = ("DeepSeek-V4's activation peak is not measured: kvplan adds the sparse-attention "
            "workspace vLLM reserves while profiling (sized by max_model_len) to its empirical "
            "vLLM estimate; pass --activation-memory with a measured peak")
    return replace(b, activation_bytes=b.activation_bytes + ws, kv_pool_bytes=pool,
                   terms=tuple(terms), notes=(*b.notes, note))


@dataclass(frozen=True)
class Dsv4Pool:
    """One GPU's DeepSeek-V4 pool under vLLM 0.34."""

    groups: tuple[v4.PackedGroup, ...]
    block_bytes: int
    num_blocks: int  # available // block_bytes (vLLM's num_gpu_blocks, the null block included)
    in_flight_tokens: int

    @property
    def usable_blocks(self) -> int:
        """Block ids sequences can hold: all but the BlockPool's null block."""
        return max(self.num_blocks - 1, 0)

    def sequence_blocks(self, n: int) -> int:
        return v4.packed_blocks(n, self.groups)

    def reserved_blocks(self, n: int) -> int:
        return v4.reserved_blocks(n, self.groups, self.in_flight_tokens)

    def shared_blocks(self, prefix_tokens: int) -> int:
        """Whole compressed blocks of a shared prefix (the only group prefix caching keeps for
        every sequence; windows and compressor states are each sequence's own)."""
        return (prefix_tokens // v4.FULL_BLOCK) * sum(g.window_tokens is None for g in self.groups)

    def engine_concurrency(self, max_model_len: int) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.num_blocks / self.reserved_blocks(max_model_len)

    def engine_tokens(self, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size: N tokens" (``get_kv_cache_capacity``)."""
        return int(self.engine_concurrency(max_model_len) * max_model_len)

    def whole_sequences(self, n: int, prefix_tokens: int = 0) -> int:
        shared = self.shared_blocks(prefix_tokens)
        private = self.sequence_blocks(n) - shared
        return max((self.usable_blocks - shared) // private, 0) if private > 0 else 0

    def admitted(self, n: int, prefix_tokens: int = 0) -> int:
        """n-token requests running together when each is admitted only while its full-prompt
        reservation is free (``scheduler_reserve_full_isl``): k fit while shared + (k - 1) x
        private + (reserved - shared) <= usable, the shared prefix's blocks held once."""
        private = self.sequence_blocks(n) - self.shared_blocks(prefix_tokens)
        reserve = self.reserved_blocks(n)
        if self.usable_blocks < reserve or private <= 0:
            return 0
        return (self.usable_blocks - reserve) // private + 1

    def starts(self, max_model_len: int) -> bool:
        """vLLM's start-up check: the pool less one block covers one full-length request's
        reservation."""
        return (self.num_blocks - 1) * self.block_bytes >= \
            self.block_bytes * self.reserved_blocks(max_model_len)


def pool(model: Model, kv_pool_bytes: int, mnbt: int) -> Dsv4Pool:
    specs = layers(model)
    v4.check(specs)
    groups = v4.packed_groups(specs)
    block = v4.packed_block_bytes(groups)
    return Dsv4Pool(groups, block, max(kv_pool_bytes, 0) // block, v4.in_flight_tokens(mnbt))


def group_words(p: Dsv4Pool) -> str:
    """The groups as the fit table's notes name them."""
    kinds = {"compressed": "compressed + indexer", "window": "window", "state": "compressor state"}
    return ", ".join(f"{kinds[g.kind]} ({g.layers} caches, {g.block_tokens}-token blocks, "
                     f"{g.page_bytes:,} B)" for g in p.groups)


def sequence_words(p: Dsv4Pool, n: int) -> str:
    """How an n-token sequence's block ids add up, group by group."""
    names = {"compressed": "compressed", "window": "window", "state": "compressor state"}
    parts = [f"{v4.packed_blocks(n, (g,)):,} {names[g.kind]}" for g in p.groups]
    return " + ".join(parts)


def notes(p: Dsv4Pool, ctx: int, max_model_len: int, whole: int) -> list[str]:
    """What the fit table's figures mean for DeepSeek-V4."""
    held, reserve = p.sequence_blocks(ctx), p.reserved_blocks(ctx)
    out = [f"vLLM's DeepSeek-V4 pool: {len(p.groups)} KV-cache groups share one pool of block "
           f"ids, each costing the widest group's pages ({p.block_bytes:,} B): "
           f"{group_words(p)}; one block is the pool's null block"]
    steady = p.whole_sequences(ctx)
    out.append(f"a {ctx:,}-token sequence holds {held:,} block ids ({sequence_words(p, ctx)}) "
               f"but vLLM admits a request only while its full-prompt reservation is free "
               f"({reserve:,} at {ctx:,} prompt tokens: each sliding group's window + "
               f"{p.in_flight_tokens:,} in-flight tokens, scheduler_reserve_full_isl), so with "
               f"every prompt this long {whole:,} run together (the blocks alone would hold "
               f"{steady:,}); "
               f"the engine's figure divides the pool by the reservation at max_model_len "
               f"({p.reserved_blocks(max_model_len):,})")
    return out


def padded_heads(heads_per_rank: int) -> int:
    """The query heads FlashMLA's fp8 decode kernel computes (``get_padded_num_q_heads``: 64 up
    to 64 heads, else 128; more than 128 is refused)."""
    if heads_per_rank > 128:
        raise InputError(f"vLLM's DeepSeek-V4 FlashMLA takes at most 128 query heads per GPU, "
                         f"got {heads_per_rank}: use a larger --tp", field="--tp")
    return 64 if heads_per_rank <= 64 else 128


def step_reads(spec: CompressedAttention, count: int, model: Model, tp: int):
    """What one decode step of one sequence reads and computes in ``count`` DeepSeek-V4 layers
    of ``spec`` on one GPU, as ``(kv_reads, attention_flops, state_bytes)`` for
    ``kvplan.core.perf.StepModel`` (each a ``KvRead``: a rate per cached raw token, capped at
    ``cap_tokens`` raw tokens). Nothing is split by TP (every rank holds and reads it all):

    - every layer attends to its window: min(n, W) entries of e = 584 B (``KvRead(e, W)``);
    - ratio 4: the sparse attention reads the indexer's ``index_topk`` selected compressed
      entries, min(n / 4, topk) x e = ``KvRead(e / 4, 4 x topk)``, and the indexer scores every
      compressed key, n / 4 x 132 B = ``KvRead(132 / 4)``;
    - ratio 128: every compressed entry, n / 128 x e = ``KvRead(e / 128)``;
    - the compressor writes one fp32 row (kv and score, 2 x coff x head_dim x 4 B) a token and
      reads the coff x r rows of a group every r tokens: (1 + coff) rows a step, amortised
      (the r = 4 indexer's compressor too, over index_head_dim).

    FLOPs: each attended entry costs 2 x h x (head_dim + head_dim) (the 512-wide latent is K
    and V), h the heads FlashMLA computes (``padded_heads``: Flash at TP 8 runs 8 heads padded
    to 64); the indexer 2 x index_n_heads x index_head_dim per compressed key, on every rank
    (replicated). The same rates price prefill (capped per query).

    Worked, DeepSeek-V4-Flash (topk 512) at n = 131,072, one sequence on one GPU:
    window 43 x 128 x 584 = 3,214,336 B; ratio-4 selected 21 x 512 x 584 = 6,279,168 B;
    indexer keys 21 x 32,768 x 132 = 90,832,896 B; ratio-128 entries 20 x 1,024 x 584 =
    11,960,320 B; compressor rows 21 x (3 x 8,192 + 3 x 2,048) + 20 x 2 x 4,096 = 808,960 B:
    113,095,680 B a step (dense MLA over all 131,072 tokens at 584 B would read 43 x
    76,546,048 = 3,291,480,064 B)."""
    from ..core.perf import KvRead

    e = v4.entry_bytes(spec)
    r = spec.compress_ratio
    heads = int(model.config["num_attention_heads"])
    h = padded_heads(cdiv(heads, tp))
    per_entry = 2 * h * 2 * spec.head_dim
    reads = [KvRead(float(e * count), spec.window_tokens)]
    flops = [KvRead(float(per_entry * count), spec.window_tokens)]
    state = 0.0
    if r > 1:
        row = 2 * spec.overlap * spec.head_dim * 4
        state += (1 + spec.overlap) * row * count
    if r == 4:
        topk = int(model.config["index_topk"])
        reads.append(KvRead(e * count / 4, 4 * topk))
        flops.append(KvRead(per_entry * count / 4, 4 * topk))
        key = spec.index_head_dim + spec.index_head_dim // 128 * 4
        reads.append(KvRead(key * count / 4))
        index_heads = int(model.config["index_n_heads"])
        flops.append(KvRead(2 * index_heads * spec.index_head_dim * count / 4))
        state += (1 + spec.overlap) * 2 * spec.overlap * spec.index_head_dim * 4 * count
    elif r > 1:
        reads.append(KvRead(e * count / r))
        flops.append(KvRead(per_entry * count / r))
    return reads, flops, state
