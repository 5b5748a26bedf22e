"""``kvplan fit``: does a model fit on a GPU at a context, with how many sequences. Pure:
composes the footprint (``kvplan.planning.footprint``), the weight bytes
(``kvplan.core.weights``), the engine's memory budget (``kvplan.engines.*_memory``) and the
paged pool arithmetic (``kvplan.engines.kvpool``, ``kvplan.planning.fit_pools``); the verdict is
``kvplan.planning.fit_verdict``'s and the TP/PP suggestion ``kvplan.planning.fit_search``'s.

Per pipeline stage the engine sizes its own pool from that stage's weights and layers; vLLM
then gives every stage the smallest block count, so the busiest GPU is the stage with the
fewest blocks (and the per-sequence bytes are that stage's).
"""

from __future__ import annotations

from dataclasses import replace

from ..core.budget import Budget, BudgetInputs
from ..core.dtypes import dtype_bytes
from ..core.errors import InputError, ParallelismError
from ..core.model import Model
from ..core.parallel import MoeSplit, experts_on_busiest_rank, pp_stage_sizes, pp_stages
from ..core.units import cdiv, ceil_bytes
from ..core.weights import Weights, expert_layer_bytes, expert_width, tensor_role, weight_bytes
from ..engines import EngineLayout, get_engine, sglang_dsa
from ..engines import vllm_dsv4 as dsv4
from ..engines.base import version_tuple
from ..engines.expert_buffers import (
    NO_EP_MEMORY,
    ExpertParallelMemory,
    batched_dp_tokens,
    check_all2all,
    expert_parallel_memory,
    redundant_experts,
)
from ..engines.kvpool import (
    vllm_groups,
    vllm_hybrid_block_size,
    vllm_num_blocks,
    vllm_stage_groups,
)
from ..engines.parallel_rules import moe_split
from . import fit_dsv4
from .fit_pools import pool_layers
from .fit_search import smallest_layout
from .fit_types import FitRequest, FitResult, StagePlan
from .fit_verdict import conclude
from .footprint import Footprint, kv_footprint, resolve_formats
from .model_limits import check_context


def _block_size(req: FitRequest, layout: EngineLayout, model: Model) -> tuple[int, list[str]]:
    """The attention block the engine starts from: the user's, the engine default, or vLLM's
    MLA backend block; a hybrid's block is then raised by ``_hybrid_unify``."""
    notes: list[str] = []
    block = req.block_size_tokens
    if sglang_dsa.applies(layout, model):
        fmt = resolve_formats(model, layout, req.kv_dtype,
                              gpu_capability=req.gpu.compute_capability).name
        notes.append(f"SGLang forces {sglang_dsa.PAGE_TOKENS}-token pages for DSA models "
                     "(model_overrides/deepseek_v2.py)"
                     + (f"; --block-size {block} does not apply" if block not in
                        (None, sglang_dsa.PAGE_TOKENS) else "")
                     + f"; its DSA latent on {req.gpu.name} (SM {req.gpu.compute_capability}) "
                     f"under --kv-dtype {req.kv_dtype}: {fmt}")
        return sglang_dsa.PAGE_TOKENS, notes
    if layout.name != "vllm":
        return (block or layout.default_block_size_tokens), notes
    kinds = {spec.kind for spec in model.cache_layers}
    if "indexer" in kinds:
        block = 64
        notes.append("vLLM forces 64-token blocks for sparse MLA (FlashMLASparse backend: "
                     "get_supported_kernel_block_sizes [64]) on the latent and indexer caches"
                     + (f"; --block-size {req.block_size_tokens} does not apply"
                        if req.block_size_tokens not in (None, 64) else ""))
    elif "mla" in kinds:
        mla = _mla_backend(req, layout, model)
        if block is None or mla.forced:
            if block not in (None, mla.block_tokens):
                notes.append(f"--block-size {block} does not apply: {mla.rule}")
            block = mla.block_tokens
            notes.append(f"vLLM runs MLA on {req.gpu.name} with {mla.backend} ({block}-token "
                         f"blocks): {mla.rule}")
    return (block or layout.default_block_size_tokens), notes


