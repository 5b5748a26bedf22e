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
from ..core.parallel import MoeSplit, check_degree


def _common(tp: int, dp: int, ep: int, num_experts: int) -> None:
    check_degree(tp, "tp")
    check_degree(dp, "dp")
    check_degree(ep, "ep")
    if ep > 1 and not num_experts:
        raise ParallelismError(f"ep={ep} needs a mixture-of-experts model; this one has no "
                               "routed experts", field="ep")
    if ep > tp * dp:
        raise ParallelismError(f"ep={ep} is more than the tp x dp = {tp * dp} GPUs of a stage "
                               "the experts are spread over", field="ep")
    if ep > 1 and ep > num_experts:
        raise ParallelismError(f"ep={ep} is more than the model's {num_experts} routed experts: "
                               "some GPUs would hold none", field="ep")


def vllm_split(tp: int, dp: int, ep: int, num_experts: int) -> MoeSplit:
    """vLLM (``FusedMoEParallelConfig.make``, vllm/model_executor/layers/fused_moe/config.py):
    ``--enable-expert-parallel`` makes the expert-parallel group all ``dp x tp`` GPUs of a stage
    (``ep_size = dp_size * tp_size``, each expert whole: ``tp_size = 1``); without it the MoE
    layer is tensor-parallel over all of them (``flatten_tp_size = dp_size * tp_size``).
    Everything else (attention, dense and shared-expert MLPs, embedding, LM head) is one copy
    per DP rank, split over its ``tp`` GPUs. So ``--ep`` is 1 or ``tp x dp`` on vLLM."""
    _common(tp, dp, ep, num_experts)
    if ep not in (1, tp * dp):
        raise ParallelismError(
            f"vLLM's expert-parallel group is every GPU of a stage (--enable-expert-parallel: "
            f"ep = tp x dp = {tp * dp}); ep={ep} is not a layout vLLM runs", field="ep")
    if ep > 1:
        return MoeSplit(tp=tp, dp=dp, ep=ep, moe_tp=1)
    return MoeSplit(tp=tp, dp=dp, ep=1, moe_tp=tp * dp if num_experts else tp)


def moe_split(engine: str, tp: int, dp: int, ep: int, num_experts: int) -> MoeSplit:
    """The placement ``engine`` gives ``tp x dp`` GPUs of a stage with ``ep`` expert ranks."""
    if engine == "vllm":
        return vllm_split(tp, dp, ep, num_experts)
    if dp == 1 and ep == 1:
        check_degree(tp, "tp")
        return MoeSplit(tp=tp, moe_tp=tp)
    raise ParallelismError(f"data / expert parallelism is not modelled for {engine} yet; "
                           "plan it with --engine vllm", field="dp" if dp > 1 else "ep")
