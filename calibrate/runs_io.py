"""Run files: one JSON document per run in ``calibrate/runs/``, written atomically (a temporary
file, then a link, via kvplan.report.outfile) and never overwritten (a new run gets a new name).

Schema (``"schema": "kvplan-calibration-run"``, ``"version": 1``): ``harness_version``,
``date`` (UTC ISO 8601), ``device`` {``kind`` cpu|cuda, ``name``, ``memory_bytes``},
``versions`` {``python``, ``torch``, ``cuda``, ``driver``, ``kvplan``}, ``gpu`` (the
hardware_specs key the device matched, or null), ``efficiency`` (achieved fractions of that
GPU's datasheet, or null: read by the performance model), ``method`` (timing notes), and
``cases``: a list of ``footprint`` (``inputs``, ``predicted_bytes``, ``measured_bytes``,
``reserved_bytes``, ``tolerance`` 0), ``bandwidth`` (``bytes``, ``seconds``, ``bytes_per_s``)
and ``decode_step`` (``inputs``, ``predicted_seconds``, ``measured_seconds``, ``tolerance``:
null = informational) records; ``distributed`` (optional) holds the per-rank TP cases.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.report.outfile import write_atomic

RUNS = Path(__file__).resolve().parent / "runs"


def write_run(run: dict, folder: Path = RUNS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{run['date'][:19].replace(':', '').replace('-', '')}-{run['device']['kind']}"
    stem += "-" + "".join(ch if ch.isalnum() else "-" for ch in run["device"]["name"].lower())[:40]
    path = folder / f"{stem}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    return write_atomic(path, json.dumps(run, indent=1, sort_keys=False) + "\n")