def _mla_backend(req: FitRequest, layout: EngineLayout, model: Model):
    """vLLM's dense-MLA backend on this GPU (``kvplan.engines.vllm_mla``)."""
    from ..engines.vllm_mla import mla_backend

    if not req.gpu.compute_capability:
        raise InputError(f"{req.gpu.name}: the GPU spec names no compute_capability, which "
                         "decides vLLM's MLA kernel and block size", field="--gpu")
    fmt = resolve_formats(model, layout, req.kv_dtype).name
    nope = next((getattr(s, "qk_nope_head_dim", None) for s in model.cache_layers
                 if s.kind == "mla"), None)
    return mla_backend(req.gpu.compute_capability, fmt.startswith("fp8"), layout.version, nope)


def _hybrid_alignment(req: FitRequest, layout: EngineLayout, model: Model, block: int,
                      mla: bool, head_dim: int) -> tuple[int, str]:
    """The multiple vLLM raises a hybrid's attention block in, and where it is read.

    vLLM <= 0.19 (``HybridAttentionMambaModelConfig``): 64 for MLA (128 for CUTLASS MLA on
    Blackwell), 32 for head size 256 on Blackwell (FlashInfer), else 16. From 0.20
    (``Platform.update_block_size_for_backend``): the larger of the attention backend's
    smallest kernel block and the block it starts from; from 0.27 at least 128 for MLA
    (TRTLLM/FlashInfer MLA decode kernels)."""
    from ..engines.vllm_memory import mla_block_size

    v = version_tuple(layout.version)
    if v <= (0, 19, 99):
        if mla:
            return mla_block_size(req.gpu.architecture), "vLLM <= 0.19: MLA alignment"
        if req.gpu.architecture == "blackwell" and head_dim == 256:
            return 32, "vLLM <= 0.19: FlashInfer on Blackwell, head size 256"
        return 16, "vLLM <= 0.19: FlashAttention blocks of 16"
    kernel = _mla_backend(req, layout, model).kernel_tokens if mla else (
        32 if req.gpu.architecture == "blackwell" and head_dim == 256 else 16)
    align = max(kernel, block)
    if mla and v >= (0, 27, 0):
        return max(align, 128), "vLLM >= 0.27: MLA hybrids align to 128 tokens"
    return align, "the attention backend's kernel block, or the starting block if larger"


def _hybrid_unify(req: FitRequest, model: Model, fp_costs, layout, block: int
                  ) -> tuple[int, int | None, list[str]]:
    """vLLM: raise the attention block until one attention page covers a Mamba page, in
    multiples of ``_hybrid_alignment``; the Mamba page is padded to the attention page."""
    costs = [c for layer in fp_costs for c in layer]
    states = [c for c in costs if c.state_bytes_per_rank]
    attn = [c for c in costs if not c.state_bytes_per_rank]
    if layout.name != "vllm" or not states or not attn:
        return block, None, []
    align, _why = _hybrid_alignment(req, layout, model, block, attn[0].kind == "mla",
                                    attn[0].head_dim_k)
    per_token = ceil_bytes(attn[0].rank_bytes_for_tokens(1))
    state_page = max(c.state_bytes_per_rank for c in states)
    new_block = vllm_hybrid_block_size(per_token, state_page, block, align)
    padded = new_block * per_token
    pct = 100 * (padded - state_page) / state_page
    return new_block, padded, [
        f"vLLM sets the attention block to {new_block:,} tokens so an attention page "
        f"({padded:,} B) covers a Mamba page ({state_page:,} B, padded by {pct:.2f}%), in "
        f"multiples of {align} tokens ({_why})"]


def _budget(layout: EngineLayout, inputs: BudgetInputs, last_stage: bool) -> Budget:
    from ..engines import vllm_memory

    if layout.name == "vllm":
        return vllm_memory.vllm_budget(inputs, layout.version, last_stage=last_stage)
    activation = vllm_memory.activation_estimate(inputs, "main", last_stage)
    if layout.name == "sglang":
        from ..engines.sglang_memory import sglang_budget
        return sglang_budget(inputs, layout.version, activation)
    if layout.name == "trtllm":
        from ..engines.trtllm_memory import trtllm_budget
        return trtllm_budget(inputs, layout.version, activation)
    if layout.name == "llama.cpp":
        from ..engines.llama_cpp_memory import llama_cpp_budget
        return llama_cpp_budget(inputs, layout.version)
    raise InputError(f"{layout.name} has no memory budget model; use vllm, sglang, trtllm or "
                     "llama.cpp", field="--engine")


