"""The calibration harness on CPU (small sizes) and `kvplan validate`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from cli_helpers import fail

from kvplan.cli.main import run

torch = pytest.importorskip("torch")

from calibrate.footprint import QUICK_CASES, measure  # noqa: E402
from calibrate.harness import run as harness_run  # noqa: E402
from calibrate.runs_io import write_run  # noqa: E402

RUNS = Path(__file__).resolve().parents[1] / "calibrate" / "runs"


@pytest.mark.parametrize("case", QUICK_CASES, ids=[c.id for c in QUICK_CASES])
def test_footprint_equals_prediction_for_every_layer_kind(case):
    r = measure(case, "cpu")
    assert r["measured_bytes"] == r["predicted_bytes"] > 0


def test_hand_checked_footprints():
    by_id = {c.id: c for c in QUICK_CASES}
    # Llama-3-8B bf16: 32 layers x [2, 64 blocks, 16 tokens, 8 heads, 128] x 2 B
    assert measure(by_id["full-gqa-bf16"], "cpu")["measured_bytes"] == 32 * 2 * 64 * 16 * 8 * 128 * 2
    # tp 16 with 8 KV heads: one replicated head per rank
    assert measure(by_id["gqa-tp16-replicated"], "cpu")["measured_bytes"] == 32 * 2 * 64 * 16 * 1 * 128 * 2
    # DeepSeek-V2-Lite: 27 layers x [64, 16, 512 + 64] x 2 B on every rank, whatever tp
    assert measure(by_id["mla-latent-tp4"], "cpu")["measured_bytes"] == 27 * 64 * 16 * 576 * 2


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    doc = harness_run("cpu", quick=True, models=["llama-3-8b"], distributed=0)
    path = write_run(doc, tmp_path_factory.mktemp("runs"))
    return path, doc


def test_run_file_schema_and_validate_passes(quick_run, capsys):
    path, doc = quick_run
    assert doc["schema"] == "kvplan-calibration-run" and doc["version"] == 1
    assert {"python", "torch", "kvplan"} <= set(doc["versions"])
    kinds = {c["kind"] for c in doc["cases"]}
    assert kinds == {"footprint", "bandwidth", "decode_step"}
    assert run(["validate", str(path), "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert all(v["ok"] is not False for v in verdicts)
    assert sum(1 for v in verdicts if v["kind"] == "footprint") == 3  # llama-3-8b: bf16, fp8, tp 16


def test_a_wrong_prediction_makes_validate_fail(quick_run, tmp_path, capsys):
    _, doc = quick_run
    bad = copy.deepcopy(doc)
    case = next(c for c in bad["cases"] if c["kind"] == "footprint")
    case["measured_bytes"] += 2  # as if the formula had drifted from the measurement
    path = write_run(bad, tmp_path)
    assert run(["validate", str(path)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_runs_are_never_overwritten(quick_run, tmp_path):
    _, doc = quick_run
    a, b = write_run(doc, tmp_path), write_run(doc, tmp_path)
    assert a != b and a.exists() and b.exists()


@pytest.mark.parametrize("content,needle", [
    ("{not json", "corrupt run file"),
    (json.dumps({"schema": "kvplan-calibration-run", "version": 99, "cases": []}),
     "run schema version 99 is newer"),
    (json.dumps({"schema": "something-else"}), "not a kvplan calibration run"),
    (json.dumps({"schema": "kvplan-calibration-run", "version": 1,
                 "cases": [{"kind": "footprint", "id": "x"}]}), "case 'x' is malformed"),
])
def test_bad_run_files_are_one_line_errors(tmp_path, capsys, content, needle):
    path = tmp_path / "run.json"
    path.write_text(content)
    assert needle in fail(capsys, "validate", str(path))


def test_two_process_gloo_run():
    from calibrate.distributed import run_spawned

    rec = run_spawned(2)
    assert rec["world_size"] == 2 and rec["backend"] == "gloo"
    ranks = [c for c in rec["cases"] if c["id"].startswith("tp2-gqa-rank")]
    assert len(ranks) == 2
    for c in rec["cases"]:
        assert c["measured_bytes"] == c["predicted_bytes"]
    # Llama-3-8B, tp 2: 4 of 8 KV heads per rank: 32 x [2, 16, 16, 4, 128] x 2 B
    assert ranks[0]["measured_bytes"] == 32 * 2 * 16 * 16 * 4 * 128 * 2
    assert rec["allreduce"]["bus_bytes_per_s"] > 0


def test_committed_runs_validate(capsys):
    assert list(RUNS.glob("*.json")), "a measured run is committed"
    assert run(["validate"]) == 0
