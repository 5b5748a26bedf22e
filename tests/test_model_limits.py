"""Model context limits as the engines enforce them (issue 15), each limit derived by hand
from the config keys vLLM's ``_get_and_verify_max_len`` reads."""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run
from kvplan.core.errors import ConfigError
from kvplan.loaders.hf_config import parse_config
from kvplan.loaders.resolve import load_model

BASE = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "intermediate_size": 11008, "torch_dtype": "bfloat16"}


def limit(config: dict):
    return parse_config({**BASE, **config}, name="t", source="t.json").context_limit


def error_line(capsys, *args: str) -> str:
    assert run(list(args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("name,tokens,source", [
    ("llama-3.1-8b", 131_072, "max_position_embeddings = 131,072"),  # llama3 rope: not scaled
    # yarn: original_max_position_embeddings 4,096 x factor 40 = 163,840
    ("deepseek-v3", 4096 * 40, "rope_scaling yarn: original_max_position_embeddings 4,096 x factor 40"),
    ("qwen3-235b-a22b", 40_960, "max_position_embeddings = 40,960"),
    ("llama-65b", 2048, "max_sequence_length = 2,048"),  # the file's key wins a tie with a default
    ("kimi-linear-48b-a3b-instruct", 1_048_576, "model_max_length = 1,048,576"),
    ("mamba-2.8b", None, None),  # no length key: no limit
])
def test_builtin_limits(name, tokens, source):
    lim = load_model(name).context_limit
    assert (lim.tokens if lim else None) == tokens
    assert (lim.source if lim else None) == source


def test_a_key_the_file_leaves_out_has_the_transformers_default():
    # falcon-7b's config.json has no length key; transformers' FalconConfig says 2048
    lim = load_model("falcon-7b").context_limit
    assert lim.tokens == 2048 and "transformers 5.25.0 falcon default" in lim.source
    # Gemma-3's text_config leaves it out too (131,072), and its linear factor 8 is not applied
    # again (vLLM: the length is already scaled)
    lim = load_model("gemma-3-27b-it").context_limit
    assert lim.tokens == 131_072 and lim.source.startswith("text_config.max_position_embeddings")


def test_rope_scaling_rules():
    assert limit({"max_position_embeddings": 4096}).tokens == 4096
    assert limit({"max_position_embeddings": 4096,
                  "rope_scaling": {"rope_type": "linear", "factor": 4.0}}).tokens == 16_384
    assert limit({"max_position_embeddings": 4096,  # the older spelling: type
                  "rope_scaling": {"type": "dynamic", "factor": 2}}).tokens == 8192
    # yarn starts from its original length: 32,768 x 4 = 131,072 whatever max_position_embeddings
    assert limit({"max_position_embeddings": 40_960, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}}
    ).tokens == 131_072
    for kind in ("llama3", "longrope", "su"):  # these do not lengthen the declared context
        assert limit({"max_position_embeddings": 8192,
                      "rope_scaling": {"rope_type": kind, "factor": 8.0}}).tokens == 8192
    # transformers 5: rope_parameters, one mapping per layer type
    assert limit({"max_position_embeddings": 8192, "rope_parameters": {
        "full_attention": {"rope_type": "default"},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0}}}).tokens == 16_384
    # the smallest key wins; model_max_length may lift the limit back up
    assert limit({"max_position_embeddings": 8192, "seq_length": 4096}).tokens == 4096
    lim = limit({"max_position_embeddings": 8192, "model_max_length": 65_536})
    assert lim.tokens == 65_536 and lim.source == "model_max_length = 65,536"


@pytest.mark.parametrize("value", [-1, 0, True, "4096", 1e300, float("nan")])
def test_a_bad_length_is_one_error_naming_the_field(value):
    with pytest.raises(ConfigError) as e:
        limit({"max_position_embeddings": value})
    assert "max_position_embeddings" in str(e.value)
    with pytest.raises(ConfigError):
        limit({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear",
                                                                 "factor": value}})


def test_fit_refuses_past_the_limit_and_names_the_override(capsys):
    err = error_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-c", "256k")
    assert err == ("kvplan: error: --context: context 262,144 exceeds llama-3.1-8b's limit of "
                   "131,072 tokens (max_position_embeddings = 131,072); vLLM and SGLang refuse "
                   "it at start-up; pass --allow-long-max-model-len to plan it anyway (the launch "
                   "lines then set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    err = error_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-c", "8k",
                     "--max-model-len", "200k")
    assert err.startswith("kvplan: error: --max-model-len: context 204,800 exceeds")
    # at the limit exactly is fine
    assert run(["fit", "llama-3.1-8b", "--gpu", "h100", "-c", "128k", "--json"]) == 0
    capsys.readouterr()


