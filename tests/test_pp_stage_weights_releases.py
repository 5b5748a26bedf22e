"""Which pipeline ranks hold the embedding, final norm, LM head and towers, by vLLM release.

Read in the vLLM sdists (``kvplan.loaders.params_stages``): gemma.py (served natively through
0.33.0, by the transformers backend in 0.34.0) and gpt_neox.py (natively through 0.31.0) have
no rank test, so every rank builds their embedding and final norm (and gpt_neox's embed_out);
``_mark_tower_model`` keeps towers on the first rank only from 0.33.0. commandr.py and
gemma2.py build no lm_head in any release (the logits read embed_tokens). falcon_h1.py builds
embed_tokens on the first rank only and ties the last rank's lm_head to it, which fails at
pp > 1. Every byte count below is derived by hand from the fixture configs (bf16: 2 B a
parameter; the vocabularies here are multiples of 64, so vLLM's padding adds none).
"""

from __future__ import annotations

import json

import pytest
from family_helpers import BF16, CONFIGS, load, raw

from kvplan.cli.main import run
from kvplan.core.weights import weight_bytes
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.params_stages import (
    VLLM_EVERY_STAGE,
    vllm_every_stage,
    vllm_stage_weights,
)
from kvplan.loaders.quant_config import weight_format
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_types import FitRequest

GEMMA = "google__gemma-7b.json"
NEOX = "EleutherAI__gpt-neox-20b.json"
GEMMA3_4B = "google__gemma-3-4b-it.json"
GEMMA2 = "google__gemma-2-9b.json"
COMMAND_R7B = "CohereForAI__c4ai-command-r7b-12-2024.json"
FALCON_H1 = "tiiuae__Falcon-H1-0.5B.json"


def stages(fname: str, pp: int, version: str, config: dict | None = None) -> tuple[int, ...]:
    m = load(fname, config)
    w = vllm_stage_weights(weight_inventory(m), m.model_type, version)
    return weight_bytes(w, weight_format(m, "bf16"), pp=pp).per_stage_bytes


def diff(a: tuple[int, ...], b: tuple[int, ...]) -> list[int]:
    return [x - y for x, y in zip(a, b, strict=True)]


# --- the table by release ------------------------------------------------------------------
def test_release_bounds():
    assert vllm_every_stage("gemma", "0.28.0") == {"embed", "norm"}  # gemma.py asserts tied
    assert vllm_every_stage("gemma", "0.29.0") == {"embed", "norm", "head"}
    assert vllm_every_stage("gemma", "0.33.0") == {"embed", "norm", "head"}
    assert vllm_every_stage("gemma", "0.34.0") == frozenset()  # transformers backend
    assert vllm_every_stage("gpt_neox", "0.10.2") == {"embed", "norm", "head"}
    assert vllm_every_stage("gpt_neox", "0.31.0") == {"embed", "norm", "head"}
    assert vllm_every_stage("gpt_neox", "0.32.0") == frozenset()
    assert vllm_every_stage("gemma3_text", "0.13.0") == {"embed", "norm"}  # asserts tied
    assert vllm_every_stage("gemma3_text", "0.14.0") == {"embed", "norm", "head"}
    for mt in ("llama", "qwen2", "falcon_h1", "deepseek_v3"):  # first / last, every release
        assert all(not vllm_every_stage(mt, v) for v in ("0.10.2", "0.20.0", "0.30.0", "0.34.0"))
    for mt in ("cohere", "gemma2"):
        assert all(vllm_every_stage(mt, v) == {"embed", "norm"}
                   for v in ("0.10.2", "0.20.0", "0.30.0", "0.34.0"))
    # the 0.34.0 view the inventory marks is unchanged for the types it held
    assert "gemma" not in VLLM_EVERY_STAGE and "gpt_neox" not in VLLM_EVERY_STAGE
    assert VLLM_EVERY_STAGE["mixtral"] == {"embed", "norm", "head"}


