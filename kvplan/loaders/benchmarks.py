"""Measured serving benchmarks -> ``MeasuredRun`` rows, from the files people already have:

- ``vllm bench serve --save-result`` JSON (and the older ``benchmark_serving.py`` JSON): one
  run per file. It does not record the GPU or the parallelism: pass them when benchmarking
  (``--metadata gpu=h200-sxm tp=8``, saved into the file) or to kvplan (``--meta gpu=...``).
- SGLang ``bench_serving`` JSONL (``--output-file``): one run per line, the same fields.
- AIConfigurator's silicon CSV (``silicon_sample.csv`` of the ``aiconfigurator-core`` wheel,
  Apache-2.0): one run per row, TTFT and TPOT measured, no KV dtype and no throughput.
- kvplan CSV (docs/benchmarks.md): ``model, gpu, engine, engine_version, tp, pp,
  weight_dtype, kv_dtype, prompt_tokens, output_tokens, concurrency, num_prompts, ttft_ms,
  tpot_ms, output_tokens_per_s, group, tolerance`` (``tolerance``: the |error| allowed on
  each measured value of the row; past it, ``kvplan validate`` exits 1).

A row that cannot be read is a ``RowProblem`` naming the file, row and field; the other rows
are still read. A file that is no benchmark at all is one ``BenchmarkFileError``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from dataclasses import fields
from pathlib import Path

from ..core.benchmark import MeasuredRun, RowProblem
from ..core.errors import KvplanError

MAX_FILE_BYTES = 64 * 2**20
MAX_ROWS = 200_000
META_KEYS = ("model", "gpu", "engine", "engine_version", "tp", "pp", "weight_dtype", "kv_dtype",
             "group")
KVPLAN_COLUMNS = ("model", "gpu", "engine", "engine_version", "tp", "pp", "weight_dtype",
                  "kv_dtype", "prompt_tokens", "output_tokens", "concurrency", "num_prompts",
                  "ttft_ms", "tpot_ms", "output_tokens_per_s", "group", "tolerance")
ENGINES = ("vllm", "sglang", "trtllm")

#: AIConfigurator's system names -> kvplan GPU keys (hardware_specs/)
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
               "b300_sxm": "b300", "gb200": "gb200", "a100_sxm": "a100-80gb-sxm",
               "l40s": "l40s"}
#: AIConfigurator's quant modes -> kvplan weight dtypes (None: the checkpoint's own format)
AIC_QUANT = {"": None, "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block",
             "nvfp4": "nvfp4", "int4_wo": None}
AIC_KV_NOTE = ("silicon_sample.csv records no KV-cache dtype: predicted with the engine's "
               "default (auto: the model's dtype)")


class BenchmarkFileError(KvplanError):
    """A benchmark file that cannot be read at all, or is in no format kvplan knows."""


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        self.field, self.message = field, message


def _positive_int(value, field: str) -> int:
    text = str(value).strip()
    try:
        f = float(text)
    except ValueError:
        raise _Bad(field, f"expected a positive whole number, got {text!r}") from None
    if not math.isfinite(f) or f <= 0 or f != int(f) or f > 10**9:
        raise _Bad(field, f"expected a positive whole number, got {text!r}")
    return int(f)


def _positive(value, field: str, scale: float = 1.0) -> float:
    text = str(value).strip()
    try:
        f = float(text)
    except ValueError:
        raise _Bad(field, f"expected a positive number, got {text!r}") from None
    if not math.isfinite(f) or f <= 0 or f > 1e12:
        raise _Bad(field, f"expected a positive number, got {text!r}")
    return f * scale


def _optional(row: dict, key: str, fn, *args):
    value = row.get(key)
    if value is None or str(value).strip() == "":
        return None
    return fn(value, key, *args)


def _group(*parts: str) -> str:
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]


def _engine(value, field: str) -> str:
    e = str(value).strip().lower()
    if e not in ENGINES:
        raise _Bad(field, f"unknown engine {value!r}; use {', '.join(ENGINES)}")
    return e


DISAGG_NOTE = ("disaggregated: the prefill workers send each prompt's KV to a decode worker "
               "at the GPU's NVLink bandwidth within an NVL72 rack (GB200, GB300), else at 50 "
               "GB/s per GPU (one 400 Gb/s NIC per GPU, as HGX nodes ship)")


def _layout(r: dict, prefix: str) -> tuple[int, int, int, int]:
    """(tp, pp, dp, ep) of the ``prefix`` columns (``""``, ``prefill_`` or ``decode_``),
    checked: one placement of the stage's GPUs (the GPU spec's NVLink domain and scale-out
    link time wider ones, ``kvplan.core.perf.cross_domain_factor``)."""
    def degree(key: str) -> int:  # AIConfigurator writes 0 or nothing for "not used"
        value = (r.get(prefix + key) or "").strip()
        return 1 if value in ("", "0") else _positive_int(value, prefix + key)
    tp = _positive_int(r.get(prefix + "tp_size"), prefix + "tp_size")
    dp, ep, moe_tp = degree("attention_dp_size"), degree("moe_ep_size"), degree("moe_tp_size")
    if ep > 1 and moe_tp * ep != tp * dp:
        raise _Bad(prefix + "moe_tp_size", f"moe_tp_size x moe_ep_size = {moe_tp * ep} is not "
                   f"tp_size x attention_dp_size = {tp * dp}: not one placement of the stage's "
                   "GPUs")
    pp = _positive_int(r.get(prefix + "pp_size") or 1, prefix + "pp_size")
    return tp, pp, dp, ep


def _aic_row(r: dict, where: str) -> MeasuredRun:
    mode = r.get("mode")
    if mode not in ("agg", "disagg"):
        raise _Bad("mode", f"{mode!r}: not agg or disagg")
    system = (r.get("system") or "").strip()
    if system not in AIC_SYSTEMS:
        raise _Bad("system", f"unknown GPU {system!r} (kvplan knows "
                   f"{', '.join(sorted(AIC_SYSTEMS))})")
    model = (r.get("model_path") or "").strip()
    if not model:
        raise _Bad("model_path", "missing")
    assumptions = [AIC_KV_NOTE]
    moe_q = (r.get("moe_quant_mode") or "").strip()
    gemm_q = (r.get("gemm_quant_mode") or "").strip()
    quant = moe_q or gemm_q
    if quant not in AIC_QUANT:
        raise _Bad("moe_quant_mode", f"unknown quantisation {quant!r}")
    weight = AIC_QUANT[quant]
    if quant == "int4_wo":
        assumptions.append("int4_wo: the checkpoint's own int4 format")
    if model.startswith("openai/gpt-oss") and quant == "nvfp4":
        weight = None  # gpt-oss ships its experts in mxfp4; the fp4 runs serve that checkpoint
        assumptions.append("gpt-oss fp4: the checkpoint's own mxfp4 experts")
    if moe_q and gemm_q and moe_q != gemm_q:
        assumptions.append(f"weights {moe_q} throughout (the run used {gemm_q} GEMMs outside "
                           "the experts)")
    source = r.get("silicon_data_source") or ""
    conc = re.search(r"silicon_concurrency=(\d+)", source)
    day = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source)
    concurrency = _positive_int(conc.group(1) if conc else r.get("batch_size"), "batch_size")
    sweep = re.search(r"(workflow_run_id=\d+|source_file=[^;]+)", source)
    prefill, workers = None, (0, 1)
    if mode == "disagg":
        tp, pp, dp, ep = _layout(r, "decode_")
        prefill = _layout(r, "prefill_")
        for key in ("prefill_num_workers", "decode_num_workers"):
            if not (r.get(key) or "").strip():
                raise _Bad(key, "missing: the row does not record how many workers of each role "
                           "served its users, which decides each worker's load")
        workers = (_positive_int(r.get("prefill_num_workers"), "prefill_num_workers"),
                   _positive_int(r.get("decode_num_workers"), "decode_num_workers"))
        assumptions.append(DISAGG_NOTE)
    else:
        tp, pp, dp, ep = _layout(r, "")
    isl = _positive_int(r.get("isl"), "isl")
    osl = _positive_int(r.get("osl"), "osl")
    ttft = _positive(r.get("silicon_ttft_ms"), "silicon_ttft_ms", 1e-3)
    tpot = _positive(r.get("silicon_tpot_ms"), "silicon_tpot_ms", 1e-3)
    return MeasuredRun(
        source=where, model=model, gpu=AIC_SYSTEMS[system], engine=_engine(r.get("backend"), "backend"),
        engine_version=(r.get("backend_version") or "").strip(),
        measured_on=day.group(1) if day else "", tp=tp, pp=pp, dp=dp, ep=ep, weight_dtype=weight,
        prompt_tokens=isl, output_tokens=osl, concurrency=concurrency, ttft_s=ttft, tpot_s=tpot,
        output_tokens_per_s=concurrency * osl / (ttft + (osl - 1) * tpot),
        throughput_derived=True,
        group=_group(sweep.group(1) if sweep else source, model, system, str(r.get("backend")),
                     str(tp), quant, *((f"dp{dp}", f"ep{ep}") if dp > 1 or ep > 1 else ()),
                     *(("disagg", *map(str, prefill)) if prefill else ())),
        assumptions=tuple(assumptions), prefill=prefill, prefill_workers=workers[0],
        decode_workers=workers[1])


def _kvplan_row(r: dict, where: str) -> MeasuredRun:
    for key in ("model", "gpu"):
        if not (r.get(key) or "").strip():
            raise _Bad(key, "missing")
    conc = _optional(r, "concurrency", _positive_int)
    if conc is None:
        raise _Bad("concurrency", "missing (closed-loop runs at fixed concurrency are re-predicted)")
    ttft = _optional(r, "ttft_ms", _positive, 1e-3)
    tpot = _optional(r, "tpot_ms", _positive, 1e-3)
    tput = _optional(r, "output_tokens_per_s", _positive)
    if ttft is None and tpot is None and tput is None:
        raise _Bad("ttft_ms", "no measurement (give ttft_ms, tpot_ms or output_tokens_per_s)")
    return MeasuredRun(
        source=where, model=r["model"].strip(), gpu=r["gpu"].strip(),
        engine=_engine(r.get("engine") or "", "engine"),
        engine_version=(r.get("engine_version") or "").strip(),
        tp=_optional(r, "tp", _positive_int) or 1, pp=_optional(r, "pp", _positive_int) or 1,
        weight_dtype=(r.get("weight_dtype") or "").strip() or None,
        kv_dtype=(r.get("kv_dtype") or "").strip() or "auto",
        prompt_tokens=_positive_int(r.get("prompt_tokens"), "prompt_tokens"),
        output_tokens=_positive_int(r.get("output_tokens"), "output_tokens"),
        concurrency=conc, num_prompts=_optional(r, "num_prompts", _positive_int),
        ttft_s=ttft, tpot_s=tpot, output_tokens_per_s=tput,
        tolerance=_optional(r, "tolerance", _positive),
        group=(r.get("group") or "").strip() or "|".join(
            [Path(where.rsplit(":", 1)[0]).name] + [(r.get(k) or "").strip() for k in (
                "model", "gpu", "engine", "tp", "pp", "weight_dtype", "kv_dtype")]))


def _serving_json_row(d: dict, where: str, fmt: str, meta: dict[str, str]) -> MeasuredRun:
    """A ``vllm bench serve`` result or one SGLang ``bench_serving`` line."""
    recorded = {k: d[k] for k in META_KEYS if k in d and d[k] not in (None, "")}
    if "model" not in recorded and d.get("model_id"):
        recorded["model"] = d["model_id"]
    if "engine" not in recorded and str(d.get("backend", "")).lower() in ENGINES:
        recorded["engine"] = d["backend"]
    for k, v in recorded.items():
        numeric = k in ("tp", "pp") and isinstance(v, int) and not isinstance(v, bool)
        if not (numeric or isinstance(v, str)):
            raise _Bad(k, f"expected a string, got {type(v).__name__} {v!r}"[:120])
    fields = {**meta, **{k: str(v) for k, v in recorded.items()}}  # what the file records wins
    assumptions = [f"{k} not recorded: {v}" for k, v in (("tp", "1"), ("pp", "1"),
                   ("kv_dtype", "auto (the model's dtype)"),
                   ("weight_dtype", "the checkpoint's own format")) if k not in fields]
    for key in ("model", "gpu", "engine"):
        if key not in fields:
            hint = ("run `vllm bench serve --metadata " if fmt == "vllm" else "pass `--meta ")
            raise _Bad(key, f"missing: the {fmt} result does not record it; {hint}{key}=...`")
    completed = _positive_int(d.get("completed"), "completed")
    conc = d.get("max_concurrency")
    rate = d.get("request_rate")
    if conc in (None, "", 0):
        raise _Bad("max_concurrency", f"missing (request_rate {rate!r}): open-loop runs are not "
                   "re-predicted yet; benchmark with --max-concurrency")
    if rate not in (None, "inf", "Infinity", float("inf")):
        raise _Bad("request_rate", f"{rate!r}: a finite request rate (open loop, arrivals "
                   "capped by max_concurrency) is not re-predicted yet; benchmark with "
                   "--request-rate inf")
    concurrency = _positive_int(conc, "max_concurrency")
    prompts = _optional(d, "num_prompts", _positive_int)
    if prompts is not None and prompts < concurrency:
        concurrency = prompts  # never more users in flight than prompts
    tpot = d.get("mean_tpot_ms")
    if tpot in (0, 0.0, "0", "0.0"):  # vLLM writes 0 when every output is one token
        tpot = None
    # ``vllm bench serve`` stamps its result with the client's local time, "%Y%m%d-%H%M%S"
    # (``result_json["date"]``, vllm/benchmarks/serve.py of 0.11.0 and 0.34.0): the day an
    # unnamed vLLM build is dated by (``planning.bench_predict.row_engine``); SGLang's
    # bench_serving records none
    stamp = re.fullmatch(r"(\d{4})(\d{2})(\d{2})-\d{6}", str(d.get("date") or ""))
    isl = _positive(d.get("total_input_tokens"), "total_input_tokens") / completed
    osl = _positive(d.get("total_output_tokens"), "total_output_tokens") / completed
    return MeasuredRun(
        source=where, model=str(fields["model"]), gpu=str(fields["gpu"]),
        engine=_engine(fields["engine"], "engine"),
        engine_version=str(fields.get("engine_version", "")),
        measured_on="-".join(stamp.groups()) if stamp else "",
        tp=_positive_int(fields.get("tp", 1), "tp"), pp=_positive_int(fields.get("pp", 1), "pp"),
        weight_dtype=fields.get("weight_dtype") or None, kv_dtype=fields.get("kv_dtype") or "auto",
        prompt_tokens=max(1, round(isl)), output_tokens=max(1, round(osl)),
        concurrency=concurrency, num_prompts=prompts,
        ttft_s=_optional(d, "mean_ttft_ms", _positive, 1e-3),
        tpot_s=_optional({"mean_tpot_ms": tpot}, "mean_tpot_ms", _positive, 1e-3),
        output_tokens_per_s=_optional(d, "output_throughput", _positive),
        group=str(fields.get("group") or Path(where.rsplit(":", 1)[0]).name),
        assumptions=tuple(assumptions))


def _read_text(path: Path) -> str:
    from .files import read_text

    return read_text(path, BenchmarkFileError, "utf-8-sig", MAX_FILE_BYTES)


def _csv_rows(text: str, path: Path):
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        rows = []
        for i, r in enumerate(reader, start=2):
            if i > MAX_ROWS + 1:
                raise BenchmarkFileError(f"more than {MAX_ROWS:,} rows", source=str(path))
            rows.append((i, r))
    except csv.Error as e:
        raise BenchmarkFileError(f"malformed CSV ({e})", source=str(path)) from None
    return header, rows


def read_benchmarks(path: Path, meta: dict[str, str] | None = None
                    ) -> tuple[list[MeasuredRun], list[RowProblem]]:
    """Every row of one benchmark file, and the rows that could not be read."""
    meta = meta or {}
    text = _read_text(path)
    runs: list[MeasuredRun] = []
    problems: list[RowProblem] = []

    def take(where: str, fn, *args):
        try:
            runs.append(fn(*args))
        except _Bad as b:
            problems.append(RowProblem(where, b.field, b.message))

    if not text.strip():
        raise BenchmarkFileError("empty file", source=str(path))
    name = path.name.lower()
    if name.endswith(".csv"):
        header, rows = _csv_rows(text, path)
        if not rows:
            raise BenchmarkFileError("no rows under the header", source=str(path))
        if "silicon_tpot_ms" in header:
            if meta:
                raise BenchmarkFileError("--meta does not apply: AIConfigurator's CSV records "
                                         "its model, GPU, engine and parallelism per row",
                                         source=str(path))
            for i, r in rows:
                take(f"{path}:{i}", _aic_row, r, f"{path}:{i}")
            return runs, problems
        unknown = [h for h in header if h not in KVPLAN_COLUMNS]
        if not header or unknown or "model" not in header:
            raise BenchmarkFileError(
                f"not a benchmark CSV kvplan knows (unknown column(s) {', '.join(unknown[:5])}); "
                "expected AIConfigurator's silicon CSV or kvplan's columns "
                f"({', '.join(KVPLAN_COLUMNS)})" if unknown else
                "not a benchmark CSV kvplan knows (no model column)", source=str(path))
        for i, r in rows:
            filled = {**r, **{k: v for k, v in meta.items() if not (r.get(k) or "").strip()}}
            take(f"{path}:{i}", _kvplan_row, filled, f"{path}:{i}")
        return runs, problems
    if name.endswith(".jsonl"):
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            if i > MAX_ROWS:
                raise BenchmarkFileError(f"more than {MAX_ROWS:,} lines", source=str(path))
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(RowProblem(f"{path}:{i}", "line", f"not JSON ({e.msg})"))
                continue
            except (RecursionError, ValueError) as e:  # nesting too deep, integers too long
                problems.append(RowProblem(f"{path}:{i}", "line", f"not readable JSON ({e})"[:200]))
                continue
            if not isinstance(d, dict):
                problems.append(RowProblem(f"{path}:{i}", "line", "not a JSON object"))
                continue
            take(f"{path}:{i}", _serving_json_row, d, f"{path}:{i}", "sglang", meta)
        return runs, problems
    if name.endswith(".json"):
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise BenchmarkFileError(f"not JSON ({e.msg}, line {e.lineno})", source=str(path)) from None
        except (RecursionError, ValueError) as e:  # nesting too deep, integers too long
            raise BenchmarkFileError(f"not readable JSON ({e})"[:200], source=str(path)) from None
        if not isinstance(d, dict) or not ({"mean_tpot_ms", "mean_ttft_ms"} & set(d)):
            raise BenchmarkFileError("not a `vllm bench serve --save-result` JSON (no mean_ttft_ms "
                                     "or mean_tpot_ms)", source=str(path))
        take(f"{path}:1", _serving_json_row, d, f"{path}:1", "vllm", meta)
        return runs, problems
    raise BenchmarkFileError("format not recognised: expected .json (vllm bench serve), .jsonl "
                             "(SGLang bench_serving) or .csv (AIConfigurator silicon or kvplan "
                             "columns)", source=str(path))


#: what makes two rows one measurement: everything but where it is filed (source, sweep, the
#: release label, the day, the reader's notes)
_PROVENANCE = {"source", "group", "engine_version", "measured_on", "assumptions", "tolerance"}


REPEAT = ("repeats an earlier row's measurement (every setting and measured value equal): "
          "counted once")


def measurement_key(run: MeasuredRun) -> tuple:
    """The deployment, the workload and every measured value, to the last digit."""
    return tuple(getattr(run, f.name) for f in fields(run) if f.name not in _PROVENANCE)


def read_all(paths: list[Path], meta: dict[str, str] | None = None
             ) -> tuple[list[MeasuredRun], list[RowProblem]]:
    """Every row of every file, in order, and the rows that could not be read. A row equal to
    an earlier one in everything but its provenance (``measurement_key``: the same deployment,
    workload and measured TTFT / TPOT / throughput to the last digit) is the same measurement
    filed twice - AIConfigurator's silicon sample files 711 of its 5,221 rows again under
    other source files - and is counted once, so that no measurement is both fitted and judged
    or weighs twice in a median; each repeat is reported as a problem."""
    runs: list[MeasuredRun] = []
    problems: list[RowProblem] = []
    first: set[tuple] = set()
    for p in paths:
        rs, ps = read_benchmarks(p, meta)
        for r in rs:
            key = measurement_key(r)
            if key in first:
                problems.append(RowProblem(r.source, "row", REPEAT))
                continue
            first.add(key)
            runs.append(r)
        problems += ps
    return runs, problems
