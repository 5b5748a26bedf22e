"""Which pipeline stages hold the embedding, the final norm and the LM head under vLLM.

vLLM 0.34's default (llama.py ``LlamaModel`` / ``LlamaForCausalLM``) builds embed_tokens on
the first rank (and, tied, the last), the norm and lm_head on the last. Many model classes have
no rank test for them and build them on every rank (mixtral.py :316 / :336 / :406, qwen3_moe.py
:468 / :479 / :580, commandr.py :351 / :363, qwen3_next.py :685 / :876, qwen3_5 nvidia
model.py :495, ...: ``kvplan.loaders.params_stages``). Per-stage bytes derived by hand below
(bf16: 2 B a parameter; vocabularies here are multiples of 64, so vLLM's padding adds none).
"""

from __future__ import annotations

import json

import pytest
from family_helpers import BF16, CONFIGS, FP32, load

from kvplan.cli.main import run
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hf_config import text_fields
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.params_stages import VLLM_EVERY_STAGE
from kvplan.loaders.quant_config import weight_format

MIXTRAL = "mistralai__Mixtral-8x7B-v0.1.json"
QWEN3_MOE = "Qwen__Qwen3-30B-A3B.json"
COMMAND_R = "CohereForAI__c4ai-command-r-v01.json"
QWEN3_NEXT = "Qwen__Qwen3-Next-80B-A3B-Instruct.json"
QWEN35 = "Qwen__Qwen3.5-27B.json"
DSV2_LITE = "deepseek-ai__DeepSeek-V2-Lite.json"


def stages(fname: str, pp: int, every_stage: bool = True) -> tuple[int, ...]:
    m = load(fname)
    w = weight_inventory(m)
    return weight_bytes(w, weight_format(m, "bf16"), pp=pp, every_stage=every_stage).per_stage_bytes


