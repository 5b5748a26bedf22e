"""Review s30c: vLLM >= 0.26 in-flight tokens of a sliding layer's reservation
(kvpool.vllm_in_flight_tokens, fit_verdict.conclude). Each was a defect, fixed.

Derived from the sdists' vllm/config/vllm.py:
- max_concurrent_batches (0.26 - 0.33): async -> (V2 runner: pp + 1; V1: 2 at pp 1, else pp);
  no async -> pp. 0.34: async -> pp + 1, else pp.
- use_v2_model_runner with VLLM_USE_V2_MODEL_RUNNER unset: 0.26 - 0.28 True for a "generate"
  model that is not hybrid / attention-free and is dense (or a listed MoE);
  0.29 - 0.33 True on CUDA unless Triton is missing or a listed unsupported feature is on
  (the architecture test _is_default_v2_model_runner_model is gone).
- async_scheduling auto (None): 0.26, 0.27.x turn it off for method "draft_model" (not in the
  EAGLE / ngram_gpu / dspark exemptions); 0.28 - 0.32 add `method != "draft_model"` to the
  exemptions; 0.33 exempts ("draft_model", "dspark", "dflash") on V1; 0.34 has no
  speculative check at all. So a separate draft model keeps async scheduling from 0.28.
"""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run
from kvplan.engines.kvpool import vllm_in_flight_tokens


def _fit(capsys, *args) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# gemma-2-9b (42 layers alternating sliding 4,096 / full, 8 KV heads x head_dim 256, bf16) with
# itself as the draft model: 16-token page = 16 x 8 x 256 x 2 (K, V) x 2 B = 131,072 B; target
# + draft = 42 sliding + 42 full layers of two specs -> two groups of 42, block 42 x 131,072 =
# 5,505,024 B; 16 GiB = 17,179,869,184 B -> 3,120 blocks (17,179,869,184 // 5,505,024).
# max_model_len 8,192: full group cdiv(8,192, 16) = 512 pages.
# Draft model, async on (0.28+), pp 1: max_concurrent_batches 2 -> in flight 2 x 2,048 = 4,096:
# sliding cdiv(min(4,095 + 4,096, 8,192), 16) + 1 = 512 + 1 = 513 -> 1,025 per request ->
# 3,120 / 1,025 = 3.0439. kvplan passes async = (draft_fp is None) = False: in flight 2,048,
# cdiv(6,143, 16) + 1 = 385 -> 897 -> 3,120 / 897 = 3.4783 (right only for 0.26 / 0.27.x).
DRAFT = ["gemma-2-9b", "--draft-model", "gemma-2-9b", "--num-speculative-tokens", "4",
         "--gpu", "h200", "-c", "4k", "--max-model-len", "8192",
         "--max-num-batched-tokens", "2048", "--kv-cache-memory", "16GiB"]


@pytest.mark.parametrize("version", ["0.28.0", "0.30.0"])
def test_draft_model_keeps_async_scheduling_from_028(capsys, version):
    d = _fit(capsys, *DRAFT, "--engine", f"vllm@{version}")
    assert d["engine_max_concurrency"] == pytest.approx(3120 / 1025, abs=1e-3)


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0", "0.33.0"])
def test_pp_on_the_default_v2_runner_029_to_033(version):
    # 0.29 - 0.33 use_v2_model_runner: env unset -> (ROCm list, Triton, unsupported features)
    # -> True; max_concurrent_batches = pp + 1 = 3 at pp 2: 3 x 8,192 = 24,576.
    from kvplan.engines.kvpool import vllm_v2_runner_default

    v2 = vllm_v2_runner_default(version, "gemma2", moe=False, hybrid=False)
    assert vllm_in_flight_tokens(version, 8_192, 2, False, v2) == 3 * 8_192


def test_pp_dense_model_on_v2_runner_026(capsys):
    # gemma-2-9b is dense (not is_moe), not hybrid, runner "generate" ->
    # _is_default_v2_model_runner_model True -> max_concurrent_batches = pp + 1 = 3 at pp 2:
    # 3 x 1,024 = 3,072 in-flight tokens (kvplan: 2 x 1,024 = 2,048).
    d = _fit(capsys, "gemma-2-9b", "--gpu", "h200", "--pp", "2", "-c", "4k",
             "--max-model-len", "8192", "--max-num-batched-tokens", "1024",
             "--engine", "vllm@0.26.0")
    assert any("3 in-flight batches" in n or "3,072 in-flight tokens" in n for n in d["notes"])


def test_draft_model_start_up_check_030(capsys):
    # 5 GiB = 5,368,709,120 B -> 975 blocks (// 5,505,024); 0.29+ check: need = 5,505,024 x
    # (512 + 513) = 5,642,649,600 B > grant 5,368,709,120 - 5,505,024 = 5,363,204,096 B ->
    # vLLM raises (kvplan's 512 + 385 = 897 pages = 4,938,006,528 B passes).
    d = _fit(capsys, *DRAFT[:-1], "5GiB", "--engine", "vllm@0.30.0")
    assert d["fits"] is False
