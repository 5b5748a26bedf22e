"""kvplan's parameter inventories against an independent implementation: transformers'
own model classes, instantiated on the meta device from the same fixture configs, recorded in
tests/fixtures/transformers_param_counts.json by scripts/check_params_with_transformers.py
(transformers is not a kvplan dependency, so the counts are a recorded fact here).

A fixture matches when kvplan's total equals transformers' parameters, or its parameters plus
the loaded buffers transformers keeps apart (MoE score-correction biases and the like). The
other differences are stated and derived one by one below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvplan

FIX = Path(__file__).parent / "fixtures"
COUNTS = json.loads((FIX / "transformers_param_counts.json").read_text())["counts"]


def qwen_vl_tower(out: int, deepstack: int = 0) -> int:
    """Qwen3-VL-style tower (width 1152, MLP 4304, 27 blocks, 16 x 16 x 2 patches, 2304
    positions, 2 x 2 merge) to text width ``out``, with ``deepstack`` extra mergers."""
    d, inter, merged = 1152, 4304, 4 * 1152
    block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (inter * d + inter) + (d * inter + d)
    merger = lambda norm: norm + merged * (merged + 1) + out * (merged + 1)  # noqa: E731
    return d * 3 * 2 * 16 * 16 + d + 2304 * d + 27 * block + merger(2 * d) \
        + deepstack * merger(2 * merged)


#: fixture -> (kvplan minus transformers' parameters, why)
STATED = {
    # transformers' text-only class leaves the vision tower out; kvplan counts it (vLLM loads it)
    "Qwen__Qwen3.5-27B.json": (qwen_vl_tower(5120), "vision tower"),
    "Qwen__Qwen3.5-397B-A17B.json": (qwen_vl_tower(4096), "vision tower"),
    # vLLM's fused QKV keeps a V slot on attention_k_eq_v full layers (2 KV heads x 512 x 2816 on
    # 5 layers; 4 x 512 x 5376 on 10), + the loaded layer scalars and vision standardize values
    "google__gemma-4-26B-A4B.json": (5 * 2 * 512 * 2816 + 30 + 2 * 1152, "V slots + buffers"),
    "nvidia__Gemma-4-31B-IT-NVFP4.json": (10 * 4 * 512 * 5376 + 60 + 2 * 1152,
                                           "V slots + buffers"),
    # Gemma-4 E models: the loaded buffers (4 bounds on each of 112 vision + 120 audio clipped
    # linears, a layer scalar per layer); transformers' buffer count also holds the computed
    # audio inv_timescales (512) and softcaps (12), which no checkpoint holds
    "google__gemma-4-E2B-it.json": (232 * 4 + 35, "loaded buffers"),
    "google__gemma-4-E4B-it.json": (232 * 4 + 42, "loaded buffers"),
    # 60 MoE layers' score-correction biases (384 each) and MoonViT's 4 x 1152 time table
    "moonshotai__Kimi-K2.5.json": (60 * 384 + 4 * 1152, "score biases + time table"),
    # DeepSeek-V4: vLLM's int32 tid2eid tables [vocab, top_k] on the 3 hash-routed layers and
    # fp32 score biases on the other layers are parameters; transformers keeps both as buffers
    # (tid2eid in int64). Shapes otherwise agree tensor for tensor (vLLM fuses wq_a + wkv and
    # the compressors' wkv + wgate, transformers keeps them apart). Neither side counts the MTP
    # layer here (transformers does not build it; kvplan reports it apart).
    "deepseek-ai__DeepSeek-V4-Flash.json": (3 * 129_280 * 6 + 40 * 256, "hash tables + biases"),
    "deepseek-ai__DeepSeek-V4-Pro.json": (3 * 129_280 * 6 + 58 * 384, "hash tables + biases"),
}
#: vendored configs without a vision_config: kvplan counts the text model and says so
TOWER_NOT_COUNTED = {"llava-hf__llava-1.5-7b-hf.json", "Qwen__Qwen2-VL-7B-Instruct.json"}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_inventory_matches_transformers(name):
    cfg = json.loads((FIX / "configs" / name).read_text())
    w = kvplan.weight_inventory(kvplan.parse_config(cfg, name=name, source=name))
    theirs = COUNTS[name]
    diff = w.params_total - theirs["params"]
    if name in STATED:
        assert diff == STATED[name][0], STATED[name][1]
        if name.startswith("deepseek-ai__DeepSeek-V4"):  # the stated difference is the buffers
            assert diff == theirs["buffers"]
    elif name in TOWER_NOT_COUNTED:
        assert diff < 0 and any("not counted" in n for n in w.notes)
    else:
        assert diff in (0, theirs["buffers"]), (w.params_total, theirs)


def test_the_record_covers_the_2026_families():
    assert len(COUNTS) >= 60
    for name in ("XiaomiMiMo__MiMo-V2-Flash.json", "Qwen__Qwen3-VL-30B-A3B-Instruct.json",
                 "google__gemma-4-26B-A4B.json", "deepseek-ai__DeepSeek-V3.2.json",
                 "zai-org__GLM-5.json", "moonshotai__Kimi-K2.5.json",
                 "deepseek-ai__DeepSeek-V4-Flash.json", "deepseek-ai__DeepSeek-V4-Pro.json"):
        assert name in COUNTS
