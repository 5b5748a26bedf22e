"""vLLM's defaults by release, as read in the PyPI sdists of each release (2026-12-03), and how
``kvplan validate`` plans a measured row by the release it ran.

- ``vllm/config/cache.py``: ``gpu_memory_utilization`` ``Field(default=0.9)`` in 0.19.1,
  ``Field(default=0.92)`` in 0.20.0.
- ``vllm/envs.py``: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to "0" in 0.19.1 and
  "1" in 0.20.0, so the CUDA-graph estimate (768 MiB + 5 MiB a layer, + 384 MiB with TP) is
  subtracted from the pool from 0.20.0.
- ``vllm/engine/arg_utils.py``: from 0.28.0 (not in 0.27.1) a GPU with >= 160 GiB gets
  ``max_num_batched_tokens`` 16384 and ``max_num_seqs`` 1024 under ``vllm serve``; other GPUs
  with >= 70 GiB that are not A100s 8192 / 1024; the rest 2048 / 256.
- PyPI upload days: 0.18.1 2026-03-31, 0.19.0 2026-04-03, 0.11.0 2025-10-04, 0.12.0
  2025-12-03, 0.10.1.1 2025-08-20; 0.9.0 (the first listed) 2025-05-28.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kvplan.core.benchmark import MeasuredRun
from kvplan.core.errors import InputError
from kvplan.engines.vllm_memory import serve_defaults
from kvplan.engines.vllm_releases import RELEASE_DAYS, release_on
from kvplan.loaders.benchmarks import read_all
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.bench_predict import row_engine
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest

MiB, GiB = 2**20, 2**30
B200_TOTAL = 191_501_854_310  # hardware_specs/b200.yaml driver_total_bytes (178.35 GiB)
H200_TOTAL = 150_119_844_413  # 139.81 GiB
H100_TOTAL = 85_045_477_376  # 79.20 GiB


def plan(model: str, gpu: str, engine: str, **kw):
    m = load_model(model)
    return plan_fit(FitRequest(model=m, weights=weight_inventory(m),
                               weight_format=weight_format(m, None), gpu=load_gpu(gpu),
                               engine=engine, **kw))


def test_token_budget_tiers():
    assert B200_TOTAL >= 160 * GiB > H200_TOTAL >= 70 * GiB > 40 * GiB
    assert serve_defaults(B200_TOTAL, "NVIDIA B200", "0.28.0") == (16384, 1024)
    assert serve_defaults(B200_TOTAL, "NVIDIA B200", "main") == (16384, 1024)
    assert serve_defaults(B200_TOTAL, "NVIDIA B200", "0.27.1") == (8192, 1024)
    assert serve_defaults(H200_TOTAL, "NVIDIA H200", "main") == (8192, 1024)
    assert serve_defaults(H100_TOTAL, "NVIDIA A100-SXM4-80GB", "main") == (2048, 256)


def test_b200_plans_take_the_tier_by_release():
    new = plan("llama-3.1-8b", "b200", "vllm", context_tokens=8192)
    old = plan("llama-3.1-8b", "b200", "vllm@0.27.1", context_tokens=8192)
    assert (new.max_num_batched_tokens, old.max_num_batched_tokens) == (16384, 8192)
    # the forward term of the activation estimate doubles with the budget: T x (3 x 14,336 +
    # 6 x 4,096) x 2 B; 16,384 tokens: 2,214,592,512 B, over the sampler's 15.45 x 1,024 x
    # 128,256 = 2,029,112,524 (at 8,192 tokens the sampler is the larger)
    assert new.budget.activation_bytes == 16384 * (3 * 14336 + 6 * 4096) * 2 == 2_214_592_512
    assert old.budget.activation_bytes == 2_029_112_524
    # TensorRT-LLM and llama.cpp keep the tiers kvplan applied to them before
    assert plan("llama-3.1-8b", "b200", "trtllm", context_tokens=8192).max_num_batched_tokens == 8192


def test_utilisation_and_cuda_graphs_switch_at_0_20():
    # Llama-3.1-8B on one H100: weights 16,060,522,496 B; activation and non-torch pinned
    act, over = 2 * GiB, GiB // 4  # non-torch: 0.25 GiB on one GPU
    graphs = 768 * MiB + 5 * MiB * 32  # 973,078,528 B at TP 1
    b19 = plan("llama-3.1-8b", "h100", "vllm@0.19.1", context_tokens=8192,
               activation_memory_bytes=act).budget
    b20 = plan("llama-3.1-8b", "h100", "vllm@0.20.0", context_tokens=8192,
               activation_memory_bytes=act).budget
    assert b19.usable_bytes == H100_TOTAL * 90 // 100 == 76_540_929_638
    assert b20.usable_bytes == H100_TOTAL * 92 // 100 == 78_241_839_185
    assert b19.runtime_overhead_bytes == over  # non-torch 0.25 GiB at TP 1, no graphs
    assert b20.runtime_overhead_bytes == over + graphs == 1_241_513_984
    assert b20.kv_pool_bytes == 78_241_839_185 - 16_060_522_496 - act - over - graphs


def test_release_days():
    assert release_on("2026-04-03") == "0.19.0"  # published that day
    assert release_on("2026-04-02") == "0.18.1"
    assert release_on("2025-10-29") == "0.11.0"
    assert release_on("2025-12-05") == "0.12.0"
    assert release_on("2025-08-20") == "0.10.1.1"
    assert release_on("2025-05-27") is None
    days = [d for _, d in RELEASE_DAYS]
    assert days == sorted(days) and RELEASE_DAYS[-1] == ("0.34.0", "2026-11-16")


def run(engine: str, version: str, day: str = "") -> MeasuredRun:
    return MeasuredRun(source="x:2", model="llama-3.1-8b", gpu="b200", engine=engine,
                       engine_version=version, measured_on=day, prompt_tokens=1024,
                       output_tokens=1024, concurrency=4)


@pytest.mark.parametrize("version,spec", [
    ("0.19.0", "vllm@0.19.0"), ("0.10.1.1", "vllm@0.10.1.1"), ("v0.11.2", "vllm@0.11.2"),
    ("0.11.0rc1", "vllm@0.11.0"), ("0.9.2.post1", "vllm@0.9.2")])
def test_a_named_release_plans_by_its_rules(version, spec):
    assert row_engine(run("vllm", version)) == (spec, None)


def test_unnamed_builds_plan_by_the_release_out_on_their_day():
    spec, why = row_engine(run("vllm", "nightly-5b8c30d62b754b57", "2026-04-03"))
    assert spec == "vllm@0.19.0"
    assert why == ("vLLM build nightly-5b8c30d62b754b57 measured on 2026-04-03: planned by "
                   "release 0.19.0's rules, the last release out by then")
    spec, why = row_engine(run("vllm", ""))
    assert spec == "vllm" and why is not None and "no measurement day" in why
    # SGLang and TensorRT-LLM rows keep the engine's default rules
    assert row_engine(run("sglang", "0.5.9", "2026-04-03")) == ("sglang", None)
    assert row_engine(run("trtllm", "1.2.0rc6.post3")) == ("trtllm", None)


def test_the_silicon_reader_keeps_the_measurement_day(tmp_path: Path):
    """One row of AIConfigurator's silicon_sample.csv as shipped (benchmarks/data)."""
    src = Path(__file__).resolve().parent.parent / "benchmarks/data/aiconfigurator_silicon_sample.csv"
    with src.open() as f:
        rows = list(csv.reader(f))
    header = rows[0]
    nightly = next(r for r in rows[1:] if r[header.index("backend_version")].startswith("nightly-5b8c"))
    out = tmp_path / "silicon.csv"
    with out.open("w", newline="") as f:
        csv.writer(f).writerows([header, nightly])
    runs, problems = read_all([out])
    assert problems == [] and runs[0].measured_on == "2026-04-03"
    assert runs[0].engine_version == "nightly-5b8c30d62b754b57"


def test_minimax_m2_first_served_in_0_11_1():
    """MiniMaxM2ForCausalLM is in the registry of 0.11.1's sdist, not 0.11.0's; from 0.11.1
    it plans as plain GQA: 62 layers x 8 KV heads x 128 x (K, V) x 2 B = 253,952 B a token."""
    from kvplan.planning.footprint import kv_footprint

    path = Path(__file__).resolve().parent / "fixtures/configs/MiniMaxAI__MiniMax-M2.5.json"
    m = load_model(str(path))
    with pytest.raises(InputError, match="vllm first served 'minimax_m2' models in 0.11.1"):
        kv_footprint(m, [1], engine="vllm@0.11.0")
    assert kv_footprint(m, [1], engine="vllm@0.11.1").bytes_per_token == 62 * 8 * 128 * 2 * 2
