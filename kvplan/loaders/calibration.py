"""Measured efficiency factors from calibrated runs (``calibrate/runs/*.json``, written by the
calibration harness), replacing the defaults of ``kvplan.core.perf.Efficiency`` for that GPU.

A run file is JSON with at least ``{"gpu": "<hardware_specs key>", "efficiency":
{"hbm_bandwidth": 0.87, "flops": 0.64}}`` plus its provenance (device, driver, versions, date,
method). The newest run (by its ``date`` field) for the GPU wins. ``KVPLAN_CALIBRATION_PATH``
adds folders. No run yet: the defaults apply and the output says so.
"""

from __future__ import annotations

from pathlib import Path

from ..core.perf import Efficiency
from .data_dirs import search_path
from .run_files import RunFileError, load_run


def run_dirs() -> list[Path]:
    return search_path("KVPLAN_CALIBRATION_PATH", "calibrate/runs")


def _fraction(eff: dict, key: str, default: float, path: Path) -> float:
    value = eff.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise RunFileError(f"expected a fraction in (0, 1], got {value!r}", source=str(path),
                           field=f"efficiency.{key}")
    return float(value)


def _serving_calibration(path: Path) -> bool:
    """Whether ``path`` is a serving calibration (``kvplan.loaders.serving_calibration``)."""
    import json

    from .files import read_text
    from .serving_calibration import SCHEMA

    try:
        doc = json.loads(read_text(path, RunFileError))
    except (RunFileError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA


def measured_efficiency(gpu_key: str) -> Efficiency | None:
    """The newest calibrated efficiency for ``gpu_key``; a run file that is not a valid run
    (schema, version, cases) or holds an efficiency outside (0, 1] is an error naming it."""
    best: tuple[str, Efficiency] | None = None
    for folder in run_dirs():
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = load_run(path)
            except RunFileError:
                if _serving_calibration(path):
                    continue  # KVPLAN_CALIBRATION_PATH holds both kinds: `calibrate --out`'s
                raise
            eff = data.get("efficiency")
            if data.get("gpu") != gpu_key or eff is None:
                continue
            if not isinstance(eff, dict) or "hbm_bandwidth" not in eff:
                raise RunFileError("expected an object with hbm_bandwidth (and flops)",
                                   source=str(path), field="efficiency")
            e = Efficiency(hbm_bandwidth=_fraction(eff, "hbm_bandwidth", 0.0, path),
                           flops=_fraction(eff, "flops", Efficiency.flops, path),
                           source=f"calibrated run {path.name}")
            date = str(data.get("date", ""))
            if best is None or date > best[0]:
                best = (date, e)
    return best[1] if best else None
