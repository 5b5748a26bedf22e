"""Which pipeline ranks vLLM builds the embedding, the final norm and the LM head on.

vLLM's default (llama.py 0.34.0 ``LlamaModel`` :377-397, ``LlamaForCausalLM`` :502-517; also
qwen2.py, qwen3.py, qwen3_vl.py, nemotron_nas.py, mimo_v2.py, the transformers backend that
serves Gemma and GPT-NeoX in 0.34, transformers/base.py :428-451 and causal.py :47-66) builds
``embed_tokens`` on the first rank and, tied, on the last (``is_first_rank or
(tie_word_embeddings and is_last_rank)``, else ``PPMissingLayer``), the final norm and the LM
head on the last. DeepSeek-V2/V3/V3.2, GLM-4.x, GLM-5, MiniMax-M2, Falcon-H1 and Kimi-Linear /
K3 build the embedding on the first rank only (deepseek_v2.py :1459-1467; a tied last rank
builds its own ParallelLMHead, the same bytes as the copy kvplan counts). That is the
``weight_bytes`` placement without ``every_stage``.

The model classes below have no rank test for some of these tensors: every pipeline rank
allocates them (``Tensor.every_stage``; ``weight_bytes(every_stage=True)``, the vLLM planner's
call). Multimodal towers are wrapped in ``_mark_tower_model`` (interfaces.py 0.34.0 :347-395:
a ``StageMissingLayer`` on every rank after the first), so they stay on the first stage.
Not here, as vLLM refuses pp > 1 for them (no ``SupportsPP``): gemma3n, zamba2, MiniMax-M1.

By release (model files read in the sdists 0.10.2, 0.11.0-0.14.1, 0.16.0-0.18.0, 0.20.0,
0.22.0, 0.24.0, 0.26.0, 0.28.0-0.34.0): the classes in the table have no rank test in every
release that serves them, except where an entry names a first / last release:

- ``gemma``: gemma.py (<= 0.33.0; 0.34 serves GemmaForCausalLM with the transformers backend,
  first / last rule) builds embed_tokens and the norm on every rank; it asserts
  tie_word_embeddings through 0.28.0, and 0.29.0-0.33.0 build an untied lm_head on every rank
  (gemma.py 0.29.0 :358-365).
- ``gpt_neox``: gpt_neox.py (<= 0.31.0; 0.32 moves GPTNeoXForCausalLM to the transformers
  backend) builds embed_in, final_layer_norm (LayerNorm, weight and bias) and embed_out on
  every rank (0.10.2 :206 / :216 / :296).
- ``gemma3``: asserts tie_word_embeddings through 0.13.0; an untied lm_head from 0.14.0
  (gemma3.py 0.14.0 :476).
- towers: ``_mark_tower_model`` makes them a ``StageMissingLayer`` on later ranks only from
  0.33.0 (interfaces.py 0.33.0 / 0.34.0 :392 ``or not get_pp_group().is_first_rank``); through
  0.32.0 it does so only for a modality limited to 0 (0.16.0-0.32.0), and earlier releases
  have no rank test at all (gemma3_mm.py 0.14.1 :525, qwen3_vl.py 0.14.1 :1285): every rank
  builds the vision / audio tower and its projector.

Unchanged in every release read: llama.py, qwen2.py (first / last rule), falcon_h1.py
(embed_tokens on the first rank only), commandr.py and gemma2.py (no lm_head: logits from
embed_tokens; both assert tie_word_embeddings through 0.28.0, and 0.29.0+ ignore an lm_head,
commandr.py by ``orig_to_new_prefix={"lm_head": None}``) and the other entries.

``vllm_stage_weights`` re-marks an inventory for one vLLM release (the inventory itself carries
the 0.34.0 marks).
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import ParallelismError
from ..core.model import Model
from ..core.weights import Weights

#: the newest release read: the marks ``weight_inventory`` puts on its tensors
LATEST = "0.34.0"
#: every part, all releases
_ALL = (None, None)

#: model type -> (part, first release, last release) for each tensor its vLLM model class
#: builds on every pipeline rank: "embed" (embed_tokens), "norm" (the final norm, weight and
#: bias), "head" (an untied lm_head; a tied one shares the embedding's weight, ``tie_weights``);
#: a release bound of None is open. Lines cite 0.34.0 unless stated.
VLLM_STAGE_RULES: dict[str, tuple[tuple[str, str | None, str | None], ...]] = {
    # commandr.py :351 embed_tokens, :363 norm; no lm_head (compute_logits reads embed_tokens)
    **dict.fromkeys(("cohere", "cohere2"), (("embed", *_ALL), ("norm", *_ALL))),
    # gemma2.py :259 embed_tokens, :270 norm; no lm_head (compute_logits :368 reads embed_tokens)
    "gemma2": (("embed", *_ALL), ("norm", *_ALL)),
    # gemma.py 0.33.0 (the last release with it): embed_tokens, norm; lm_head from 0.29.0
    "gemma": (("embed", None, "0.33.0"), ("norm", None, "0.33.0"),
              ("head", "0.29.0", "0.33.0")),
    # gpt_neox.py 0.31.0 (the last release with it): embed_in, final_layer_norm, embed_out
    "gpt_neox": (("embed", None, "0.31.0"), ("norm", None, "0.31.0"),
                 ("head", None, "0.31.0")),
    # gemma3.py :300 embed_tokens, :313 norm, :392 lm_head (from 0.14.0; gemma3_mm.py :568
    # wraps Gemma3ForCausalLM)
    **dict.fromkeys(("gemma3", "gemma3_text"),
                    (("embed", *_ALL), ("norm", *_ALL), ("head", "0.14.0", None))),
    # gemma4.py :1029 embed_tokens, :1109 norm, :1469 lm_head (gemma4.py from 0.20.0)
    "gemma4_text": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # falcon.py :380 word_embeddings, :395 ln_f (LayerNorm, weight and bias), :503 lm_head
    **dict.fromkeys(("falcon", "RefinedWeb", "RefinedWebModel"),
                    (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL))),
    # mamba.py :116 embeddings, :134 norm_f, :191 lm_head (FalconMamba: the same class)
    **dict.fromkeys(("mamba", "falcon_mamba"),
                    (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL))),
    # mamba2.py :109 embeddings, :126 norm_f, :232 lm_head
    "mamba2": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # mixtral.py :316 embed_tokens, :336 norm, :406 lm_head
    "mixtral": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # qwen2_moe.py :373 embed_tokens, :389 norm, :463 lm_head
    "qwen2_moe": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # qwen3_moe.py :468 embed_tokens, :479 norm, :580 lm_head
    "qwen3_moe": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # qwen3_vl_moe.py :93 Qwen3MoeLLMModel(Qwen3MoeModel): qwen3_moe.py :468, :479; :168 lm_head
    "qwen3_vl_moe_text": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # qwen3_next.py :685 embed_tokens, :876 lm_head; the norm on the last rank only (:709)
    "qwen3_next": (("embed", *_ALL), ("head", *_ALL)),
    # vllm/models/qwen3_5/nvidia/model.py :495 embed_tokens; norm (:520) and lm_head (:676,
    # tied: the embedding itself) on the last rank only (qwen3_5.py 0.17.0-0.33.0 alike)
    **dict.fromkeys(("qwen3_5_text", "qwen3_5_moe_text"), (("embed", *_ALL),)),
    # gpt_oss.py :486 embedding, :499 norm, :1417 lm_head
    "gpt_oss": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # jamba.py :313 embed_tokens, :340 final_layernorm, :424 lm_head
    "jamba": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # granitemoehybrid.py :342 embed_tokens, :367 norm, :666 lm_head
    "granitemoehybrid": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # nemotron_h.py :584 embed_tokens, :620 norm_f, :842 lm_head
    "nemotron_h": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
    # bamba.py of 0.23.0 (the last release that serves Bamba): :283 embed_tokens,
    # :307 final_layernorm, :479 lm_head
    "bamba": (("embed", *_ALL), ("norm", *_ALL), ("head", *_ALL)),
}

#: the last release whose vision / audio towers (and projectors) every pipeline rank builds
TOWERS_EVERY_STAGE_LAST = "0.32.0"
#: names of the tower and projector tensors the inventories place with the embedding
TOWER_PREFIXES = ("vision.", "audio_tower.", "multi_modal_projector.", "mm_projector.",
                  "embed_vision.", "embed_audio.")


def _vt(version: str) -> tuple[int, ...]:
    from ..engines.base import version_tuple

    return version_tuple(version)


def vllm_every_stage(model_type: str, version: str = LATEST) -> frozenset[str]:
    """The tensors (of "embed", "norm", "head") vLLM ``version`` builds on every pipeline rank
    for a model of this type; empty where its class follows the first / last rank rule."""
    v = _vt(version)
    return frozenset(part for part, first, last in VLLM_STAGE_RULES.get(model_type, ())
                     if (first is None or v >= _vt(first)) and (last is None or v <= _vt(last)))


#: model type -> its vLLM 0.34.0 every-rank tensors (``vllm_every_stage`` at ``LATEST``)
VLLM_EVERY_STAGE: dict[str, frozenset[str]] = {
    mt: every for mt in VLLM_STAGE_RULES if (every := vllm_every_stage(mt))}


def _part(name: str) -> str | None:
    if name == "embed_tokens":
        return "embed"
    if name.startswith("final_norm."):
        return "norm"
    return "head" if name == "lm_head" else None


def vllm_stage_weights(weights: Weights, model_type: str, version: str) -> Weights:
    """``weights`` with ``every_stage`` marked as vLLM ``version`` builds them: the table's
    embed_tokens / final_norm / lm_head for a model type in it, and the towers (every rank
    through ``TOWERS_EVERY_STAGE_LAST``). Tensors of other model types keep their marks."""
    every = vllm_every_stage(model_type, version) if model_type in VLLM_STAGE_RULES else None
    towers = _vt(version) <= _vt(TOWERS_EVERY_STAGE_LAST)
    out = []
    for t in weights.tensors:
        mark = t.every_stage
        part = _part(t.name)
        if every is not None and part is not None and t.place in ("embed", "head"):
            mark = part in every
        elif t.place == "embed" and t.name.startswith(TOWER_PREFIXES):
            mark = towers
        out.append(t if mark == t.every_stage else replace(t, every_stage=mark))
    return replace(weights, tensors=tuple(out))


#: model types whose vLLM class builds embed_tokens on the first rank only yet ties the last
#: rank's lm_head to it: ``ParallelLMHead.tie_weights(PPMissingLayer())`` sets
#: ``layer.weight = embed_tokens.weight`` on a layer without one (AttributeError) at pp > 1.
#: falcon_h1.py :427-434 (first rank only), :601-602 (tie), 0.10.2-0.34.0 alike
VLLM_TIED_FIRST_RANK_ONLY = {"falcon_h1": "FalconH1ForCausalLM"}


def check_vllm_tied_pp(model: Model, pp: int) -> None:
    """Refuse pp > 1 for a tied model vLLM cannot build over several pipeline ranks."""
    cls = VLLM_TIED_FIRST_RANK_ONLY.get(model.model_type)
    if pp > 1 and cls and model.config.get("tie_word_embeddings") is True:
        raise ParallelismError(
            f"vLLM's {cls} builds embed_tokens on the first pipeline rank only and ties the "
            "last rank's lm_head to it (tie_word_embeddings true): model construction fails "
            "at pp > 1; use --pp 1", field="pp")