def _intermediate_per_rank(model: Model, weights: Weights | None, tp: int) -> int:
    if weights is None:
        return 4 * model.hidden_size // tp
    widest = 0
    for t in weights.tensors:
        if t.linear and t.name.endswith(("up_proj.weight", "gate_proj.weight")):
            widest = max(widest, t.rows * (weights.experts_per_token if t.expert else 1))
    return cdiv(widest or 4 * model.hidden_size, tp)


def _check_native(req: FitRequest, fp: Footprint) -> None:
    for fmt in {fp.formats.k, fp.formats.v}:
        if not req.gpu.runs_natively(fmt) and not req.allow_emulated:
            raise InputError(f"{req.gpu.name} ({req.gpu.architecture}) cannot run KV format "
                             f"{fmt.name} natively (it runs {', '.join(req.gpu.native_kv_formats)}); "
                             "pass --allow-emulated to plan it anyway", field="--kv-dtype")


def _split_note(split: MoeSplit, weights: Weights | None) -> str:
    num_experts = weights.num_experts if weights else 0
    present = {tensor_role(t) for t in weights.tensors} if weights else set()
    if not num_experts:
        return (f"{split.dp} independent replicas of {split.tp} GPU(s), each with its own "
                "sequences and KV pool")
    ranks = (f"{split.dp} attention data-parallel ranks of {split.tp} GPU(s), each with its own "
             "sequences and KV pool" if split.dp > 1
             else f"attention split over {split.tp} GPU(s)")
    roles = [f"{what} {'replicated' if n == 1 else f'split over {n}'}"
             for what, role in (("dense MLPs", "mlp"), ("shared experts", "shared"),
                                ("embedding", "embed"), ("LM head", "head"))
             if (n := split.role_tp(role)) != split.tp and role in present]
    if split.ep > 1:
        slots = num_experts + split.redundant
        local = experts_on_busiest_rank(slots, split.ep)
        of = (f"{num_experts} + {split.redundant} redundant" if split.redundant
              else f"{num_experts}")
        experts = (f"routed experts spread over {split.ep} GPUs ({local} of {of} per "
                   "layer on the busiest)"
                   + (f", each split over {split.moe_tp}" if split.moe_tp > 1 else ", each whole"))
    else:
        experts = f"every routed expert split over {split.moe_tp} GPUs (no expert parallelism)"
    return "; ".join([ranks, *roles, experts])


def _check_deepstack_stages(model, pp: int) -> None:
    """Qwen3-VL feeds its deepstack visual features into the first ``len(
    vision_config.deepstack_visual_indexes)`` decoder layers, and vLLM asserts every later
    pipeline stage starts at or after them (0.34 qwen3_vl.py: ``start_layer >=
    len(deepstack_visual_indexes)``): Qwen3-VL-8B's 36 layers and 3 indexes allow pp <= 12
    (3 layers a stage), not 13 (stage 1 starts at layer 2)."""
    vision = (model.config or {}).get("vision_config")
    indexes = vision.get("deepstack_visual_indexes") if isinstance(vision, dict) else None
    if not isinstance(indexes, list) or not indexes:
        return
    first = pp_stage_sizes(model.num_layers, pp)[0]
    if first < len(indexes):
        raise ParallelismError(
            f"vLLM's Qwen3-VL asserts every pipeline stage after the first starts at or after "
            f"layer {len(indexes)} (len(vision_config.deepstack_visual_indexes)); at pp {pp} "
            f"stage 1 starts at layer {first}: use a smaller --pp", field="pp")


#: text model types whose vLLM model class does not implement SupportsPP (vLLM refuses pp > 1):
#: gemma3n_mm.py (0.34), minimax_text_01.py (0.13, the last releases that serve MiniMax-M1),
#: zamba2.py (0.34: ``Zamba2ForCausalLM(nn.Module, HasInnerState, IsHybrid)``)
VLLM_NO_PP = {"gemma3n_text": "Gemma3nForConditionalGeneration",
              "minimax_m1": "MiniMaxText01ForCausalLM", "minimax_text_01": "MiniMaxText01ForCausalLM",
              "zamba2": "Zamba2ForCausalLM",
              "mamba2": "Mamba2ForCausalLM"}  # 0.34 mamba2.py: no SupportsPP (mamba.py has it)
