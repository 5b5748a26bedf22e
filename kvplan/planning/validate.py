"""``kvplan validate``: re-predict every case of measured calibration runs
(``calibrate/runs/*.json``, schema in ``calibrate/runs_io.py``, read by
``kvplan.loaders.run_files``) with the current code.

Footprint cases must match to the byte; timing cases are judged against their recorded
tolerance (none = informational). The predictions live here, in kvplan, so the harness and the
regression check use one definition: ``footprint_prediction`` and ``decode_prediction``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from ..core.errors import KvplanError
from ..loaders.run_files import RunFileError, load_run


@dataclass(frozen=True)
class Verdict:
    run: str
    case: str
    kind: str
    predicted: float | None
    measured: float | None
    error: float | None  # relative
    tolerance: float | None
    ok: bool | None  # None: informational
    unit: str


MAX_INPUT = 10**12  # any count in a case's inputs (tokens, blocks, sequences, widths)


def _count(inputs: dict, key: str, default: int | None = None, minimum: int = 1) -> int:
    """An integer input of a case, range-checked before any work (a string or a huge value
    would otherwise multiply into a string or a number of unbounded size)."""
    value = inputs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INPUT:
        raise ValueError(f"inputs.{key} must be an integer from {minimum} to {MAX_INPUT:,}, "
                         f"got {str(value)[:40]!r}")
    return value


def _rate(inputs: dict, key: str) -> float:
    """A positive, finite number input (a measured rate)."""
    value = inputs.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e30:
        raise ValueError(f"inputs.{key} must be a positive finite number, got {str(value)[:40]!r}")
    return float(value)


def _name(inputs: dict, key: str, default: str | None = None) -> str:
    value = inputs.get(key, default)
    if not isinstance(value, str) or not value:
        raise ValueError(f"inputs.{key} must be a non-empty string, got {str(value)[:40]!r}")
    return value


def footprint_prediction(inputs: dict) -> int:
    """kvplan's bytes for a footprint case on rank 0: pages x blocks + states x sequences, or,
    with ``context_tokens``, one sequence's bytes at that context (vLLM layout)."""
    from ..loaders.resolve import load_model
    from .footprint import kv_footprint

    if not isinstance(inputs, dict):
        raise ValueError("inputs must be an object")
    m = load_model(_name(inputs, "model"))
    block = _count(inputs, "block_size_tokens")
    ctx = _count(inputs, "context_tokens") if inputs.get("context_tokens") is not None else None
    fp = kv_footprint(m, (ctx or block,), kv_dtype=_name(inputs, "kv_dtype", "auto"),
                      tp=_count(inputs, "tp", 1), block_size_tokens=block, engine="vllm")
    if ctx:
        return fp.sequences[0].per_gpu_bytes
    seqs, blocks = _count(inputs, "num_seqs", minimum=0), _count(inputs, "num_blocks", minimum=0)
    total = Fraction(0)
    for layer in fp.layer_costs:
        for c in layer:
            if c.state_bytes_per_rank:
                total += c.state_bytes_per_rank * seqs
            else:
                total += c.rank_bytes_for_tokens(block) * blocks
    return int(total)


def decode_prediction(i: dict) -> float:
    """The performance model's step time for a synthetic decode-step case."""
    from ..core.perf import Efficiency, KvRead, StepModel, decode_step

    if not isinstance(i, dict):
        raise ValueError("inputs must be an object")
    i = {**i, **{k: _count(i, k) for k in ("hidden", "heads", "kv_heads", "layers",
                                            "intermediate", "element_bytes", "batch", "context")},
         **{k: _rate(i, k) for k in ("copy_bytes_per_s", "flops_per_s")}}
    hd = i["hidden"] // i["heads"]
    e = i["element_bytes"]
    params = i["layers"] * (i["hidden"] * (i["heads"] + 2 * i["kv_heads"]) * hd
                            + i["heads"] * hd * i["hidden"] + 3 * i["hidden"] * i["intermediate"])
    model = StepModel(weight_bytes=params * e, expert_bytes=0.0, moe_layers=0, num_experts=0,
                      top_k=0, kv_reads=(KvRead(2.0 * i["layers"] * i["kv_heads"] * hd * e),),
                      state_bytes=0.0, flops_per_token=2.0 * params,
                      attn_flops=(KvRead(2.0 * i["layers"] * i["heads"] * 2 * hd),),
                      hidden_size=i["hidden"], layers=i["layers"], tp=1, pp=1,
                      hbm_bytes_per_s=i["copy_bytes_per_s"], flops_per_s=i["flops_per_s"],
                      link_bytes_per_s=1.0,
                      efficiency=Efficiency(hbm_bandwidth=1.0, flops=1.0, source="measured ceilings"))
    return float(decode_step(model, i["batch"], i["context"]).seconds)


def _case(run: str, c: dict, path: Path) -> Verdict | None:
    try:
        kind = c["kind"]
        if kind == "footprint":
            bytes_predicted = footprint_prediction(c["inputs"])
            bytes_measured = int(c["measured_bytes"])
            err = ((bytes_predicted - bytes_measured) / bytes_measured if bytes_measured
                   else float(bytes_predicted != 0))
            return Verdict(run, c["id"], kind, bytes_predicted, bytes_measured, err, 0.0,
                           bytes_predicted == bytes_measured, "B")
        if kind == "decode_step":
            predicted = decode_prediction(c["inputs"])
            measured = float(c["measured_seconds"])
            if not measured > 0:
                raise ValueError(f"measured_seconds must be positive, got {measured}")
            err = (predicted - measured) / measured
            tol = c.get("tolerance")
            return Verdict(run, c["id"], kind, predicted, measured, err, tol,
                           None if tol is None else abs(err) <= tol, "s")
        if kind == "bandwidth":
            rate = c["bytes_per_s"] if "bytes_per_s" in c else c["bus_bytes_per_s"]
            return Verdict(run, c["id"], kind, None, float(rate), None, None, None, "B/s")
    except KvplanError as e:
        raise RunFileError(f"case {c.get('id')!r}: {e}", source=str(path)) from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as e:
        raise RunFileError(f"case {c.get('id', '?')!r} is malformed ({type(e).__name__}: {e})",
                           source=str(path), field="cases") from None
    raise RunFileError(f"case {c.get('id')!r} has unknown kind {kind!r}", source=str(path),
                       field="cases")


def validate(paths: list[Path]) -> list[Verdict]:
    out: list[Verdict] = []
    for path in paths:
        doc = load_run(path)
        dist = doc.get("distributed") or {}
        if not isinstance(dist, dict) or not isinstance(dist.get("cases", []), list) \
                or not isinstance(doc.get("cases"), list):
            raise RunFileError("cases and distributed.cases must be lists of objects",
                               source=str(path), field="cases")
        cases = list(doc["cases"]) + list(dist.get("cases", []))
        for c in cases:
            if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                raise RunFileError("a case is not an object with a string id", source=str(path),
                                   field="cases")
            v = _case(path.name, c, path)
            if v is not None:
                out.append(v)
    return out
