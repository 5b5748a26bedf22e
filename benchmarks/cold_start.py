"""Cold-start benchmark of `kvplan size` (not a timed test; run by hand and quote the numbers).

Times, in interleaved rounds so machine noise hits both alike:
  A. `kvplan size llama-3-70b` (the console script, output discarded)
  B. `python -c "import typer, rich.console"` (the CLI framework's own import cost)
and prints the medians and the ratio A / B. Goals (issue 2): A under 0.3 s; A / B <= 1.5.

    python3 benchmarks/cold_start.py [--rounds 30] [--model llama-3-70b]

kvplan's modules are byte-compiled first (``compileall``), as ``pip install`` does for the
CLI framework's packages; otherwise a shell with PYTHONDONTWRITEBYTECODE=1 would compile
kvplan from source on every run and time the compiler, not kvplan.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--model", default="llama-3-70b")
    args = ap.parse_args()
    # The console script, run by this interpreter directly: a version manager's shim in front of
    # `kvplan` (pyenv's is a bash script) would add its own start-up to one side only.
    exe = shutil.which("kvplan")
    size_cmd = [sys.executable, exe, "size", args.model] if exe else [
        sys.executable, "-m", "kvplan.cli.main", "size", args.model]
    base_cmd = [sys.executable, "-c", "import typer, rich.console"]
    import kvplan

    compileall.compile_dir(kvplan.__path__[0], quiet=1)
    timed(size_cmd), timed(base_cmd)  # warm the OS file cache and .pyc files
    a, b = [], []
    for _ in range(args.rounds):
        a.append(timed(size_cmd))
        b.append(timed(base_cmd))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"kvplan size {args.model}: median {ma:.3f} s (min {min(a):.3f}, max {max(a):.3f})")
    print(f"import typer, rich.console: median {mb:.3f} s (min {min(b):.3f}, max {max(b):.3f})")
    print(f"ratio of medians: {ma / mb:.2f}, of minimums: {min(a) / min(b):.2f}"
          "  (goal <= 1.5; absolute goal < 0.3 s)")


if __name__ == "__main__":
    main()
