"""How each engine places a model under attention data parallelism (``--dp``) and expert
parallelism (``--ep``), and which combinations it refuses. Pure.

kvplan's flags mean the same on every engine: ``--tp T`` GPUs per attention rank, ``--dp D``
attention ranks (each with its own sequences and KV pool), ``--ep E`` GPUs the routed experts
are spread over, all within one pipeline stage of ``T x D`` GPUs. Each engine's rule turns that
into a ``kvplan.core.parallel.MoeSplit`` (how many GPUs split each kind of tensor) or one
``ParallelismError`` line naming the engine's own rule and where it lives.
"""

from __future__ import annotations

from ..core.errors import ParallelismError
from ..core.parallel import MoeSplit, check_degree, plain_split

#: The widest stage kvplan plans (tp x dp GPUs): beyond any NVLink domain or cluster sold
MAX_STAGE_GPUS = 4096


def _common(tp: int, dp: int, ep: int, num_experts: int) -> None:
    check_degree(tp, "tp")
    check_degree(dp, "dp")
    check_degree(ep, "ep")
    if tp * dp > MAX_STAGE_GPUS:
        raise ParallelismError(f"tp x dp = {tp * dp:,} GPUs in a stage; kvplan plans at most "
                               f"{MAX_STAGE_GPUS:,}", field="dp")
    if ep > 1 and not num_experts:
        raise ParallelismError(f"ep={ep} needs a mixture-of-experts model; this one has no "
                               "routed experts", field="ep")
    if ep > tp * dp:
        raise ParallelismError(f"ep={ep} is more than the tp x dp = {tp * dp} GPUs of a stage "
                               "the experts are spread over", field="ep")
    if ep > 1 and ep > num_experts:
        raise ParallelismError(f"ep={ep} is more than the model's {num_experts} routed experts: "
                               "some GPUs would hold none", field="ep")


def _split_experts(engine: str, split: MoeSplit, width: int) -> MoeSplit:
    """Each expert's gate / up rows split evenly over ``moe_tp`` GPUs, as every engine asserts
    (vLLM ``FusedMoEConfig``: intermediate_size % tp_size == 0; SGLang FusedMoE: % moe_tp_size)."""
    if width and split.moe_tp > 1 and width % split.moe_tp:
        raise ParallelismError(f"{engine} splits each expert's {width} intermediate rows over "
                               f"{split.moe_tp} GPUs, which does not divide them evenly",
                               field="dp" if split.dp > 1 else "ep")
    return split


def _replicas(tp: int, dp: int) -> MoeSplit:
    """A dense model under ``--dp``: independent replicas of ``tp`` GPUs, nothing shared."""
    return MoeSplit(tp=tp, dp=dp, moe_tp=tp)


def vllm_split(tp: int, dp: int, ep: int, num_experts: int) -> MoeSplit:
    """vLLM (``FusedMoEParallelConfig.make``, vllm/model_executor/layers/fused_moe/config.py):
    ``--enable-expert-parallel`` makes the expert-parallel group all ``dp x tp`` GPUs of a stage
    (``ep_size = dp_size * tp_size``, each expert whole: ``tp_size = 1``); without it the MoE
    layer is tensor-parallel over all of them (``flatten_tp_size = dp_size * tp_size``). The
    busiest EP rank holds ceil(experts / ep) (``determine_expert_map``: the first
    ``experts % ep`` ranks get one more). Attention, dense MLPs, embedding and LM head are one
    copy per DP rank split over its ``tp`` GPUs (deepseek_v2.py ``VocabParallelEmbedding``,
    ``ParallelLMHead``); shared experts too, except that with EP, tp > 1 and dp > 1 vLLM runs
    sequence-parallel MoE (``ParallelConfig.use_sequence_parallel_moe`` with the default
    ``allgather_reducescatter`` all2all backend) and replicates them whole
    (``DeepseekV2MLP(disable_tp=is_sequence_parallel)``). A dense model's DP ranks are
    independent replicas. So ``--ep`` is 1 or ``tp x dp`` on vLLM."""
    _common(tp, dp, ep, num_experts)
    if not num_experts:
        return _replicas(tp, dp)
    if ep not in (1, tp * dp):
        raise ParallelismError(
            f"vLLM's expert-parallel group is every GPU of a stage (--enable-expert-parallel: "
            f"ep = tp x dp = {tp * dp}); ep={ep} is not a layout vLLM runs", field="ep")
    if ep == 1:
        return MoeSplit(tp=tp, dp=dp, ep=1, moe_tp=tp * dp)
    return MoeSplit(tp=tp, dp=dp, ep=ep, moe_tp=1, shared_tp=1 if tp > 1 and dp > 1 else 0)