#: text model types whose SGLang model class asserts a single pipeline stage
#: (``assert self.pp_group.is_first_rank and self.pp_group.is_last_rank``): SGLang 0.5.23
#: srt/models/lfm2.py and lfm2_moe.py
SGLANG_NO_PP = {"lfm2": "Lfm2ForCausalLM", "lfm2_moe": "Lfm2MoeForCausalLM"}


def _check_kimi_k3_padding(req: FitRequest, layout: EngineLayout) -> None:
    """vLLM 0.34's KimiMoE (kimi_k3/nvidia/model.py) zero-pads each rank's expert slice to
    min_moe_intermediate_per_partition (256) when moe_intermediate_size / tp is narrower and
    expert parallelism is off: Kimi-K3 (3,072) above TP 12, a third more expert bytes at TP 16.
    Not counted, so refused."""
    from ..loaders.params_kimi_k3 import is_kimi_k3

    width = expert_width(req.weights)
    if layout.name == "vllm" and req.ep == 1 and req.tp > 1 and width and \
            width // req.tp < 256 and is_kimi_k3(req.model):
        raise ParallelismError(f"vLLM pads each rank's Kimi-K3 expert slice ({width:,} / "
                               f"{req.tp} = {width // req.tp} rows) to 256 without expert "
                               "parallelism, which kvplan does not count: use --ep, or tp <= "
                               f"{width // 256}", field="tp")


