"""The calibration run: every case on one device, a progress bar, a summary table, one run
file. ``kvplan calibrate`` and ``python -m calibrate`` call ``main``."""

from __future__ import annotations

import datetime as dt
import platform

from . import HARNESS_VERSION, SCHEMA, SCHEMA_VERSION
from .bandwidth import copy_ceiling, paged_attention
from .decode import decode_step_case, matmul_rate
from .footprint import QUICK_CASES, FootprintCase, measure


def _device_info(device: str) -> tuple[dict, dict]:
    import torch

    import kvplan

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "driver": None,
                "kvplan": getattr(kvplan, "__version__", "0.1.0")}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        return {"kind": "cuda", "name": props.name, "memory_bytes": total}, versions
    return {"kind": "cpu", "name": platform.processor() or platform.machine(),
            "memory_bytes": None}, versions


def _gpu_key(name: str) -> str | None:
    from kvplan.core.errors import KvplanError
    from kvplan.loaders.hardware import load_gpu

    try:
        return load_gpu(name).key
    except KvplanError:
        return None


def run(device: str = "cpu", quick: bool = True, models: list[str] | None = None,
        distributed: int = 0, progress=None) -> dict:
    """All cases on ``device``; returns the run document (not yet written)."""
    info, versions = _device_info(device)
    cases_fp = [c for c in QUICK_CASES if not models or c.model in models]
    if models:
        cases_fp += [FootprintCase(f"extra-{m}", m) for m in models
                     if m not in {c.model for c in QUICK_CASES}]
    mib = 64 if quick else 1024
    shapes = [(1, 1024), (8, 1024), (4, 4096)] if quick else [(1, 4096), (16, 4096), (64, 4096), (8, 32768)]
    total = len(cases_fp) + 1 + len(shapes) + 2 + (1 if distributed else 0)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, label)

    cases = []
    for c in cases_fp:
        cases.append(measure(c, device))
        tick(c.id)
    copy = copy_ceiling(device, mib)
    cases.append(copy)
    tick(copy["id"])
    for batch, context in shapes:
        cases.append(paged_attention(device, batch=batch, context=context,
                                     dtype="float32" if device == "cpu" else "bfloat16"))
        tick(cases[-1]["id"])
    flops = matmul_rate(device, 1024 if quick else 8192)
    tick("matmul")
    cases.append(decode_step_case(device, layers=2, hidden=2048, heads=16, kv_heads=4,
                                  intermediate=5632, batch=4, context=1024,
                                  copy_bytes_per_s=copy["bytes_per_s"], flops_per_s=flops))
    tick(cases[-1]["id"])
    gpu = _gpu_key(info["name"]) if info["kind"] == "cuda" else None
    efficiency = None
    if gpu:
        from kvplan.loaders.hardware import load_gpu

        spec = load_gpu(gpu)
        best = max(c["bytes_per_s"] for c in cases if c["kind"] == "bandwidth")
        efficiency = {"hbm_bandwidth": round(best / spec.hbm_bandwidth_bytes_per_s, 3),
                      "flops": round(flops / spec.dense_flops_per_s["fp32" if "fp32" in
                                     spec.dense_flops_per_s else "bf16"], 3)}
    doc = {"schema": SCHEMA, "version": SCHEMA_VERSION, "harness_version": HARNESS_VERSION,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": info, "versions": versions, "gpu": gpu, "efficiency": efficiency,
           "method": {"timing": "CUDA events" if info["kind"] == "cuda" else "time.perf_counter",
                      "warmup": 1, "repeats": 5, "statistic": "median",
                      "inputs": "torch.rand (never zeros)", "quick": quick,
                      "matmul_flops_per_s": flops},
           "cases": cases}
    if distributed:
        from .distributed import run_spawned

        doc["distributed"] = run_spawned(distributed)
        tick("distributed")
    return doc


def summary_rows(doc: dict) -> list[tuple[str, str, str, str]]:
    rows = []
    for c in [*doc["cases"], *(doc.get("distributed") or {}).get("cases", [])]:
        if c["kind"] == "footprint":
            ok = c["predicted_bytes"] == c["measured_bytes"]
            rows.append((c["id"], f"{c['predicted_bytes']:,} B", f"{c['measured_bytes']:,} B",
                         "exact" if ok else "DIFFERS"))
        elif c["kind"] == "bandwidth":
            rows.append((c["id"], "", f"{c['bytes_per_s'] / 1e9:,.1f} GB/s", "measured"))
        else:
            rows.append((c["id"], f"{c['predicted_seconds'] * 1e3:.2f} ms",
                         f"{c['measured_seconds'] * 1e3:.2f} ms", "informational"
                         if c["tolerance"] is None else f"tolerance {c['tolerance']:.0%}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from .runs_io import RUNS, write_run

    ap = argparse.ArgumentParser(prog="python -m calibrate")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default="", help="comma list of extra built-in models")
    ap.add_argument("--quick", action="store_true", help="small sizes (CI, CPU)")
    ap.add_argument("--distributed", type=int, default=0, help="also run N local processes")
    ap.add_argument("--output-dir", default=str(RUNS))
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def progress(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        doc = run(args.device, args.quick, [m for m in args.models.split(",") if m],
                  args.distributed, progress)
    from pathlib import Path

    path = write_run(doc, Path(args.output_dir))
    table = Table(title=f"{doc['device']['name']} ({doc['device']['kind']})")
    for col in ("case", "predicted", "measured", "verdict"):
        table.add_column(col)
    for row in summary_rows(doc):
        table.add_row(*row)
    console.print(table)
    console.print(f"run written to {path}")
    return 0
