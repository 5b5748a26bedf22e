"""Collectives wider than one NVLink domain: the GPU spec's NVLink domain and scale-out NIC
(hardware_specs/*.yaml ``interconnect.domain_gpus``, ``scale_out``) and the factor the step
model applies to their bytes (``kvplan.core.perf.cross_domain_factor``), derived by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.cli.main import run
from kvplan.core.perf import cross_domain_factor
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.perf_model import step_model


def dsv3_step(gpu: str, tp: int, dp: int = 1, ep: int = 1):
    m = load_model("deepseek-v3")
    req = FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                     gpu=load_gpu(gpu), tp=tp, dp=dp, ep=ep, context_tokens=4096, search=False)
    return step_model(plan_fit(req))


def test_specs_state_their_domain_and_nic():
    h200 = load_gpu("h200")
    assert (h200.nvlink_domain_gpus, h200.scale_out_bandwidth_bytes_per_s_per_direction) == (
        8, 50_000_000_000)  # one 400 Gb/s ConnectX-7 per GPU
    assert load_gpu("b300").scale_out_bandwidth_bytes_per_s_per_direction == 100_000_000_000
    assert load_gpu("gb200").nvlink_domain_gpus == 72


def test_factor_by_hand():
    sm = dsv3_step("h200", 8)
    assert (sm.domain_gpus, sm.scale_out_bytes_per_s, sm.link_bytes_per_s) == (8, 50e9, 450e9)
    assert cross_domain_factor(sm, 8, False) == cross_domain_factor(sm, 8, True) == 1.0
    # all-reduce over 16 = 2 domains of 8: 2 x 7/8 of the message over NVLink, 2 x 1/2 of a
    # 1/8 share over the NIC, against a flat ring's 2 x 15/16 over NVLink
    flat = 2 * 15 / 16 / 450e9
    assert cross_domain_factor(sm, 16, False) == pytest.approx(
        (2 * 7 / 8 / 450e9 + 2 * 1 / 2 / 8 / 50e9) / flat)
    assert cross_domain_factor(sm, 16, False) == pytest.approx(1.5333, abs=1e-4)
    # all-to-all over 64: 56/64 of a GPU's bytes leave its node, at 450/50 = 9 x the time
    assert cross_domain_factor(sm, 64, True) == pytest.approx(8 / 64 + 56 / 64 * 9)


def test_wide_collectives_cost_more_than_the_nvlink_ring():
    sm = dsv3_step("h200", 8)
    wide = replace(sm, tp=16)
    from kvplan.core.perf import allreduce_s

    msg = 4096 * 7168 * 2  # a 4k-token prefill's activations, bf16
    ring16 = 2 * sm.layers * (sm.efficiency.allreduce_latency_s + 2 * 15 / 16 * msg
                              / (450e9 * sm.efficiency.interconnect) * 1.5333333333333332)
    assert allreduce_s(wide, 4096) == pytest.approx(ring16)


def test_a_domain_without_a_stated_nic_is_refused(capsys):
    # GB200's spec states its 72-GPU NVL72 domain but no scale-out link: 128 GPUs in one MoE
    # group cannot be timed
    assert run(["curve", "deepseek-v3", "--gpu", "gb200", "--dp", "128", "--ep", "128",
                "--x", "batch", "--points", "1,8", "-c", "4k"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert "span NVLink domains of 72, and the GPU spec gives no scale_out bandwidth" in err


def test_cross_domain_latency_per_call_by_hand():
    """Each TP all-reduce over more GPUs than a domain adds Efficiency.cross_domain_latency_s:
    DeepSeek-V3 at TP 16 on H200s (61 layers, 2 all-reduces each: 122 calls, every one over
    2 domains) pays 122 x 23 us = 2.806 ms more per decode step; TP 8 pays nothing. The MoE
    dispatch / combine of attention DP pays it too once the DP x TP group leaves the domain:
    DP 16 x TP 1 on 8-GPU domains, 58 MoE layers x 2 = 116 calls; DP 8 (one domain) none."""
    from kvplan.core.perf import decode_step, step_terms

    sm = dsv3_step("h200", 8)
    wide = replace(sm, tp=16)
    lat = 23e-6
    for m, calls in ((sm, 0), (wide, 122)):
        assert step_terms(m, 8, 4096).cross_calls == calls
        slow = replace(m, efficiency=replace(m.efficiency, cross_domain_latency_s=lat))
        assert decode_step(slow, 8, 4096).seconds - decode_step(m, 8, 4096).seconds == \
            pytest.approx(calls * lat)
    dp = dsv3_step("h200", 1, dp=8, ep=8)
    assert step_terms(dp, 8, 4096).cross_calls == 0
    wide_dp = replace(dp, dp=16, ep=16)
    assert step_terms(wide_dp, 8, 4096).cross_calls == 2 * (61 - 3) == 116
    slow_dp = replace(wide_dp, efficiency=replace(wide_dp.efficiency, cross_domain_latency_s=lat))
    assert decode_step(slow_dp, 8, 4096).seconds - decode_step(wide_dp, 8, 4096).seconds == \
        pytest.approx(116 * lat)
    # prefill: the same latency on each of its 122 all-reduces
    from kvplan.core.perf import allreduce_s
    slow = replace(wide, efficiency=replace(wide.efficiency, cross_domain_latency_s=lat))
    assert allreduce_s(slow, 4096) - allreduce_s(wide, 4096) == pytest.approx(122 * lat)


def test_cross_domain_file_is_read_and_checked(tmp_path, monkeypatch):
    import json

    from kvplan.core.errors import KvplanError
    from kvplan.loaders.serving_calibration import cross_domain_latency

    (tmp_path / "cross_domain").mkdir()
    path = tmp_path / "cross_domain" / "latency.json"
    monkeypatch.setenv("KVPLAN_CALIBRATION_PATH", str(tmp_path))
    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    path.write_text(json.dumps({"schema": "kvplan-cross-domain-calibration", "version": 1,
                                "cross_domain_latency_s": 2.3e-5,
                                "provenance": {"rows_fit": 120}}))
    value, label = cross_domain_latency()
    assert value == 2.3e-5 and "23 us" in label and "120 measured rows" in label
    head = '{"schema": "kvplan-cross-domain-calibration", "version": 1, '
    for bad in ('{"schema": "x"}', "[1", head + '"cross_domain_latency_s": -1}',
                head + '"cross_domain_latency_s": 1' + "0" * 400 + "}",
                head.replace('"version": 1', '"version": 9') + '"cross_domain_latency_s": 0}'):
        path.write_text(bad)
        with pytest.raises(KvplanError):
            cross_domain_latency()
    monkeypatch.setenv("KVPLAN_CALIBRATIONS", "off")
    assert cross_domain_latency() is None


def test_shipped_fit_improves_measured_rows_of_other_architectures(monkeypatch):
    """Re-predict the silicon sample's gpt-oss-120b rows with TP over two or more HGX nodes
    (an architecture the fit never saw) with and without the shipped latency, against their
    measured TPOT."""
    import json
    import statistics
    from pathlib import Path

    from kvplan.loaders.benchmarks import read_benchmarks
    from kvplan.planning.bench_predict import row_terms
    from kvplan.planning.bench_validate import efficiency_for_row, evaluate_rows

    root = Path(__file__).parents[1]
    doc = json.loads((root / "calibrations" / "cross_domain" / "latency.json").read_text())
    prov = doc["provenance"]
    assert set(prov["train_model_types"]).isdisjoint(prov["held_out_model_types"])
    assert "gpt_oss" in prov["held_out_model_types"]
    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    runs, _ = read_benchmarks(root / "benchmarks" / "data" / "aiconfigurator_silicon_sample.csv")
    runs = [r for r in runs if r.family == "gpt-oss-120b" and r.tp > 8 and r.dp == 1]
    terms, _ = row_terms(runs)
    cache: dict = {}
    terms = [t for t in terms if efficiency_for_row(t, cache, False).calibrated]
    assert len(terms) >= 10

    def median_error(latency):
        res = evaluate_rows(terms, efficiency=lambda t: replace(
            efficiency_for_row(t, cache, False), cross_domain_latency_s=latency))
        return statistics.median(abs(r.errors["tpot"]) for r in res)

    assert median_error(doc["cross_domain_latency_s"]) < median_error(0.0) - 0.05


def test_gb200_takes_b200s_calibration(monkeypatch):
    """GB200's spec names B200 (the same die) for its calibrations: kvplan uses B200's fitted
    figures for GB200 and says so; with calibrations off, neither."""
    from kvplan.planning.deployment import efficiency_for

    gb200, b200 = load_gpu("gb200"), load_gpu("b200")
    assert gb200.calibration_from == "b200" and "same" not in b200.calibration_from
    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    g, b = efficiency_for(gb200, None, None, "trtllm"), efficiency_for(b200, None, None, "trtllm")
    assert g.calibrated and (g.hbm_bandwidth, g.step_overhead_s) == (b.hbm_bandwidth,
                                                                       b.step_overhead_s)
    assert "transferred to gb200" in g.source
    monkeypatch.setenv("KVPLAN_CALIBRATIONS", "off")
    assert not efficiency_for(gb200, None, None, "trtllm").calibrated


def test_gb200_rows_with_the_transferred_calibration(monkeypatch):
    """The silicon sample's GB200 TensorRT-LLM DeepSeek-V3 TP 8 / EP 8 rows (never fitted by any
    calibration) against their measured TPOT: B200's figures land within 30% (median); the
    18-row GB200 fit this replaced was 178% off."""
    import statistics
    from pathlib import Path

    from kvplan.loaders.benchmarks import read_benchmarks
    from kvplan.planning.bench_predict import row_terms
    from kvplan.planning.bench_validate import evaluate_rows

    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    root = Path(__file__).parents[1]
    runs, _ = read_benchmarks(root / "benchmarks" / "data" / "aiconfigurator_silicon_sample.csv")
    runs = [r for r in runs if r.gpu == "gb200" and r.engine == "trtllm" and r.tp == 8
            and r.ep == 8 and r.family == "DeepSeek-V3"]
    terms, _ = row_terms(runs)
    assert len(terms) >= 20
    res = evaluate_rows(terms)
    assert all("transferred to gb200" in r.calibration for r in res)
    assert statistics.median(abs(r.errors["tpot"]) for r in res) < 0.30


def test_calibration_from_needs_its_reason(tmp_path):
    from pathlib import Path

    from kvplan.core.errors import GpuSpecError

    spec = (Path(__file__).parents[1] / "hardware_specs" / "gb200.yaml").read_text()
    bad = "\n".join(line for line in spec.splitlines()
                    if not line.startswith("calibration_from_note"))
    (tmp_path / "g.yaml").write_text(bad)
    with pytest.raises(GpuSpecError, match="calibration_from"):
        load_gpu(str(tmp_path / "g.yaml"))


def test_indexer_file_is_read_checked_and_applied_only_to_indexer_models(tmp_path, monkeypatch):
    """calibrations/indexer/overhead.json: one fitted cost for every GPU and engine, taken by a
    calibrated figure only for a model with lightning indexers, and named in its label."""
    import shutil
    from pathlib import Path

    from kvplan.core.errors import KvplanError
    from kvplan.loaders import serving_calibration
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.serving_calibration import indexer_overhead
    from kvplan.planning.deployment import efficiency_for

    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
    monkeypatch.setattr(serving_calibration, "calibration_dirs", lambda: [tmp_path])  # no shipped
    shutil.copy(Path(__file__).parents[1] / "calibrations" / "b200--sglang.json", tmp_path)
    b200 = load_gpu("b200")
    (tmp_path / "indexer").mkdir()
    path = tmp_path / "indexer" / "overhead.json"
    e = efficiency_for(b200, None, None, "sglang", sparse_indexer=True)
    assert e.indexer_overhead_s == 0.0 and "not calibrated" in e.source  # said, not silent
    head = '{"schema": "kvplan-indexer-calibration", "version": 1, '
    path.write_text(head + '"indexer_overhead_s": 8.3e-5, "provenance": {"rows_fit": 86}}')
    value, label = indexer_overhead()
    assert value == 8.3e-5 and "83 us" in label and "86 measured rows" in label
    e = efficiency_for(b200, None, None, "sglang", sparse_indexer=True)
    assert e.indexer_overhead_s == 8.3e-5 and "83 us per layer" in e.source
    plain = efficiency_for(b200, None, None, "sglang")
    assert plain.indexer_overhead_s == 0.0 and "indexer" not in plain.source
    # an uncalibrated figure (no serving calibration for the GPU) stays the pure roofline
    assert efficiency_for(load_gpu("h100"), None, None, "sglang",
                          sparse_indexer=True).indexer_overhead_s == 0.0
    for bad in ('{"schema": "kvplan-cross-domain-calibration", "version": 1}', "[1",
                head + '"indexer_overhead_s": -1}', head + '"indexer_overhead_s": 0.5}',
                head + '"indexer_overhead_s": "80us"}'):
        path.write_text(bad)
        with pytest.raises(KvplanError):
            indexer_overhead()
    monkeypatch.setenv("KVPLAN_CALIBRATIONS", "off")
    assert indexer_overhead() is None


def test_shipped_indexer_fit_is_held_out_by_gpu():
    """The shipped fit's report: every GPU's rows judged by a fit on the other GPUs' rows;
    the held-out TPOT of GLM-5's rows is far better with the term than without it."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "calibrations" / "indexer" /
                      "overhead.json").read_text())
    rep = doc["provenance"]["report"]
    assert len(rep["by_gpu"]) >= 3 and doc["provenance"]["model_types"] == ["glm_moe_dsa"]
    tpot = rep["held_out"]["tpot"]
    assert tpot["before"]["median_abs_error"] > 0.25 and tpot["after"]["median_abs_error"] < 0.12
    # each fit without a GPU lands within a quarter of the shipped value (on the 58 distinct
    # rows: 82, 90 and 104 us without B300, B200 and H200, against 103 us from all three)
    for g in rep["by_gpu"].values():
        assert abs(g["fitted_without_s"] / doc["indexer_overhead_s"] - 1) < 0.25