def plan_layout(req: FitRequest) -> FitResult:
    """Plan one (model, GPU, engine, parallelism, context), without the TP/PP search."""
    layout = get_engine(req.engine)
    model = req.model
    v4_notes = fit_dsv4.check_request(req, layout) if model.compressed_attention else None
    max_model_len = req.max_model_len or req.context_tokens
    if req.context_tokens > max_model_len:
        raise InputError(f"context {req.context_tokens:,} exceeds --max-model-len "
                         f"{max_model_len:,}", field="--context")
    if req.shared_prefix_tokens >= req.context_tokens:
        raise InputError(f"the shared prefix ({req.shared_prefix_tokens:,} tokens) must be "
                         f"shorter than the context ({req.context_tokens:,})", field="--shared-prefix")
    if req.pp > 1 and layout.name == "vllm" and model.model_type in VLLM_NO_PP:
        raise ParallelismError(f"vLLM's {VLLM_NO_PP[model.model_type]} does not implement "
                               "SupportsPP ('Pipeline parallelism is not supported'): use --pp 1",
                               field="pp")
    if layout.name == "vllm":  # a tied lm_head on a rank without the embedding (Falcon-H1)
        from ..loaders.params_stages import check_vllm_tied_pp
        check_vllm_tied_pp(model, req.pp)
    if layout.name == "vllm" and req.pp > 1:
        _check_deepstack_stages(model, req.pp)
    if layout.name == "vllm" and model.model_type == "lfm2_moe":  # lfm2_moe.py's own refusals
        from ..loaders.params_lfm2 import check_vllm_parallel
        check_vllm_parallel(model, req.tp, req.pp)
    if layout.name == "vllm" and model.model_type == "gemma4_text":  # KV sharing across stages
        from ..loaders.params_gemma4 import check_vllm_pipeline
        check_vllm_pipeline(model, req.pp)
    if req.pp > 1 and layout.name == "sglang" and model.model_type in SGLANG_NO_PP:
        raise ParallelismError(f"SGLang's {SGLANG_NO_PP[model.model_type]} serves one pipeline "
                               "stage only (it asserts pp_group.is_first_rank and is_last_rank): "
                               "use --pp 1", field="pp")
    if req.draft and req.pp > 1 and layout.name == "vllm":
        raise ParallelismError("vLLM runs speculative decoding without pipeline parallelism; "
                               "use --pp 1", field="pp")
    from ..engines.vllm_memory import serve_defaults

    total = req.total_memory_bytes or req.gpu.memory_driver_total_bytes
    # vLLM's tiers by release; the other engines keep the tiers kvplan has applied to them
    # (vLLM's before 0.28: their own token-budget defaults by GPU are not read)
    dflt_tokens, dflt_seqs = serve_defaults(total, req.gpu.name,
                                            layout.version if layout.name == "vllm" else "0.27")
    if layout.name == "sglang":  # its chunked prefill, by release and GPU tier
        from ..engines.sglang_memory import default_chunk_tokens

        dflt_tokens = default_chunk_tokens(
            layout.version, total, None if req.total_memory_bytes else req.gpu.memory_smi_total_mib,
            req.tp, model.sparse_mla)
    mnbt = (req.max_num_batched_tokens or batched_dp_tokens(layout.name, layout.version,
                                                            req.all2all, req.dp, req.ep)
            or dflt_tokens)
    # --concurrency caps the engine (the launch line's --max-num-seqs), so the budget uses it
    mns = req.max_num_seqs or (cdiv(req.concurrency, req.dp) if req.concurrency else dflt_seqs)
    if layout.name == "vllm":
        if req.max_num_seqs is None and not req.concurrency:
            mns = min(mns, mnbt)  # EngineArgs: max_num_seqs = min(default, max_num_batched_tokens)
        elif mns > mnbt:
            raise InputError(f"vLLM needs max_num_batched_tokens ({mnbt:,}) >= max_num_seqs "
                             f"({mns:,}) (SchedulerConfig): pass --max-num-batched-tokens",
                             field="--max-num-seqs" if req.max_num_seqs else "--concurrency")
    block, notes = ((dsv4.FULL_BLOCK, v4_notes) if v4_notes is not None
                    else _block_size(req, layout, model))
    start_block = block
    long_note = check_context(model, max_model_len, req.allow_long_max_model_len,
                              "--max-model-len" if req.max_model_len else "--context")
    if long_note:
        notes.append(long_note)
    if (req.dp > 1 or req.ep > 1) and req.weights is None:
        raise InputError("--dp and --ep need the model's parameter inventory to place its "
                         "experts and dense layers; --weight-memory cannot say which weights "
                         "are which", field="--weight-memory")
    if req.dcp > 1 and req.draft:
        raise InputError("speculative decoding under --dcp is not modelled (vLLM keeps the "
                         "draft's cache unsplit beside the split target's)", field="--draft-model")
    if req.dcp > 1 and req.gpu.vendor == "amd" and not any(
            s.kind == "mla" for s in model.cache_layers):
        raise ParallelismError("vLLM runs decode context parallelism for GQA/MQA only with "
                               "FlashAttention or FlashInfer (supports_dcp), which ROCm does not "
                               f"use: no DCP for {model.name} on {req.gpu.name}", field="dcp")
    if (req.dp > 1 or req.ep > 1) and req.draft:
        raise InputError("speculative decoding under --dp / --ep is not modelled (where the "
                         "draft's experts live)", field="--draft-model")
    split = moe_split(layout.name, req.tp, req.dp, req.ep, req.num_experts,
                      expert_width(req.weights),
                      redundant=(req.redundant_experts or 0) if req.eplb else 0)
    split, epm = _expert_memory(req, layout, split, mnbt)
    _check_kimi_k3_padding(req, layout)
    if req.dp > 1 or req.ep > 1:
        notes.append(_split_note(split, req.weights))
    lookahead = req.draft.num_speculative_tokens if req.draft else 0
    ctx = req.context_tokens + lookahead

    fp = kv_footprint(model, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=req.pp,
                      block_size_tokens=block, engine=layout, dcp=req.dcp,
                      gpu_capability=req.gpu.compute_capability)
    block2, state_page, hybrid_notes = _hybrid_unify(req, model, fp.layer_costs, layout, block)
    if block2 != block:
        block = block2
        fp = kv_footprint(model, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=req.pp,
                          block_size_tokens=block, engine=layout, dcp=req.dcp,
                          gpu_capability=req.gpu.compute_capability)
    notes += hybrid_notes
    _check_native(req, fp)
    notes += list(fp.notes)
    if req.weights is not None and req.weight_memory_bytes is None:
        notes += [f"weights: {n}" for n in req.weights.notes]  # what the count holds or leaves out

    draft_fp = None
    if req.draft:
        dm = req.draft.model
        if dm.vocab_size != model.vocab_size:
            raise InputError(f"draft model {dm.name} has vocabulary {dm.vocab_size}, the target "
                             f"{model.vocab_size}: speculative decoding needs the same tokenizer",
                             field="--draft-model")
        draft_fp = kv_footprint(dm, (ctx,), kv_dtype=req.kv_dtype, tp=req.tp, pp=1,
                                block_size_tokens=block, engine=layout,
                                gpu_capability=req.gpu.compute_capability)

    # weights per stage
    if req.weight_memory_bytes is not None:
        stage_weights = [req.weight_memory_bytes] * req.pp
    elif req.weights is None:
        raise InputError(f"parameter count for {model.model_type} is not modelled; pass "
                         "--weight-memory", field="--weight-memory")
    else:
        # embeddings vLLM builds on every pipeline rank (Tensor.every_stage); other engines:
        # the first stage and, tied, the last
        placed = req.weights
        if layout.name == "vllm":  # what this vLLM release builds on every rank
            from ..loaders.params_stages import vllm_stage_weights
            placed = vllm_stage_weights(placed, model.model_type, layout.version)
        wb = weight_bytes(placed, req.weight_format, pp=req.pp, split=split,
                          every_stage=layout.name == "vllm")
        stage_weights = list(wb.per_stage_bytes)
        if req.tp > 1:
            notes.append(f"weights under tp {req.tp}: linear layers and the vocabulary split "
                         "across ranks; norms (and routers, MLA's q_a/kv_a projections where "
                         f"present) replicated on every rank ({wb.replicated_bytes:,} B per GPU)")
    if req.draft and req.weight_memory_bytes is None:
        if req.draft.weights is None:
            raise InputError("parameter count of the draft model is not modelled; pass "
                             "--weight-memory for the total", field="--draft-model")
        stage_weights[-1] += weight_bytes(req.draft.weights, req.draft.weight_format,
                                          tp=req.tp).per_gpu_bytes
    if req.weight_memory_bytes is None:
        extra, how = _model_buffers(req, layout, model, mnbt)
        if extra:
            stage_weights = [w + extra for w in stage_weights]
            notes.append(how)

    stages = pp_stages(model.num_layers, req.pp)
    # MoE layers communicate over all tp x dp GPUs of a stage (dispatch / all-gather), so the
    # NCCL buffers are those of that group; DP replicas of a dense model share nothing
    comm_tp = req.tp * req.dp if req.num_experts else req.tp
    inter = _intermediate_per_rank(model, req.weights, req.tp)
    plans = []
    for s, rng in enumerate(stages):
        last = s == len(stages) - 1
        inputs = BudgetInputs(
            total_bytes=total, weights_bytes=stage_weights[s], tp=comm_tp, pp=req.pp,
            hidden_size=model.hidden_size, intermediate_per_rank=inter,
            vocab_size=model.vocab_size or 0, num_layers=len(rng),
            max_num_batched_tokens=mnbt, max_num_seqs=mns, utilization=req.utilization,
            activation_bytes=req.activation_memory_bytes,
            runtime_overhead_bytes=req.overhead_memory_bytes,
            kv_cache_memory_bytes=req.kv_cache_memory_bytes,
            weights_overridden=req.weight_memory_bytes is not None,
            total_overridden=req.total_memory_bytes is not None,
            smi_total_mib=None if req.total_memory_bytes else req.gpu.memory_smi_total_mib,
            attention_dp=req.dp if comm_tp > req.tp else 1,
            ep_buffers_bytes=epm.buffer_bytes, ep_buffers_how=epm.buffer_how,
            ep_transient_bytes=epm.transient_bytes, deepep_reserve_mib=epm.reserve_mib,
            cuda_graphs=epm.cuda_graphs, model=model, gpu=req.gpu)
        budget = _budget(layout, inputs, last)
        if v4_notes is not None:  # DeepSeek-V4's packed pool (kvplan.planning.fit_dsv4)
            budget = fit_dsv4.with_workspace(budget, model, max_model_len, mnbt,
                                             req.activation_memory_bytes is not None)
            v4_pool = fit_dsv4.pool(model, budget.kv_pool_bytes, mnbt)
            plans.append(StagePlan(s, len(rng), budget, (), v4_pool.num_blocks, None, v4_pool))
            continue
        costs = [c for i in rng for c in fp.layer_costs[i]]
        if last and draft_fp is not None:
            costs += [c for layer in draft_fp.layer_costs for c in layer]
        pls = pool_layers(costs, block, state_page, max_model_len)
        plans.append(StagePlan(s, len(rng), budget, tuple(pls), None))
    if layout.name == "vllm" and v4_notes is None:
        plans = _vllm_stage_pools(plans, layout)

    result = conclude(req, layout, fp, draft_fp, block, mnbt, mns, max_model_len, ctx, plans, notes)
    return replace(result, split=split, start_block_size_tokens=start_block, expert_memory=epm)


