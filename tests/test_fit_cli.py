"""``kvplan fit`` and ``kvplan gpus`` through the CLI (``kvplan.cli.main.run``): the public JSON
keys with hand-derived numbers, and every bad input as one ``kvplan: error:`` line on stderr with
exit status 2 and no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import fail

from kvplan.cli.main import run
from kvplan.loaders.hardware import load_gpu

ROOT = Path(__file__).resolve().parent.parent
H100_YAML = ROOT / "hardware_specs" / "h100-sxm.yaml"
MiB, GiB = 2**20, 2**30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def driver_total(gpu: str) -> int:
    data = yaml.safe_load((ROOT / "hardware_specs" / f"{gpu}.yaml").read_text())
    return data["memory"]["driver_total_bytes"]


def fit_json(capsys, *args: str) -> dict:
    code = run(["fit", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# ---- JSON ------------------------------------------------------------------------------------

def llama_3_8b_tp2_bytes() -> int:
    """Llama-3-8B bf16 per GPU at tp 2 (config: hidden 4096, 32 layers, 32 heads, 8 KV heads,
    head_dim 128, intermediate 14336, vocab 128,256, untied)."""
    h = 4096
    layer = (32 * 128 // 2 * h  # q_proj rows split
             + 2 * (8 // 2) * 128 * h  # k, v: 4 KV heads per rank
             + h * (32 * 128 // 2)  # o_proj columns split
             + 3 * (14336 // 2) * h  # gate, up, down
             + 2 * h)  # norms, replicated
    vocab_rows = 128_256 // 2  # a multiple of 64 already
    return (32 * layer + 2 * vocab_rows * h + h) * 2


def test_fit_json_public_keys_and_numbers(capsys):
    total = driver_total("h100-sxm")  # 85,045,477,376
    act, over = GiB, 2 * GiB
    d = fit_json(capsys, "llama-3.1-8b", "--gpu", "h100", "--tp", "2", "-c", "16k",
                 "--activation-memory", "1GiB", "--overhead-memory", "2GiB")
    for key in ("model", "gpu", "engine", "tp", "pp", "kv_dtype", "weight_dtype", "context_tokens",
                "params_total", "params_active", "memory", "kv_pool_tokens", "per_sequence_bytes",
                "max_concurrency", "engine_max_concurrency", "fits", "launch"):
        assert key in d, key
    assert (d["model"], d["gpu"], d["engine"]) == ("llama-3.1-8b", "h100-sxm", "vllm")
    assert (d["tp"], d["pp"], d["kv_dtype"], d["weight_dtype"]) == (2, 1, "bf16", "bf16")
    assert d["context_tokens"] == 16384
    assert d["params_total"] == d["params_active"] == 8_030_261_248
    m = d["memory"]
    for key in ("total_bytes", "weights_bytes", "activation_bytes", "runtime_overhead_bytes",
                "kv_pool_bytes"):
        assert type(m[key]) is int, key
    weights = llama_3_8b_tp2_bytes()
    pool = total * 92 // 100 - weights - act - over  # vLLM main: utilisation 0.92
    assert m == {**m, "total_bytes": total, "weights_bytes": weights, "activation_bytes": act,
                 "runtime_overhead_bytes": over, "kv_pool_bytes": pool}
    page = 16 * 4 * 128 * 2 * 2  # 4 KV heads per rank
    nb = pool // page // 32
    assert d["kv_pool_tokens"] == nb * 16
    assert d["per_sequence_bytes"] == 16384 * 32 * 4 * 128 * 2 * 2
    assert type(d["max_concurrency"]) is int and d["max_concurrency"] == nb // cdiv(16384, 16)
    assert type(d["engine_max_concurrency"]) is float
    assert d["engine_max_concurrency"] == pytest.approx(nb / 1024, abs=1e-4)
    assert d["fits"] is True
    assert isinstance(d["launch"], dict) and list(d["launch"])[0] == "vllm"
    assert "--tensor-parallel-size 2" in d["launch"]["vllm"]
    assert "--tp-size 2" in d["launch"]["sglang"]
    # no --concurrency: the engine keeps its default cap (the budget's), and the note says so
    assert "--max-num-seqs" not in d["launch"]["vllm"]
    assert d["launch_layout"] == {"tp": 2, "pp": 1, "dp": 1, "ep": 1, "dcp": 1,
                                  "suggested": False}
    assert d["launch_note"].startswith("the lines leave the engine's sequence cap at its default "
                                       f"(1,024, as the budget assumed): the pool holds "
                                       f"{nb // 1024:,} full-length 16,384-token sequences")


def test_fit_json_sglang_launch_and_pool(capsys):
    total = driver_total("h100-sxm")
    d = fit_json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang", "--tp", "2",
                 "--gpu-memory-utilization", "0.8", "--overhead-memory", "1GiB",
                 "--activation-memory", "1GiB")
    pool = (total - GiB) * 8 // 10 - llama_3_8b_tp2_bytes()
    assert d["memory"]["kv_pool_bytes"] == pool
    cell = 32 * 4 * 128 * 2 * 2
    assert d["kv_pool_tokens"] == pool // cell
    assert d["max_concurrency"] == pool // (8192 * cell)
    assert list(d["launch"])[0] == "sglang"
    assert "--tp-size 2" in d["launch"]["sglang"]
    assert "--tensor-parallel-size 2" in d["launch"]["vllm"]


def test_fit_json_kv_cache_memory(capsys):
    d = fit_json(capsys, "llama-3.1-8b", "--gpu", "h200", "--kv-cache-memory", "40GiB")
    assert d["memory"]["kv_pool_bytes"] == 40 * GiB
    assert d["kv_pool_tokens"] == 40 * GiB // (65_536 * 32) * 16 == 327_680
    assert d["max_concurrency"] == 40


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("name,close", [("h10", "h100-sxm"), ("h200-sxn", "h200-sxm")])
def test_unknown_gpu_suggests(capsys, name, close):
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", name)
    assert f"unknown GPU {name!r}" in line and "did you mean" in line and close in line


def test_gpu_yaml_missing_field(tmp_path, capsys):
    lines = H100_YAML.read_text().splitlines()
    kept = [ln for ln in lines if not ln.strip().startswith("driver_total_bytes:")]
    assert len(kept) == len(lines) - 1
    path = tmp_path / "broken.yaml"
    path.write_text("\n".join(kept) + "\n")
    memory_line = next(i for i, ln in enumerate(kept, 1) if ln.startswith("memory:"))
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", str(path))
    assert "memory.driver_total_bytes: missing required field" in line
    # the file and a line inside the memory block (the key's own line or its first child)
    assert any(f"{path}:{n}: " in line for n in (memory_line, memory_line + 1)), line


def test_gpu_yaml_negative_field(tmp_path, capsys):
    text = H100_YAML.read_text()
    assert "\ntdp_watts: 700\n" in text
    path = tmp_path / "negative.yaml"
    path.write_text(text.replace("\ntdp_watts: 700\n", "\ntdp_watts: -700\n"))
    n = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("tdp_watts:"))
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", str(path))
    assert f"{path}:{n}: tdp_watts: " in line and "greater than 0" in line and "-700" in line


def test_user_gpu_folder_is_usable_by_name(tmp_path, monkeypatch, capsys):
    text = H100_YAML.read_text()
    head = text.splitlines()[:4]
    assert head[0] == 'name: "H100 SXM"' and head[3].startswith("aliases: [")
    text = text.replace('name: "H100 SXM"', 'name: "Lab H100 Custom"', 1)
    text = text.replace(head[3], "aliases: [lab-gpu, labh100]", 1)
    folder = tmp_path / "gpus"
    folder.mkdir()
    (folder / "lab-h100.yaml").write_text(text)
    monkeypatch.setenv("KVPLAN_HARDWARE_PATH", str(folder))
    total = driver_total("h100-sxm")  # the copied file keeps the H100's driver total
    for name in ("lab-h100", "lab-gpu", "LAB_H100"):
        d = fit_json(capsys, "llama-3.1-8b", "--gpu", name, "--kv-cache-memory", "20GiB")
        assert d["gpu"] == "lab-h100", name
        assert d["memory"]["total_bytes"] == total
    assert run(["gpus", "--json"]) == 0
    keys = [g["key"] for g in json.loads(capsys.readouterr().out)]
    assert "lab-h100" in keys and "h100-sxm" in keys and len(keys) >= 20


def test_fp8_kv_on_a100_is_refused(capsys):
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", "a100-80gb-sxm", "--kv-dtype", "fp8")
    assert "--kv-dtype: " in line and "cannot run KV format fp8_e4m3 natively" in line
    assert "--allow-emulated" in line
    d = fit_json(capsys, "llama-3.1-8b", "--gpu", "a100-80gb-sxm", "--kv-dtype", "fp8",
                 "--allow-emulated", "--kv-cache-memory", "20GiB")
    assert d["kv_dtype"] == "fp8_e4m3"


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_bad_gpu_memory_utilization(capsys, value):
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization", value)
    assert "--gpu-memory-utilization: must be in (0, 1]" in line


def test_draft_with_other_vocabulary(capsys):
    line = fail(capsys, "fit", "llama-3.1-70b", "--gpu", "h200", "--tp", "2", "--draft-model",
                "llama-2-7b", "--num-speculative-tokens", "3")
    assert "--draft-model: " in line and "vocabulary 32000, the target 128256" in line


@pytest.mark.parametrize("value,needle", [("12XB", "is not a size"), ("abc", "is not a size"),
                                          ("-5GiB", "must be a positive size"),
                                          ("5PiB", "unknown unit")])
def test_bad_kv_cache_memory(capsys, value, needle):
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", f"--kv-cache-memory={value}")
    assert "--kv-cache-memory: " in line and needle in line


@pytest.mark.parametrize("value", ["-3", "0"])
def test_bad_concurrency(capsys, value):
    line = fail(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--concurrency", value)
    assert f"--concurrency: must be a positive integer, got {value}" in line


# ---- kvplan gpus -----------------------------------------------------------------------------

def test_gpus_json_and_aliases(monkeypatch, capsys):
    monkeypatch.delenv("KVPLAN_HARDWARE_PATH", raising=False)
    assert run(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)
    assert len(gpus) >= 19
    by_key = {g["key"]: g for g in gpus}
    assert by_key["h200-sxm"]["memory_driver_total_bytes"] == driver_total("h200-sxm")
    for alias in ("h200", "H200-SXM", "nvidia-h200", "h200_sxm"):
        assert load_gpu(alias).key == "h200-sxm", alias
    assert load_gpu("h100").key == "h100-sxm"
