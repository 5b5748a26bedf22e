"""``kvplan curve`` and ``kvplan sweep``: axis parsing, series, memory cliffs, the sweep grid,
its filters, ranking and writers.

House rule: every pinned number is derived by hand here from the documented formulas and the
real config (``model_specs/<model>.json``) / GPU YAML (``hardware_specs/<gpu>.yaml``), with
the arithmetic written out - never copied from kvplan's output.

vLLM main budget (kvplan.engines.vllm_memory, docs/budget-research.md): pool = int(total x
0.92) - weights - activation - (non-torch 0.25 GiB + CUDA graphs 768 MiB + 5 MiB per layer),
activation = max(8192 x (3 x intermediate + 6 x hidden) x 2, int(15.45 x 1024 x vocab));
blocks = pool // (16 tokens x page per token of all layers); a sequence of n tokens holds
ceil(n / 16) blocks; concurrency = blocks // ceil(n / 16).
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_helpers import fail

from kvplan.cli.axis import parse_axis
from kvplan.cli.main import run
from kvplan.core.errors import InputError
from kvplan.core.perf import Efficiency, cost_per_mtok_usd, prefill_s, tpot_s
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.resolve import load_model
from kvplan.planning.curve import series
from kvplan.planning.deployment import build_series, efficiency_for, plan
from kvplan.planning.fit_pools import concurrency_at
from kvplan.planning.sweep import Grid, check
from kvplan.report.sweep_table import sweep

ROOT = Path(__file__).resolve().parent.parent
MiB, GiB = 2**20, 2**30


@pytest.fixture(autouse=True)
def _default_efficiency(monkeypatch):
    """No calibrated run from the environment: kvplan's default efficiencies apply."""
    monkeypatch.delenv("KVPLAN_CALIBRATION_PATH", raising=False)


def gpu_yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "hardware_specs" / f"{name}.yaml").read_text())


H100 = gpu_yaml("h100-sxm")

# --- Llama-3-70B, fp8 weights + fp8 KV, one H100: the memory cliff by hand -------------------
# config: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV heads (head_dim 128),
# vocab 128256, untied. fp8 Linear = 1 B / param + one fp32 per-tensor scale (7 per layer).
LINEAR = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28672 * 8192
WEIGHTS = 80 * (LINEAR + 4 * 7) + 2 * (2 * 128256 * 8192 + 80 * 2 * 8192 + 8192)
ACT = max(8192 * (3 * 28672 + 6 * 8192) * 2, int(Fraction(1545, 100) * 1024 * 128256))
OVERHEAD = GiB // 4 + 768 * MiB + 5 * MiB * 80
POOL = H100["memory"]["driver_total_bytes"] * 92 // 100 - WEIGHTS - ACT - OVERHEAD
BLOCK = 16 * 2 * 80 * 8 * 128 * 1  # 16 tokens x (K, V) x 80 layers x 8 heads x 128 x 1 B
BLOCKS = POOL // BLOCK


def hand_conc(n: int) -> int:
    return BLOCKS // -(-n // 16)


def test_hand_pool_and_blocks():
    assert WEIGHTS == 72_656_373_952
    assert ACT == 2_214_592_512  # the forward pass (the sampler is 2,029,117,685)
    assert POOL == 78_241_839_185 - WEIGHTS - ACT - 1_493_172_224 == 1_877_700_497
    assert BLOCK == 2_621_440
    assert BLOCKS == 716
    # one sequence needs ceil(n / 16) blocks: two fit up to 358 blocks (5,728 tokens), one up
    # to 716 (11,456 tokens), none past it
    assert (hand_conc(5728), hand_conc(5729), hand_conc(11456), hand_conc(11457)) == (2, 1, 1, 0)


# --- grid.parse_axis --------------------------------------------------------------------------


@pytest.mark.parametrize("text,tokens,expected", [
    ("8k,32k", True, [8192, 32768]),
    ("1k:8k:x2", True, [1024, 2048, 4096, 8192]),
    ("1:25:+8", False, [1, 9, 17, 25]),
    ("1:25:+8", True, [1, 9, 17, 25]),
    ("2k:8k:+2k", True, [2048, 4096, 6144, 8192]),
    ("1k:5k:x2", True, [1024, 2048, 4096]),  # stops at stop: 8k > 5k
    ("1:4:x1.5", False, [1, 2, 3]),  # 1, 1.5, 2.25, 3.375 truncated; the second 1 dropped
    ("4k,1k:2k:x2,4k", True, [4096, 1024, 2048]),  # duplicates dropped, order kept
])
def test_parse_axis(text, tokens, expected):
    assert parse_axis(text, "--points", tokens=tokens) == expected


