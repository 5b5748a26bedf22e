"""Measured efficiency factors from calibrated runs (``calibrate/runs/*.json``, written by the
calibration harness), replacing the defaults of ``kvplan.core.perf.Efficiency`` for that GPU.

A run file is JSON with at least ``{"gpu": "<hardware_specs key>", "efficiency":
{"hbm_bandwidth": 0.87, "flops": 0.64}}`` plus its provenance (device, driver, versions, date,
method). The newest run (by its ``date`` field) for the GPU wins. ``KVPLAN_CALIBRATION_PATH``
adds folders. No run yet: the defaults apply and the output says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.perf import Efficiency
from .data_dirs import data_dir


def run_dirs() -> list[Path]:
    extra = [Path(p).expanduser() for p in os.environ.get("KVPLAN_CALIBRATION_PATH", "").split(
        os.pathsep) if p]
    return [*extra, data_dir("calibrate/runs")]


def measured_efficiency(gpu_key: str) -> Efficiency | None:
    best: tuple[str, Efficiency] | None = None
    for folder in run_dirs():
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            eff = data.get("efficiency") if isinstance(data, dict) else None
            if data.get("gpu") != gpu_key or not isinstance(eff, dict):
                continue
            try:
                e = Efficiency(hbm_bandwidth=float(eff["hbm_bandwidth"]),
                               flops=float(eff.get("flops", Efficiency.flops)),
                               source=f"calibrated run {path.name}")
            except (KeyError, TypeError, ValueError):
                continue
            date = str(data.get("date", ""))
            if best is None or date > best[0]:
                best = (date, e)
    return best[1] if best else None
