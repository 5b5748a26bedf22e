"""Start-up time of `kvplan size` for a cached Hub model against the same config as a local
path (issue: a cached Hub model must plan as fast as a local path).

Fills a temporary HF_HOME from the test Hub server (tests/hub_fixture), then times 30
interleaved runs of each in fresh processes with HF_HUB_OFFLINE unset (the cache-first path
must not touch the network). Run: python3 benchmarks/hub_cached.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hub_fixture.repos import build  # noqa: E402
from hub_fixture.server import HubServer  # noqa: E402


def timed(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "kvplan")], check=True)
    with tempfile.TemporaryDirectory() as home, HubServer(build()) as server:
        env = {**os.environ, "HF_HOME": home, "HF_ENDPOINT": server.url}
        env.pop("HF_HUB_OFFLINE", None)
        timed(["size", "kvplan-test/llama3-8b"], env)  # fill the cache
        requests = len(server.state.requests)
        hub, local = [], []
        for _ in range(30):
            hub.append(timed(["size", "kvplan-test/llama3-8b"], env))
            local.append(timed(["size", "tests/fixtures/configs/meta-llama__Meta-Llama-3-8B.json"],
                               env))
        assert len(server.state.requests) == requests, "the cached path contacted the server"
    print(f"kvplan size <cached Hub id>:  median {statistics.median(hub):.3f} s "
          f"(min {min(hub):.3f})")
    print(f"kvplan size <local path>:     median {statistics.median(local):.3f} s "
          f"(min {min(local):.3f})")
    print(f"ratio of medians: {statistics.median(hub) / statistics.median(local):.2f}")


if __name__ == "__main__":
    main()
