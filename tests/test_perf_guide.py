"""The guide's bandwidth and cost-by-position examples (docs/perf.md), derived by hand."""

from __future__ import annotations

from kvplan.core.perf import Efficiency, kv_read_bytes
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.resolve import load_model
from kvplan.planning.curve import series
from kvplan.planning.deployment import plan
from kvplan.planning.fit_pools import concurrency_at


def test_32k_fp8_kv_read_per_step_on_h100():
    r, sm = plan(load_model("llama-3.1-70b"), load_gpu("h100"), kv_dtype="fp8", weight_dtype="fp8",
                 engine="vllm", tp=1, pp=1, context_tokens=32768, efficiency=Efficiency())
    kv = 32768 * 2 * 80 * 8 * 128 * 1  # tokens x (K, V) x layers x KV heads x head_dim x 1 B
    assert kv == 5_368_709_120  # the guide's "5.2 GB" (5.37 GB = 5.0 GiB)
    assert kv_read_bytes(sm, 32768) == kv
    assert round(kv / 3.35e12 * 1e3, 2) == 1.60  # ms at the H100's datasheet 3.35 TB/s
    assert round(kv / (3.35e12 * 0.8) * 1e3, 2) == 2.00  # at kvplan's 80% achieved bandwidth


def test_cost_by_position_is_linear_and_the_batch_collapses():
    r, sm = plan(load_model("llama-3.1-70b"), load_gpu("h100"), kv_dtype="fp8",
                 weight_dtype="fp8", engine="vllm", tp=2, pp=1, context_tokens=204800,
                 efficiency=Efficiency(), allow_long_max_model_len=True)  # the guide's 200k
    xs = [4096, 32768, 102400, 204800]
    s = series("fp8", r, sm, x="position", y="cost", xs=xs, context_tokens=204800, batch=64,
               price_usd_per_hour=2 * 2)
    ys = [p.y for p in s.points]
    assert all(a < b for a, b in zip(ys, ys[1:], strict=False))
    assert [p.batch for p in s.points] == [min(64, concurrency_at(r, n)) for n in xs]
    assert s.points[1].batch < 64  # at 32k fewer than 64 sequences fit two H100s
    assert s.fit_slope is not None and s.fit_slope > 0
    # the fit passes within 15% of every point of this near-linear curve past 4k
    for p in s.points[1:]:
        assert abs(s.fit_base + s.fit_slope * p.x - p.y) / p.y < 0.15
