"""Hostile inputs (tests/fuzz_cases.py) through the whole CLI: every case ends with exit status
0, 1 or 2 within its time limit, with no traceback, one ``kvplan: error:`` line on exit 2,
strict JSON for --json, and no output file left partial or replaced without --force.

A case that fails here is a defect of kvplan, not of the test. ``scripts/fuzz.py --cases N``
runs the same generators longer; the tallies of this run are printed at the end of the module.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuzz_cases import PREFIX, Case, cases, run_case, tally

from kvplan.cli.main import run

N_CASES = 800  # about 2 minutes on two cores (scripts/fuzz.py runs more)
CASES = cases(N_CASES)
OUTCOMES: list = []


@pytest.fixture(scope="module", autouse=True)
def report_tally(request):
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture and OUTCOMES:
        counts = ", ".join(f"{k} {v}" for k, v in tally(OUTCOMES).items())
        with capture.global_and_fixture_disabled():
            print(f"\nfuzz: {counts}; {sum(o.seconds for o in OUTCOMES):.0f} s in kvplan")


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}-{c.argv[0]}" for i, c in enumerate(CASES)])
def test_hostile_input(case, tmp_path):
    o = run_case(case, tmp_path / "case")
    OUTCOMES.append(o)
    assert not o.problems, f"{case.name}\nargv: {list(case.argv)}\nexit {o.code}\n{o.exc or o.err[-2000:]}"


# ---- output files -----------------------------------------------------------------------

OLD = b"precious\n"
SCENARIO = (Path(__file__).resolve().parent.parent / "kvplan/cli/starter_scenario.yaml").read_bytes()
WRITERS = {"sweep-csv": ["sweep", "llama-3.1-8b", "--gpu", "h100", "--output", "{dir}/out"],
           "sweep-json": ["sweep", "llama-3.1-8b", "--gpu", "h100", "--format", "json", "-o", "{dir}/out"],
           "sweep-md": ["sweep", "llama-3.1-8b", "--gpu", "h100", "--format", "md", "-o", "{dir}/out"],
           "plan": ["plan", "{dir}/s.yaml", "--samples", "100", "--format", "json", "-o", "{dir}/out"],
           "init": ["init", "{dir}/out"]}


@pytest.mark.parametrize("name", WRITERS)
def test_existing_output_is_refused(name, tmp_path):
    case = Case(f"{name} over an existing file", tuple(WRITERS[name]), (("out", OLD), ("s.yaml", SCENARIO)))
    o = run_case(case, tmp_path)
    assert o.code == 2 and not o.problems, (o.problems, o.err)
    assert (tmp_path / "out").read_bytes() == OLD


def _one_error(argv, capsys) -> str:
    code = run(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(PREFIX), err
    return err


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _eperm(*args, **kwargs):
    raise OSError(errno.EPERM, os.strerror(errno.EPERM))


@pytest.mark.parametrize("broken,force", [({"fsync": _enospc}, False), ({"fsync": _enospc}, True),
                                          ({"replace": _enospc}, True),
                                          ({"link": _eperm, "replace": _enospc}, False)],
                         ids=["fsync", "fsync-force", "replace-force", "no-links-then-replace"])
@pytest.mark.parametrize("name", ["sweep-csv", "plan"])
def test_failed_write_leaves_nothing(name, broken, force, tmp_path, capsys, monkeypatch):
    """A disk that fails mid-write: one error line; the target is as it was (absent, or the
    old file with --force) and no temporary file is left beside it."""
    (tmp_path / "s.yaml").write_bytes(SCENARIO)
    if force:
        (tmp_path / "out").write_bytes(OLD)
    argv = [a.replace("{dir}", str(tmp_path)) for a in WRITERS[name]] + (["--force"] if force else [])
    for attr, fake in broken.items():
        monkeypatch.setattr(os, attr, fake)
    assert "cannot write" in _one_error(argv, capsys)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s.yaml"] + (["out"] if force else []))
    if force:
        assert (tmp_path / "out").read_bytes() == OLD


def test_sigkill_mid_sweep_leaves_no_partial_target(tmp_path):
    """SIGKILL while a 98,304-row CSV is computed or written: the target is absent or whole."""
    target = tmp_path / "big.csv"
    argv = [sys.executable, "-m", "kvplan.cli.main", "sweep", "llama-3.1-8b", "--gpu", "h100,h200",
            "--tp", "1,2,4", "-c", "1k:256k:+1k", "--batch", "1:64:+1", "--output", str(target)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):  # mid-write
            break
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if target.exists():
        lines = target.read_bytes().split(b"\n")
        assert lines[-1] == b"" and len(lines) == 98_306, "a partial target"
        assert len({line.count(b",") for line in lines[:-1]}) == 1
