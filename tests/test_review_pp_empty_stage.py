"""vLLM with a pipeline stage that holds no KV cache layer, in a model that has some.

Llama-3.3-Nemotron-Super-49B (tests/fixtures/configs/nvidia__Llama-3_3-Nemotron-Super-49B-v1.json):
80 decoder layers; ``block_configs[i].attention.no_op`` is true for layers 6, 7, 11, 42-51 and
53-70, so layers 60-69 build no attention (vLLM 0.34 nemotron_nas.py ``DeciLMDecoderLayer``:
``self.self_attn`` only ``if not self._is_no_op_attention``) and no KV cache spec. At pp 8
vLLM's ``get_pp_indices`` gives 80 // 8 = 10 layers a stage (no remainder), stage 6 = layers
60-69: its worker's ``kv_cache_spec`` is empty.

vLLM >= 0.11 projects the whole model's groups onto that worker as groups with no layers:
0.11.0 - 0.26 ``get_kv_cache_config_from_groups`` asserts ``group_size > 0`` (group_size = the
longest projected group = 0); 0.34 ``kv_cache_planning._get_kv_cache_bytes_per_block`` sums no
page (0 B: ``assert bytes_per_block > 0`` or ``available // 0``). vLLM 0.10 gives the empty
worker an attention-free config of num_blocks 1 and ``unify_kv_cache_configs`` takes the
minimum over workers, 1 block (the null block) for the whole pool. Either way the plan cannot
serve a sequence, so kvplan refuses the layout; pp 4 (20 layers a stage, stage 3 = layers
60-79 holds attention layers 71-79) still plans.
"""

from __future__ import annotations

import json

import pytest

from kvplan.core.errors import ParallelismError
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_layout
from kvplan.planning.fit_types import FitRequest

SUPER = "tests/fixtures/configs/nvidia__Llama-3_3-Nemotron-Super-49B-v1.json"


def _req(pp: int, engine: str = "vllm") -> FitRequest:
    m = load_model(SUPER)
    return FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                      gpu=load_gpu("h100"), engine=engine, tp=1, pp=pp, dp=1, ep=1,
                      kv_dtype="auto", context_tokens=8192, search=False,
                      allow_emulated=False, allow_long_max_model_len=False)


def test_fixture_layers_60_to_69_have_no_attention():
    with open(SUPER) as f:
        blocks = json.load(f)["block_configs"]
    assert len(blocks) == 80
    assert all(blocks[i]["attention"]["no_op"] for i in range(60, 70))
    assert not blocks[71]["attention"]["no_op"]


def test_pp8_stage_without_cache_layers_is_refused():
    with pytest.raises(ParallelismError, match="stage 6"):
        plan_layout(_req(8))


def test_pp4_every_stage_holds_cache_layers():
    r = plan_layout(_req(4))
    assert all(p.pool_layers for p in r.stages)
    assert r.max_concurrency >= 1
