"""Wall time of `kvplan plan` on every scenario in examples/ and on the starter scenario
(`kvplan init`: 8 candidates x 10,000 sampled conversations), each in fresh processes, JSON
output; then candidates per second in one process: the starter scenario's workload over a
wider search (8 GPUs x vLLM and SGLang x TP 1-8 x PP 1-2 x 2 KV formats = 256 candidates).
Run: python3 benchmarks/plan_speed.py [repeats]"""

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
        wide = Path(tmp) / "wide.yaml"
        text = starter.read_text(encoding="utf-8")
        for old, new in (("  gpu: h100 ", "  gpu: [h100, h200, b200, a100-80gb, l40s, mi300x, gh200, l4] "),
                         ("  engine: vllm ", "  engine: [vllm, sglang] "), ("  pp: 1 ", "  pp: [1, 2] ")):
            assert old in text, old
            text = text.replace(old, new, 1)
        wide.write_text(text, encoding="utf-8")
        rates = [candidates_per_s(wide) for _ in range(repeats)]
        print(f"{'starter workload, 256 candidates':42s} median {statistics.median(rates):.0f} "
              f"candidates/s  min {min(rates):.0f}")


def candidates_per_s(path: Path) -> float:
    """Candidates planned and evaluated per second by ``run_scenario`` (in this process)."""
    sys.path.insert(0, str(ROOT))
    from kvplan.loaders.scenario_yaml import load_scenario
    from kvplan.planning.scenario import run_scenario

    sc = load_scenario(path)
    start = time.perf_counter()
    rep = run_scenario(sc)
    return (len(rep.outcomes) + len(rep.skipped)) / (time.perf_counter() - start)


if __name__ == "__main__":
    main()
