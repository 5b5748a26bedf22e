"""The smallest layout on one GPU that reaches a target concurrency: TP x PP, and for a
mixture-of-experts model on an engine with data and expert parallelism also attention DP with
EP over the whole stage (``--dp D --ep tp x D``, the layout vLLM, SGLang and TensorRT-LLM run
MoE models with), within 8 GPUs. The planner of one layout is passed in (``plan_fit`` passes its
own), so this module imports no planner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..core.errors import KvplanError
from ..core.parallel import layout_words
from ..core.scenario_spec import SEARCH_DP as SCENARIO_DP
from .fit_types import FitRequest, FitResult

SEARCH_TP = (1, 2, 4, 8)
SEARCH_PP = (1, 2, 3, 4, 6, 8)
SEARCH_DP = tuple(d for d in SCENARIO_DP if d > 1)
MAX_DP_STAGE_GPUS = 8  # the MoE group's all-to-all stays within one node (NVLink)
DP_ENGINES = ("vllm", "sglang", "trtllm")


def layouts(req: FitRequest) -> list[tuple[int, int, int, int]]:
    """(tp, pp, dp, ep) to try, fewest GPUs first; at equal GPUs fewer pipeline stages, then
    plain TP before DP."""
    out = [(tp, pp, 1, 1) for tp in SEARCH_TP for pp in SEARCH_PP]
    if req.num_experts and req.engine.split("@")[0] in DP_ENGINES:
        out += [(tp, 1, dp, tp * dp) for tp in SEARCH_TP for dp in SEARCH_DP
                if tp * dp <= MAX_DP_STAGE_GPUS]
    return sorted(out, key=lambda x: (x[0] * x[1] * x[2], x[1], x[2]))


def smallest_layout(req: FitRequest, target: int, plan_one: Callable[[FitRequest], FitResult],
                    own: FitResult | None = None) -> FitResult | None:
    """The plan of the smallest layout (``layouts``) on this GPU that reaches ``target``
    sequences for the whole deployment; None when none does, or when the request's own layout
    (``own``, its plan) comes first that does. ``plan_one`` plans one layout."""
    if req.weight_memory_bytes is not None:
        return None  # a given per-GPU weight figure says nothing about other layouts
    for tp, pp, dp, ep in layouts(req):
        if (tp, pp, dp, ep) == (req.tp, req.pp, req.dp, req.ep):
            if own is not None and own.fits and own.max_concurrency >= target:
                return None  # nothing before the asked layout reaches the target: it stands
            continue
        try:
            r = plan_one(replace(req, tp=tp, pp=pp, dp=dp, ep=ep, search=False))
        except KvplanError:
            continue
        if r.fits and r.max_concurrency >= target:
            return r
    return None


def request_layout(req: FitRequest) -> str:
    """``tp 8 x pp 1``, with dp, ep and dcp where a request has them."""
    return layout_words(req.tp, req.pp, req.dp, req.ep, req.dcp)


def search_words(req: FitRequest) -> str:
    """What the layout search covered, for a plan none of whose layouts reaches the target."""
    if req.weight_memory_bytes is not None:
        return "a given --weight-memory is not searched over layouts"
    dp = (f", and dp {'/'.join(map(str, SEARCH_DP))} with ep = tp x dp within "
          f"{MAX_DP_STAGE_GPUS} GPUs" if any(x[2] > 1 for x in layouts(req)) else "")
    return f"searched tp up to {max(SEARCH_TP)} x pp up to {max(SEARCH_PP)}{dp}"
