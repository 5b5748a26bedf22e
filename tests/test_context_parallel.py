"""Decode context parallelism (vLLM ``--decode-context-parallel-size``): per-GPU bytes, pool
blocks and concurrency derived by hand from the configs, the engine's refusals, launch lines,
the step model's exchange term and ``serving.dcp`` in a scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli.main import run
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.perf_model import step_model

# DeepSeek-V3: MLA latent kv_lora_rank 512 + qk_rope_head_dim 64 = 576 x 2 B (bf16) = 1,152 B
# per token per layer, 61 layers, 128 query heads; replicated on every TP rank without DCP
LATENT = 576 * 2
LAYERS = 61


def fit_json(capsys, *args: str) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fail(capsys, *args: str) -> str:
    assert run(list(args)) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err.strip()


def test_dsv3_tp8_dcp8_32k_by_hand(capsys):
    base = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "-c", "32k")
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "--dcp", "8", "-c", "32k")
    assert d["dcp"] == 8 and base["dcp"] == 1
    # TP 8: the whole 32k latent on every GPU; DCP 8: 1/8 of the tokens on each
    assert base["per_sequence_bytes"] == 32768 * LATENT * LAYERS == 2_302_672_896
    assert d["per_sequence_bytes"] == 32768 // 8 * LATENT * LAYERS == 287_834_112
    # the pool is the same memory; a page is 16 slots x 1,152 B x 61 layers on each GPU
    pool = d["memory"]["kv_pool_bytes"]
    assert pool == base["memory"]["kv_pool_bytes"]
    blocks = pool // (16 * LATENT * LAYERS)
    assert d["kv_pool_blocks"] == blocks
    # a request of 32k takes cdiv(cdiv(32768, 8), 16) = 256 blocks (vLLM
    # FullAttentionSpec.max_memory_usage_bytes with dcp), TP 8 alone 2,048
    assert base["max_concurrency"] == blocks // 2048 == 20
    assert d["max_concurrency"] == blocks // 256
    assert d["engine_max_concurrency"] == pytest.approx(blocks / 256, abs=1e-4)
    assert "--decode-context-parallel-size 8" in d["launch"]["vllm"]
    assert d["launch"]["sglang"].startswith("# decode context parallelism is modelled for vLLM")


def test_gqa_dcp_removes_kv_head_replication(capsys):
    # Llama-3.3-70B: 8 KV heads of 128, 80 layers; TP 16 replicates each head on 2 GPUs, DCP 2
    # splits the tokens instead: 32,768 x 80 x 1 head x (128 + 128) x 2 B = 1,342,177,280 -> 1/2
    tp = fit_json(capsys, "llama-3.3-70b", "--gpu", "h100", "--tp", "16", "-c", "32k")
    dcp = fit_json(capsys, "llama-3.3-70b", "--gpu", "h100", "--tp", "16", "--dcp", "2",
                   "-c", "32k")
    assert tp["per_sequence_bytes"] == 32768 * 80 * 256 * 2 == 1_342_177_280
    assert dcp["per_sequence_bytes"] == 1_342_177_280 // 2


@pytest.mark.parametrize("args, needle", [
    (("llama-3.3-70b", "--tp", "8", "--dcp", "2"),
     "requires tp (8) greater than the 8 KV heads"),
    (("llama-3.3-70b", "--tp", "16", "--dcp", "4"), "dcp=4 is more than tp // num_key_value_heads = 2"),
    (("deepseek-v3", "--tp", "8", "--dcp", "3"), "tp_size=8 must be divisible by dcp_size=3"),
    (("gpt-oss-120b", "--tp", "8", "--dcp", "2"), "DCP not support sliding window"),
    (("deepseek-v3", "--tp", "8", "--dcp", "2", "--engine", "sglang"), "modelled for vLLM only"),
    (("deepseek-v3", "--tp", "8", "--dcp", "2", "--engine", "vllm@0.10.1"),
     "has no decode context parallelism (from 0.10.2)"),
    (("llama-3.3-70b", "--tp", "16", "--dcp", "2", "--engine", "vllm@0.11.0"),
     "MLA only (GQA from 0.11.1)"),
    (("deepseek-v3", "--tp", "8", "--dcp", "0"), "--dcp"),
])
def test_refusals(capsys, args, needle):
    line = fail(capsys, "fit", *args, "--gpu", "h200", "-c", "8k")
    assert needle in line, line


def test_step_model_reads_a_shard_and_exchanges_outputs():
    m = load_model("deepseek-v3")
    req = FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                     gpu=load_gpu("h200"), tp=8, dcp=8, context_tokens=32768, search=False)
    sm = step_model(plan_fit(req))
    assert sum(r.bytes_per_token for r in sm.kv_reads) == LATENT * LAYERS / 8
    # per token per layer: Hg = 128 / 8 x 8 = 128 heads x (576 q + 512 out) x 2 B + 128 x 4 B
    # of LSE, x 7/8 on the wire = 244,160 B; 3 collectives per layer
    assert sm.dcp_layers == LAYERS
    assert sm.dcp_bytes_per_token == LAYERS * (128 * (576 + 512) * 2 + 128 * 4) * 7 / 8
    assert sm.dcp_bytes_per_token == LAYERS * 244_160


def test_scenario_dcp(tmp_path: Path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("""kvplan: 1
model: deepseek-v3
hardware: {gpu: h200}
serving: {tp: 8, dcp: [1, 8]}
workload: {concurrent_requests: 128, prompt_tokens: 31744, output_tokens: 1024}
samples: 20
""")
    assert run(["plan", str(p), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    cfg = {c["dcp"]: c for c in d["configurations"]}
    # a request peaks at 32,767 tokens: 2,048 blocks of 16 under TP 8, 256 of 16 x 8 with DCP 8
    assert cfg[1]["memory_concurrency"] == 20
    pool = cfg[8]["kv_pool_bytes"]
    assert cfg[8]["memory_concurrency"] == pool // (16 * LATENT * LAYERS) // 256
    assert "--decode-context-parallel-size 8" in cfg[8]["launch"]["vllm"]


def test_dcp_refusals_on_rocm_and_with_a_draft(capsys):
    # ROCm's decode backends lack supports_dcp for GQA (vLLM: "DCP not supported")
    line = fail(capsys, "fit", "qwen3-235b-a22b", "--gpu", "mi300x", "--tp", "8", "--dcp", "2",
                "-c", "32k")
    assert "which ROCm does not use" in line
    line = fail(capsys, "fit", "llama-3.3-70b", "--gpu", "h200", "--tp", "16", "--dcp", "2",
                "-c", "32k", "--draft-model", "llama-3.2-1b", "--num-speculative-tokens", "4")
    assert "speculative decoding under --dcp is not modelled" in line


def test_fit_json_layouts_carry_dcp(capsys):
    d = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--tp", "8", "--dcp", "8", "-c", "32k")
    assert d["launch_layout"] == {"tp": 8, "pp": 1, "dp": 1, "ep": 1, "dcp": 8, "suggested": False}


def test_size_takes_dcp(capsys):
    assert run(["size", "deepseek-v3", "--tp", "8", "--dcp", "8", "-c", "32k", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # the whole latent once (61 x 576 x 2 B per token), 1/8 of it on each GPU
    assert d["sequences"][0]["total_bytes"] == 32768 * LATENT * LAYERS == 2_302_672_896
    assert d["sequences"][0]["per_gpu_bytes"] == 287_834_112
    assert "tp_size=8 must be divisible by dcp_size=3" in fail(
        capsys, "size", "deepseek-v3", "--tp", "8", "--dcp", "3")
