"""``kvplan curve`` and ``kvplan sweep`` under attention data parallelism and expert
parallelism (``--dp`` / ``--ep``, issue 17).

The rule under test: ``batch`` and ``max_concurrency`` / a curve's concurrency are one DP
rank's (each rank has its own sequences and KV pool, ``kvplan.planning.fit_pools``); tokens/s
and every cost are the whole deployment's: dp ranks each running the batch, on tp x pp x dp
GPUs at the GPU's price each.

Hand numbers, from the real configs and GPU YAML:
- DeepSeek-V3 (``model_specs/deepseek-v3.json``): 61 decoder layers (the MTP layer is not
  counted), MLA with ``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64, so a bf16 KV token is
  (512 + 64) x 2 B = 1,152 B per layer on every GPU of an attention rank of tp 1; a vLLM
  block of 16 tokens is 16 x 1,152 x 61 = 1,124,352 B; a 32k sequence holds 32,768 / 16 =
  2,048 blocks.
- H200 SXM (``hardware_specs/h200-sxm.yaml``): $4.59 per GPU-hour.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from cli_helpers import fail

from kvplan.cli.main import run
from kvplan.core.errors import InputError
from kvplan.core.perf import prefill_s, tpot_s
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.resolve import load_model
from kvplan.planning.deployment import build_series, efficiency_for, plan
from kvplan.planning.fit_pools import concurrency_at
from kvplan.planning.sweep import Grid, check
from kvplan.report.sweep_table import COLUMNS, sweep

ROOT = Path(__file__).resolve().parent.parent
H200 = yaml.safe_load((ROOT / "hardware_specs" / "h200-sxm.yaml").read_text())
PRICE = H200["price_usd_per_gpu_hour"]
CTX = 32768
MLA_BLOCK_BYTES = 16 * (512 + 64) * 2 * 61  # 16 tokens x (latent + rope) x bf16 x 61 layers
BLOCKS_PER_SEQ = CTX // 16


@pytest.fixture(autouse=True)
def _default_efficiency(monkeypatch):
    """No calibrated run from the environment: kvplan's default efficiencies apply."""
    monkeypatch.delenv("KVPLAN_CALIBRATION_PATH", raising=False)


def test_hand_constants():
    assert PRICE == 4.59
    assert MLA_BLOCK_BYTES == 1_124_352
    assert BLOCKS_PER_SEQ == 2048


# --- sweep ------------------------------------------------------------------------------------

DSV3 = Grid(models=["deepseek-v3"], gpus=["h200"], tps=[1], pps=[1], dps=[8], eps=[4, 8],
            kv_dtypes=["auto"], contexts=[CTX], batches=[1, 8, 16], request=(1500, 200))


@pytest.fixture(scope="module")
def dsv3():
    return sweep(DSV3)


@pytest.fixture(scope="module")
def dsv3_plan():
    spec = load_gpu("h200")
    return plan(load_model("deepseek-v3"), spec, kv_dtype="auto", weight_dtype=None,
                engine="vllm", tp=1, pp=1, dp=8, ep=8, context_tokens=CTX,
                efficiency=efficiency_for(spec, None, None, "vllm"))


def test_grid_counts_dp_and_ep():
    assert DSV3.configs == 1 * 1 * 1 * 1 * 1 * 2 * 1 == 2
    assert DSV3.rows == 2 * 1 * 3 == 6
    g = Grid(models=["a"], gpus=["h100", "h200"], tps=[1, 2], pps=[1], kv_dtypes=["fp8"],
             contexts=[1], batches=[1], dps=[1, 2, 8], eps=[1, 8])
    assert g.configs == 2 * 2 * 3 * 2 == 24
    # the defaults: one DP rank, no EP
    d = Grid(models=["a"], gpus=["h100"], tps=[1], pps=[1], kv_dtypes=["fp8"], contexts=[1],
             batches=[1])
    assert (d.dps, d.eps, d.configs) == ([1], [1], 1)


