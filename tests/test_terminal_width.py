"""Tables at 80 and 120 columns (issue 15): every key a user types and every number printed is
whole (never cut with an ellipsis), COLUMNS is honoured in a pipe, and --wide keeps every
column."""

from __future__ import annotations

import json
import re

import pytest

from kvplan.cli.main import run
from kvplan.cli.tables import Col, chosen

WIDTHS = (80, 120)


def _out(capsys, monkeypatch, width: int, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    assert run(list(args)) == 0
    return capsys.readouterr().out


def _json(capsys, *args: str):
    assert run([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _widest_line(text: str) -> int:
    return max(len(line.rstrip()) for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_gpus_keys_and_numbers_are_whole(capsys, monkeypatch, width):
    specs = _json(capsys, "gpus")
    text = _out(capsys, monkeypatch, width, "gpus")
    assert "…" not in text
    cells = {c.strip() for line in text.splitlines() for c in line.split("│")}
    for g in specs:
        assert g["key"] in cells  # the whole key, in its own cell
        assert f"{g['price_usd_per_gpu_hour']:.2f}" in cells
        assert f"{g['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}" in cells
    assert _widest_line(text) <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_models_names_are_whole(capsys, monkeypatch, width):
    models = _json(capsys, "models")
    text = _out(capsys, monkeypatch, width, "models")
    assert "…" not in text
    cells = {c.strip() for line in text.splitlines() for c in line.split("│")}
    for m in models:
        assert m["name"] in cells
        assert f"{m['bytes_per_token']:,}" in cells
    assert _widest_line(text) <= width
    assert "more columns: --wide" in text  # hub ids (and more) left for --wide at these widths


def test_wide_keeps_every_column(capsys, monkeypatch):
    text = _out(capsys, monkeypatch, 80, "models", "--wide")
    for head in ("hub id", "family", "engine"):
        assert head in text
    assert "deepseek-ai/DeepSeek-V3.2" in text and "more columns" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_fit_budget_numbers_are_whole(capsys, monkeypatch, width):
    d = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-c", "32k")
    text = _out(capsys, monkeypatch, width, "fit", "llama-3.1-8b", "--gpu", "h100", "-c", "32k")
    assert "…" not in text
    for term in d["budget_terms"]:
        assert re.search(rf"(?<![\d,]){term['bytes']:,}(?![\d,])", text), term["key"]
    assert f"{d['kv_pool_tokens']:,} tokens" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_rows_are_whole(capsys, monkeypatch, width, tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "chat-shared-prompt.yaml"
    d = _json_plan(capsys, example)
    text = _out(capsys, monkeypatch, width, "plan", str(example), "--samples", "200")
    assert "…" not in text
    table = text.split("Configurations, best first", 1)[1].split("Best:", 1)[0]
    for rank, o in enumerate(d["configurations"], 1):
        line = next(x for x in table.splitlines() if re.match(rf"\s*{rank}\s", x))
        assert o["gpu"] in line.split()
    assert _widest_line(table) <= width


def _json_plan(capsys, example):
    assert run(["plan", str(example), "--format", "json", "--samples", "200"]) == 0
    return json.loads(capsys.readouterr().out)


def test_columns_are_dropped_lowest_rank_first():
    cols = [Col("key", "key", "left"), Col("a", optional=True, rank=1),
            Col("b", optional=True, rank=0), Col("c")]
    rows = [["x" * 10, "1" * 10, "2" * 10, "3" * 10]]
    # each column: 10 + 2 padding, 3 separators, 2 edges: 4 x 12 + 3 + 2 = 53
    assert chosen(cols, rows, 53, wide=False) == [0, 1, 2, 3]
    assert chosen(cols, rows, 52, wide=False) == [0, 1, 3]  # b (rank 0) goes first
    assert chosen(cols, rows, 30, wide=False) == [0, 3]  # the kept columns stay, however wide
    assert chosen(cols, rows, 30, wide=True) == [0, 1, 2, 3]