def _vllm_stage_pools(plans: list[StagePlan], layout: EngineLayout) -> list[StagePlan]:
    """Each stage's KV cache groups and block count under vLLM.

    From 0.11 (``get_kv_cache_configs``) the groups are the whole model's, each stage holding
    its own layers of every group (``kvpool.vllm_stage_groups``): its block is its largest
    group's pages there, its pool ``available // block`` blocks. 0.10 grouped each stage's
    own layers and drove every stage with stage 0's groups (``EngineCore._initialize_kv_caches``:
    "All workers have the same kv_cache_config except layer names"), so a stage whose groups
    differ from stage 0's is refused there. At pp 1 the two agree."""
    from .fit_pools import scheduler_pool

    cached = [p for p in plans if p.pool_layers]
    if not cached:
        return plans
    old = version_tuple(layout.version) < (0, 11, 0)
    try:  # from 0.11 only the whole model's grouping exists; before it each stage's own
        every, whole = scheduler_pool(plans, layout)
        own = {p.stage: vllm_groups(p.pool_layers, layout.version) for p in cached} if old else {}
    except ValueError as e:
        raise InputError(f"vLLM cannot pool this model's caches: {e}", field="MODEL") from None
    if old:
        from collections import Counter

        def kinds(p: StagePlan) -> Counter:
            return Counter(p.pool_layers[grp[0]].key for grp in own[p.stage].groups)
        first = cached[0]
        for p in cached[1:]:
            if kinds(p) != kinds(first):
                raise ParallelismError(
                    f"vLLM {layout.version} groups each pipeline stage's own cache layers and "
                    f"runs every stage with stage {first.stage}'s groups (EngineCore."
                    f"_initialize_kv_caches); stage {p.stage}'s groups ({len(own[p.stage].groups)}) "
                    f"differ from stage {first.stage}'s ({len(own[first.stage].groups)}), which "
                    "that release does not handle: plan with --engine vllm@0.11.0 or later, which "
                    "groups the whole model's layers", field="pp")
    out, start = [], 0
    for p in plans:
        idx = range(start, start + len(p.pool_layers))
        start += len(p.pool_layers)
        if not p.pool_layers:
            out.append(p)
            continue
        g = own[p.stage] if old else vllm_stage_groups(whole, every, idx, layout.version)
        out.append(replace(p, num_blocks=vllm_num_blocks(p.budget.kv_pool_bytes, g), pool_groups=g))
    return out