def test_columns_name_the_layout():
    assert COLUMNS[:7] == ["model", "gpu", "tp", "pp", "dp", "ep", "gpus"]
    assert COLUMNS[COLUMNS.index("batch") + 1] == "sequences"


def test_sweep_dp8_ep8_row_by_hand(dsv3, dsv3_plan, capsys):
    rows = dsv3[dsv3["ep"] == 8]
    assert len(rows) == 3
    assert (rows["dp"] == 8).all() and (rows["gpus"] == 8).all()  # tp 1 x pp 1 x dp 8
    assert (rows["price_usd_per_hour"] == 8 * PRICE).all()  # 36.72
    # one DP rank's pool holds 13 whole 32k sequences: 31,441,563,413 B // 1,124,352 B =
    # 27,964 blocks, // 2,048 blocks per sequence = 13
    pool = int(rows["kv_pool_bytes"].iloc[0])
    assert pool // MLA_BLOCK_BYTES // BLOCKS_PER_SEQ == 13
    assert (rows["max_concurrency"] == 13).all()
    # ... which is what `kvplan fit --dp 8 --ep 8` says per DP rank (104 in the deployment)
    assert run(["fit", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "-c", "32k",
                "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["max_concurrency_per_dp_rank"] == 13 and fit["max_concurrency"] == 8 * 13
    assert fit["memory"]["kv_pool_bytes"] == pool
    # batch per DP rank; sequences the deployment's
    assert list(rows["batch"]) == [1, 8, 16]
    assert list(rows["sequences"]) == [8, 64, 128]
    assert list(rows["fits"]) == [True, True, False]  # 16 > 13 a rank holds
    assert rows["error"].iloc[2] == "batch exceeds the 13 sequences the pool holds"
    r, sm = dsv3_plan
    for row in rows.itertuples(index=False):
        b = row.batch
        ttft = prefill_s(sm, CTX, r.max_num_batched_tokens)
        assert row.ttft_ms == pytest.approx(ttft * 1000, rel=1e-12)  # one rank's prompt
        # every rank prefills its own prompts: 8 x 32,768 tokens per TTFT, at 8 GPUs' price
        assert row.cost_per_mtok_input_usd == pytest.approx(
            8 * PRICE / 3600 / (8 * CTX / (row.ttft_ms / 1000)) * 1e6, rel=1e-12)
        if not row.fits:
            assert math.isnan(row.tpot_ms) and math.isnan(row.tokens_per_s)
            assert math.isnan(row.cost_per_mtok_usd) and math.isnan(row.cost_per_request_usd)
            continue
        # TPOT of a rank's batch (the MoE layers see 8 x b tokens: the step model's dp)
        assert row.tpot_ms == pytest.approx(tpot_s(sm, b, CTX) * 1000, rel=1e-12)
        # tokens/s of the deployment: 8 ranks x b sequences / TPOT, from the row's own TPOT
        assert row.tokens_per_s == pytest.approx(8 * b / (row.tpot_ms / 1000), rel=1e-12)
        assert row.tokens_per_s_per_gpu == pytest.approx(row.tokens_per_s / 8, rel=1e-12)
        assert row.cost_per_mtok_usd == pytest.approx(
            8 * PRICE / 3600 / row.tokens_per_s * 1e6, rel=1e-12)
        # a request pays one rank's GPUs (8 x price / 8 ranks) for its prefill and its share
        # of 200 decode steps of the batch at context 1500 + 100
        per_request = PRICE / 3600 * (prefill_s(sm, 1500.0, r.max_num_batched_tokens)
                                      + 200 * tpot_s(sm, b, 1600) / b)
        assert row.cost_per_request_usd == pytest.approx(per_request, rel=1e-12)


def test_sweep_refused_layout_is_an_error_row(dsv3):
    bad = dsv3[dsv3["ep"] == 4]
    assert len(bad) == 3
    assert not bad["fits"].any()
    assert (bad["error"] == "ep: vLLM's expert-parallel group is every GPU of a stage "
            "(--enable-expert-parallel: ep = tp x dp = 8); ep=4 is not a layout vLLM runs").all()
    assert bad["tpot_ms"].isna().all() and bad["tokens_per_s"].isna().all()
    # the layout columns still say what was asked
    assert (bad["gpus"] == 8).all() and list(bad["sequences"]) == [8, 64, 128]


def test_sweep_dense_dp_is_replicas():
    """A dense model's DP ranks share nothing: each is the dp 1 deployment, so TPOT, the pool
    and the per-GPU figures are the same, tokens/s and the price twice."""
    d = sweep(Grid(models=["llama-3.1-8b"], gpus=["h100"], tps=[1], pps=[1], dps=[1, 2],
                   eps=[1, 2], kv_dtypes=["fp8"], contexts=[8192], batches=[8]))
    one, two = (d[(d["dp"] == k) & (d["ep"] == 1)].iloc[0] for k in (1, 2))
    assert (one["gpus"], two["gpus"]) == (1, 2)
    assert (one["sequences"], two["sequences"]) == (8, 16)
    for col in ("max_concurrency", "kv_pool_bytes", "tpot_ms", "ttft_ms"):
        assert two[col] == one[col]
    assert two["price_usd_per_hour"] == 2 * one["price_usd_per_hour"]
    assert two["tokens_per_s"] == pytest.approx(2 * one["tokens_per_s"], rel=1e-12)
    for col in ("tokens_per_s_per_gpu", "cost_per_mtok_usd", "cost_per_mtok_input_usd"):
        assert two[col] == pytest.approx(one[col], rel=1e-12)
    # ep 2 on a dense model: the engine rule's reason, never an exception
    ep2 = d[d["ep"] == 2]
    assert len(ep2) == 2 and not ep2["fits"].any()
    assert ep2["error"].str.contains("needs a mixture-of-experts model").all()


def test_sweep_dp1_rows_say_dp_1():
    d = sweep(Grid(models=["llama-3.1-8b"], gpus=["h100"], tps=[1, 2], pps=[1],
                   kv_dtypes=["fp8"], contexts=[8192], batches=[1, 8]))
    assert (d["dp"] == 1).all() and (d["ep"] == 1).all()
    assert (d["sequences"] == d["batch"]).all()
    assert (d["gpus"] == d["tp"]).all()
    fits = d[d["fits"]]
    assert ((fits["tokens_per_s"] - fits["batch"] / (fits["tpot_ms"] / 1000)).abs()
            <= 1e-9 * fits["tokens_per_s"]).all()


def test_sweep_cli_dp_ep(capsys):
    assert run(["sweep", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "4,8", "-c", "32k",
                "--batch", "1,8", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4
    assert [(r["dp"], r["ep"], r["batch"], r["sequences"]) for r in rows] == [
        (8, 4, 1, 8), (8, 4, 8, 64), (8, 8, 1, 8), (8, 8, 8, 64)]
    assert [r["fits"] for r in rows] == [False, False, True, True]
    assert "ep=4 is not a layout vLLM runs" in rows[0]["error"]
    assert all(r["gpus"] == 8 for r in rows)


@pytest.mark.parametrize("args,flag", [
    (["--dp", "0"], "--dp"), (["--dp", "x"], "--dp"), (["--ep", "0"], "--ep"),
    (["--ep", "1.5"], "--ep"), (["--dp", "1,-2"], "--dp"),
])
def test_sweep_cli_bad_dp_ep(capsys, args, flag):
    assert flag in fail(capsys, "sweep", "qwen3-30b-a3b", "--gpu", "h200", *args)


def test_sweep_check_refuses_bad_dp_ep_in_a_grid():
    base = dict(models=["llama-3.1-8b"], gpus=["h100"], tps=[1], pps=[1], kv_dtypes=["fp8"],
                contexts=[8192], batches=[1])
    for kw, flag in (({"dps": [0]}, "--dp"), ({"eps": [1, -1]}, "--ep"),
                     ({"dps": [1.5]}, "--dp")):
        with pytest.raises(InputError) as e:
            check(Grid(**base, **kw), yes=False)
        assert str(e.value).startswith(f"{flag}: ") and "\n" not in str(e.value)


# --- curve ------------------------------------------------------------------------------------

CURVE = ["curve", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8", "--x", "batch",
         "-c", "32k", "--points", "1,2,4,8,13,14"]


def _curve(capsys, *args) -> dict:
    assert run([*CURVE, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_curve_dp_title_and_cost_from_its_own_throughput(capsys):
    cost = _curve(capsys, "--y", "cost")
    tput = _curve(capsys, "--y", "throughput")
    tpot = _curve(capsys, "--y", "tpot")
    assert "tp 1 x pp 1 x dp 8, ep 8" in cost["title"]
    assert "batch and concurrency per DP rank" in cost["title"]
    (c,), (t,), (p,) = cost["series"], tput["series"], tpot["series"]
    assert [q["x"] for q in c["points"]] == [1, 2, 4, 8, 13, 14]
    assert {q["concurrency"] for q in c["points"]} == {13}  # per DP rank, as the sweep
    assert [q["y"] is None for q in c["points"]] == [False] * 5 + [True]  # 14 > 13
    for qc, qt, qp in zip(c["points"], t["points"], p["points"], strict=True):
        if qc["y"] is None:
            assert qt["y"] is None and qp["y"] is None
            continue
        # tokens/s of all 8 ranks, each running the batch: 8 x B / TPOT
        assert qt["y"] == pytest.approx(8 * qc["x"] / (qp["y"] / 1000), rel=1e-12)
        # $ per Mtok = price x 8 GPUs / 3600 / tokens/s x 1e6
        assert qc["y"] == pytest.approx(PRICE * 8 / 3600 / qt["y"] * 1e6, rel=1e-12)
    given = _curve(capsys, "--y", "cost", "--price", "2")
    assert given["series"][0]["points"][0]["y"] == pytest.approx(
        2 * 8 / 3600 / t["points"][0]["y"] * 1e6, rel=1e-12)


def test_curve_dp_along_context_batch_is_per_rank(dsv3_plan):
    r, _ = dsv3_plan
    res = build_series("deepseek-v3", gpus=["h200"], kv_dtypes=["auto"], weight_dtype=None,
                       engine="vllm", tp=1, pp=1, dp=8, ep=8, x="context", y="throughput",
                       xs=[8192, CTX], context="8k", batch=None, price=None,
                       hbm_efficiency=None, flops_efficiency=None)
    (s,) = res.series
    (rp,) = res.plans
    assert rp.request.gpus == 8 and rp.request.dp == 8 and rp.request.ep == 8
    for p in s.points:
        assert p.concurrency == concurrency_at(rp, p.x)  # one rank's pool
        assert p.batch == min(rp.max_num_seqs, p.concurrency)
    assert s.points[1].concurrency == 13


def test_curve_dp1_title_unchanged(capsys):
    assert run(["curve", "llama-3.1-8b", "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert ", tp 1 x pp 1, engine " in d["title"]
    assert "dp" not in d["title"]


@pytest.mark.parametrize("args,flag", [
    (["--dp", "0"], "--dp"), (["--dp", "x"], "--dp"), (["--ep=-1"], "--ep"),
    (["--ep", "x"], "--ep"),
])
def test_curve_cli_bad_dp_ep(capsys, args, flag):
    assert flag in fail(capsys, "curve", "qwen3-30b-a3b", "--gpu", "h200", *args)


def test_curve_cli_refused_layout_is_one_line(capsys):
    line = fail(capsys, "curve", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "4")
    assert line == ("kvplan: error: ep: vLLM's expert-parallel group is every GPU of a stage "
                    "(--enable-expert-parallel: ep = tp x dp = 8); ep=4 is not a layout vLLM "
                    "runs")
