"""JSON that the parser itself refuses — nesting deeper than the recursion limit, integers
over Python's 4,300-digit limit — is one line and exit 2 wherever kvplan reads JSON: a
config.json, a calibration run, a serving calibration, a trace (issue 16, class 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.cli.main import run

DEEP = '{"a": ' + "[" * 100_000
BIG = '{"num_hidden_layers": ' + "9" * 5000 + "}"


def one_line(argv, capsys, monkeypatch=None):
    code = run(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("kvplan: error: ")
    return err


@pytest.mark.parametrize("text", [DEEP, BIG], ids=["deep", "long-int"])
def test_config_json(tmp_path, capsys, text):
    p = tmp_path / "config.json"
    p.write_text(text)
    assert "unreadable JSON" in one_line(["size", str(p)], capsys)


@pytest.mark.parametrize("text", [DEEP, BIG], ids=["deep", "long-int"])
def test_run_file(tmp_path, capsys, text):
    p = tmp_path / "run.json"
    p.write_text(text)
    assert "corrupt run file" in one_line(["validate", str(p)], capsys)


def test_serving_calibration(tmp_path, capsys, monkeypatch, calibrations_on):
    (tmp_path / "h200-sxm--vllm.json").write_text(DEEP)
    monkeypatch.setenv("KVPLAN_CALIBRATION_PATH", str(tmp_path))
    err = one_line(["curve", "llama-3.1-8b", "--gpu", "h200-sxm"], capsys)
    assert "h200-sxm--vllm.json: corrupt (RecursionError)" in err


def test_trace_line(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text('{"prompt_tokens": ' + "9" * 5000 + "}\n")
    s = tmp_path / "s.yaml"
    s.write_text("kvplan: 1\nmodel: llama-3.1-8b\nhardware:\n  gpu: h100\nserving:\n  tp: 1\n"
                 "workload:\n  request_rate: 5\n  trace: t.jsonl\n")
    assert "t.jsonl:1: unreadable JSON (ValueError)" in one_line(["plan", str(s)], capsys)


@pytest.mark.parametrize("argv,words", [(["calibrate", "--device", "nope"], "--device: unknown device"),
                                        (["calibrate", "--distributed", "-1"], "--distributed"),
                                        (["calibrate", "x.csv"], "only with --from-benchmarks")])
def test_calibrate_values_are_one_line(argv, words, capsys):
    assert words in one_line(argv, capsys)


@pytest.mark.parametrize("url", ["http://[::1", "ftp://x", "http://h:99999", "user:pw@host"])
def test_bad_hf_endpoint_is_one_line(url, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    err = one_line(["size", "someorg/some-model-xyz"], capsys)
    assert "HF_ENDPOINT: not an http(s) URL" in err and "pw" not in err


def test_hub_errors_redact_endpoint_secrets():
    import os

    from kvplan.loaders.hub import shown_endpoint

    old = os.environ.get("HF_ENDPOINT")
    os.environ["HF_ENDPOINT"] = "https://user:s3cret@hub.example:8443/api?token=abc"
    try:
        assert shown_endpoint() == "https://***@hub.example:8443/api?***"
    finally:
        if old is None:
            del os.environ["HF_ENDPOINT"]
        else:
            os.environ["HF_ENDPOINT"] = old


def test_sample_and_turn_counts_are_bounded(tmp_path, capsys):
    """Sizes a user controls are refused before any work starts (issue 16, class 1)."""
    example = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "examples"
                  / "chat-shared-prompt.yaml")
    assert "--samples: expected 1 to 1,000,000" in one_line(
        ["plan", example, "--samples", "100000000"], capsys)
    s = tmp_path / "s.yaml"
    s.write_text("kvplan: 1\nmodel: llama-3.1-8b\nhardware:\n  gpu: h100\nserving:\n  tp: 1\n"
                 "workload:\n  request_rate: 5\n  prompt_tokens: 100\n  output_tokens: 10\n"
                 "samples: 1000000000000000000000000000000\n")
    assert run(["plan", str(s)]) == 2
    err = capsys.readouterr().err
    assert "samples: Input should be less than or equal to 1000000" in err and "Traceback" not in err


def _bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\nkvplan: 1\n"


@pytest.mark.parametrize("text,words", [(_bomb(), "expands to more than 100,000 YAML nodes"),
                                        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply")],
                         ids=["alias-bomb", "deep"])
@pytest.mark.parametrize("cmd", ["plan", "gpu"])
def test_yaml_bombs_are_refused_fast(tmp_path, capsys, text, words, cmd):
    import time

    p = tmp_path / "x.yaml"
    p.write_text(text)
    argv = ["plan", str(p)] if cmd == "plan" else ["fit", "llama-3.1-8b", "--gpu", str(p)]
    t = time.perf_counter()
    err = one_line(argv, capsys)
    # newer PyYAML refuses deep nesting itself ("exceeded maximum nesting depth")
    assert words in err or (words == "nested too deeply" and "maximum nesting depth" in err)
    assert time.perf_counter() - t < 10


@pytest.mark.parametrize("value, words", [
    ("1.0e40000000", "is too large a token count"),   # built, it would take minutes
    ("1e13", "over kvplan's bound of 1,099,511,627,776 tokens"),
])
def test_huge_contexts_are_refused_before_work(capsys, value, words):
    import time

    t = time.perf_counter()
    assert words in one_line(["size", "llama-3.1-8b", "-c", value], capsys)
    assert time.perf_counter() - t < 2


def test_huge_pool_size_is_refused(capsys):
    err = one_line(["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "1.0e40000000"],
                   capsys)
    assert "is too large a size" in err


@pytest.mark.parametrize("key, value", [("num_seqs", "y" * 11), ("num_blocks", 10**20),
                                        ("kv_dtype", None), ("block_size_tokens", True)])
def test_run_file_inputs_are_typed(tmp_path, capsys, key, value):
    """A footprint case whose inputs have the wrong type or size: one line naming the input (a
    string count would multiply into a string of unbounded size)."""
    import json as _json

    src = next(Path(__file__).parents[1].glob("calibrate/runs/*.json"))
    doc = _json.loads(src.read_text())
    case = next(c for c in doc["cases"] if c["kind"] == "footprint"
                and "num_seqs" in c["inputs"] and not c["inputs"].get("context_tokens"))
    case["inputs"][key] = value
    p = tmp_path / "run.json"
    p.write_text(_json.dumps(doc))
    assert f"inputs.{key} must be" in one_line(["validate", str(p)], capsys)


def test_given_pool_past_the_gpu_does_not_fit(capsys):
    """Llama-3.1-8B on one H100 (vLLM main): 85,045,477,376 B total - 16,060,522,496 weights -
    2,029,112,524 activation peak - 1,241,513,984 runtime overhead = 65,714,328,372 B is the
    largest --kv-cache-memory that can be allocated; one byte more cannot."""
    import json as _json

    def fit(pool: int) -> dict:
        assert run(["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", str(pool),
                    "--json"]) == 0
        return _json.loads(capsys.readouterr().out)

    ok, over = fit(65_714_328_372), fit(65_714_328_373)
    assert ok["fits"] and ok["max_concurrency"] == 65_714_328_372 // (8192 * 131_072)
    assert not over["fits"] and over["max_concurrency"] == 0
    assert over["verdict"].startswith("does not fit: the given 61.20 GiB KV pool + 14.96 GiB "
                                      "weights")
    assert "more than the GPU's 79.20 GiB" in over["verdict"]


def test_given_pool_is_checked_on_every_pipeline_stage(capsys):
    """Gemma-3-4B on three L4s (PP 3): every stage gets the given pool beside its own weights.
    Stage 1 (no embedding, no LM head) has room for it; stages 0 and 2 do not, so the plan
    does not fit."""
    import json as _json

    assert run(["fit", "gemma-3-4b-it", "--gpu", "l4", "--pp", "3", "-c", "8k",
                "--kv-cache-memory", "19979636736", "--json"]) == 0
    d = _json.loads(capsys.readouterr().out)
    assert not d["fits"] and " on stage " in d["verdict"]


def test_sizes_under_one_byte_are_refused(capsys):
    assert "less than one byte" in one_line(["fit", "llama-3.1-8b", "--gpu", "h100",
                                             "--kv-cache-memory", "0.5"], capsys)


def test_exponents_with_leading_zeros_parse():
    from kvplan.core.units import parse_bytes, parse_tokens

    assert parse_tokens("1e00004") == parse_tokens("1e+0004") == 10_000
    assert parse_bytes("1.5e3") == 1500


@pytest.mark.parametrize("argv, words", [
    (["calibrate", "--models", "zzz"], "--models: unknown model 'zzz'"),
    (["validate", "--by", "zzz"], "--by: applies to measured serving benchmarks"),
    (["validate", "--tpot-tolerance", "nan"], "--tpot-tolerance: applies to measured serving"),
])
def test_options_checked_before_work(capsys, argv, words):
    assert words in one_line(argv, capsys)
