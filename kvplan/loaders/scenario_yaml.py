"""Scenario YAML (``kvplan: 1``) -> ``kvplan.core.scenario_spec.Scenario``.

Pydantic models with ``extra="forbid"``; every problem in the file is reported at once, one
``file:line: field: message`` line each, an unknown key with the closest valid one. Token
counts take ``32k``-style suffixes (k = 1024), sizes ``512GiB`` / ``4TB``, bandwidths
``25GB/s`` (or a number of bytes per second). The trace file is read relative to the scenario.
"""

from __future__ import annotations

import re
import typing
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..core.errors import InputError, ScenarioError
from ..core.scenario_spec import SEARCH_PP, SEARCH_TP, Extras, Hardware, Scenario, Serving, Slo, Tier
from ..core.suggest import close_matches
from ..core.units import parse_bytes, parse_tokens
from ..core.workload import KINDS, Dist, Workload, fixed, lognormal_from_percentiles
from .trace import read_trace
from .yaml_file import error_lines, problem_line, read_yaml

VERSION = 1


def _tokens(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected a token count")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        n = parse_tokens(v)
    else:
        raise ValueError("expected a token count such as 4096 or 32k")
    if n < 0:
        raise ValueError(f"must be >= 0, got {n}")
    return n


def _positive_tokens(v: Any) -> int:
    n = _tokens(v)
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def _real(v: Any) -> float:
    """A number (not a YAML boolean such as yes/on/true, which pydantic would take as 1)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number (got {v!r})")
    return float(v)


def _nodes(v: Any) -> int | None:
    if v == "search":
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"expected a positive number of nodes or \"search\" (got {v!r})")
    return v


def _size(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError("expected a size such as 512GiB, 4TB or a byte count")
    return parse_bytes(str(v))


def _bandwidth(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a bandwidth such as 25GB/s")
    if isinstance(v, (int, float)):
        if v <= 0:
            raise ValueError(f"must be positive, got {v}")
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if not s.lower().endswith("/s"):
            raise ValueError(f"{v!r}: write a bandwidth with /s, e.g. 25GB/s")
        bw = float(parse_bytes(s[:-2]))
        if bw <= 0:
            raise ValueError(f"{v!r} rounds to 0 bytes per second")
        return bw
    raise ValueError("expected a bandwidth such as 25GB/s")


PCT = re.compile(r"^p(\d+(?:\.\d+)?)$")


def _length(v: Any) -> Dist:
    """A prompt or output length: every draw at least 1 token."""
    d = _dist(v)
    if d.kind in ("fixed", "uniform") and d.a < 1:
        raise ValueError(f"lengths are at least 1 token (got {int(d.a)})")
    if d.hi is not None and d.hi < 1:
        raise ValueError(f"lengths are at least 1 token (max {d.hi})")
    return replace(d, lo=max(d.lo, 1))


def _dist(v: Any) -> Dist:
    """4096 | 32k | {fixed: N} | {uniform: {min, max}} | {normal: {mean, std}} |
    {lognormal: {p50: A, p95: B}}, with optional ``min`` / ``max`` clips beside the kind."""
    if v is None:
        raise ValueError("expected a length or a distribution")
    if not isinstance(v, dict):
        return fixed(_tokens(v))
    kinds = [k for k in v if k in KINDS]
    extra = [k for k in v if k not in KINDS and k not in ("min", "max")]
    if len(kinds) != 1 or extra:
        bad = f" (unknown key {extra[0]!r}{_hint(extra[0], KINDS + ('min', 'max'))})" if extra else ""
        raise ValueError(f"a distribution is one of {', '.join(KINDS)} (with optional min/max)"
                         + bad)
    kind = kinds[0]
    lo = _tokens(v["min"]) if "min" in v else 0
    hi = _tokens(v["max"]) if "max" in v else None
    if hi is not None and hi < lo:
        raise ValueError(f"max {hi} is below min {lo}")
    body = v[kind]
    if kind == "fixed":
        n = _tokens(body)
        return Dist("fixed", n, lo=lo, hi=hi, text=f"{n:,}")
    if not isinstance(body, dict):
        raise ValueError(f"{kind} takes a mapping, e.g. " + {
            "uniform": "{uniform: {min: 100, max: 2000}}", "normal": "{normal: {mean: 800, std: 200}}",
            "lognormal": "{lognormal: {p50: 800, p95: 4000}}"}[kind])
    if kind == "uniform":
        _keys(body, ("min", "max"), kind)
        a, b = _tokens(body["min"]), _tokens(body["max"])
        if b < a:
            raise ValueError(f"uniform max {b} is below min {a}")
        return Dist("uniform", a, b, lo=lo, hi=hi, text=f"uniform {a:,}..{b:,}")
    if kind == "normal":
        _keys(body, ("mean", "std"), kind)
        mean, std = _number(body["mean"], "mean"), _number(body["std"], "std")
        if mean <= 0 or std < 0:
            raise ValueError("normal needs mean > 0 and std >= 0")
        return Dist("normal", mean, std, lo=max(lo, 1), hi=hi, text=f"normal mean {mean:g}, std {std:g}")
    pcts = []
    for k, x in body.items():
        m = PCT.match(str(k))
        if not m:
            raise ValueError(f"lognormal takes two percentiles such as p50 and p95, not {k!r}")
        q = float(m.group(1))
        if not 0 < q < 100:
            raise ValueError(f"percentile {k} is outside (0, 100)")
        pcts.append((q, _number(x, str(k))))
    if len(pcts) != 2:
        raise ValueError("lognormal takes exactly two percentiles, e.g. {p50: 800, p95: 4000}")
    (q1, x1), (q2, x2) = sorted(pcts)
    if q1 == q2 or not 0 < x1 < x2:
        raise ValueError("lognormal percentiles must rise: the higher percentile needs the "
                         "larger value, both > 0")
    d = lognormal_from_percentiles(q1, x1, q2, x2)
    return Dist("lognormal", d.a, d.b, lo=max(lo, 1), hi=hi,
                text=f"lognormal p{q1:g} {x1:g}, p{q2:g} {x2:g}")


def _keys(body: dict, want: tuple[str, ...], kind: str) -> None:
    for k in body:
        if k not in want:
            raise ValueError(f"{kind}: unknown key {k!r}{_hint(str(k), want)}")
    for k in want:
        if k not in body:
            raise ValueError(f"{kind} needs {' and '.join(want)}")


def _number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{name} must be a number")
    return float(_tokens(v)) if isinstance(v, str) else float(v)


def _hint(word: str, options) -> str:
    options = list(options)
    close = close_matches(word, options, n=1)
    if not close:  # e.g. "prize" -> price_usd_per_gpu_hour: match the first word of a key
        heads = {o.split("_")[0]: o for o in options}
        close = [heads[h] for h in close_matches(word, heads, n=1, cutoff=0.7)]
    return f"; did you mean {close[0]!r}?" if close else ""


def _search_ints(default: tuple[int, ...]):
    def parse(v: Any) -> tuple[int, ...]:
        if v == "search":
            return default
        items = v if isinstance(v, list) else [v]
        out = []
        for x in items:
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ValueError(f"expected a positive integer, a list of them or \"search\" (got {x!r})")
            out.append(x)
        if not out:
            raise ValueError("empty list")
        return tuple(out)
    return parse


def _names(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, list) else [v]
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ValueError("expected a name or a list of names")
    return tuple(items)


Tokens = Annotated[int, BeforeValidator(_tokens)]
PosTokens = Annotated[int, BeforeValidator(_positive_tokens)]
LengthIn = Annotated[Any, BeforeValidator(_length)]
Real = BeforeValidator(_real)
Size = Annotated[int, BeforeValidator(_size)]
Bandwidth = Annotated[float, BeforeValidator(_bandwidth)]
DistIn = Annotated[Any, BeforeValidator(_dist)]
Names = Annotated[Any, BeforeValidator(_names)]
PosInt = Annotated[int, Field(strict=True, gt=0)]
Fraction01 = Annotated[float, Real, Field(gt=0, le=1)]
PosReal = Annotated[float, Real, Field(gt=0, allow_inf_nan=False)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DraftIn(_M):
    model: str
    speculative_tokens: PosInt


class HardwareIn(_M):
    gpu: Names
    gpus_per_node: PosInt = 8
    nodes: Annotated[Any, BeforeValidator(_nodes)] = None
    price_usd_per_gpu_hour: PosReal | dict[str, PosReal] | None = None


class ServingIn(_M):
    engine: Names = ("vllm",)
    tp: Annotated[Any, BeforeValidator(_search_ints(SEARCH_TP))] = (1,)
    pp: Annotated[Any, BeforeValidator(_search_ints(SEARCH_PP))] = (1,)
    kv_dtype: Names = ("auto",)
    weight_dtype: str | None = None
    block_size: PosInt | None = None
    gpu_memory_utilization: Fraction01 | None = None
    max_num_batched_tokens: PosTokens | None = None
    max_num_seqs: PosInt | None = None
    max_model_len: PosTokens | None = None
    allow_emulated: Annotated[bool, Field(strict=True)] = False
    kv_cache_memory: Size | None = None  # vLLM --kv-cache-memory-bytes: a pool of exactly this size


class WorkloadIn(_M):
    request_rate: PosReal | None = None
    concurrent_requests: PosInt | None = None
    prompt_tokens: LengthIn | None = None
    output_tokens: LengthIn | None = None
    trace: str | None = None
    shared_prefix_tokens: Tokens = 0
    prefix_cache_hit_rate: Annotated[float, Real, Field(ge=0, lt=1)] = 0.0
    turns: PosInt = 1
    tokens_per_turn: LengthIn | None = None
    thinking_tokens: DistIn | None = None
    images_per_request: Annotated[int, Field(strict=True, ge=0)] = 0
    tokens_per_image: Annotated[int, Field(strict=True, ge=0)] = 0


class SloIn(_M):
    ttft_ms: PosReal | None = None
    tpot_ms: PosReal | None = None
    percentile: Annotated[float, Real, Field(gt=0, le=100)] = 95.0


class TierIn(_M):
    bytes: Size
    bandwidth: Bandwidth


class OffloadIn(_M):
    cpu: TierIn | None = None
    nvme: TierIn | None = None


class PreemptionIn(_M):
    mode: Literal["recompute", "swap"]


class DisaggregatedIn(_M):
    link_bandwidth: Bandwidth


class ScenarioIn(_M):
    kvplan: Literal[1]
    name: str | None = None
    description: str | None = None
    model: str
    draft_model: DraftIn | None = None
    hardware: HardwareIn
    serving: ServingIn = ServingIn()
    workload: WorkloadIn
    slo: SloIn = SloIn()
    offload: OffloadIn | None = None
    preemption: PreemptionIn | None = None
    disaggregated: DisaggregatedIn | None = None
    samples: PosInt = 10_000
    seed: Annotated[int, Field(strict=True, ge=0)] = 0


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model whose fields sit at ``loc`` (for unknown-key suggestions)."""
    cls: type[BaseModel] = ScenarioIn
    for part in loc:
        f = cls.model_fields.get(str(part))
        if f is None:
            return None
        nxt = [a for a in typing.get_args(f.annotation) or (f.annotation,)
               if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nxt:
            return None
        cls = nxt[0]
    return cls


def _suggest(loc: tuple, kind: str) -> str:
    if kind != "extra_forbidden" or not loc:
        return ""
    cls = _model_at(loc[:-1])
    return _hint(str(loc[-1]), list(cls.model_fields)) if cls else ""


def _cross_checks(raw: dict, locate, path: Path) -> list[str]:
    """Rules between fields, checked on the raw document so they join pydantic's errors."""
    out = []

    def add(loc: tuple, msg: str) -> None:
        out.append(problem_line(path, locate, loc, msg))

    w = raw.get("workload")
    if isinstance(w, dict):
        w = {k: v for k, v in w.items() if v is not None}  # an explicit null is no value
        rate, conc = "request_rate" in w, "concurrent_requests" in w
        if rate == conc:
            add(("workload",), "give exactly one of request_rate (requests/s) or concurrent_requests")
        if "trace" in w:
            for k in ("prompt_tokens", "output_tokens"):
                if k in w:
                    add(("workload", k), "a trace gives the lengths; drop this or the trace")
            if w.get("turns", 1) != 1:
                add(("workload", "turns"), "a trace holds whole requests: turns must be 1")
        else:
            for k in ("prompt_tokens", "output_tokens"):
                if k not in w:
                    add(("workload", k), "missing required field (or give a trace: file.jsonl)")
        if w.get("shared_prefix_tokens") and w.get("prefix_cache_hit_rate"):
            add(("workload", "prefix_cache_hit_rate"), "give shared_prefix_tokens or "
                "prefix_cache_hit_rate, not both (the hit rate is the alternative)")
        if "tokens_per_turn" in w and w.get("turns", 1) == 1:
            add(("workload", "tokens_per_turn"), "needs turns > 1")
        if w.get("turns", 1) != 1 and "tokens_per_turn" not in w:
            add(("workload", "tokens_per_turn"), "turns > 1 need the user tokens each later turn adds")
        if w.get("images_per_request") and not w.get("tokens_per_image"):
            add(("workload", "tokens_per_image"), "images_per_request needs tokens_per_image")
    h: dict = raw["hardware"] if isinstance(raw.get("hardware"), dict) else {}
    gpus = h.get("gpu")
    if isinstance(h.get("price_usd_per_gpu_hour"), (int, float)) and isinstance(gpus, list) and len(gpus) > 1:
        add(("hardware", "price_usd_per_gpu_hour"), "one price for several GPUs: give one per GPU, "
            "e.g. {h100: 2.5, l4: 0.8}")
    s = raw.get("slo")
    if isinstance(s, dict) and "ttft_ms" not in s and "tpot_ms" not in s:
        add(("slo",), "give ttft_ms and/or tpot_ms (or leave slo out)")
    return out


def load_scenario(path: Path) -> Scenario:
    raw, locate = read_yaml(path, InputError)
    if not isinstance(raw, dict):
        raise ScenarioError([f"{path}: a scenario is a YAML mapping (start with `kvplan: 1`)"])
    if "kvplan" in raw and raw["kvplan"] != VERSION:
        raise ScenarioError([f"{path}:{locate(('kvplan',))}: kvplan: scenario version "
                             f"{raw['kvplan']!r} is not supported; this kvplan reads version {VERSION}"])
    problems = _cross_checks(raw, locate, path)
    doc = None
    try:
        doc = ScenarioIn.model_validate(raw)
    except ValidationError as e:
        problems = error_lines(e, path, locate, _suggest) + problems
    trace = None
    base = path.parent
    tr = (raw.get("workload") or {}).get("trace") if isinstance(raw.get("workload"), dict) else None
    if isinstance(tr, str):
        try:
            trace = read_trace(base / tr)
        except ScenarioError as e:
            problems += e.problems
        except InputError as e:  # an unreadable trace
            problems.append(f"{path}:{locate(('workload', 'trace'))}: workload.trace: {e}")
    names: dict[str, Any] = {}
    if doc is not None:
        problems += _check_names(doc, path, locate, names)
    if problems or doc is None:
        raise ScenarioError(sorted(problems, key=_line_of))
    return _convert(doc, path, trace, names)


def _local(name: str, base: Path) -> str:
    """A path written relative to the scenario file, made absolute; names stay names."""
    p = base / Path(name).expanduser()
    return str(p.resolve()) if p.exists() else name


def _check_names(doc: ScenarioIn, path: Path, locate, names: dict[str, Any]) -> list[str]:
    """Engines, KV formats, weight dtype, GPUs and models resolve now, so a typo is one line
    at its key like any other problem (Hub models are fetched when planned)."""
    from ..core.errors import KvplanError
    from ..core.formats import parse_format
    from ..engines import get_engine
    from .hardware import load_gpu
    from .quant_config import CLI_FORMATS, normalize_weight_dtype
    from .resolve import HUB_ID, load_model

    out: list[str] = []
    base = path.parent

    def add(loc: tuple, msg: str) -> None:
        out.append(problem_line(path, locate, loc, msg))

    for e in doc.serving.engine:
        try:
            get_engine(e)
        except KvplanError as err:
            add(("serving", "engine"), err.detail)
    for kv in doc.serving.kv_dtype:
        if kv.strip().lower() != "auto":
            try:
                parse_format(kv)
            except KvplanError as err:
                add(("serving", "kv_dtype"), err.detail)
    wd = doc.serving.weight_dtype
    if wd is not None:
        if normalize_weight_dtype(wd) not in CLI_FORMATS:
            add(("serving", "weight_dtype"), f"unknown weight dtype {wd!r}; use {', '.join(CLI_FORMATS)}")
    gpus = []
    for g in doc.hardware.gpu:
        g2 = _local(g, base) if g.endswith((".yaml", ".yml")) else g
        try:
            gpus.append(load_gpu(g2).key if g2 == g else g2)
        except KvplanError as err:
            add(("hardware", "gpu"), err.detail)
    names["gpus"] = tuple(gpus)
    price = doc.hardware.price_usd_per_gpu_hour
    if isinstance(price, dict):
        resolved = set()
        for g in gpus:
            try:
                resolved.add(load_gpu(g).key)
            except KvplanError:
                pass
        keys = {}
        for k in price:
            if k in resolved:  # the key of a GPU in the list (also one from a spec file)
                keys[k] = price[k]
                continue
            try:
                keys[load_gpu(_local(k, base) if k.endswith((".yaml", ".yml")) else k).key] = price[k]
            except KvplanError as err:
                add(("hardware", "price_usd_per_gpu_hour", k), err.detail)
        for missing in sorted(resolved - set(keys)):
            add(("hardware", "price_usd_per_gpu_hour"), f"no price for {missing}")
        names["prices"] = keys
    draft = doc.draft_model.model if doc.draft_model else None
    for key, value in (("model", doc.model), ("draft_model", draft)):
        if value is None:
            continue
        v = _local(value, base)
        names[key] = v
        if v == value and HUB_ID.match(value) and not Path(value).exists():
            from .builtins import find

            if find(value) is None:
                continue  # a Hub id: fetched (or found in the cache) when planned
        where = (key,) if key == "model" else (key, "model")
        try:
            m = load_model(v)
        except KvplanError as err:
            add(where, err.detail)
            continue
        try:  # the parameter inventory and weight format are needed to plan it
            from .hf_params import weight_inventory
            from .quant_config import weight_format

            weight_inventory(m)
            weight_format(m, wd)
        except KvplanError as err:
            add(where if "weight dtype" not in err.detail else ("serving", "weight_dtype"),
                err.detail.replace("pass --weight-memory", "kvplan plan needs a parameter count "
                                   "(use `kvplan fit --weight-memory` for this model)"))
    return out


def _line_of(problem: str) -> tuple[str, int]:
    m = re.match(r"^(.*?):(\d+): ", problem)
    return (m.group(1), int(m.group(2))) if m else (problem.split(":")[0], 0)


def _convert(d: ScenarioIn, path: Path, trace, names: dict[str, Any]) -> Scenario:
    w = d.workload
    wl = Workload(
        prompt=w.prompt_tokens, output=w.output_tokens, trace=trace,
        trace_name=w.trace or "", shared_prefix_tokens=w.shared_prefix_tokens,
        prefix_cache_hit_rate=w.prefix_cache_hit_rate, turns=w.turns,
        tokens_per_turn=w.tokens_per_turn, thinking=w.thinking_tokens,
        images_per_request=w.images_per_request, tokens_per_image=w.tokens_per_image,
        request_rate_per_s=w.request_rate, concurrent_requests=w.concurrent_requests)
    s = d.serving
    serving = Serving(engines=s.engine, tps=s.tp, pps=s.pp, kv_dtypes=s.kv_dtype,
                      weight_dtype=s.weight_dtype, block_size_tokens=s.block_size,
                      utilization=s.gpu_memory_utilization,
                      max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs,
                      max_model_len=s.max_model_len, kv_cache_memory_bytes=s.kv_cache_memory,
                      allow_emulated=s.allow_emulated)
    h = d.hardware
    price = h.price_usd_per_gpu_hour
    hw = Hardware(gpus=names["gpus"], gpus_per_node=h.gpus_per_node, nodes=h.nodes,
                  price_usd_per_gpu_hour=price if not isinstance(price, dict) else None,
                  prices_usd_per_gpu_hour=names.get("prices", {}))
    slo = Slo(ttft_s=d.slo.ttft_ms / 1e3 if d.slo.ttft_ms else None,
              tpot_s=d.slo.tpot_ms / 1e3 if d.slo.tpot_ms else None, percentile=d.slo.percentile)
    off = d.offload or OffloadIn()

    def tier(t: TierIn | None) -> Tier | None:
        return Tier(t.bytes, t.bandwidth) if t else None

    extras = Extras(cpu=tier(off.cpu), nvme=tier(off.nvme),
                    preemption=d.preemption.mode if d.preemption else None,
                    disagg_link_bytes_per_s=d.disaggregated.link_bandwidth if d.disaggregated else None)
    return Scenario(
        path=str(path), name=d.name or path.stem, model=names["model"], hardware=hw, serving=serving,
        workload=wl, slo=slo, extras=extras,
        draft_model=names.get("draft_model"),
        speculative_tokens=d.draft_model.speculative_tokens if d.draft_model else 0,
        samples=d.samples, seed=d.seed)
