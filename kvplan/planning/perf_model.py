"""A planned deployment (``FitResult``) -> the per-GPU terms of ``kvplan.core.perf.StepModel``. Pure.

Tensors counted per GPU with the TP rules of ``kvplan.core.weights``; the embedding table (and
a vision tower) is a lookup and is not read by a decode step, a tied LM head is (it is the
embedding matrix).

Under pipeline parallelism a step crosses every stage in turn (``kvplan.core.perf``: no
micro-batch overlap), so its time is the sum of the stages' times, and the ``pp x`` stage time
of ``tpot_s`` / ``prefill_s`` is that sum when the StepModel is the mean stage: every additive
term (dense weight bytes, routed experts' bytes and FLOPs per MoE layer, KV and state bytes
read per sequence, attention FLOPs, decoder layers, layers running their own indexer, DCP
collectives) is summed over the stages and divided by pp. Exact for each of those; the one
approximation is ``max(memory, compute)``, taken on the mean stage rather than per stage (the
same when every stage is memory-bound, as decode is). LFM2-8B-A1B at pp 8 (3 layers a stage,
attention on layers 2, 6, 10, 14, 18, 21): stages 1 and 5 hold conv layers only, and the stage
with most weight bytes (stage 1, which the step model was once taken from) reads no KV; the
mean stage reads 6 / 8 of an attention layer's 2,048 B per cached token, and pp x it the 6
layers' 12,288 B. At pp 1 the mean
stage is the one stage.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.errors import InputError
from ..core.gpu import GpuSpec
from ..core.layers import (
    ChunkedLocal,
    CompressedAttention,
    FullAttention,
    LightningIndexer,
    MultiHeadLatent,
    SlidingWindow,
)
from ..core.parallel import plain_split, pp_stage_sizes
from ..core.perf import Efficiency, KvRead, StepModel
from ..core.weights import Tensor, rank_tensor_bytes, tensor_role
from ..engines.context_parallel import exchange_bytes_per_token
from ..engines.costs import LayerCost
from .fit_types import FitResult


def compute_dtype(gpu: GpuSpec, weight_scheme: str) -> str:
    """The GEMM dtype: fp8 weights run fp8 GEMMs where the GPU has them, fp4 weights (nvfp4,
    mxfp4) fp4 GEMMs where it has those (Blackwell); else bf16 (weight-only kernels)."""
    if weight_scheme.startswith("fp8") and "fp8" in gpu.dense_flops_per_s:
        return "fp8"
    if weight_scheme in ("nvfp4", "mxfp4") and "fp4" in gpu.dense_flops_per_s:
        return "fp4"
    return "bf16"


def _stage_of(layer: int | None, sizes: list[int]) -> int:
    acc = 0
    for s, n in enumerate(sizes):
        acc += n
        if layer is not None and layer < acc:
            return s
    return len(sizes) - 1


def _cap(cost: LayerCost, sparse_topk: int | None = None) -> int | None:
    """The most cached tokens one query of this layer reads: a window, or under sparse MLA
    (DeepSeek-V3.2, GLM-5.x) the indexer's top-k, on every MLA layer of the model (layers
    without their own indexer reuse another layer's top-k)."""
    if isinstance(cost.spec, (SlidingWindow, ChunkedLocal)):
        return cost.window_tokens
    if sparse_topk and isinstance(cost.spec, MultiHeadLatent):
        return sparse_topk
    return None


def with_speculation(r: FitResult, sm: StepModel, acceptance_length: float) -> StepModel:
    """``sm`` with speculative decoding by the request's draft model: its own step model (the
    draft's weights and cache layers, same GPU, TP and efficiency), K draft tokens, and the
    mean tokens emitted per verify step."""
    from dataclasses import replace

    d = r.request.draft
    if d is None or r.draft_footprint is None:
        raise ValueError("speculative decoding needs a draft model")
    dr = replace(r, request=replace(r.request, model=d.model, weights=d.weights,
                                    weight_format=d.weight_format, pp=1, draft=None),
                 footprint=r.draft_footprint)
    return replace(sm, speculative_tokens=d.num_speculative_tokens,
                   acceptance_length=acceptance_length, draft=step_model(dr, sm.efficiency))


