"""Every launch line kvplan prints uses flags its engine has, with values the engine accepts
(issue 15), for built-in models x GPUs x engines. The engines' flags are recorded facts
(tests/fixtures/engine_flags/: vLLM 0.34.0 and SGLang 0.5.23 read from their own parsers by
scripts/engine_flags.py; trtllm-serve and llama-server transcribed from their sources)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kvplan.core.errors import KvplanError
from kvplan.loaders import builtins
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.launch import launch_commands

FLAGS = {p.stem: json.loads(p.read_text(encoding="utf-8"))
         for p in (Path(__file__).parent / "fixtures" / "engine_flags").glob("*.json")}
PREFIX = {"vllm": ["vllm", "serve"], "sglang": ["python", "-m", "sglang.launch_server"],
          "trtllm": ["trtllm-serve"], "llama.cpp": ["llama-server"]}
POSITIONAL = {"vllm": 1, "trtllm": 1, "sglang": 0, "llama.cpp": 0}


def problems(engine: str, line: str) -> list[str]:
    """What the engine would refuse in ``line`` (empty: it parses)."""
    spec = FLAGS[engine]
    text = line
    yaml_opts = None
    if engine == "trtllm":  # printf '%s\n' 'JSON' > extra.yaml && trtllm-serve ...
        first, _, text = line.partition(" && ")
        yaml_opts = json.loads(shlex.split(first)[2])
    words = shlex.split(text, comments=True)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)  # an environment assignment (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)
    out = []
    if words[:len(PREFIX[engine])] != PREFIX[engine]:
        return [f"not a {engine} command: {words[:3]}"]
    rest = words[len(PREFIX[engine]) + POSITIONAL[engine]:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        opt = spec["options"].get(flag)
        if opt is None:
            out.append(f"unknown flag {flag}")
            i += 1
            continue
        if opt["value"]:
            value = rest[i + 1] if i + 1 < len(rest) else None
            if value is None:
                out.append(f"{flag} needs a value")
            elif "choices" in opt and value not in opt["choices"]:
                out.append(f"{flag} {value}: not one of {opt['choices']}")
            elif value not in spec["checked_values"].get(flag, [value]):
                out.append(f"{flag} {value}: the engine refuses it")
            i += 2
        else:
            i += 1
    if yaml_opts is not None:
        keys = spec["yaml_keys"]
        out += [f"extra.yaml: unknown key {k}" for k in yaml_opts if k not in keys[""]]
        kv = yaml_opts.get("kv_cache_config", {})
        out += [f"extra.yaml: unknown key kv_cache_config.{k}" for k in kv
                if k not in keys["kv_cache_config"]]
        if kv.get("dtype") not in spec["checked_values"]["kv_cache_config.dtype"]:
            out.append(f"kv_cache_config.dtype {kv.get('dtype')}")
    return out


def test_the_checker_refuses_what_the_engines_refuse():
    assert problems("sglang", "python -m sglang.launch_server --model-path m --kv-cache-dtype fp8") \
        == ["--kv-cache-dtype fp8: not one of ['auto', 'bf16', 'bfloat16', 'fp4_mx_block16', "
            "'fp8_e4m3', 'fp8_e5m2', 'mxfp8', 'nvfp4']"]
    assert problems("vllm", "vllm serve m --kv-cache-dtype fp9 --no-such-flag") == [
        "--kv-cache-dtype fp9: the engine refuses it", "unknown flag --no-such-flag"]
    assert problems("vllm", "vllm serve m --quantization fp8 --enable-expert-parallel") == []
    assert problems("llama.cpp", "llama-server -m x.gguf -ctk fp8") == [
        "-ctk fp8: not one of ['bf16', 'f16', 'f32', 'iq4_nl', 'q4_0', 'q4_1', 'q5_0', 'q5_1', "
        "'q8_0']"]
    assert problems("trtllm", "printf '%s\\n' '{\"kv_cache_config\": {\"dtype\": \"fp8\", "
                    "\"bogus\": 1}}' > extra.yaml && trtllm-serve m --tp_size 2") == [
        "extra.yaml: unknown key kv_cache_config.bogus"]


MODELS = sorted({builtins._load(p)["name"] for p in builtins.index().values()})
SETUPS = [("h100", "auto", None, 1, 1), ("h200", "fp8", "fp8", 2, 1), ("b200", "nvfp4", None, 4, 1),
          ("mi300x", "auto", None, 1, 2), ("l40s", "fp8", "awq", 2, 2)]


@pytest.mark.parametrize("name", MODELS)
def test_every_launch_line_parses(name):
    model = load_model(name)
    checked = 0
    for gpu_key, kv, wd, tp, pp in SETUPS:
        ctx = min(8192, model.context_limit.tokens) if model.context_limit else 8192
        try:
            req = FitRequest(model=model, weights=weight_inventory(model),
                             weight_format=weight_format(model, wd), gpu=load_gpu(gpu_key),
                             tp=tp, pp=pp, kv_dtype=kv, context_tokens=ctx, search=False,
                             allow_emulated=True, concurrency=4)
            r = plan_fit(req)
        except KvplanError:
            continue  # a layout the rules refuse (heads that do not divide, no inventory, ...)
        for engine, line in launch_commands(r).items():
            if line.startswith("#"):
                continue  # the engine cannot run this (said in the comment)
            assert problems(engine, line) == [], (engine, gpu_key, kv, wd, line)
            checked += 1
    if checked == 0:
        pytest.skip("no layout of these setups plans (parameter inventory, limits)")


@pytest.mark.parametrize("engine, all2all", [("vllm", "deepep_low_latency"),
                                             ("vllm", "deepep_high_throughput"),
                                             ("vllm", "default"),
                                             ("sglang", "deepep_auto"),
                                             ("sglang", "deepep_high_throughput")])
def test_eplb_and_deepep_lines_parse(engine, all2all):
    model = load_model("deepseek-v3")
    req = FitRequest(model=model, weights=weight_inventory(model),
                     weight_format=weight_format(model, None), gpu=load_gpu("h200"),
                     engine=engine, dp=8, ep=8, eplb=True, redundant_experts=8, all2all=all2all,
                     context_tokens=8192, search=False, concurrency=16)
    lines = launch_commands(plan_fit(req))
    for name in ("vllm", "sglang"):
        line = lines[name]
        if line.startswith("#"):
            assert name == "vllm" and all2all == "deepep_auto"
            continue
        assert problems(name, line) == [], (name, line)
        assert "--enable-eplb" in line
