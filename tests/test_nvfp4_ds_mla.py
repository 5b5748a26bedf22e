"""vLLM's nvfp4_ds_mla KV cache (0.30.0+, FlashMLA sparse on SM 10.x), derived by hand.

One latent row per token per layer (vLLM 0.34.0 flashmla_sparse.py, "nvfp4_ds_mla" format;
mla_attention.py ``state_content_bytes = {"nvfp4_ds_mla": 352}``):
512 e2m1 NoPE values, two per byte = 256 B; 64 e4m3 RoPE values = 64 B; one e4m3 scale per 16
NoPE values = 32 B: 352 B, against fp8_ds_mla's 512 + 4 x 4 + 64 x 2 = 656 B. The indexer key
(128 fp8 + one fp32 scale = 132 B) keeps its own format. Latent and key are replicated over TP.
"""

from __future__ import annotations

import json

import pytest

from kvplan.cli.main import run
from kvplan.core.formats import parse_format

DSV32 = "tests/fixtures/configs/deepseek-ai__DeepSeek-V3.2.json"  # 61 layers, indexer on each
GLM5 = "tests/fixtures/configs/zai-org__GLM-5.json"  # 78 layers, indexer on each
ROW = 512 // 2 + 64 + 512 // 16
INDEXER = 128 + 4


def cli_json(capsys, *args) -> dict:
    rc = run([*args, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def cli_err(capsys, *args) -> str:
    rc = run(list(args))
    out = capsys.readouterr()
    assert rc == 2, out.out
    return out.err


def test_row_bytes_by_hand():
    assert ROW == 352
    assert parse_format("nvfp4_ds_mla").k.vector_bytes(576) == 352


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize(("config", "layers"), [(DSV32, 61), (GLM5, 78)])
def test_bytes_per_token(capsys, config, layers, tp):
    d = cli_json(capsys, "size", config, "--kv-dtype", "nvfp4_ds_mla", "--tp", str(tp),
                 "-c", "8k")
    per_token = layers * (ROW + INDEXER)
    assert per_token == {61: 29_524, 78: 37_752}[layers]
    assert d["bytes_per_token"] == per_token
    # replicated: every GPU holds the whole row at TP 8 too
    (seq,) = d["sequences"]
    assert seq["per_gpu_bytes"] == per_token * 8192
    assert d["block_size"] == 64


def test_fp8_ds_mla_for_comparison(capsys):
    d = cli_json(capsys, "size", DSV32, "--kv-dtype", "fp8", "-c", "8k")
    assert d["bytes_per_token"] == 61 * (656 + 132) == 48_068


def test_fit_on_b200_blocks(capsys):
    d = cli_json(capsys, "fit", DSV32, "--gpu", "b200", "--tp", "8", "--kv-dtype",
                 "nvfp4_ds_mla", "-c", "8k")
    # a 64-token block across the 61 latent and 61 indexer layers: 61 x 64 x (352 + 132) B
    block = 61 * 64 * (ROW + INDEXER)
    assert block == 1_889_536
    pool = d["memory"]["kv_pool_bytes"]
    assert d["kv_pool_blocks"] == pool // block
    assert d["per_sequence_bytes"] == 128 * block  # 8,192 / 64 blocks
    assert d["max_concurrency"] == d["kv_pool_blocks"] // 128
    assert "--kv-cache-dtype nvfp4_ds_mla" in d["launch"]["vllm"]


@pytest.mark.parametrize(("args", "words"), [
    (("--gpu", "h200"), "SM 10.x only"),
    (("--gpu", "rtx-5090"), "SM 12.0"),
    (("--gpu", "b200", "--engine", "vllm@0.29.0"), "first in vLLM 0.30.0"),
    (("--gpu", "b200", "--engine", "sglang"), "nvfp4_ds_mla"),
])
def test_refusals(capsys, args, words):
    err = cli_err(capsys, "fit", DSV32, "--tp", "8", "--kv-dtype", "nvfp4_ds_mla", *args)
    assert words in err
    assert "Traceback" not in err


def test_dense_mla_refused(capsys):
    err = cli_err(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--kv-dtype",
                  "nvfp4_ds_mla")
    assert "sparse-MLA backend only" in err
