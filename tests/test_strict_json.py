"""Every JSON output is strict JSON (issue 16, class 3): non-finite numbers become null."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvplan.report.strict_json import dumps


def strict(text: str):
    def refuse(token):
        raise ValueError(f"non-strict JSON constant {token}")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_become_null():
    text = dumps({"a": float("nan"), "b": [float("inf"), -float("inf"), np.float64(2.5)],
                  "c": (np.int64(3), True, None)})
    assert strict(text) == {"a": None, "b": [None, None, 2.5], "c": [3, True, None]}


def test_numpy_nan_and_nested():
    assert strict(dumps([{"x": np.float64("nan")}])) == [{"x": None}]


@pytest.mark.parametrize("argv", [["size", "mamba2-2.7b", "--json"],
                                  ["fit", "llama-3.1-8b", "--gpu", "h100", "--json"],
                                  ["curve", "mamba2-2.7b", "--gpu", "h100", "--json"]])
def test_cli_json_is_strict(argv, capsys):
    from kvplan.cli.main import run

    assert run(argv) == 0
    strict(capsys.readouterr().out)
