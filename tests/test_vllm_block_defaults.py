"""The block vLLM starts from, by release, and how a hybrid's block is raised from it; the
launch lines pass that starting block so every release realises the plan (issue 15).

Read from vLLM's sdists on PyPI: ``CacheConfig.DEFAULT_BLOCK_SIZE`` is 16 up to 0.33.0 and 64
in 0.34.0; hybrids align in ``HybridAttentionMambaModelConfig`` up to 0.19 and in
``Platform.update_block_size_for_backend`` from 0.20 (the larger of the backend's smallest
kernel block and the starting block; MLA at least 128 from 0.27)."""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run
from kvplan.engines.vllm_mla import mla_backend


def fit(capsys, *argv):
    assert run(["fit", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_034_starts_from_64_token_blocks(capsys):
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B per token.
    # The pool bytes do not depend on the block; the whole blocks do.
    new = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k", "--engine", "vllm@0.34.0")
    old = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k", "--engine", "vllm@0.33.0")
    pool = new["memory"]["kv_pool_bytes"]
    assert pool == old["memory"]["kv_pool_bytes"]
    assert new["block_size_tokens"] == 64 and old["block_size_tokens"] == 16
    assert new["kv_pool_blocks"] == pool // (64 * 131_072)
    assert new["kv_pool_tokens"] == 64 * (pool // (64 * 131_072))
    assert old["kv_pool_tokens"] == 16 * (pool // (16 * 131_072))
    assert new["launch"]["vllm"].endswith("--block-size 64")
    assert old["launch"]["vllm"].endswith("--block-size 16")


def test_default_engine_passes_its_block(capsys):
    # main as kvplan read it starts from 16; the line says so, since vLLM 0.34 would take 64
    d = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k")
    assert d["block_size_tokens"] == 16 and d["launch"]["vllm"].endswith("--block-size 16")


def test_hybrid_block_rises_from_the_starting_block(capsys):
    # Qwen3-Next on one H200: attention 2 KV heads x 256 x 2 x 2 B = 2,048 B per token, Mamba
    # page 1,097,728 B. main: 16 x cdiv(1,097,728, 16 x 2,048) = 16 x 34 = 544; 0.34 starts
    # from 64: 64 x cdiv(1,097,728, 64 x 2,048) = 64 x 9 = 576.
    args = ("qwen3-next-80b-a3b-instruct", "--gpu", "h200", "-c", "32k", "--weight-memory", "60GiB")
    main = fit(capsys, *args)
    new = fit(capsys, *args, "--engine", "vllm@0.34.0")
    assert main["block_size_tokens"] == 544 and new["block_size_tokens"] == 576
    # the line passes the starting block (vLLM rounds it up itself) and turns prefix
    # caching off: the plan is Mamba cache mode "none"
    assert "--block-size 16 --no-enable-prefix-caching" in main["launch"]["vllm"]
    assert "--block-size 64 --no-enable-prefix-caching" in new["launch"]["vllm"]


def test_mla_hybrid_aligns_to_128(capsys):
    # Kimi-Linear on H200, vLLM main (>= 0.27): the MLA latent is (512 + 64) x 2 B = 1,152 B
    # per token, the KDA page 2,170,880 B: 128 x cdiv(2,170,880, 128 x 1,152) = 128 x 15
    d = fit(capsys, "kimi-linear-48b-a3b-instruct", "--gpu", "h200", "-c", "32k")
    assert d["block_size_tokens"] == 1920
    assert any("multiples of 128 tokens (vLLM >= 0.27" in n for n in d["notes"])
    assert "--block-size 16 --no-enable-prefix-caching" in d["launch"]["vllm"]


def test_dense_model_keeps_prefix_caching(capsys):
    d = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k")
    assert "prefix-caching" not in d["launch"]["vllm"]


@pytest.mark.parametrize("cc, fp8, version, backend, block", [
    ("9.0", False, "0.33.0", "FLASH_ATTN_MLA", 16),
    ("9.0", False, "0.34.0", "FLASH_ATTN_MLA", 64),   # multiples of 16: takes 64
    ("9.0", True, "0.34.0", "FLASHMLA", 64),
    ("10.0", False, "0.33.0", "FLASHINFER_MLA", 32),  # 32 or 64: 16 is not one
    ("10.0", False, "0.34.0", "FLASHINFER_MLA", 64),
    ("8.0", False, "0.34.0", "TRITON_MLA", 64),
    ("9.0", False, "main", "FLASH_ATTN_MLA", 16),
])
def test_mla_backend_block_by_release(cc, fp8, version, backend, block):
    b = mla_backend(cc, fp8, version, 128)
    assert (b.backend, b.block_tokens) == (backend, block)


def test_mla_cutlass_stays_at_128():
    assert mla_backend("10.0", False, "0.34.0", 96).block_tokens == 128


@pytest.mark.parametrize("spelling", ["vllm@0.34", "vllm@0.34.0"])
def test_two_part_version_is_that_release(capsys, spelling):
    # "0.34" is 0.34.0: as a tuple (0, 34) it once sorted before (0, 34, 0)
    d = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k", "--engine", spelling)
    assert d["block_size_tokens"] == 64


def test_vllm_018_is_not_the_forced_mla_block(capsys):
    # DeepSeek-V2-Lite on H200, vLLM 0.18 (two-part spelling): FlashAttention-3 MLA, 16
    d = fit(capsys, "deepseek-v2-lite", "--gpu", "h200", "-c", "32k", "--engine", "vllm@0.18")
    assert d["block_size_tokens"] == 16
