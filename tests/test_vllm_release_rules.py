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
from kvplan.engines import get_engine
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


def test_rocm_subtracts_cuda_graphs_from_0_26():
    """vllm/v1/worker/gpu_worker.py profiles the graphs ``if not current_platform.is_rocm()``
    in 0.20.x and ``if current_platform.is_cuda()`` up to 0.25.1; ``is_cuda_alike()`` (ROCm
    too) from 0.26.0. Llama-3.1-8B on one MI300X (driver total 206,141,652,992 B)."""
    act, over = 2 * GiB, GiB // 4
    graphs = 768 * MiB + 5 * MiB * 32  # 973,078,528 B at TP 1
    b25 = plan("llama-3.1-8b", "mi300x", "vllm@0.25.1", context_tokens=8192,
               activation_memory_bytes=act).budget
    b26 = plan("llama-3.1-8b", "mi300x", "vllm@0.26.0", context_tokens=8192,
               activation_memory_bytes=act).budget
    usable = 206_141_652_992 * 92 // 100
    assert b25.usable_bytes == b26.usable_bytes == usable == 189_650_320_752
    assert b25.runtime_overhead_bytes == over == 268_435_456
    assert b26.runtime_overhead_bytes == over + graphs == 1_241_513_984
    assert b25.kv_pool_bytes == usable - 16_060_522_496 - act - over
    # the same release on an H100 subtracts them (CUDA)
    h = plan("llama-3.1-8b", "h100", "vllm@0.25.1", context_tokens=8192,
             activation_memory_bytes=act).budget
    assert h.runtime_overhead_bytes == over + graphs


def test_the_extensible_cache_note_only_where_0_34_sizes_the_pool_itself():
    """0.34.0's ``CacheConfig.gpu_memory_utilization`` is ``None`` (1.0 under the extensible
    cache, which ``kv_cache_memory_bytes`` turns off); 0.33.0's is ``Field(default=0.92)``."""
    from kvplan.engines.vllm_memory import EXTENSIBLE_NOTE

    def notes(engine: str, **kw) -> tuple[str, ...]:
        return plan("llama-3.1-8b", "h100", engine, context_tokens=8192, **kw).budget.notes

    assert EXTENSIBLE_NOTE in notes("vllm") and EXTENSIBLE_NOTE in notes("vllm@0.34.0")
    assert EXTENSIBLE_NOTE not in notes("vllm@0.33.0")
    assert EXTENSIBLE_NOTE not in notes("vllm", utilization=0.92)
    assert EXTENSIBLE_NOTE not in notes("vllm", kv_cache_memory_bytes=40 * GiB)


def test_vllm_bench_json_dates_an_unnamed_build(tmp_path: Path):
    """``vllm bench serve`` writes ``"date": "%Y%m%d-%H%M%S"`` (serve.py) and no vLLM version:
    a result from 2026-04-02 with no ``engine_version`` plans by 0.18.1 (out 2026-03-31)."""
    import json

    d = {"date": "20260402-231500", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B",
         "num_prompts": 80, "request_rate": "inf", "max_concurrency": 8, "completed": 80,
         "total_input_tokens": 80_000, "total_output_tokens": 16_000, "mean_ttft_ms": 40.0,
         "mean_tpot_ms": 5.0, "output_throughput": 1500.0, "gpu": "h100-sxm"}
    p = tmp_path / "run.json"
    p.write_text(json.dumps(d))
    runs, problems = read_all([p])
    assert problems == [] and runs[0].measured_on == "2026-04-02"
    assert row_engine(runs[0])[0] == "vllm@0.18.1"
    p.write_text(json.dumps({**d, "date": "yesterday"}))
    assert read_all([p])[0][0].measured_on == ""


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
    ("0.19.0", "vllm@0.19.0"), ("v0.11.2", "vllm@0.11.2"), ("0.11.0rc1", "vllm@0.11.0"),
    ("0.9.2.post1", "vllm@0.9.2"), ("0.9.2+cu126", "vllm@0.9.2"),
    ("0.11.0+rocm700", "vllm@0.11.0"), ("0.11.1rc2.dev160+g9d6964926", "vllm@0.11.1")])
def test_a_named_release_plans_by_its_rules(version, spec):
    assert row_engine(run("vllm", version)) == (spec, None)
    get_engine(spec)  # a spec --engine takes


def test_a_four_number_release_plans_by_the_three_number_one():
    """0.10.1.1 and 0.9.0.1 are PyPI releases; ``--engine vllm@X`` takes three numbers, so
    such a row (named, or dated 2025-08-20 .. 2025-09-12 with no name) plans as 0.10.1."""
    spec, why = row_engine(run("vllm", "0.10.1.1"))
    assert spec == "vllm@0.10.1" and why is not None and "0.10.1.1 planned by 0.10.1" in why
    spec, why = row_engine(run("vllm", "", "2025-08-20"))
    assert spec == "vllm@0.10.1" and why is not None and "release 0.10.1.1's rules" in why
    # every release a measurement day can name gives a spec that plans
    for version, day in RELEASE_DAYS:
        get_engine(row_engine(run("vllm", "nightly", day))[0])
        get_engine(row_engine(run("vllm", version))[0])


def test_a_day_after_the_list_was_read_says_so():
    spec, why = row_engine(run("vllm", "", "2027-01-15"))
    assert spec == "vllm@0.34.0" and why is not None
    assert "the newest release kvplan lists (PyPI read on 2026-12-03)" in why


def test_a_day_before_the_first_listed_release_says_so():
    spec, why = row_engine(run("vllm", "nightly", "2025-05-27"))
    assert spec == "vllm" and why is not None
    assert "before the first release kvplan lists (0.9.0, 2025-05-28)" in why


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
