"""Fitted serving calibrations (``calibrations/<gpu>--<engine>.json``, written by ``kvplan
calibrate --from-benchmarks``): the efficiencies of ``kvplan.core.perf.Efficiency`` for one
(GPU, engine), with their provenance (source, rows, split, date, fit error, held-out error).
``KVPLAN_CALIBRATION_PATH`` folders are searched first. Used automatically for that GPU and
engine; where none exists the output says the figures are uncalibrated. ``KVPLAN_CALIBRATIONS
=off`` turns every serving calibration off (the pure roofline, as the tests that pin roofline
arithmetic run).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TypeGuard

from ..core.errors import KvplanError
from ..core.perf import Efficiency
from .data_dirs import search_path

SCHEMA = "kvplan-serving-calibration"
VERSION = 1
FIELDS = ("hbm_bandwidth", "flops", "interconnect", "attention", "moe", "step_overhead_s",
          "sequence_overhead_s", "allreduce_latency_s", "host_ttft_s", "host_ttft_per_prompt_token_s",
          "startup_share")
#: fields a calibration may omit (files written before kvplan fitted them), with their value then
OPTIONAL = {"layer_overhead_s": 0.0}
#: the seconds each fitted time term is searched between (``kvplan.planning.calibration_fit``)
TIME_RANGE = {"step_overhead_s": (1e-5, 0.1), "layer_overhead_s": (1e-7, 2e-3),
              "sequence_overhead_s": (1e-8, 1e-3),
              "allreduce_latency_s": (1e-6, 2e-4), "host_ttft_s": (1e-5, 2.0),
              "host_ttft_per_prompt_token_s": (1e-9, 1e-4)}
#: the most a time term in a file may hold, ten times the fit's bound: more is a corrupt file
TIME_CEILING_S = {k: 10 * hi for k, (_, hi) in TIME_RANGE.items()}
FRACTIONS = ("hbm_bandwidth", "flops", "interconnect", "attention", "moe")


class CalibrationFileError(KvplanError):
    """A calibration file that is unreadable, of another schema, or holds an impossible value."""


def calibration_dirs() -> list[Path]:
    return search_path("KVPLAN_CALIBRATION_PATH", "calibrations")


def file_name(gpu: str, engine: str) -> str:
    return f"{gpu}--{engine}.json"


def _finite(v: object) -> TypeGuard[float]:
    """A JSON number that is a finite float (an integer too long for a float is not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _show(v: object) -> str:
    """A value for an error line, cut short (an integer of 400 digits is not echoed whole)."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _read_doc(path: Path, schema: str, kind: str) -> dict:
    """A calibration file's JSON object of ``schema``; anything else one error naming it."""
    from .files import read_text

    text = read_text(path, CalibrationFileError)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:  # long integers, deep nesting
        raise CalibrationFileError(f"corrupt ({type(e).__name__})", source=str(path)) from None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        raise CalibrationFileError(f"not a kvplan {kind} calibration (schema {schema!r})",
                                   source=str(path), field="schema")
    if doc.get("version") != VERSION:
        raise CalibrationFileError(f"version {doc.get('version')!r}; this kvplan reads {VERSION}",
                                   source=str(path), field="version")
    return doc


def _provenance(doc: dict) -> tuple[dict, dict]:
    """A calibration's provenance and its held-out figures (empty when absent)."""
    prov: dict = doc["provenance"] if isinstance(doc.get("provenance"), dict) else {}
    held: dict = prov["held_out"] if isinstance(prov.get("held_out"), dict) else {}
    return prov, held


def read_calibration(path: Path) -> tuple[Efficiency, dict]:
    """The efficiency and provenance a calibration file holds; anything else is an error
    naming the file and field."""
    doc = _read_doc(path, SCHEMA, "serving")
    eff = doc.get("efficiency")
    if not isinstance(eff, dict):
        raise CalibrationFileError("expected an object", source=str(path), field="efficiency")
    values = {}
    for key in (*FIELDS, *OPTIONAL):
        v = eff.get(key, OPTIONAL.get(key))
        if not _finite(v) or v < 0:
            raise CalibrationFileError(f"expected a non-negative number, got {_show(v)}",
                                       source=str(path), field=f"efficiency.{key}")
        if v > TIME_CEILING_S.get(key, math.inf):
            raise CalibrationFileError(f"{v!r} s is past the {TIME_CEILING_S[key]:g} s this term "
                                       "can plausibly hold", source=str(path),
                                       field=f"efficiency.{key}")
        if key in FRACTIONS and not 0 < v <= 1:
            raise CalibrationFileError(f"expected a fraction in (0, 1], got {v!r}",
                                       source=str(path), field=f"efficiency.{key}")
        if key == "startup_share" and v > 1:
            raise CalibrationFileError(f"expected a share in [0, 1], got {v!r}",
                                       source=str(path), field=f"efficiency.{key}")
        values[key] = float(v)
    unknown = sorted(set(eff) - set(FIELDS) - set(OPTIONAL))
    if unknown:
        raise CalibrationFileError(f"unknown key(s) {', '.join(unknown)}", source=str(path),
                                   field="efficiency")
    prov, held = _provenance(doc)
    versions = doc.get("engine_versions")
    on = (f" on releases {', '.join(str(v) for v in versions[:6])}"
          f"{', ...' if len(versions) > 6 else ''}") if isinstance(versions, list) and versions else ""
    label = (f"calibration {path.name} ({prov.get('rows_fit', '?')} measured rows of "
             f"{prov.get('source', 'unnamed source')}{on}, fitted {prov.get('date', '?')}; held-out "
             f"TPOT median error {held.get('tpot_median_abs_error', '?')})")
    return Efficiency(**values, source=label, calibrated=True), doc


def serving_calibration(gpu: str, engine: str) -> Efficiency | None:
    """The calibration for (``gpu``, ``engine``), or None when there is none."""
    if os.environ.get("KVPLAN_CALIBRATIONS", "").lower() == "off":
        return None
    for folder in calibration_dirs():
        path = folder / file_name(gpu, engine)
        if path.is_file():
            return read_calibration(path)[0]
    return None


CROSS_SCHEMA = "kvplan-cross-domain-calibration"
CROSS_FILE = Path("cross_domain") / "latency.json"
INDEXER_SCHEMA = "kvplan-indexer-calibration"
INDEXER_FILE = Path("indexer") / "overhead.json"


def _read_term(path: Path, schema: str, kind: str, key: str, ceiling_s: float) -> tuple[float, dict]:
    """One fitted number of seconds in [0, ``ceiling_s``] and the file's provenance, from a
    file that holds a term fitted for every GPU and engine at once."""
    doc = _read_doc(path, schema, kind)
    v = doc.get(key)
    if not _finite(v) or not 0 <= v <= ceiling_s:
        raise CalibrationFileError(f"expected seconds in [0, {ceiling_s:g}], got {_show(v)}",
                                   source=str(path), field=key)
    return float(v), doc


def read_cross_domain(path: Path) -> tuple[float, str]:
    """(seconds per collective call that leaves an NVLink domain, label naming the file and
    its fit) from a file written by ``benchmarks/fit_cross_domain.py``."""
    v, doc = _read_term(path, CROSS_SCHEMA, "cross-domain", "cross_domain_latency_s", 0.1)
    prov, held = _provenance(doc)
    label = (f"cross-domain call latency {v * 1e6:.0f} us for TP all-reduces and attention-DP "
             f"dispatch / combine wider than an "
             f"NVLink domain ({CROSS_FILE}: "
             f"{prov.get('rows_fit', '?')} measured rows, held-out TPOT median error "
             f"{held.get('tpot_median_abs_error', '?')})")
    return v, label


def read_indexer_overhead(path: Path) -> tuple[float, str]:
    """(seconds per layer running its own lightning indexer per forward pass, label naming the
    file and its fit) from a file written by ``benchmarks/fit_indexer.py``."""
    v, doc = _read_term(path, INDEXER_SCHEMA, "indexer", "indexer_overhead_s", 0.01)
    prov, held = _provenance(doc)
    label = (f"indexer cost {v * 1e6:.0f} us per layer with its own top-k per forward pass "
             f"({INDEXER_FILE}: {prov.get('rows_fit', '?')} measured rows of "
             f"{_words(prov.get('model_types'))} on {_words(prov.get('engines'))}; applied to "
             f"every engine and indexer model; "
             f"held out by GPU: TPOT median error {held.get('tpot_median_abs_error', '?')})")
    return v, label


def _words(v: object) -> str:
    """A provenance list for a label: short plain words only, else '?'."""
    if not isinstance(v, list) or not v or not all(
            isinstance(x, str) and x.replace("_", "").replace("-", "").isalnum() for x in v):
        return "?"
    return ", ".join(v[:6])[:120]


def _global_term(name: Path, read) -> tuple[float, str] | None:
    if os.environ.get("KVPLAN_CALIBRATIONS", "").lower() == "off":
        return None
    for folder in calibration_dirs():
        path = folder / name
        if path.is_file():
            return read(path)
    return None


def cross_domain_latency() -> tuple[float, str] | None:
    """The fitted latency of a collective call over more GPUs than one NVLink domain, or None
    (none shipped, or calibrations off)."""
    return _global_term(CROSS_FILE, read_cross_domain)


def indexer_overhead() -> tuple[float, str] | None:
    """The fitted fixed cost of one layer's lightning indexer per forward pass, or None (none
    shipped, or calibrations off)."""
    return _global_term(INDEXER_FILE, read_indexer_overhead)