def test_the_override_is_stated_and_set_in_the_launch_lines(capsys):
    assert run(["fit", "llama-3.1-8b", "--gpu", "h100", "-c", "256k",
                "--allow-long-max-model-len", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert any(n.startswith("context 262,144 exceeds llama-3.1-8b's limit of 131,072 tokens "
                            "(max_position_embeddings = 131,072): planned because of "
                            "--allow-long-max-model-len") for n in d["notes"])
    assert d["launch"]["vllm"].startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve ")
    assert "--max-model-len 262144" in d["launch"]["vllm"]
    assert d["launch"]["sglang"].startswith(
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server ")


def test_sweep_rows_past_the_limit_say_so(capsys):
    assert run(["sweep", "llama-3-8b", "--gpu", "h100", "-c", "4k,16k", "--batch", "1",
                "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ok, past = rows
    assert ok["context_tokens"] == 4096 and ok["fits"] is True and ok["error"] == ""
    assert past["context_tokens"] == 16_384 and past["fits"] is False
    assert past["tpot_ms"] is None and past["max_concurrency"] == 0
    assert past["error"] == ("context exceeds llama-3-8b's limit of 8,192 tokens "
                             "(max_position_embeddings = 8,192); pass --allow-long-max-model-len "
                             "to plan it")


def test_curve_leaves_out_points_past_the_limit(capsys):
    assert run(["curve", "llama-3-8b", "--gpu", "h100", "--x", "context", "--y", "concurrency",
                "--points", "4k,8k,16k", "--json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    (s,) = d["series"]
    assert [p["x"] for p in s["points"]] == [4096, 8192]
    assert ("points past llama-3-8b's limit of 8,192 tokens (max_position_embeddings = 8,192) "
            "left out: 16,384") in out.err
    err = error_line(capsys, "curve", "llama-3-8b", "--gpu", "h100", "--x", "batch", "-c", "16k")
    assert err.startswith("kvplan: error: --context: context 16,384 exceeds llama-3-8b's limit")


SCENARIO = """kvplan: 1
model: llama-3-8b
hardware: {{gpu: h100, gpus_per_node: 8, nodes: 1}}
serving: {{tp: 1{extra}}}
workload:
  request_rate: 1
  prompt_tokens: {{uniform: {{min: 2000, max: 12000}}}}
  output_tokens: 100
samples: 200
"""


def test_scenario_requests_past_the_limit_are_left_out_and_said(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(extra=""), encoding="utf-8")
    assert run(["plan", str(f), "--format", "json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["max_model_len"] == 8192
    assert any("requests are longer than llama-3-8b's limit of 8,192 tokens" in w
               for w in d["warnings"])
    f.write_text(SCENARIO.format(extra=", max_model_len: 16k"), encoding="utf-8")
    err = error_line(capsys, "plan", str(f))
    assert err.startswith(f"kvplan: error: {f}: serving.max_model_len: context 16,384 exceeds "
                          "llama-3-8b's limit of 8,192 tokens")
    assert "pass serving.allow_long_max_model_len: true to plan it anyway" in err
    f.write_text(SCENARIO.format(extra=", max_model_len: 16k, allow_long_max_model_len: true"),
                 encoding="utf-8")
    assert run(["plan", str(f), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 16_384


def test_a_warning_is_printed_once(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(extra=""), encoding="utf-8")
    assert run(["plan", str(f), "-f", "markdown"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out.count("requests are longer than") == 1  # in the report
    assert run(["plan", str(f)]) == 0
    out = capsys.readouterr()
    assert out.err.count("requests are longer than") == 1 and "longer than" not in out.out


def test_size_marks_contexts_past_the_limit(capsys):
    """Llama-3 70B has 8,192 positions: ``size`` still counts 32k (80 x 8 x 128 x 2 x 2 B x
    32,768 = 10,737,418,240 B) but marks it, in the table and the JSON."""
    assert run(["size", "llama-3-70b", "-c", "8k,32k", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["context_limit_tokens"], d["context_limit_source"]) == (
        8192, "max_position_embeddings = 8,192")
    assert [(s["context_tokens"], s["per_gpu_bytes"], s["past_context_limit"])
            for s in d["sequences"]] == [(8192, 2_684_354_560, False),
                                         (32768, 10_737_418_240, True)]
    assert run(["size", "llama-3-70b", "-c", "8k,32k"]) == 0
    out = capsys.readouterr().out
    assert "model limit" in out and out.count("past it") == 1
    assert "32,768 tokens: past llama-3-70b's limit of 8,192 tokens" in " ".join(out.split())


def test_size_within_the_limit_has_no_mark(capsys):
    assert run(["size", "llama-3.1-8b", "-c", "128k"]) == 0
    out = capsys.readouterr().out
    assert "model limit" not in out and "past it" not in out
