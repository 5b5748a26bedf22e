"""Qwen3-VL under pipeline parallelism on vLLM: every stage after the first must start at or
after layer len(vision_config.deepstack_visual_indexes) (0.34 qwen3_vl.py asserts it)."""

from __future__ import annotations

import json

from cli_helpers import fail

from kvplan.cli.main import run


def test_pp13_puts_stage_1_before_the_deepstack_layers(capsys):
    # Qwen3-VL-8B: 36 layers, deepstack_visual_indexes [8, 16, 24] (3 entries). vLLM's
    # get_pp_indices at pp 13: 36 // 13 = 2 layers a stage, the 36 % 13 = 10 extra layers to
    # stages 2..11 -> [2, 2, 3 x 10, 2]: stage 1 starts at layer 2 < 3
    msg = fail(capsys, "fit", "qwen3-vl-8b-instruct", "--gpu", "l4", "--pp", "13")
    assert "stage 1 starts at layer 2" in msg and "layer 3" in msg


def test_pp12_starts_every_stage_at_a_multiple_of_3(capsys):
    # 36 / 12 = 3 layers a stage: stage 1 starts at layer 3 = len(indexes)
    assert run(["fit", "qwen3-vl-8b-instruct", "--gpu", "l4", "--pp", "12", "-c", "4096",
                "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"]
