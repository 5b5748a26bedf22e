"""Review s30 (commits 7994c1f..7f9003b): the defects it found, fixed; each expectation derived
by hand from vLLM's source and the model's config (arithmetic in the comments)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import fail
from test_step3_family import _step3p5

from kvplan.cli.main import run

# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 B = 131,072 B per token over the
# model; 131,072 tokens x 131,072 B = 17,179,869,184 B = 16 GiB for one max_model_len request.
# Half the model (pp 2, 16 layers): 8 GiB per stage.
LLAMA = ["llama-3.1-8b", "--gpu", "a100-40gb-sxm", "-c", "8k", "--max-model-len", "128k",
         "--kv-cache-memory", "4GiB"]


def _fit(capsys, *args) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("engine", ["vllm", "vllm@0.13.0", "vllm@0.17.0"])
def test_pp1_start_up_check_max_model_len(capsys, engine):
    # vLLM 0.13 check_enough_kv_cache_memory (sum of the layers' max_memory_usage_bytes);
    # 0.17+ / 0.34 kv_cache_planning.py:1656 on the worker's groups: 32 x 65,536 B pages x
    # cdiv(131,072, 16) = 8,192 blocks = 16 GiB > 4 GiB -> ValueError, the engine does not start
    d = _fit(capsys, *LLAMA, "--engine", engine)
    assert d["fits"] is False


def test_pp2_017_per_stage_start_up_check(capsys):
    # 0.17.0 kv_cache_utils.py get_kv_cache_configs: for each worker
    # _check_enough_kv_cache_memory(avail_mem, _max_memory_usage_bytes_from_groups(projected)):
    # 16 layers x 65,536 B x 8,192 blocks = 8 GiB > 4 GiB on either stage -> refused
    d = _fit(capsys, *LLAMA, "--pp", "2", "--engine", "vllm@0.17.0")
    assert d["fits"] is False


def test_014_refusal_advice_points_to_refused_layouts(capsys):
    d = _fit(capsys, *LLAMA, "--pp", "2", "--engine", "vllm@0.14.0")
    assert d["fits"] is False
    assert "0.17.0" not in d["verdict"]  # 0.17 refuses too: 8 GiB per stage > 4 GiB


def test_014_refusal_names_017_where_it_starts(capsys):
    # a 12 GiB pool per stage: 0.14 wants the whole model's 16 GiB of the smallest stage and
    # refuses; 0.17 wants each stage's 8 GiB and starts
    args = [a if a != "4GiB" else "12GiB" for a in LLAMA]
    d = _fit(capsys, *args, "--pp", "2", "--engine", "vllm@0.14.0")
    assert d["fits"] is False and "vllm@0.17.0 or later checks each stage" in d["verdict"]
    assert _fit(capsys, *args, "--pp", "2", "--engine", "vllm@0.17.0")["fits"]


@pytest.mark.parametrize("engine,fits", [("vllm@0.28.0", True), ("vllm@0.29.0", False)])
def test_the_null_block_from_029(capsys, engine, fits):
    # a pool of exactly 8,192 blocks of 32 x 65,536 B = 16 GiB: 0.28 wants 8,192 blocks of it;
    # from 0.29 the check holds one block back (the null block) and wants 8,192 of 8,191
    args = [a if a != "4GiB" else "16GiB" for a in LLAMA]
    assert _fit(capsys, *args, "--engine", engine)["fits"] is fits


def test_active_without_lookup_subtracts_only_the_embedding(capsys):
    # Qwen3-VL-30B-A3B text_config: vocab_size 151,936 x hidden_size 2,048 = 311,164,928,
    # untied (tie_word_embeddings false): the only row gather; the vision tower (~0.54B) is
    # matmuls, not a lookup
    d = _fit(capsys, "qwen3-vl-30b-a3b-instruct", "--gpu", "h200")
    assert d["params_active"] - d["params_active_without_lookup"] == 151_936 * 2_048


def test_step3p5_error_does_not_call_num_attention_groups_uninterpreted(tmp_path, capsys):
    p = tmp_path / "s35.json"
    p.write_text(json.dumps(_step3p5(is_heterogeneous=True)))
    msg = fail(capsys, "size", str(p))
    assert "is_heterogeneous" in msg
    assert "num_attention_groups" not in msg


def test_glm47_builtin_is_the_bf16_release(capsys):
    # its config copy has no quantization_config: the built-in is zai-org/GLM-4.7 (bf16), not
    # the FP8 checkpoint, whose launch line would load half the bytes planned
    d = _fit(capsys, "glm-4.7", "--gpu", "h200", "--tp", "8")
    assert d["weight_dtype"] == "bf16"
    assert "zai-org/GLM-4.7 " in d["launch"]["vllm"] and "FP8" not in d["launch"]["vllm"]


def test_fixture_path_exists():
    assert (Path(__file__).parent / "fixtures" / "configs").is_dir()