def _model_buffers(req: FitRequest, layout: EngineLayout, model: Model,
                   mnbt: int) -> tuple[int, str]:
    """Buffers vLLM's model allocates at load beside the weights (counted with them): Qwen3-VL's
    deepstack input embeddings, one ``max_num_batched_tokens x hidden`` tensor per deepstack
    level in the model dtype (vllm/model_executor/models/qwen3_vl.py). Qwen3-VL-8B at 8,192
    tokens: 3 x 8,192 x 4,096 x 2 B = 201,326,592 B."""
    if layout.name == "vllm" and model.compressed_attention:
        return fit_dsv4.model_buffers(model, mnbt)
    text = model.config.get("text_config")
    if layout.name == "vllm" and isinstance(text, dict) and text.get("model_type") in (
            "gemma3n_text", "gemma4_text"):
        # gemma3n_mm.py / gemma4_mm.py: per_layer_embeddings [max_num_batched_tokens, L, p] in
        # the model dtype (the embedding's), pre-allocated for CUDA graphs when p > 0. Gemma-3n
        # E4B at 2,048 tokens: 2,048 x 35 x 256 x 2 B = 36,700,160 B; Gemma-4 E2B at 8,192:
        # 8,192 x 35 x 256 x 2 B = 146,800,640 B (Gemma4TextConfig's p default 256: 26B-A4B
        # and 31B state 0)
        layers = model.num_layers
        ple = text.get("hidden_size_per_layer_input",
                       256 if text.get("model_type") == "gemma4_text" else None)
        if isinstance(ple, int) and not isinstance(ple, bool) and ple > 0:
            size = dtype_bytes(model.dtype)
            extra = mnbt * layers * ple * size
            return extra, (f"weights include vLLM's per-layer-embedding buffer: {mnbt:,} tokens "
                           f"(max_num_batched_tokens) x {layers} layers x {ple} x {size} B = "
                           f"{extra:,} B per GPU")
    vision = model.config.get("vision_config")
    if layout.name != "vllm" or not isinstance(vision, dict) or not str(
            model.config.get("model_type", "")).startswith("qwen3_vl"):
        return 0, ""
    levels = vision.get("deepstack_visual_indexes")
    if not isinstance(levels, list) or not levels:
        return 0, ""
    size = dtype_bytes(model.dtype)
    extra = len(levels) * mnbt * model.hidden_size * size
    return extra, (f"weights include vLLM's deepstack input buffers: {len(levels)} levels x "
                   f"{mnbt:,} tokens (max_num_batched_tokens) x {model.hidden_size:,} x {size} B "
                   f"= {extra:,} B per GPU")