# --- Gemma-7B (tied): embed_tokens and the norm on every stage through 0.33.0 --------------
# embed_tokens 256,000 x 3072 = 786,432,000 parameters (1,572,864,000 B); norm 3072 (6,144 B)
G_EMBED, G_NORM = BF16 * 256_000 * 3072, BF16 * 3072


def test_gemma_every_stage_through_0_33():
    assert (G_EMBED, G_NORM) == (1_572_864_000, 6_144)
    old, new = stages(GEMMA, 4, "0.30.0"), stages(GEMMA, 4, "0.34.0")
    # 0.34 first / last (tied): embed on stages 0 and 3, the norm on 3; 0.30 adds the norm on
    # stage 0 and embed + norm on the middle two
    assert diff(old, new) == [G_NORM, G_EMBED + G_NORM, G_EMBED + G_NORM, 0] == [
        6_144, 1_572_870_144, 1_572_870_144, 0]
    assert stages(GEMMA, 4, "0.33.0") == old
    assert len(set(old)) == 1  # 28 layers, 7 a stage, each with embed + norm


def test_gemma_fit_stage_weights_by_release():
    m = load(GEMMA)

    def plan(engine: str) -> list[int]:
        r = plan_fit(FitRequest(model=m, weights=weight_inventory(m),
                                weight_format=weight_format(m, "bf16"), gpu=load_gpu("h200"),
                                engine=engine, pp=4, context_tokens=8192))
        return [s.budget.weights_bytes for s in r.stages]

    old, new = plan("vllm@0.30.0"), plan("vllm@0.34.0")
    # the buffers added to every stage cancel in a difference of stages of one release
    assert diff(old, [old[1]] * 4) == [0, 0, 0, 0]
    assert new[3] - new[1] == G_EMBED + G_NORM and new[0] - new[1] == G_EMBED


# --- GPT-NeoX-20B (untied, LayerNorm with bias): all three on every stage through 0.31.0 ----
# embed_in and embed_out 50,432 x 6144 = 309,854,208 each (619,708,416 B); final_layer_norm
# weight + bias 2 x 6144 = 12,288 (24,576 B)
N_VOCAB, N_NORM = BF16 * 50_432 * 6144, BF16 * 2 * 6144


def test_gpt_neox_every_stage_through_0_31():
    assert (N_VOCAB, N_NORM) == (619_708_416, 24_576)
    old, new = stages(NEOX, 4, "0.31.0"), stages(NEOX, 4, "0.32.0")
    # 0.32 first / last: embed on 0, norm + head on 3; 0.31 adds norm + head on 0, all three
    # on 1 and 2, the embedding on 3
    assert diff(old, new) == [N_VOCAB + N_NORM, 2 * N_VOCAB + N_NORM, 2 * N_VOCAB + N_NORM,
                              N_VOCAB] == [619_732_992, 1_239_441_408, 1_239_441_408, 619_708_416]
    assert stages(NEOX, 4, "0.34.0") == new


# --- Gemma-3-4B: the SigLIP tower and projector on every stage through 0.32.0 --------------
# vision_config: hidden 1152, intermediate 4304, 27 layers, patch 14, image 896; text hidden 2560
_PER_LAYER = (3 * 1152 * (1152 + 1)  # q, k, v with bias: 3,984,768
              + 1152 * 1152 + 1152  # out_proj + bias: 1,328,256
              + 4304 * (1152 + 1)  # fc1 with bias: 4,962,512
              + 1152 * 4304 + 1152  # fc2 + bias: 4,959,360
              + 4 * 1152)  # two LayerNorms (weight + bias): 4,608
