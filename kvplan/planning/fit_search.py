"""The smallest TP x PP layout on one GPU that reaches a target concurrency. The planner of
one layout is passed in (``plan_fit`` passes its own), so this module imports no planner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..core.errors import KvplanError
from .fit_types import FitRequest, FitResult

SEARCH_TP = (1, 2, 4, 8)
SEARCH_PP = (1, 2, 3, 4, 6, 8)


def smallest_layout(req: FitRequest, target: int, plan_one: Callable[[FitRequest], FitResult]
                    ) -> FitResult | None:
    """The plan of the smallest TP (then PP) on this GPU that reaches ``target`` sequences;
    None when none does. ``plan_one`` plans one layout."""
    options = sorted(((tp, pp) for tp in SEARCH_TP for pp in SEARCH_PP), key=lambda x: (x[0] * x[1], x[1]))
    if req.weight_memory_bytes is not None:
        return None  # a given per-GPU weight figure says nothing about other layouts
    for tp, pp in options:
        if (tp, pp) == (req.tp, req.pp):
            continue
        try:
            r = plan_one(replace(req, tp=tp, pp=pp, search=False))
        except KvplanError:
            continue
        if r.fits and r.max_concurrency >= target:
            return r
    return None
