"""Progress on a terminal only, and a Hub that cannot be reached decided fast (issue 15)."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "chat-shared-prompt.yaml"
KVPLAN = [sys.executable, "-m", "kvplan.cli.main"]


def test_plan_progress_on_a_terminal_never_in_a_pipe():
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    p = subprocess.Popen([*KVPLAN, "plan", str(EXAMPLE), "--samples", "500"], cwd=ROOT,
                         stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert p.wait(timeout=60) == 0
    assert b"planning candidates" in seen
    piped = subprocess.run([*KVPLAN, "plan", str(EXAMPLE), "--samples", "500"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "planning candidates" not in piped.stderr
    as_json = subprocess.run([*KVPLAN, "plan", str(EXAMPLE), "--samples", "500", "-f", "json"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 0 and as_json.stderr == ""


def _free_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_hub_is_one_line_in_under_two_seconds(tmp_path):
    port = _free_port()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path)}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("KVPLAN_HUB_TIMEOUT", None)
    start = time.monotonic()
    p = subprocess.run([*KVPLAN, "fit", "some-org/some-model", "--gpu", "h100"], env=env,
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert p.returncode == 2 and took < 2.0 + 1.5  # the connect, plus the interpreter start
    assert p.stderr.count("\n") == 1
    assert p.stderr.strip() == (
        f"kvplan: error: some-org/some-model@main (http://127.0.0.1:{port}): cannot reach the Hub "
        f"at http://127.0.0.1:{port} (connection refused); check the network, the proxy or "
        "HF_ENDPOINT, set HF_HUB_OFFLINE=1 to use the cache only, or raise KVPLAN_HUB_TIMEOUT")
    start = time.monotonic()
    p = subprocess.run([*KVPLAN, "fit", "some-org/some-model", "--gpu", "h100"],
                       env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and time.monotonic() - start < 3.5
    assert "HF_HUB_OFFLINE is set" in p.stderr
