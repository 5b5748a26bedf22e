"""vLLM refuses the plain nvfp4 KV layout on MLA models (vllm/config/vllm.py
``validate_nvfp4_kv_cache_with_mla``, present from 0.21, absent in 0.20): kvplan says so in one
line instead of pricing head_size / 2 + head_size / 16 bytes for a latent."""

from __future__ import annotations

import json

from cli_helpers import fail

from kvplan.cli.main import run


def test_nvfp4_refused_for_mla_on_vllm(capsys):
    for model in ("deepseek-v3", "kimi-k2-instruct", "deepseek-v2-lite"):
        err = fail(capsys, "size", model, "--kv-dtype", "nvfp4", "-c", "8k")
        assert "--kv-dtype" in err and "validate_nvfp4_kv_cache_with_mla" in err
    # sparse MLA (DeepSeek-V3.2) was already refused by its backend's formats
    assert "fp8_ds_mla" in fail(capsys, "size", "deepseek-v3.2", "--kv-dtype", "nvfp4")
    err = fail(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--kv-dtype", "nvfp4")
    assert "MLA" in err


def test_nvfp4_still_planned_for_gqa_and_before_0_21(capsys):
    assert run(["size", "llama-3.1-8b", "--kv-dtype", "nvfp4", "-c", "8k", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x (1/2 + 1/16) B per token
    assert d["bytes_per_token"] == 32 * 8 * 2 * (64 + 8) == 36_864
    assert run(["size", "deepseek-v3", "--kv-dtype", "nvfp4", "-c", "8k",
                "--engine", "vllm@0.20"]) == 0
    capsys.readouterr()