@pytest.mark.parametrize("text", ["8k:1k:x2", "1k:8k:x1", "1k:8k:x0.5", "1k:8k", "1k:8k:*2",
                                  "1k:8k:+", "1k:8k:+abc", "1k:2k:4k:+1", "0:8:+1", "abc", ",",
                                  "1:1000000:+1"])
def test_parse_axis_bad_ranges_are_one_line_errors(text):
    with pytest.raises(InputError) as e:
        parse_axis(text, "--points", tokens=False)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("--points: ")


# --- curve ------------------------------------------------------------------------------------

CLIFF_XS = parse_axis("4k:16k:+1k", "--points")  # 4096, 5120, ..., 16384


def llama70_series(y: str, x: str = "context", xs=None):
    return build_series("llama-3.1-70b", gpus=["h100"], kv_dtypes=["fp8"], weight_dtype="fp8",
                        engine="vllm", tp=1, pp=1, x=x, y=y, xs=xs or CLIFF_XS, context="8k",
                        batch=None, price=None, hbm_efficiency=None, flops_efficiency=None)


def test_curve_concurrency_is_concurrency_at_and_the_hand_cliff():
    res = llama70_series("concurrency")
    (s,) = res.series
    (r,) = res.plans
    assert r.budget.kv_pool_bytes == POOL
    assert [p.y for p in s.points] == [float(concurrency_at(r, n)) for n in CLIFF_XS]
    assert [p.concurrency for p in s.points] == [hand_conc(n) for n in CLIFF_XS]
    # 4k, 5k: 716 // 256 = 2, 716 // 320 = 2; 6k: 716 // 384 = 1; 11k: 716 // 704 = 1;
    # 12k: 716 // 768 = 0
    assert [hand_conc(n) for n in CLIFF_XS] == [2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert s.cliff_one == 6144
    assert s.cliff_zero == 12288
    assert s.fit_base is None and s.fit_slope is None  # fits only along position


def test_curve_batch_axis_drops_points_past_the_cliff():
    r, sm = plan(load_model("llama-3.1-8b"), load_gpu("h100"), kv_dtype="bf16", weight_dtype=None,
                 engine="vllm", tp=1, pp=1, context_tokens=8192, efficiency=Efficiency())
    xs = [1, 8, 32, 64, 128]
    s = series("bf16", r, sm, x="batch", y="tpot", xs=xs, context_tokens=8192, batch=None,
               price_usd_per_hour=3.99)
    conc = concurrency_at(r, 8192)
    assert 8 < conc < 128
    for p in s.points:
        assert p.concurrency == conc and p.batch == p.x
        assert (p.y is None) == (p.x > conc)
        if p.y is not None:
            assert p.y == pytest.approx(tpot_s(sm, p.x, 8192) * 1000, rel=1e-12)
    assert s.cliff_one is None and s.cliff_zero is None


def test_curve_position_fit_is_least_squares():
    xs = parse_axis("1k:128k:x2", "--points")
    res = build_series("llama-3.1-8b", gpus=["h100"], kv_dtypes=["fp8"], weight_dtype=None,
                       engine="vllm", tp=1, pp=1, x="position", y="cost", xs=xs, context="8k",
                       batch=64, price=2.0, hbm_efficiency=None, flops_efficiency=None)
    (s,) = res.series
    (r,) = res.plans
    pts = [(p.x, p.y) for p in s.points if p.y is not None]
    assert len(pts) == len(xs)
    # each point: $2/h / 3600 / (B / TPOT) x 1e6 with B = min(64, concurrency at n)
    (_, sm) = plan(load_model("llama-3.1-8b"), load_gpu("h100"), kv_dtype="fp8", weight_dtype=None,
                   engine="vllm", tp=1, pp=1, context_tokens=max(xs), efficiency=Efficiency())
    for p in s.points:
        b = min(64, concurrency_at(r, p.x))
        assert p.batch == b
        assert p.y == pytest.approx(2.0 / 3600 / (b / tpot_s(sm, b, p.x)) * 1e6, rel=1e-12)
    # hand least squares: slope = sum (x - mx)(y - my) / sum (x - mx)^2, base = my - slope mx
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    assert s.fit_slope == pytest.approx(slope, rel=1e-9)
    assert s.fit_base == pytest.approx(my - slope * mx, rel=1e-9)
    # and numpy's own fit agrees
    np_slope, np_base = np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)
    assert s.fit_slope == pytest.approx(np_slope, rel=1e-6)
    assert s.fit_base == pytest.approx(np_base, rel=1e-6)