TOWER = (1152 * 3 * 14 * 14 + 1152  # patch embedding + bias: 678,528
         + (896 // 14) ** 2 * 1152  # position embedding 4,096 x 1152: 4,718,592
         + 27 * _PER_LAYER  # 411,466,608
         + 2 * 1152  # post_layernorm: 2,304
         + 2560 * 1152 + 1152)  # projector + its norm: 2,950,272


def test_gemma3_tower_every_stage_through_0_32():
    assert _PER_LAYER == 15_239_504 and TOWER == 419_816_304
    old, new = stages(GEMMA3_4B, 2, "0.32.0"), stages(GEMMA3_4B, 2, "0.33.0")
    assert diff(old, new) == [0, BF16 * TOWER] == [0, 839_632_608]


# --- Command-R7B and Gemma-2-9B: no lm_head whatever tie_word_embeddings says ---------------
@pytest.mark.parametrize("fname, vocab, hidden", [
    (COMMAND_R7B, 256_000, 4096), (GEMMA2, 256_000, 3584)])
def test_logits_from_embedding_no_lm_head(fname, vocab, hidden):
    tied = weight_inventory(load(fname))
    assert tied.tied_embeddings and not any(t.name == "lm_head" for t in tied.tensors)
    for flag in (True, False):
        w = weight_inventory(load(fname, {**raw(fname), "tie_word_embeddings": flag}))
        assert w.tied_embeddings and not any(t.name == "lm_head" for t in w.tensors)
        assert w.params_total == tied.params_total
        assert any("tie_word_embeddings false not applied" in n for n in w.notes) == (not flag)
    # one embedding table of vocab x hidden, on every stage (embed in the table, no head)
    vb = BF16 * vocab * hidden
    assert vb == {4096: 2_097_152_000, 3584: 1_835_008_000}[hidden]
    m = load(fname, {**raw(fname), "tie_word_embeddings": False})
    four = weight_bytes(vllm_stage_weights(weight_inventory(m), m.model_type, "0.34.0"),
                        weight_format(m, "bf16"), pp=4).per_stage_bytes
    first_last = weight_bytes(weight_inventory(m), weight_format(m, "bf16"), pp=4,
                              every_stage=False).per_stage_bytes
    # first / last (tied): embedding on 0 and 3; vLLM adds it on 1 and 2 (plus the norm)
    norm = BF16 * hidden
    assert diff(four, first_last) == [norm, vb + norm, vb + norm, 0]


# --- Falcon-H1 tied at pp > 1: vLLM's tie_weights on a PPMissingLayer fails -----------------
def _falcon(tmp_path, tie: bool | None):
    cfg = raw(FALCON_H1)
    if tie is not None:
        cfg = {**cfg, "tie_word_embeddings": tie}
    path = tmp_path / "falcon_h1.json"
    path.write_text(json.dumps(cfg))
    return path


# the fixture holds the published file's leading keys only (no vocab_size): weights passed
WM = ("--weight-memory", "2GiB")


def test_falcon_h1_tied_refused_at_pp2(tmp_path, capsys):
    # Falcon-H1-Tiny-90M ships tie_word_embeddings true; the 0.5B fixture with the flag set
    path = _falcon(tmp_path, True)
    for engine in ("vllm", "vllm@0.10.2", "vllm@0.30.0"):
        code = run(["fit", str(path), "--gpu", "h200", "--pp", "2", "--engine", engine, *WM])
        out, err = capsys.readouterr()
        assert code == 2 and not out
        assert len(err.strip().splitlines()) == 1
        assert "FalconH1ForCausalLM" in err and "pp" in err and "--pp 1" in err
    assert run(["fit", str(path), "--gpu", "h200", "--pp", "1", *WM]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("tie", [False, None])
def test_falcon_h1_untied_plans_at_pp2(tmp_path, capsys, tie):
    # FalconH1Config's default is untied: lm_head on the last rank, built there by vLLM
    assert run(["fit", str(_falcon(tmp_path, tie)), "--gpu", "h200", "--pp", "2", *WM]) == 0
    capsys.readouterr()
    assert (CONFIGS / FALCON_H1).exists()
