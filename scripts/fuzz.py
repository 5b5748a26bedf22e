"""Run kvplan's fuzz cases (tests/fuzz_cases.py) standalone, more of them than the test does.

    python scripts/fuzz.py --cases 2000 --seed 1234 [--repro /tmp/fuzz_repro] [--timeout 10]

Prints the tallies (cases, tracebacks, hangs, partial files, ...) and each failure class with
its count and smallest case; --repro writes that case (argv.txt, env.txt, its input files)
under DIR/<n>/. Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ["KVPLAN_CALIBRATIONS"] = "off"  # as tests/conftest.py

from fuzz_cases import SEED, cases, failure_class, run_case, tally  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--repro", type=Path, help="write one reproduction per failure class here")
    args = ap.parse_args()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    start, outcomes = time.perf_counter(), []
    classes = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="kvplan-fuzz-") as tmp:
        for i, case in enumerate(cases(args.cases, args.seed)):
            o = run_case(case, Path(tmp) / str(i), args.timeout)
            outcomes.append(o)
            for problem in o.problems:
                classes[failure_class(problem, o)].append(o)
            shutil.rmtree(Path(tmp) / str(i), ignore_errors=True)
    for key, value in tally(outcomes).items():
        print(f"{key}: {value}")
    print(f"wall time: {time.perf_counter() - start:.1f} s")
    for n, (key, hits) in enumerate(sorted(classes.items(), key=lambda kv: -len(kv[1])), 1):
        o = min(hits, key=lambda o: sum(len(d) for _, d in o.case.files))
        print(f"\n[{n}] {key}  ({len(hits)} cases)\n    case: {o.case.name[:160]}\n"
              f"    argv: {list(o.case.argv)}")
        if o.exc:
            print("    " + "\n    ".join(o.exc.strip().splitlines()[-7:]))
        else:
            print(f"    exit {o.code}; stderr: {o.err[-300:]!r}")
        if args.repro:
            d = args.repro / str(n)
            d.mkdir(parents=True, exist_ok=True)
            for name, data in o.case.files:
                (d / name).write_bytes(data)
            (d / "argv.txt").write_text(repr(list(o.case.argv)) + "\n# {dir} = this folder\n")
            (d / "env.txt").write_text("".join(f"{k}={v}\n" for k, v in o.case.env))
            (d / "class.txt").write_text(f"{key}\n{len(hits)} cases\n\n{o.exc or o.err}")
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())