def _expert_memory(req: FitRequest, layout: EngineLayout, split: MoeSplit,
                   mnbt: int) -> tuple[MoeSplit, ExpertParallelMemory]:
    """EPLB's redundant slots (into the split) and the expert-parallel buffers of a GPU."""
    if not (req.eplb or req.redundant_experts is not None or req.all2all != "default"):
        return split, NO_EP_MEMORY
    if req.weights is None:
        raise InputError("--eplb and --all2all need the model's parameter inventory (expert "
                         "shapes); --weight-memory cannot say which weights are experts",
                         field="--weight-memory")
    check_all2all(layout.name, req.all2all, split.ep, req.gpu.nvlink_domain_gpus)
    r = redundant_experts(layout.name, layout.version, req.num_experts, split.ep, req.eplb,
                          req.redundant_experts, req.model.model_type, req.weight_format.scheme)
    split = split._replace(redundant=r)
    if r and req.weight_memory_bytes is not None:
        raise InputError(f"--weight-memory is used as given, so the {r} redundant expert slots "
                         "per layer would be left out of it: drop --weight-memory or "
                         "--redundant-experts", field="--weight-memory")
    staging = expert_layer_bytes(req.weights, req.weight_format, split) if req.eplb else 0
    epm = expert_parallel_memory(layout.name, layout.version, req.all2all,
                                 hidden=req.model.hidden_size, experts=req.num_experts,
                                 redundant=r, eplb=req.eplb, ep=split.ep, dp=req.dp,
                                 stage_gpus=req.tp * req.dp, batched_tokens=mnbt,
                                 staging_bytes=staging)
    return split, epm


def plan_fit(req: FitRequest) -> FitResult:
    """Plan one (model, GPU, engine, parallelism, context); with a target concurrency, or when
    it does not fit, also the smallest layout on this GPU that does (``suggestion``: tp, pp,
    dp, ep; ``kvplan.planning.fit_search``)."""
    result = plan_layout(req)
    if req.search and (req.concurrency or not result.fits):
        found = smallest_layout(req, req.concurrency or 1, plan_layout, result)
        if found is not None:
            f = found.request
            result = replace(result, suggestion=(f.tp, f.pp, f.dp, f.ep),
                             suggestion_concurrency=found.max_concurrency, suggested=found)
    return result


def resolve_kv_format(model: Model, engine: str, kv_dtype: str) -> str:
    return resolve_formats(model, get_engine(engine), kv_dtype).name
