"""The FAIL classes of the hostile-input audit (audit16), pinned as they behave now: every
hostile input is one `kvplan: error:` line and exit 2 (no traceback, no hang, no segfault);
an absolute GPU path in a scenario plans; control characters never reach stdout raw."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvplan.cli.main import run

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "hardware_specs" / "h100-sxm.yaml"
MAMBA = ROOT / "tests" / "fixtures" / "configs" / "state-spaces__mamba-130m-hf.json"
LLAMA = ROOT / "tests" / "fixtures" / "configs" / "meta-llama__Llama-3.1-8B.json"
LONG = "x" * 300
NAN, INF = float("nan"), float("inf")
BIG = "BIG5000"  # written as a 5000-digit integer (Python refuses to build its text)

BASE = {
    "kvplan": 1, "name": "audit", "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100", "gpus_per_node": 8, "nodes": "search"},
    "serving": {"engine": "vllm", "tp": 1, "pp": 1, "kv_dtype": "auto"},
    "workload": {"request_rate": 10,
                 "prompt_tokens": {"lognormal": {"p50": 1500, "p95": 6000}, "max": "24k"},
                 "output_tokens": {"lognormal": {"p50": 300, "p95": 1200}, "max": "4k"},
                 "shared_prefix_tokens": 2000},
    "slo": {"ttft_ms": 2000, "tpot_ms": 50, "percentile": 95},
    "samples": 1000,
}


def one_line(argv, capsys):
    code = run(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("kvplan: error: "), err
    return err


def merge(doc: dict, over: dict) -> dict:
    """`over` replaces top-level keys, or keys of a top-level section (None deletes one)."""
    doc = copy.deepcopy(doc)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key].update(value)
            doc[key] = {k: v for k, v in doc[key].items() if v is not None}  # None deletes
        else:
            doc[key] = value
    return doc


def scenario(tmp_path: Path, over: dict, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(merge(BASE, over), sort_keys=False).replace(BIG, "9" * 5000))
    return p


def gpu_yaml(tmp_path: Path, over: dict, name: str = "gpu.yaml") -> Path:
    doc = merge(yaml.safe_load(H100.read_text()), {"aliases": [], **over})
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False).replace(BIG, "9" * 5000))
    return p


def run_file(tmp_path: Path, edit) -> Path:
    doc = json.loads(next((ROOT / "calibrate" / "runs").glob("*.json")).read_text())
    edit(doc)
    p = tmp_path / "run.json"
    p.write_text(json.dumps(doc))
    return p


def _wl(key, value):
    return {"workload": {key: value}}


SCENARIOS = [
    ("normal-mean-nan", _wl("prompt_tokens", {"normal": {"mean": NAN, "std": 10}}),
     "workload.prompt_tokens: mean must be a finite number"),
    ("normal-mean-inf", _wl("prompt_tokens", {"normal": {"mean": INF, "std": 10}}),
     "workload.prompt_tokens: mean must be a finite number"),
    ("normal-std-inf", _wl("prompt_tokens", {"normal": {"mean": 100, "std": INF}}),
     "workload.prompt_tokens: std must be a finite number"),
    ("normal-std-nan", _wl("prompt_tokens", {"normal": {"mean": 100, "std": NAN}}),
     "workload.prompt_tokens: std must be a finite number"),
    ("lognormal-inf", _wl("prompt_tokens", {"lognormal": {"p50": 100, "p95": INF}}),
     "workload.prompt_tokens: p95 must be a finite number"),
    ("lognormal-1e300", _wl("prompt_tokens", {"lognormal": {"p50": 100, "p95": 1e300}}),
     "workload.prompt_tokens: p95 must be a finite number up to 1,099,511,627,776 (got 1e+300)"),
    ("thinking-nan", _wl("thinking_tokens", {"normal": {"mean": NAN, "std": 1}}),
     "workload.thinking_tokens: mean must be a finite number"),
    ("tokens-per-turn-inf", {"workload": {"turns": 3, "tokens_per_turn":
                                          {"normal": {"mean": INF, "std": 1}}}},
     "workload.tokens_per_turn: mean must be a finite number"),
    ("block-size-1e30", {"serving": {"block_size": 10**30}},
     "serving.block_size: Input should be less than or equal to 2147483647"),
    ("mnbt-1e30", {"serving": {"max_num_batched_tokens": 10**30}},
     "serving.max_num_batched_tokens: is over kvplan's bound"),
    ("kvplan-true", {"kvplan": True}, "kvplan: Input should be a valid integer (got True)"),
    ("kvplan-1.0", {"kvplan": 1.0}, "kvplan: Input should be a valid integer (got 1.0)"),
    ("offload-bw-nan", {"offload": {"cpu": {"bytes": "256GiB", "bandwidth": NAN}}},
     "offload.cpu.bandwidth: must be a positive finite number"),
    ("offload-bw-inf", {"offload": {"cpu": {"bytes": "256GiB", "bandwidth": INF}}},
     "offload.cpu.bandwidth: must be a positive finite number"),
    ("disagg-bw-nan", {"disaggregated": {"link_bandwidth": NAN}},
     "disaggregated.link_bandwidth: must be a positive finite number"),
    ("disagg-bw-inf", {"disaggregated": {"link_bandwidth": INF}},
     "disaggregated.link_bandwidth: must be a positive finite number"),
    ("prompt-5000-digits", _wl("prompt_tokens", BIG), "unreadable YAML (Exceeds the limit"),
    ("model-long-name", {"model": LONG}, "File name too long"),
]


@pytest.mark.parametrize("over, words", [c[1:] for c in SCENARIOS], ids=[c[0] for c in SCENARIOS])
def test_scenario_values(tmp_path, capsys, over, words):
    assert words in one_line(["plan", str(scenario(tmp_path, over))], capsys)


GPUS = [
    ("memory-1e400", {"memory": {"marketed_bytes": 10**400, "driver_total_bytes": 10**400}},
     "memory.marketed_bytes: Input should be less than or equal to"),
    ("bandwidth-1e400", {"hbm_bandwidth_bytes_per_s": 10**400},
     "hbm_bandwidth_bytes_per_s: Input should be less than or equal to"),
    ("flops-1e400", {"dense_flops_per_s": {"bf16": 10**400}},
     "dense_flops_per_s.bf16: Input should be less than or equal to"),
    ("price-inf", {"price_usd_per_gpu_hour": INF},
     "price_usd_per_gpu_hour: Input should be a finite number"),
    ("price-true", {"price_usd_per_gpu_hour": True},
     "price_usd_per_gpu_hour: Input should be a valid number (got True)"),
    ("price-str", {"price_usd_per_gpu_hour": "3"},
     "price_usd_per_gpu_hour: Input should be a valid number (got the string '3'"),
    ("eff-hbm-true", {"efficiency": {"hbm_bandwidth": True, "source": "x"}},
     "efficiency.hbm_bandwidth: Input should be a valid number (got True)"),
    ("eff-allreduce-inf", {"efficiency": {"allreduce_latency_us": INF, "source": "x"}},
     "efficiency.allreduce_latency_us: Input should be a finite number"),
    ("memory-5000-digits", {"memory": {"marketed_bytes": BIG}}, "unreadable YAML (Exceeds the limit"),
]


@pytest.mark.parametrize("cmd", ["fit", "curve"])
@pytest.mark.parametrize("over, words", [c[1:] for c in GPUS], ids=[c[0] for c in GPUS])
def test_gpu_yaml_values(tmp_path, capsys, over, words, cmd):
    p = str(gpu_yaml(tmp_path, over))
    argv = (["fit", "llama-3.1-8b", "--gpu", p, "--json"] if cmd == "fit"
            else ["curve", "llama-3.1-8b", "--gpu", p, "--y", "cost", "--json"])
    assert words in one_line(argv, capsys)


CLI = [
    ("size-model-long", ["size", LONG], "File name too long"),
    ("fit-gpu-long", ["fit", "llama-3.1-8b", "--gpu", LONG], "File name too long"),
    ("fit-gpu-long-yaml", ["fit", "llama-3.1-8b", "--gpu", LONG + ".yaml"], "File name too long"),
    ("plan-o-long", ["plan", "{scenario}", "-o", LONG + ".md"], "File name too long"),
    ("sweep-output-long", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--output", LONG + ".csv"],
     "File name too long"),
    ("curve-plot-long", ["curve", "llama-3.1-8b", "--gpu", "h100", "--plot", LONG + ".png"],
     "File name too long"),
    ("init-long", ["init", LONG + ".yaml"], "File name too long"),
    ("curve-gpu-comma", ["curve", "llama-3.1-8b", "--gpu", ","], "--gpu: expected one or more values"),
    ("sweep-gpu-comma", ["sweep", "llama-3.1-8b", "--gpu", ","], "--gpu: expected one or more values"),
    ("sweep-kv-dtype", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "zzz"],
     "--kv-dtype: unknown KV format 'zzz'"),
    ("sweep-kv-dtype-list", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "fp8,zzz"],
     "--kv-dtype: unknown KV format 'zzz'"),
    ("sweep-engine", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--engine", "zzz"],
     "--engine: unknown engine 'zzz'"),
    ("sweep-engine-list", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm,zzz"],
     "--engine: unknown engine"),
    ("sweep-weight-dtype", ["sweep", "llama-3.1-8b", "--gpu", "h100", "--weight-dtype", "zzz"],
     "--weight-dtype: unknown weight dtype 'zzz'"),
    ("sweep-batch-2**63", ["sweep", "llama-3.1-8b", "--gpu", "h100",
                           "--batch", "9223372036854775808"],
     "--batch: '9223372036854775808' is over kvplan's bound"),
    ("sweep-context-1e30", ["sweep", "llama-3.1-8b", "--gpu", "h100", "-c", "1.0e30"],
     "--context: '1.0e30' is too large a token count"),
    ("size-c-huge", ["size", "llama-3.1-8b", "-c", "1.0e40000000"], "too large a token count"),
    ("fit-c-huge", ["fit", "llama-3.1-8b", "--gpu", "h100", "-c", "1.0e40000000"],
     "too large a token count"),
    ("fit-kvcm-huge", ["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory",
                       "1.0e40000000"], "too large a size"),
    ("fit-kvcm-huge-gib", ["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory",
                           "1.0e40000000GiB"], "too large a size"),
    ("fit-shared-prefix-huge", ["fit", "llama-3.1-8b", "--gpu", "h100", "--shared-prefix",
                                "1.0e40000000"], "too large a token count"),
    ("fit-max-model-len-huge", ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                                "1.0e40000000"], "too large a token count"),
]


@pytest.mark.parametrize("argv, words", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_cli_values(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    argv = [str(scenario(tmp_path, {})) if a == "{scenario}" else a for a in argv]
    t = time.perf_counter()
    assert words in one_line(argv, capsys)
    assert time.perf_counter() - t < 2  # a huge number is refused before it is built
    assert not any(p.name.startswith(LONG[:50]) for p in tmp_path.iterdir())


def _alarm(signum, frame):
    raise TimeoutError("kvplan blocked on a special file")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("role", ["scenario", "trace", "run", "benchmarks"])
def test_special_files(tmp_path, capsys, kind, role):
    if kind == "fifo":
        special = tmp_path / "fifo"
        os.mkfifo(special)
    else:
        special = Path("/dev/zero")
    argv = {"scenario": ["plan", str(special)],
            "trace": ["plan", str(scenario(tmp_path, {"workload": {
                "prompt_tokens": None, "output_tokens": None,
                "trace": special.name if kind == "fifo" else str(special)}}))],
            "run": ["validate", str(special)],
            "benchmarks": ["validate", "--benchmarks", str(special)]}[role]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        err = one_line(argv, capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert f"{special.name if kind == 'fifo' else special}: not a regular file" in err


MAMBA_RANKS = [(-1, "must be >= 1, got -1"), (0, "must be >= 1, got 0"),
               (48.5, "expected an integer, got 48.5"), (True, "expected an integer, got True"),
               ("48", "expected an integer, got '48'"), ([48], "expected an integer, got [48]")]


@pytest.mark.parametrize("rank, words", MAMBA_RANKS, ids=[repr(r) for r, _ in MAMBA_RANKS])
def test_mamba_dt_rank(tmp_path, capsys, rank, words):
    doc = json.loads(MAMBA.read_text())
    doc["time_step_rank"] = rank
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(doc))
    assert f"time_step_rank: {words}" in one_line(["fit", str(tmp_path / "m"), "--gpu", "h100"], capsys)


def _first_case_id(doc):
    doc["cases"][0]["id"] = ["x"]


RUNS = [
    ("distributed-list", lambda d: d.__setitem__("distributed", [1]),
     "cases and distributed.cases must be lists of objects"),
    ("distributed-str", lambda d: d.__setitem__("distributed", "x"),
     "cases and distributed.cases must be lists of objects"),
    ("case-id-list", _first_case_id, "a case is not an object with a string id"),
    ("version-true", lambda d: d.__setitem__("version", True),
     "version: expected an integer schema version, got 'True'"),
]


@pytest.mark.parametrize("edit, words", [c[1:] for c in RUNS], ids=[c[0] for c in RUNS])
def test_run_file_shapes(tmp_path, capsys, edit, words):
    assert words in one_line(["validate", str(run_file(tmp_path, edit))], capsys)


DEEP = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"


@pytest.mark.parametrize("role", ["scenario", "gpu"])
def test_yaml_nested_100k_levels(tmp_path, role):
    """libyaml's recursive composer segfaulted here: a subprocess, so a crash fails one test."""
    p = tmp_path / "deep.yaml"
    p.write_text(DEEP)
    argv = ["plan", str(p)] if role == "scenario" else ["fit", "llama-3.1-8b", "--gpu", str(p)]
    proc = subprocess.run([sys.executable, "-m", "kvplan.cli.main", *argv], capture_output=True,
                          text=True, timeout=30, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    err = proc.stderr
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("kvplan: error: ")
    assert "nested too deeply" in err or "maximum nesting depth" in err


@pytest.mark.parametrize("value", ["inf", "nan", "1e300"])
def test_hub_timeout_is_bounded(tmp_path, capsys, monkeypatch, value):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", value)
    err = one_line(["size", "someorg/not-cached-xyz"], capsys)
    assert f"KVPLAN_HUB_TIMEOUT: expected 0 to 3,600 seconds, got '{value}'" in err


def test_absolute_gpu_path_in_scenario_plans(tmp_path, capsys, monkeypatch):
    (tmp_path / "hw").mkdir()
    gpu = gpu_yaml(tmp_path / "hw", {}, "h100copy.yaml")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    s = scenario(tmp_path, {"hardware": {"gpu": str(gpu.resolve())}})
    code = run(["plan", str(s), "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err and json.loads(out)


def test_html_report_escapes_control_characters(tmp_path, capsys):
    s = scenario(tmp_path, {"name": "evil\x1b]0;X\x07title"})
    code = run(["plan", str(s), "-f", "html"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "<html" in out.lower() and "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;X\\x07title" in out  # shown as escapes


@pytest.mark.parametrize("fmt", ["csv", "md"])
def test_sweep_escapes_model_folder_name(tmp_path, capsys, fmt):
    folder = tmp_path / "esc\x1b]0;X\x07name"
    folder.mkdir()
    (folder / "config.json").write_text(LLAMA.read_text())
    code = run(["sweep", str(folder), "--gpu", "h100", "--format", fmt])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "esc\\x1b]0;X\\x07name" in out and "\x1b" not in out and "\x07" not in out
