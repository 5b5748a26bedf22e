"""Wall time of `kvplan plan` on every scenario in examples/ and on the starter scenario
(`kvplan init`: 8 candidates x 10,000 sampled conversations), each in fresh processes, JSON
output. Run: python3 benchmarks/plan_speed.py [repeats]"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        starter = Path(tmp) / "starter.yaml"
        subprocess.run([sys.executable, "-m", "kvplan.cli.main", "init", str(starter)], check=True,
                       stderr=subprocess.DEVNULL, cwd=ROOT)
        files = [*sorted((ROOT / "examples").glob("*.yaml")), starter]
        for f in files:
            times = [timed(["plan", str(f), "--format", "json"]) for _ in range(repeats)]
            print(f"{f.name:42s} median {statistics.median(times):.2f} s  min {min(times):.2f} s")


if __name__ == "__main__":
    main()
