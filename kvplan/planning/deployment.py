"""Loading and planning for the curve and sweep commands: resolve the model and GPUs, plan
each (GPU, KV format) with ``plan_fit`` and build its performance model. Sits above the
loaders; the math is in ``kvplan.planning.fit``, ``kvplan.core.perf`` and ``kvplan.planning.curve``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.gpu import GpuSpec
from ..core.parallel import layout_words
from ..core.perf import Efficiency, StepModel
from ..core.units import format_tokens, parse_tokens
from .curve import Series, series
from .fit import plan_fit
from .fit_types import FitRequest, FitResult
from .model_limits import ALLOW_FLAG, check_context, limit_words, over_limit
from .perf_model import step_model


@dataclass(frozen=True)
class CurveResult:
    title: str
    series: tuple[Series, ...]
    plans: tuple[FitResult, ...]
    efficiencies: tuple[Efficiency, ...]
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...] = ()  # the model's (read from its config)
    assumed_standard_attention: bool = False


def spec_efficiency(gpu: GpuSpec) -> Efficiency:
    """kvplan's defaults, with whatever the GPU YAML's ``efficiency`` block sets."""
    e = gpu.efficiency
    if not e:
        return Efficiency()
    d = Efficiency()
    return Efficiency(
        hbm_bandwidth=float(e.get("hbm_bandwidth", d.hbm_bandwidth)),  # type: ignore[arg-type]
        flops=float(e.get("flops", d.flops)),  # type: ignore[arg-type]
        interconnect=float(e.get("interconnect", d.interconnect)),  # type: ignore[arg-type]
        allreduce_latency_s=float(e.get("allreduce_latency_us", d.allreduce_latency_s * 1e6))  # type: ignore[arg-type]
        / 1e6, source=f"{gpu.source}: {e.get('source')}")


def efficiency_for(gpu: GpuSpec, hbm: float | None, flops: float | None,
                   engine: str | None = None, sparse_indexer: bool = False) -> Efficiency:
    """The serving calibration for (GPU, engine) (``calibrations/``), else a calibration
    harness run for the GPU, else kvplan's defaults with the GPU YAML's overrides, labelled
    uncalibrated; ``hbm``/``flops`` given by the user replace those two terms. A model with
    lightning indexers (``sparse_indexer``) takes the indexer's fitted fixed cost with a
    calibrated figure, and the label says which (or that none is shipped)."""
    from ..loaders.calibration import measured_efficiency
    from ..loaders.serving_calibration import cross_domain_latency, indexer_overhead, serving_calibration

    engine = engine.partition("@")[0] if engine else engine  # a release plans with its
    # engine's calibration, whose label names the releases it was fitted on
    own = serving_calibration(gpu.key, engine) if engine else None
    if own is None and engine and gpu.calibration_from:
        other = serving_calibration(gpu.calibration_from, engine)
        if other is not None:  # the same silicon in another system: its fit, said so
            own = replace(other, source=f"{other.source}, transferred to {gpu.key}: "
                          f"{gpu.calibration_from_note}")
    base = own or measured_efficiency(gpu.key) or spec_efficiency(gpu)
    cross = cross_domain_latency() if base.calibrated else None
    if cross is not None:  # only calibrated figures take it: the roofline has no latencies
        base = replace(base, cross_domain_latency_s=cross[0], source=f"{base.source}; {cross[1]}")
    if sparse_indexer and base.calibrated:
        index = indexer_overhead()
        if index is not None:
            base = replace(base, indexer_overhead_s=index[0], source=f"{base.source}; {index[1]}")
        else:
            base = replace(base, source=f"{base.source}; the indexer's fixed cost per layer is "
                           "not calibrated (no indexer/overhead.json): time figures optimistic")
    if not base.calibrated:
        base = replace(base, source=f"{base.source}; uncalibrated: no serving calibration for "
                       f"{gpu.key}{' ' + engine if engine else ''}, so time figures are the "
                       "roofline (optimistic against measured serving)")
    if hbm is not None or flops is not None:
        base = replace(base, hbm_bandwidth=hbm if hbm is not None else base.hbm_bandwidth,
                       flops=flops if flops is not None else base.flops, source="given")
    return base


def plan(model, gpu: GpuSpec, *, kv_dtype: str, weight_dtype: str | None, engine: str, tp: int,
         pp: int, context_tokens: int, efficiency: Efficiency, weights=None,
         allow_long_max_model_len: bool = False, dp: int = 1,
         ep: int = 1) -> tuple[FitResult, StepModel]:
    """Plan one configuration (``dp`` attention data-parallel ranks of tp x pp GPUs, routed
    experts over ``ep`` GPUs of a stage; a layout the engine refuses raises like ``kvplan
    fit``); ``weights`` (the model's inventory) may be passed in when the same model is planned
    many times (a sweep)."""
    from ..loaders.hf_params import weight_inventory
    from ..loaders.quant_config import weight_format

    req = FitRequest(model=model, weights=weights or weight_inventory(model),
                     weight_format=weight_format(model, weight_dtype), gpu=gpu, engine=engine,
                     tp=tp, pp=pp, dp=dp, ep=ep, kv_dtype=kv_dtype,
                     context_tokens=context_tokens, search=False,
                     allow_emulated=False, allow_long_max_model_len=allow_long_max_model_len)
    r = plan_fit(req)
    return r, step_model(r, efficiency)


def build_series(model_name: str, *, gpus: list[str], kv_dtypes: list[str],
                 weight_dtype: str | None, engine: str, tp: int, pp: int, x: str, y: str,
                 xs: list[int], context: str, batch: int | None, price: float | None,
                 hbm_efficiency: float | None, flops_efficiency: float | None,
                 assume_standard_attention: bool = False,
                 allow_long_max_model_len: bool = False, dp: int = 1,
                 ep: int = 1) -> CurveResult:
    """The series of one model over GPUs x KV formats. Along context or position, points past
    the model's context limit are left out (and said so) unless ``allow_long_max_model_len``;
    a --context past it for the batch axis is refused like ``kvplan fit``. With ``dp`` > 1
    the batch and concurrency are one DP rank's, throughput and cost the deployment's
    (tp x pp x dp GPUs, ``kvplan.planning.curve``)."""
    from ..core.errors import InputError
    from ..loaders.hardware import load_gpu
    from ..loaders.resolve import load_model

    m = load_model(model_name, assume_standard_attention=assume_standard_attention)
    try:
        ctx = parse_tokens(context)
    except ValueError as e:
        raise InputError(str(e), field="--context") from None
    warnings = list(m.warnings)
    if x != "batch" and not allow_long_max_model_len and over_limit(m, max(xs)):
        kept = [n for n in xs if not over_limit(m, n)]
        if not kept:
            check_context(m, min(xs), False, "--points")
        warnings.append(f"points past {limit_words(m)} left out: "
                        + ", ".join(f"{n:,}" for n in xs if n not in kept)
                        + f"; pass {ALLOW_FLAG} to plan them")
        xs = kept
    max_len = ctx if x == "batch" else max(xs)
    out, plans, effs = [], [], []
    for g in gpus:
        spec = load_gpu(g)
        eff = efficiency_for(spec, hbm_efficiency, flops_efficiency, engine, m.lightning_indexers)
        for kv in kv_dtypes:
            r, sm = plan(m, spec, kv_dtype=kv, weight_dtype=weight_dtype, engine=engine, tp=tp,
                         pp=pp, context_tokens=max_len, efficiency=eff,
                         allow_long_max_model_len=allow_long_max_model_len, dp=dp, ep=ep)
            # every GPU of the deployment: tp x pp per DP rank, dp ranks
            hourly = (price if price is not None else spec.price_usd_per_gpu_hour) * tp * pp * dp
            label = f"{spec.key} {r.kv_format}" if len(gpus) > 1 else r.kv_format
            if len(kv_dtypes) == 1 and len(gpus) > 1:
                label = spec.key
            out.append(series(label, r, sm, x=x, y=y, xs=xs, context_tokens=ctx, batch=batch,
                              price_usd_per_hour=hourly))
            plans.append(r)
            effs.append(eff)
    along = (f"context {format_tokens(ctx)}" if x == "batch" else
             f"{x} {format_tokens(min(xs))}-{format_tokens(max(xs))}")
    title = (f"{m.name} on {', '.join(dict.fromkeys(r.request.gpu.key for r in plans))}, "
             f"{layout_words(tp, pp, dp, ep)}, engine {plans[0].layout.label}, weights "
             f"{plans[0].request.weight_format.name}, KV "
             f"{', '.join(dict.fromkeys(r.kv_format for r in plans))}, {along}"
             + ("; batch and concurrency per DP rank, throughput and cost for all "
                f"{dp} ranks" if dp > 1 else ""))
    for s, r in zip(out, plans, strict=True):
        if all(p.concurrency == 0 for p in s.points):
            warnings.append(f"{s.label}: nothing fits at any point ({r.verdict}); the smallest "
                            "layout is what `kvplan fit --concurrency 1` suggests")
    return CurveResult(title, tuple(out), tuple(plans), tuple(effs), tuple(warnings),
                       m.assumptions, m.standard_attention_assumed)