def fit_json(fname: str, pp: int, capsys) -> dict:
    code = run(["fit", str(CONFIGS / fname), "--gpu", "h200", "--pp", str(pp),
                "--weight-dtype", "bf16", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# --- Mixtral-8x7B: embed_tokens, norm and the untied lm_head on every stage ---------------
# per layer: q 4096 x 4096 = 16,777,216; k, v 1,024 x 4096 = 4,194,304 each; o 16,777,216
# (41,943,040); router 8 x 4096 = 32,768; experts 8 x 3 x 14,336 x 4096 = 1,409,286,144;
# two norms 8,192
MX_LAYER = 41_943_040 + 32_768 + 1_409_286_144 + 8_192
MX_VOCAB = 32_000 * 4096  # embed_tokens, and again lm_head: 131,072,000
MX_NORM = 4096


def test_mixtral_layer_and_total_by_hand():
    assert MX_LAYER == 1_451_270_144
    w = weight_inventory(load(MIXTRAL))
    assert w.params_total == 32 * MX_LAYER + 2 * MX_VOCAB + MX_NORM == 46_702_792_704


def test_mixtral_stages_pp2_pp4(capsys):
    # pp 2: 16 / 16 layers; each stage also the embedding, the lm_head and the norm
    every = BF16 * (16 * MX_LAYER + 2 * MX_VOCAB + MX_NORM)
    assert stages(MIXTRAL, 2) == (every, every) == (46_964_940_800, 46_964_940_800)
    # the first / last rule would have: embed on stage 0, norm + lm_head on stage 1
    assert stages(MIXTRAL, 2, every_stage=False) == (
        BF16 * (16 * MX_LAYER + MX_VOCAB), BF16 * (16 * MX_LAYER + MX_VOCAB + MX_NORM)) == (
        46_702_788_608, 46_702_796_800)
    # pp 4: 8 layers a stage, every stage with both vocabulary tables and the norm
    every4 = BF16 * (8 * MX_LAYER + 2 * MX_VOCAB + MX_NORM)
    assert stages(MIXTRAL, 4) == (every4,) * 4 == (23_744_618_496,) * 4
    # the middle stages gain 2 x 131,072,000 x 2 B + 4096 x 2 B over the first / last rule
    assert stages(MIXTRAL, 4, every_stage=False)[1] == BF16 * 8 * MX_LAYER == 23_220_322_304
    assert every4 - BF16 * 8 * MX_LAYER == 524_296_192
    # the fit JSON: the busiest GPU's weights (all stages alike: stage 0 reported)
    for pp, weights in ((2, 46_964_940_800), (4, 23_744_618_496)):
        d = fit_json(MIXTRAL, pp, capsys)
        assert (d["memory"]["weights_bytes"], d["busiest_stage"]) == (weights, 0)


# --- Qwen3-30B-A3B (qwen3_moe): the same three on every stage -----------------------------
# per layer: q 4096 x 2048 = 8,388,608; k, v 512 x 2048 = 1,048,576 each; o 8,388,608
# (18,874,368); q_norm, k_norm 128 each; router 128 x 2048 = 262,144; experts 128 x 3 x 768 x
# 2048 = 603,979,776; two norms 4,096
Q3_LAYER = 18_874_368 + 256 + 262_144 + 603_979_776 + 4_096
Q3_VOCAB = 151_936 * 2048  # 311,164,928 (151,936 = 2,374 x 64)
Q3_NORM = 2048


def test_qwen3_moe_stages_pp2_pp4():
    assert Q3_LAYER == 623_120_640
    w = weight_inventory(load(QWEN3_MOE))
    assert w.params_total == 48 * Q3_LAYER + 2 * Q3_VOCAB + Q3_NORM == 30_532_122_624
    two = BF16 * (24 * Q3_LAYER + 2 * Q3_VOCAB + Q3_NORM)
    assert stages(QWEN3_MOE, 2) == (two, two) == (31_154_454_528, 31_154_454_528)
    four = BF16 * (12 * Q3_LAYER + 2 * Q3_VOCAB + Q3_NORM)
    assert stages(QWEN3_MOE, 4) == (four,) * 4 == (16_199_559_168,) * 4
    first_last = stages(QWEN3_MOE, 4, every_stage=False)
    assert first_last == (BF16 * (12 * Q3_LAYER + Q3_VOCAB), BF16 * 12 * Q3_LAYER,
                          BF16 * 12 * Q3_LAYER, BF16 * (12 * Q3_LAYER + Q3_VOCAB + Q3_NORM))


# --- Command-R (cohere): tied, embed_tokens and the norm on every stage, no lm_head --------
# commandr.py builds no lm_head (compute_logits reads embed_tokens). Per layer (40, one norm,
# parallel block): q, k, v, o 8192 x 8192 each (64 KV heads x 128) = 268,435,456; gated MLP
# 3 x 22,528 x 8192 = 553,648,128; input_layernorm 8,192
CR_LAYER = 4 * 8192 * 8192 + 3 * 22_528 * 8192 + 8192
CR_VOCAB = 256_000 * 8192  # 2,097,152,000


def test_command_r_stages_pp2_pp4():
    assert CR_LAYER == 822_091_776
    w = weight_inventory(load(COMMAND_R))
    assert w.tied_embeddings and not any(t.name == "lm_head" for t in w.tensors)
    assert w.params_total == 40 * CR_LAYER + CR_VOCAB + 8192 == 34_980_831_232
    two = BF16 * (20 * CR_LAYER + CR_VOCAB + 8192)
    assert stages(COMMAND_R, 2) == (two, two) == (37_077_991_424, 37_077_991_424)
    four = BF16 * (10 * CR_LAYER + CR_VOCAB + 8192)
    assert stages(COMMAND_R, 4) == (four,) * 4 == (20_636_155_904,) * 4
    # first / last (tied): the embedding on stages 0 and 3, the norm on 3; vLLM adds the
    # norm (8,192 x 2 B) on stage 0 and embedding + norm on the middle two
    diff = [a - b for a, b in zip(stages(COMMAND_R, 4), stages(COMMAND_R, 4, False), strict=True)]
    assert diff == [BF16 * 8192, BF16 * (CR_VOCAB + 8192), BF16 * (CR_VOCAB + 8192), 0] == [
        16_384, 4_194_320_384, 4_194_320_384, 0]


# --- Qwen3-Next: embed_tokens and lm_head on every stage, the norm on the last only -------
def test_qwen3_next_norm_on_the_last_stage_only():
    vocab = 151_936 * 2048  # 311,164,928 parameters, 622,329,856 B
    four = stages(QWEN3_NEXT, 4)  # 48 layers: 12 a stage, three 3:1 linear / full groups each
    assert four[0] == four[1] == four[2] == four[3] - BF16 * 2048  # the 2048-wide final norm
    diff = [a - b for a, b in zip(four, stages(QWEN3_NEXT, 4, False), strict=True)]
    assert diff == [BF16 * vocab, 2 * BF16 * vocab, 2 * BF16 * vocab, BF16 * vocab] == [
        622_329_856, 1_244_659_712, 1_244_659_712, 622_329_856]
    two = stages(QWEN3_NEXT, 2)
    assert two[1] - two[0] == BF16 * 2048


# --- Qwen3.5-27B: embed_tokens on every stage; norm, lm_head and the vision tower not ------
def test_qwen35_embedding_on_every_stage_tower_on_the_first():
    vocab = 248_320 * 5120  # 248,320 = 3,880 x 64: 1,271,398,400 parameters
    for pp in (2, 4):
        diff = [a - b for a, b in zip(stages(QWEN35, pp), stages(QWEN35, pp, False), strict=True)]
        assert diff == [0] + [BF16 * vocab] * (pp - 1)
        assert diff[-1] == 2_542_796_800


# --- DeepSeek-V2-Lite: the first / last rule, unchanged -----------------------------------
def test_deepseek_v2_lite_first_last():
    w = weight_inventory(load(DSV2_LITE))
    assert not any(t.every_stage for t in w.tensors)
    for pp in (2, 4):
        assert stages(DSV2_LITE, pp) == stages(DSV2_LITE, pp, False)


# --- DeepSeek-V4: the fp32 hyper-head on every stage ---------------------------------------
def test_deepseek_v4_hyper_head_on_every_stage():
    m = load("deepseek-ai__DeepSeek-V4-Flash.json")
    w, fmt = weight_inventory(m), weight_format(m, None)
    # hc_head_fn [4, 4 x 4096], hc_head_base [4], hc_head_scale [1], fp32
    head = FP32 * (4 * 4 * 4096 + 4 + 1)
    assert head == 262_164
    for pp in (2, 4):
        vllm = weight_bytes(w, fmt, pp=pp).per_stage_bytes
        first_last = weight_bytes(w, fmt, pp=pp, every_stage=False).per_stage_bytes
        assert [a - b for a, b in zip(vllm, first_last, strict=True)] == [head] * (pp - 1) + [0]


# --- each fixture's inventory marks what its vLLM class builds on every rank --------------
def _expected(mt: str, tied: bool, norm_bias: bool) -> set[str]:
    every = VLLM_EVERY_STAGE.get(mt, frozenset())
    names = {"embed_tokens"} if "embed" in every else set()
    if "norm" in every:
        names |= {"final_norm.weight"} | ({"final_norm.bias"} if norm_bias else set())
    if "head" in every and not tied:
        names.add("lm_head")
    return names


@pytest.mark.parametrize("fname, mt, norm_bias", [
    ("mistralai__Mixtral-8x22B-v0.1.json", "mixtral", False),
    ("Qwen__Qwen1.5-MoE-A2.7B.json", "qwen2_moe", False),
    ("Qwen__Qwen3-235B-A22B-FP8.json", "qwen3_moe", False),
    ("Qwen__Qwen3-VL-30B-A3B-Instruct.json", "qwen3_vl_moe_text", False),
    ("Qwen__Qwen3-Next-80B-A3B-Instruct.json", "qwen3_next", False),
    ("Qwen__Qwen3.5-397B-A17B.json", "qwen3_5_moe_text", False),
    ("CohereForAI__c4ai-command-r7b-12-2024.json", "cohere2", False),
    ("google__gemma-2-27b-it.json", "gemma2", False),
    ("google__gemma-3-1b-it.json", "gemma3_text", False),
    ("google__gemma-3-27b-it.json", "gemma3_text", False),
    ("google__gemma-4-26B-A4B.json", "gemma4_text", False),
    ("tiiuae__falcon-180B.json", "falcon", True),
    ("tiiuae__falcon-mamba-7b.json", "falcon_mamba", False),
    ("state-spaces__mamba-130m-hf.json", "mamba", False),
    ("mistralai__Mamba-Codestral-7B-v0.1.json", "mamba2", False),
    ("openai__gpt-oss-120b.json", "gpt_oss", False),
    ("ai21labs__Jamba-v0.1.json", "jamba", False),
    ("nvidia__Nemotron-H-56B-Base-8K.json", "nemotron_h", False),
    ("ibm-ai-platform__Bamba-9B.json", "bamba", False),
    # the first / last rule: nothing marked
    ("huggyllama__llama-65b.json", "llama", False),
    ("mistralai__Mistral-7B-v0.1.json", "mistral", False),
    ("microsoft__Phi-3-medium-4k-instruct.json", "phi3", False),
    ("meta-llama__Llama-4-Scout-17B-16E-Instruct.json", "llama4_text", False),
    ("Qwen__Qwen3-8B.json", "qwen3", False),
    ("Qwen__Qwen3-VL-8B-Instruct.json", "qwen3_vl_text", False),
    ("Qwen__Qwen2-VL-7B-Instruct.json", "qwen2_vl", False),
    ("google__gemma-7b.json", "gemma", False),
    ("EleutherAI__gpt-neox-20b.json", "gpt_neox", True),
    ("deepseek-ai__DeepSeek-R1.json", "deepseek_v3", False),
    ("deepseek-ai__DeepSeek-V3.2.json", "deepseek_v32", False),
    ("moonshotai__Kimi-K2-Instruct.json", "kimi_k2", False),
    ("zai-org__GLM-5.2.json", "glm_moe_dsa", False),
    ("zai-org__GLM-4.7-Flash.json", "glm4_moe_lite", False),
    ("MiniMaxAI__MiniMax-M2.5.json", "minimax_m2", False),
    ("XiaomiMiMo__MiMo-V2-Flash.json", "mimo_v2_flash", False),
    ("nvidia__Llama-3_3-Nemotron-Super-49B-v1.json", "nemotron-nas", False),
    ("moonshotai__Kimi-Linear-48B-A3B-Instruct.json", "kimi_linear", False),
])
def test_inventory_marks_the_vllm_every_rank_tensors(fname, mt, norm_bias):
    m = load(fname)
    w = weight_inventory(m)
    assert text_fields(m.config, m.source)[1] == mt
    assert (mt in VLLM_EVERY_STAGE) == (mt not in {
        "llama", "mistral", "phi3", "llama4_text", "qwen3", "qwen3_vl_text", "qwen2_vl", "gemma",
        "gpt_neox", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa", "glm4_moe_lite",
        "minimax_m2", "mimo_v2_flash", "nemotron-nas", "kimi_linear"})
    marked = {t.name for t in w.tensors if t.every_stage}
    assert marked == _expected(mt, w.tied_embeddings, norm_bias)
    # towers (place "embed", not embed_tokens) stay on the first stage: _mark_tower_model
    assert not any(t.every_stage and t.place == "embed" and t.name != "embed_tokens"
                   for t in w.tensors)
