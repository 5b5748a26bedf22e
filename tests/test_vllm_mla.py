"""vLLM's dense-MLA backend and block size per GPU and release (issue 15: per-GPU kernel rules),
as read from vLLM's source (kvplan/engines/vllm_mla.py cites the files and PRs)."""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run


def fit(capsys, *args: str) -> dict:
    assert run(["fit", "deepseek-v2-lite", "-c", "8k", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("engine,gpu,kv,block,backend", [
    ("vllm", "a100-80gb", "auto", 16, "TRITON_MLA"),  # SM 8.0
    ("vllm", "l40s", "auto", 16, "TRITON_MLA"),  # SM 8.9
    ("vllm", "l40s", "fp8", 16, "TRITON_MLA"),
    ("vllm", "h100", "auto", 16, "FLASH_ATTN_MLA"),  # FA3 MLA takes multiples of 16
    ("vllm", "h200", "fp8", 64, "FLASHMLA"),  # FA3 MLA has no fp8 cache: FlashMLA's 64
    ("vllm", "b200", "auto", 32, "FLASHINFER_MLA"),  # FlashInfer MLA: 32 or 64, the smallest
    ("vllm", "rtx-5090", "auto", 16, "TRITON_MLA"),  # GeForce Blackwell, SM 12.0
    ("vllm", "mi300x", "auto", 16, "TRITON_MLA"),  # ROCm AITER off by default
    ("vllm@0.17", "h100", "auto", 64, "FLASH_ATTN_MLA"),  # forced in cuda.py before PR #35122
    ("vllm@0.17", "b200", "auto", 64, "FLASHINFER_MLA"),  # 0.15-0.17, qk_nope_head_dim 128
    ("vllm@0.14", "b200", "auto", 128, "CUTLASS_MLA"),
    ("vllm@0.14", "a100-80gb", "auto", 16, "TRITON_MLA"),
])
def test_default_block_per_gpu(capsys, engine, gpu, kv, block, backend):
    d = fit(capsys, "--gpu", gpu, "--engine", engine, "--kv-dtype", kv, "--allow-emulated")
    assert d["block_size_tokens"] == block
    assert any(n.startswith("vLLM runs MLA on ") and f"with {backend} ({block}-token blocks)"
               in n for n in d["notes"])


def test_a_given_block_size_is_kept_on_main_and_forced_before(capsys):
    d = fit(capsys, "--gpu", "h100", "--block-size", "32")
    assert d["block_size_tokens"] == 32  # vLLM >= 0.18 never overrides --block-size for MLA
    assert "--block-size 32" in d["launch"]["vllm"]
    d = fit(capsys, "--gpu", "h100", "--block-size", "32", "--engine", "vllm@0.17")
    assert d["block_size_tokens"] == 64
    assert any(n.startswith("--block-size 32 does not apply: vLLM <= 0.17 forces 64-token")
               for n in d["notes"])
