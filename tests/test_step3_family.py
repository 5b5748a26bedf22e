"""Step-3 (``step3_text`` under a Step3VL wrapper) and Step-3.5-Flash (``step3p5``) cache rules,
read in vLLM 0.34's step3_text.py and step3p5.py. No published config.json of either was found
through the search tools, so these are rule tests on configs built from vLLM's config classes
and the shapes Step-3.5-Flash's model card states, not fixtures."""

from __future__ import annotations

import pytest
from family_helpers import BF16, check_attn, load, row

from kvplan.core.errors import ConfigError
from kvplan.engines.vllm import FIRST_RELEASE
from kvplan.planning.footprint import kv_footprint

# vLLM's Step3TextConfig defaults (transformers_utils/configs/step3_vl.py), moe_layers_enum
# written as the comma-separated string the checkpoints carry (step3_text.py splits it)
STEP3_TEXT = {
    "architectures": ["Step3TextForCausalLM"], "model_type": "step3_text", "hidden_size": 7168,
    "intermediate_size": 18432, "num_attention_heads": 64, "num_attention_groups": 1,
    "num_hidden_layers": 61, "max_seq_len": 65536, "vocab_size": 128815, "rms_norm_eps": 1e-5,
    "moe_intermediate_size": 5120, "moe_num_experts": 48, "moe_top_k": 3,
    "max_position_embedding": 65536, "share_expert_dim": 5120, "share_q_dim": 2048,
    "head_dim": 256, "norm_expert_weight": False,
    "moe_layers_enum": ",".join(str(i) for i in range(4, 60)), "torch_dtype": "bfloat16",
}


def test_step3_vl_wrapper_with_moe_layers_enum():
    cfg = {"architectures": ["Step3VLForConditionalGeneration"], "model_type": "step3_vl",
           "text_config": STEP3_TEXT}
    m = load("step3.json", cfg)
    # 61 layers x 1 KV head x (256 K + 256 V) x 2 B = 61 x 1,024 = 62,464
    assert kv_footprint(m, [1]).bytes_per_token == 61 * 1 * (256 + 256) * BF16 == 62_464


def _step3p5(**over):
    """Step-3.5-Flash's shape: 45 decoder layers (+3 MTP entries in layer_types), a full layer
    every 4th (0, 4, ..., 44), 64 query heads on full and 96 on sliding layers, 8 KV heads of
    128, window 512."""
    types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)]
    cfg = {
        "architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5", "hidden_size": 4096,
        "intermediate_size": 11264, "num_attention_heads": 64, "num_attention_groups": 8,
        "num_hidden_layers": 45, "vocab_size": 128896, "head_dim": 128,
        "max_position_embeddings": 262144, "layer_types": types, "sliding_window": 512,
        "attention_other_setting": {"attention_type": "sliding_attention",
                                    "num_attention_heads": 96, "num_attention_groups": 8,
                                    "head_dim": 128},
        "use_head_wise_attn_gate": True, "moe_layers_enum": ",".join(map(str, range(3, 45))),
        "moe_num_experts": 288, "moe_top_k": 8, "moe_intermediate_size": 1280,
        "share_expert_dim": 1280, "num_nextn_predict_layers": 3, "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return cfg


def test_step3p5_hybrid_layers():
    m = load("s35.json", _step3p5())
    fp = kv_footprint(m, [1])
    # full layers 0, 4, ..., 44: 12; each 8 KV heads x (128 + 128) x 2 B = 4,096 B per token
    check_attn(row(fp, "full_attention"), count=12, kv_heads=8, head_dim=128, window=None,
               bytes_per_token=8 * 256 * BF16)
    # the other 33 of the 45: the same KV geometry (vLLM builds every layer with
    # num_attention_groups and head_dim), window 512
    check_attn(row(fp, "sliding_window"), count=33, kv_heads=8, head_dim=128, window=512,
               bytes_per_token=8 * 256 * BF16)
    assert fp.bytes_per_token == 12 * 4096 == 49_152
    heads = {spec.kind: spec.num_attention_heads for b in m.layers for spec in b}
    assert heads == {"full_attention": 64, "sliding_window": 96}


def test_step3p5_head_counts_and_refusals():
    # num_sliding_attention_heads wins over attention_other_setting (vLLM's order)
    m = load("s35.json", _step3p5(num_sliding_attention_heads=80))
    assert {s.num_attention_heads for b in m.layers for s in b if s.kind == "sliding_window"} \
        == {80}
    # attention_other_setting without attention_type: vLLM uses num_attention_heads
    other = {"num_attention_heads": 96}
    m = load("s35.json", _step3p5(attention_other_setting=other))
    assert {s.num_attention_heads for b in m.layers for s in b} == {64}
    with pytest.raises(ConfigError, match="att_impl_type"):
        load("s35.json", _step3p5(att_impl_type="MFA"))
    with pytest.raises(ConfigError, match="layer_types: has 40 entries for 45 layers"):
        load("s35.json", _step3p5(layer_types=["full_attention"] * 40))
    with pytest.raises(ConfigError, match=r"layer_types\[1\]"):
        load("s35.json", _step3p5(layer_types=["full_attention", "linear_attention"] * 24))
    bad = {"attention_type": "sliding_attention", "num_attention_heads": 96,
           "num_attention_groups": 4}
    with pytest.raises(ConfigError, match="num_attention_groups: 4 differs"):
        load("s35.json", _step3p5(attention_other_setting=bad))


def test_step3p5_mtp_layer_types_and_release():
    # layer_types for the decoder only, the draft's in mtp_layer_types (upstream's layout)
    types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)]
    m = load("s35.json", _step3p5(layer_types=types[:45], mtp_layer_types=types[45:]))
    assert kv_footprint(m, [1]).bytes_per_token == 49_152
    assert FIRST_RELEASE["step3p5"] is None  # 0.14.1's sdist has no step3p5.py, 0.16.0's has;
    # 0.15.0 / 0.15.1 ship wheels only
