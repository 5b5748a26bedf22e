"""Sweep speed (issue: >= 1 million grid rows per second once the model and GPU are loaded,
and a 100k-row sweep end to end in under 2 s). Run: python3 benchmarks/sweep_speed.py

1. Arithmetic rate: one planned configuration, a 1,000-context x 1,000-batch block
   (1,000,000 rows) through ``kvplan.planning.sweep.block`` (concurrency per context, roofline over
   the block as numpy arrays); median of 5.
2. End to end: ``kvplan sweep`` in a fresh process over 2 GPUs x 4 TP x 2 KV formats x 100
   contexts x 64 batches = 102,400 rows, CSV to a file; median of 5.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def arithmetic_rate() -> None:
    from kvplan.core.perf import Efficiency
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.deployment import plan
    from kvplan.planning.sweep import block

    m = load_model("llama-3-70b")
    r, sm = plan(m, load_gpu("h200"), kv_dtype="fp8", weight_dtype="fp8", engine="vllm", tp=2,
                 pp=1, context_tokens=1_024_000, efficiency=Efficiency())
    contexts = np.arange(1, 1001, dtype=np.int64) * 1024
    batches = np.arange(1, 1001, dtype=np.int64)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        cols = block(r, sm, contexts, batches, 9.18)
        times.append(time.perf_counter() - t)
    rows = len(cols["batch"])
    med = statistics.median(times)
    print(f"block of {rows:,} rows: median {med:.3f} s = {rows / med / 1e6:.2f} M rows/s")


def end_to_end() -> None:
    times = []
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "grid.csv")
        cmd = [sys.executable, "-m", "kvplan.cli.main", "sweep", "llama-3-70b", "--gpu", "h100,h200",
               "--tp", "1,2,4,8", "--kv-dtype", "bf16,fp8", "--weight-dtype", "fp8",
               "-c", "2k:200k:+2k", "--batch", "1:512:+8", "--output", out]
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
            times.append(time.perf_counter() - t)
        rows = sum(1 for _ in open(out)) - 1
    print(f"kvplan sweep, {rows:,} rows end to end: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f})")


if __name__ == "__main__":
    arithmetic_rate()
    end_to_end()