def sglang_split(tp: int, dp: int, ep: int, num_experts: int, redundant: int = 0) -> MoeSplit:
    """SGLang (python/sglang/srt/server_args.py, runtime_context.py, models/deepseek_v2.py):
    ``--tp`` is every GPU of a stage (N = kvplan's tp x dp); ``--enable-dp-attention --dp D``
    gives attention ``N / D`` GPUs per rank; the MoE layer is split ``moe_tp = N / ep``
    (``--ep-size``), and FusedMoE asserts ``num_experts % moe_ep_size == 0``. Under DP
    attention the embedding is replicated (``VocabParallelEmbedding(enable_tp=not
    enable_dp_attention)``), while dense MLPs, shared experts and the LM head stay split over
    all N GPUs (defaults: ``--moe-dense-tp-size`` None, no ``--enable-dp-lm-head``). SGLang
    fuses DeepSeek's shared expert into the routed ones on Hopper and newer when EP is off:
    the same bytes as a shared MLP split over N. A dense model's ``--dp`` ranks (without DP
    attention) are independent replicas."""
    _common(tp, dp, ep, num_experts)
    if not num_experts:
        return _replicas(tp, dp)
    world = tp * dp
    if world % ep:
        raise ParallelismError(f"SGLang splits each expert over tp / ep GPUs (moe_tp_size = "
                               f"tp_size // ep_size): ep={ep} must divide the {world} GPUs of "
                               "a stage", field="ep")
    if (num_experts + redundant) % ep:  # FusedMoE gets the routed + redundant slots
        slots = f"{num_experts} + {redundant} redundant" if redundant else f"{num_experts}"
        raise ParallelismError(f"SGLang's FusedMoE needs the {slots} experts to divide "
                               f"by ep ({ep}): assert num_experts % moe_ep_size == 0", field="ep")
    if dp == 1:
        return MoeSplit(tp=tp, ep=ep, moe_tp=tp // ep)
    return MoeSplit(tp=tp, dp=dp, ep=ep, moe_tp=world // ep, mlp_tp=world, shared_tp=world,
                    embed_tp=1, head_tp=world)


def trtllm_split(tp: int, dp: int, ep: int, num_experts: int) -> MoeSplit:
    """TensorRT-LLM (tensorrt_llm/mapping.py, _torch/models/modeling_deepseekv3.py):
    ``tp_size`` is every GPU of a stage and must equal ``moe_tp_size x moe_ep_size``; each EP
    rank holds ``num_experts // moe_ep_size`` experts. ``enable_attention_dp`` gives every
    rank whole attention (attention TP 1), and with it the dense MLPs and shared experts
    (``_compute_mlp_tp_size`` / ``_compute_shared_expert_tp_size``: 1), the embedding ("we
    don't do parallelism here") and the LM head (unless ``enable_lm_head_tp_in_adp``) are
    replicated. A dense model's ``--dp`` ranks are independent replicas."""
    _common(tp, dp, ep, num_experts)
    if not num_experts:
        return _replicas(tp, dp)
    if dp > 1 and tp > 1:
        raise ParallelismError("TensorRT-LLM's attention DP runs whole attention on every GPU "
                               f"(attention TP 1): use --tp 1 --dp {tp * dp}", field="tp")
    world = tp * dp
    if world % ep:
        raise ParallelismError(f"TensorRT-LLM needs tp_size = moe_tp_size x moe_ep_size: ep={ep} "
                               f"must divide the {world} GPUs of a stage", field="ep")
    if num_experts % ep:
        raise ParallelismError(f"TensorRT-LLM gives each EP rank num_experts // ep experts: the "
                               f"{num_experts} experts must divide by ep ({ep})", field="ep")
    if dp == 1:
        return MoeSplit(tp=tp, ep=ep, moe_tp=tp // ep)
    return MoeSplit(tp=1, dp=dp, ep=ep, moe_tp=world // ep, mlp_tp=1, shared_tp=1, embed_tp=1,
                    head_tp=1)


RULES = {"vllm": vllm_split, "sglang": sglang_split, "trtllm": trtllm_split}


def moe_split(engine: str, tp: int, dp: int, ep: int, num_experts: int,
              expert_width: int = 0, redundant: int = 0) -> MoeSplit:
    """The placement ``engine`` gives ``tp x dp`` GPUs of a stage with ``ep`` expert ranks
    (``expert_width``: a routed expert's intermediate size, checked against its split)."""
    if engine in RULES:
        split = (sglang_split(tp, dp, ep, num_experts, redundant) if engine == "sglang"
                 else RULES[engine](tp, dp, ep, num_experts))
        return _split_experts(engine, split, expert_width) if dp > 1 or ep > 1 else split
    if dp == 1 and ep == 1:
        check_degree(tp, "tp")
        return plain_split(tp)
    raise ParallelismError(f"{engine} has no data or expert parallelism kvplan models (vllm, "
                           "sglang and trtllm do)", field="dp" if dp > 1 else "ep")
