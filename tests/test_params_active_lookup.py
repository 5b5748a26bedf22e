"""Active parameters with and without the embedding lookup (a row gather, no matmul)."""

from __future__ import annotations

import json

from kvplan.cli.main import run


def _fit(capsys, *args) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpt_oss_120b_active_without_the_embedding_is_the_published_figure(capsys):
    d = _fit(capsys, "gpt-oss-120b", "--gpu", "h200")
    # untied input embedding: vocab 201,088 x hidden 2,880 = 579,133,440 parameters
    assert d["params_active"] - d["params_active_without_lookup"] == 201_088 * 2_880
    # OpenAI's model card: 5.13B active per token, 116.83B total
    assert round(d["params_active_without_lookup"] / 1e9, 2) == 5.13
    assert round(d["params_total"] / 1e9, 2) == 116.83


def test_a_tied_embedding_is_not_a_lookup(capsys):
    # Llama-3.2-1B ties its embedding to the LM head: every token multiplies by it
    d = _fit(capsys, "llama-3.2-1b", "--gpu", "h100")
    assert d["params_active_without_lookup"] == d["params_active"] == d["params_total"]