def step_model(r: FitResult, efficiency: Efficiency | None = None) -> StepModel:
    req = r.request
    w, fmt, tp, pp = req.weights, req.weight_format, req.tp, req.pp
    if w is None:
        raise ValueError("a performance model needs the parameter inventory (not --weight-memory)")
    layers = r.footprint.model.num_layers
    sizes = pp_stage_sizes(layers, pp)
    dense_bytes = [Fraction(0)] * pp
    expert_bytes = [Fraction(0)] * pp
    dense_params = [0] * pp
    expert_params = [0] * pp
    moe_layers: list[set[int | None]] = [set() for _ in range(pp)]

    split = r.split or plain_split(tp)

    def rank_params(t: Tensor) -> int:
        """Parameters whose FLOPs one GPU computes per token of its rank. A routed expert:
        its moe_tp share. Everything else: a 1/tp share whatever the engine's placement, as a
        rank's tokens meet the tensor either split over its tp GPUs, gathered from every
        rank onto a split over all tp x dp (SGLang's dense MLPs), or whole on one GPU with
        tp = 1 (TensorRT-LLM's attention DP); sequence-parallel shared experts (vLLM) see
        1/tp of the rank's tokens whole."""
        rows, cols = t.shape_on_rank(split.moe_tp if tensor_role(t) == "expert" else tp)
        return rows * cols * t.count

    for t in w.tensors:
        if t.place == "extra":
            continue
        b = rank_tensor_bytes(t, fmt, split)
        if t.place == "embed":
            if t.per_token:  # runs on every token, on the first stage
                s = 0
            elif not (w.tied_embeddings and t.name == "embed_tokens"):
                continue  # a lookup: not read by a decode step
            else:
                s = pp - 1  # the tied LM head reads the embedding matrix on the last stage
        elif t.place == "head":
            s = pp - 1
        else:
            s = _stage_of(t.layer, sizes)
        if t.expert:  # one expert's bytes on a GPU that holds it (each split over moe_tp)
            expert_bytes[s] += fmt.tensor_bytes(t, split.moe_tp) / t.count
            expert_params[s] += rank_params(t) // t.count
            moe_layers[s].add(t.layer)
        else:
            dense_bytes[s] += b
            dense_params[s] += rank_params(t)
    # the mean stage: every term summed over the stages, over pp (see the module docstring)
    n_moe = sum(len(layers_of) for layers_of in moe_layers)
    per_expert_bytes = float(sum(expert_bytes)) / n_moe if n_moe else 0.0
    expert_active = w.experts_per_token * sum(expert_params) / pp
    active = sum(dense_params) / pp + expert_active

    costs: dict[int, tuple[LayerCost, int]] = {}
    indexer_layers = 0  # layers that compute their own top-k (the engine's cache holds its keys)
    for i in range(layers):
        indexer_layers += any(isinstance(c.spec, LightningIndexer) for c in r.footprint.layer_costs[i])
        for c in r.footprint.layer_costs[i]:
            costs.setdefault(id(c), (c, 0))
            costs[id(c)] = (c, costs[id(c)][1] + 1)
    kv_reads, attn, prefill_attn, state = [], [], [], 0.0
    dcp_layers, dcp_bytes = 0, 0.0
    topk = next((s.index_topk for s in r.footprint.model.cache_layers
                 if isinstance(s, LightningIndexer) and s.index_topk), None)
    for c, count in costs.values():
        if isinstance(c.spec, CompressedAttention):  # DeepSeek-V4: kvplan.planning.fit_dsv4
            from .fit_dsv4 import step_reads

            reads, flops, rows = step_reads(c.spec, count, r.footprint.model, tp)
            kv_reads += reads
            attn += flops
            prefill_attn += flops
            state += rows
            indexer_layers += count if c.spec.index_head_dim else 0  # its own lightning indexer
            continue
        if c.state_bytes_per_rank:
            state += 2 * c.state_bytes_per_rank * count  # read and written every step
            continue
        if c.token_shards > 1:  # DCP: 1/dcp of the KV read here, outputs merged over dcp GPUs
            dcp_layers += count
            dcp_bytes += count * exchange_bytes_per_token(c, tp, c.token_shards)
        kv_reads.append(KvRead(float(c.rank_bytes_for_tokens(1)) * count, _cap(c, topk)))
        spec = c.spec
        if isinstance(spec, LightningIndexer):  # scores every cached token: q . k per head
            per_token = prefill = 2 * spec.index_n_heads * spec.index_head_dim
        elif isinstance(spec, MultiHeadLatent):
            heads = spec.num_attention_heads // tp
            per_token = 2 * heads * (spec.latent_dim + spec.kv_lora_rank)
            prefill = 2 * heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim)
        elif isinstance(spec, (FullAttention, SlidingWindow, ChunkedLocal)):
            per_token = prefill = 2 * (spec.num_attention_heads // tp) * (spec.head_dim_k +
                                                                          spec.head_dim_v)
        else:
            continue
        attn.append(KvRead(float(per_token * count), _cap(c, topk)))
        prefill_attn.append(KvRead(float(prefill * count), _cap(c, topk)))
    gpu = req.gpu
    dtype = compute_dtype(gpu, fmt.scheme)
    group = tp * split.dp if n_moe else tp  # the widest collective: the MoE layers' tp x dp
    domain = gpu.nvlink_domain_gpus or 0
    scale_out = float(gpu.scale_out_bandwidth_bytes_per_s_per_direction or 0)
    if domain and group > domain and not scale_out:
        raise InputError(f"{gpu.name}: {group} GPUs in one collective span NVLink domains of "
                         f"{domain}, and the GPU spec gives no scale_out bandwidth to time the "
                         "link between them", field="--gpu")
    def per_stage(reads: list[KvRead]) -> tuple[KvRead, ...]:
        return tuple(KvRead(k.bytes_per_token / pp, k.cap_tokens) for k in reads)

    return StepModel(
        weight_bytes=float(sum(dense_bytes)) / pp, expert_bytes=per_expert_bytes,
        moe_layers=n_moe / pp, num_experts=w.num_experts if n_moe else 0,
        top_k=w.experts_per_token if n_moe else 0, kv_reads=per_stage(kv_reads),
        state_bytes=state / pp, flops_per_token=2.0 * active, attn_flops=per_stage(attn),
        hidden_size=r.footprint.model.hidden_size, layers=layers / pp, tp=tp,
        pp=pp, dp=split.dp if n_moe else 1, ep=split.ep if n_moe else 1,
        hbm_bytes_per_s=float(gpu.hbm_bandwidth_bytes_per_s),
        flops_per_s=float(gpu.dense_flops_per_s[dtype]),
        link_bytes_per_s=float(gpu.interconnect_bandwidth_bytes_per_s_per_direction),
        efficiency=efficiency or Efficiency(), prefill_attn_flops=per_stage(prefill_attn),
        expert_flops_per_token=2.0 * expert_active, dcp_layers=dcp_layers / pp,
        dcp_bytes_per_token=dcp_bytes / pp, domain_gpus=domain, scale_out_bytes_per_s=scale_out,
        indexer_layers=indexer_layers / pp)