CURVE = ["curve", "llama-3.1-70b", "--gpu", "h100", "--weight-dtype", "fp8", "--kv-dtype", "fp8",
         "--x", "context", "--y", "concurrency", "--points", "4k:16k:+1k"]


def test_curve_cli_csv(capsys):
    assert run([*CURVE, "--csv"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "series,x_axis,x,y_axis,y,y_unit,batch,concurrency"
    assert len(lines) == 1 + len(CLIFF_XS)
    rows = [line.split(",") for line in lines[1:]]
    assert [int(r[2]) for r in rows] == CLIFF_XS
    assert [int(r[7]) for r in rows] == [hand_conc(n) for n in CLIFF_XS]
    assert {r[1] for r in rows} == {"context"} and {r[3] for r in rows} == {"concurrency"}
    assert {r[5] for r in rows} == {"sequences"}
    # batch = min(max_num_seqs 1024, concurrency)
    assert [int(r[6]) for r in rows] == [hand_conc(n) for n in CLIFF_XS]


def test_curve_cli_json(capsys):
    assert run([*CURVE, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) == {"title", "assumptions", "assumed_standard_attention", "series", "efficiency"}
    (s,) = d["series"]
    assert set(s) == {"label", "x_axis", "y_axis", "y_unit", "cliff_one_sequence", "cliff_zero",
                      "fit_base", "fit_slope_per_token", "points"}
    assert (s["cliff_one_sequence"], s["cliff_zero"]) == (6144, 12288)
    assert set(s["points"][0]) == {"x", "y", "batch", "concurrency"}
    assert [p["concurrency"] for p in s["points"]] == [hand_conc(n) for n in CLIFF_XS]
    (e,) = d["efficiency"]
    assert set(e) == {"hbm_bandwidth", "flops", "interconnect", "source"}
    assert (e["hbm_bandwidth"], e["flops"]) == (0.8, 0.6)  # the documented defaults


def test_curve_cli_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out.png"
    assert run([*CURVE, "--plot", str(out), "--json"]) == 0
    capsys.readouterr()
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,flag", [
    (["--plot", "out.jpg"], "--plot"),
    (["--x", "tokens"], "--x"),
    (["--y", "latency"], "--y"),
    (["--price", "0"], "--price"),
    (["--price=-2"], "--price"),
    (["--points", "8k:1k:x2"], "--points"),
    (["--hbm-efficiency", "1.5"], "--hbm-efficiency"),
])
def test_curve_cli_bad_values_are_one_line_errors(capsys, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    line = fail(capsys, *CURVE, *args)
    assert flag in line
    assert not (tmp_path / "out.jpg").exists()


# --- sweep ------------------------------------------------------------------------------------

REQUIRED = ["model", "gpu", "tp", "pp", "gpus", "kv_dtype", "context_tokens", "fits",
            "max_concurrency", "kv_pool_bytes", "tpot_ms", "ttft_ms", "tokens_per_s",
            "cost_per_mtok_usd"]
GRID = Grid(models=["llama-3.1-8b"], gpus=["h100", "h200"], tps=[1, 2], pps=[1],
            kv_dtypes=["bf16", "fp8"], contexts=[8192, 32768], batches=[1, 8, 64])
SWEEP = ["sweep", "llama-3.1-8b", "--gpu", "h100,h200", "--tp", "1,2", "--kv-dtype", "bf16,fp8",
         "-c", "8k,32k", "--batch", "1,8,64"]


@pytest.fixture(scope="module")
def df():
    return sweep(GRID)


def test_sweep_shape_and_columns(df):
    assert len(df) == GRID.configs * 2 * 3 == 8 * 6 == 48
    assert set(REQUIRED) <= set(df.columns)
    assert (df["gpus"] == df["tp"] * df["pp"]).all()
    # a row that fits has no error; one that does not says why (the batch over what fits)
    assert (df.loc[df["fits"], "error"] == "").all()
    over = df[~df["fits"]]
    assert len(over) > 0
    assert (over["error"] == "batch exceeds the " + over["max_concurrency"].astype(str)
            + " sequences the pool holds").all()


def test_sweep_equals_plan_and_perf_row_by_row(df):
    cache = {}
    for row in df.itertuples(index=False):
        key = (row.gpu, row.tp, row.kv_dtype)
        if key not in cache:
            spec = load_gpu(row.gpu)
            kv = "bf16" if row.kv_dtype == "bf16" else "fp8"
            cache[key] = (spec, *plan(load_model("llama-3.1-8b"), spec, kv_dtype=kv,
                                      weight_dtype=None, engine="vllm", tp=row.tp, pp=1,
                                      context_tokens=32768,
                                      efficiency=efficiency_for(spec, None, None)))
        spec, r, sm = cache[key]
        n, b = row.context_tokens, row.batch
        conc = concurrency_at(r, n)
        assert row.kv_pool_bytes == r.budget.kv_pool_bytes
        assert row.max_concurrency == conc
        assert bool(row.fits) == (1 <= b <= conc)
        assert row.ttft_ms == pytest.approx(prefill_s(sm, n, r.max_num_batched_tokens) * 1000,
                                            rel=1e-12)
        price = spec.price_usd_per_gpu_hour * row.tp
        if row.fits:
            tpot = tpot_s(sm, b, n)
            assert row.tpot_ms == pytest.approx(tpot * 1000, rel=1e-12)
            assert row.tokens_per_s == pytest.approx(b / tpot, rel=1e-12)
            assert row.cost_per_mtok_usd == pytest.approx(
                cost_per_mtok_usd(price, b / tpot), rel=1e-12)
        else:
            assert math.isnan(row.tpot_ms) and math.isnan(row.tokens_per_s)
            assert math.isnan(row.cost_per_mtok_usd)
    assert not df["fits"].all() and df["fits"].any()


def test_sweep_llama3_70b_by_hand():
    d = sweep(Grid(models=["llama-3.1-70b"], gpus=["h100"], tps=[1], pps=[1], kv_dtypes=["fp8"],
                   contexts=[8192, 32768], batches=[1, 2], weight_dtype="fp8"))
    assert list(d["max_concurrency"]) == [hand_conc(8192)] * 2 + [hand_conc(32768)] * 2
    assert list(d["max_concurrency"]) == [1, 1, 0, 0]  # 716 // 512, 716 // 2048
    assert list(d["fits"]) == [True, False, False, False]
    assert (d["kv_pool_bytes"] == POOL).all()
    # decode at 8k, B = 1, default efficiency (HBM 80%): reads the non-embedding weights
    # (WEIGHTS less the bf16 embedding table) + 8192 tokens x 163,840 B of fp8 KV
    read = WEIGHTS - 2 * 128256 * 8192 + 8192 * 2 * 80 * 8 * 128
    assert read == 71_897_204_928
    tpot = read / (H100["hbm_bandwidth_bytes_per_s"] * 0.8)  # 26.83 ms; FLOPs: 0.135 ms at 60%
    assert d["tpot_ms"][0] == pytest.approx(tpot * 1000, rel=1e-12)
    assert d["tokens_per_s"][0] == pytest.approx(1 / tpot, rel=1e-12)
    assert d["cost_per_mtok_usd"][0] == pytest.approx(3.99 / 3600 * tpot * 1e6, rel=1e-12)
    # prefill 8192 tokens in one chunk: 8192 x (2 x params without the embedding + 2 x 64 x
    # 256 x 80 x 8192 / 2) FLOPs at 60% of the fp8 peak (compute-bound: 1.03 s vs 26 ms)
    flops = 8192 * (2 * (80 * (LINEAR + 2 * 8192) + 8192 + 128256 * 8192)
                    + 2 * 64 * 256 * 80 * 4096)
    peak = H100["dense_flops_per_s"]["fp8"] * 0.6
    assert d["ttft_ms"][0] == pytest.approx(flops / peak * 1000, rel=1e-12)


def test_sweep_unsplittable_tp_rows_carry_the_error():
    d = sweep(Grid(models=["llama-3.1-8b"], gpus=["h100"], tps=[1, 3], pps=[1], kv_dtypes=["bf16"],
                   contexts=[8192], batches=[1, 8]))
    assert len(d) == 4
    bad = d[d["tp"] == 3]
    assert len(bad) == 2
    assert not bad["fits"].any()
    assert bad["error"].str.contains("32").all() and bad["error"].str.contains("3").all()
    assert bad["tpot_ms"].isna().all()
    assert (d[d["tp"] == 1]["error"] == "").all()


def _json_rows(capsys, *args) -> list[dict]:
    assert run([*SWEEP, *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("expr,col,op", [
    ("tpot_ms <= 10", "tpot_ms", lambda v: v <= 10),
    ("max_concurrency >= 64", "max_concurrency", lambda v: v >= 64),
    ("fits == true", "fits", lambda v: v is True),
])
def test_sweep_where(capsys, df, expr, col, op):
    rows = _json_rows(capsys, "--where", expr)
    assert rows and all(r[col] is not None and op(r[col]) for r in rows)
    values = df[col].astype(float)
    want = {"tpot_ms": values <= 10, "max_concurrency": values >= 64,
            "fits": values == 1}[col]
    assert len(rows) == int(want.sum()) < len(df)


def test_sweep_where_and(capsys, df):
    rows = _json_rows(capsys, "--where", "tpot_ms <= 10", "--where", "max_concurrency >= 64")
    assert len(rows) == int(((df["tpot_ms"] <= 10) & (df["max_concurrency"] >= 64)).sum()) > 0


@pytest.mark.parametrize("expr", ["__import__('os')", "__import__('os').system('true') > 0",
                                  "bogus_column <= 1", "model == 1", "tpot_ms <= abc",
                                  "tpot_ms"])
def test_sweep_where_refused_with_the_column_list(capsys, expr):
    line = fail(capsys, *SWEEP, "--where", expr)
    assert "--where" in line
    for col in ("tpot_ms", "max_concurrency", "cost_per_mtok_usd", "kv_pool_bytes"):
        assert col in line


def test_sweep_objective_and_top(capsys, df):
    rows = _json_rows(capsys, "--objective", "cost_per_mtok")
    assert len(rows) == int(df["fits"].sum())
    assert all(r["fits"] for r in rows)
    costs = [r["cost_per_mtok_usd"] for r in rows]
    assert costs == sorted(costs)
    top = _json_rows(capsys, "--objective", "cost_per_mtok", "--top", "3")
    assert top == rows[:3]
    assert len(_json_rows(capsys, "--top", "5")) == 5
    fail(capsys, *SWEEP, "--objective", "cheapest")
    fail(capsys, *SWEEP, "--top", "0")


def test_sweep_formats_stdout_and_output(capsys, tmp_path, df):
    assert run([*SWEEP]) == 0  # csv by default
    csv = capsys.readouterr().out
    lines = csv.splitlines()
    header = lines[0].split(",")
    assert set(REQUIRED) <= set(header)
    assert len(lines) == 1 + len(df)
    assert run([*SWEEP, "--format", "md"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("| model | gpu | tp |") and md[1].startswith("|---|")
    assert len(md) == 2 + len(df)
    rows = _json_rows(capsys)
    assert len(rows) == len(df) and set(REQUIRED) <= set(rows[0])
    for fmt, text in (("csv", csv), ("md", "\n".join(md) + "\n")):
        path = tmp_path / f"out.{fmt}"
        assert run([*SWEEP, "--format", fmt, "--output", str(path)]) == 0
        out, err = capsys.readouterr()
        assert out == ""
        assert err.strip() == f"kvplan: wrote {len(df)} rows to {path}"
        assert path.read_text() == text
    path = tmp_path / "out.json"
    assert run([*SWEEP, "--format", "json", "-o", str(path)]) == 0
    capsys.readouterr()
    assert json.loads(path.read_text()) == rows


def test_sweep_parquet_needs_output_and_pyarrow(capsys, tmp_path, monkeypatch):
    assert "--output" in fail(capsys, *SWEEP, "--format", "parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    line = fail(capsys, *SWEEP, "--format", "parquet", "--output", str(tmp_path / "x.parquet"))
    assert "pyarrow" in line
    assert not (tmp_path / "x.parquet").exists()
    assert "--format" in fail(capsys, *SWEEP, "--format", "xlsx")


def test_sweep_grid_size_limits(capsys):
    assert "--gpu: expected one or more values" in fail(capsys, "sweep", "llama-3.1-8b", "--gpu", ",")
    # 20,000 contexts x 51 batches = 1,020,000 rows > 1,000,000: refused before any work
    line = fail(capsys, "sweep", "llama-3.1-8b", "--gpu", "h100", "-c", "1:20000:+1",
                "--batch", "1:51:+1")
    assert "--yes" in line and "1,020,000" in line
    # 100,000 x 101 = 10,100,000 rows: over the 10,000,000 a sweep holds, even with --yes
    line = fail(capsys, "sweep", "llama-3.1-8b", "--gpu", "h100", "-c", "1:100000:+1",
                "--batch", "1:101:+1", "--yes")
    assert "10,100,000 rows, over the 10,000,000" in line
    big = Grid(models=["llama-3.1-8b"], gpus=["h100"], tps=[1], pps=[1], kv_dtypes=["auto"],
               contexts=list(range(1, 20_001)), batches=list(range(1, 52)))
    with pytest.raises(InputError):
        check(big, yes=False)
    check(big, yes=True)  # allowed with --yes
    with pytest.raises(InputError):
        check(Grid(models=[], gpus=["h100"], tps=[1], pps=[1], kv_dtypes=["auto"],
                   contexts=[8192], batches=[1]), yes=True)


@pytest.mark.parametrize("price", ["0", "-1", "-0.5"])
def test_sweep_non_positive_price_refused(capsys, price):
    assert "--price" in fail(capsys, *SWEEP, f"--price={price}")


def test_sweep_price_scales_cost(df):
    d = sweep(Grid(models=["llama-3.1-8b"], gpus=["h100"], tps=[2], pps=[1], kv_dtypes=["fp8"],
                   contexts=[8192], batches=[8], price=1.0))
    ref = df[(df["gpu"] == "h100-sxm") & (df["tp"] == 2) & (df["kv_dtype"] == "fp8_e4m3")
             & (df["context_tokens"] == 8192) & (df["batch"] == 8)].iloc[0]
    # $1 per GPU-hour x 2 GPUs against the YAML's $3.99 x 2
    assert d["price_usd_per_hour"][0] == 2.0
    assert d["cost_per_mtok_usd"][0] == pytest.approx(ref["cost_per_mtok_usd"] / 3.99, rel=1e-12)
    assert H100["price_usd_per_gpu_hour"] == 3.99


def test_gpu_yaml_efficiency_block_is_used(tmp_path, monkeypatch):
    """An ``efficiency`` block in a GPU YAML replaces kvplan's defaults (precedence:
    calibrated run > YAML > defaults); a decode step then reads at that bandwidth."""
    import yaml as _yaml

    from kvplan.loaders.hardware import load_gpu
    from kvplan.planning.deployment import efficiency_for

    data = _yaml.safe_load(open("hardware_specs/h100-sxm.yaml").read())
    data["efficiency"] = {"hbm_bandwidth": 0.9, "flops": 0.5, "source": "vendor benchmark"}
    path = tmp_path / "h100-tuned.yaml"
    path.write_text(_yaml.safe_dump(data))
    e = efficiency_for(load_gpu(str(path)), None, None)
    assert (e.hbm_bandwidth, e.flops, e.interconnect) == (0.9, 0.5, 0.7)
    assert "vendor benchmark" in e.source
    given = efficiency_for(load_gpu(str(path)), 0.75, None)
    assert (given.hbm_bandwidth, given.flops, given.source) == (0.75, 0.5, "given")
    data["efficiency"]["hbm_bandwidth"] = 1.5
    bad = tmp_path / "h100-bad.yaml"
    bad.write_text(_yaml.safe_dump(data))
    with pytest.raises(Exception, match="efficiency.hbm_bandwidth"):
        load_gpu(str(bad))
