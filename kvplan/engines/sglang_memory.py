"""SGLang's memory budget, by release: kvplan's late-2025 reading of SGLang main (the default,
``--engine sglang``) and SGLang 0.5.23 (``--engine sglang@0.5.23``).

Which rules plan a version (``rules_release``): ``main`` -> the late-2025 main copy (the default
has not moved to 0.5.23); ``0.5.23`` -> 0.5.23; a numbered release before 0.5.23 -> the
late-2025 copy, mapped explicitly and said in the budget's notes (those releases were not read,
so which one changed the reserve is not established); releases after 0.5.23 are refused when
the version is parsed (``sglang.NEWEST_READ``).

Both releases:
- ``mem_fraction_static`` f is "(weights + KV pool) / GPU memory". Its default is
  ``round((gpu_MiB - reserved_MiB) / gpu_MiB, 3)``, gpu_MiB being nvidia-smi's
  ``memory.total`` (``get_nvgpu_memory_capacity``; kvplan falls back to the driver total where
  the GPU file gives no nvidia-smi figure), reserved = 512 + 1.5 x max(chunked_prefill_size,
  2048) + tp x pp / 8 x 1024 + the CUDA-graph reserve, at least 10,240 MiB on GPUs over 60 GiB,
  then + 2,048 MiB with DeepEP.
- KV pool = free after weights - (1 - f) x free before weights = f x free_before - weights,
  where free_before is the driver total less the CUDA context and NCCL buffers (runtime
  overhead). Activations and CUDA graphs must fit in the (1 - f) reserve; they are shown, not
  subtracted. (0.5.23: ``KVCacheConfigurator._profile_available_bytes``, the same arithmetic.)
- Tokens = pool // cell bytes (every layer's K + V per token on one rank), floored to the
  page size; the minimum over pipeline stages (0.5.23: ``DefaultPoolConfigurator``).

Late-2025 main (``ServerArgs._handle_gpu_memory_settings``, copy id 8356329,
docs/budget-research.md 5.1): graph reserve 2 x cuda_graph_max_bs (none without CUDA graphs,
DeepEP normal mode), + cuda_graph_max_bs x dp x 3 (x 1.5 more over 300) under DP attention.
Tiers by the driver total: < 20 GiB 2048 / 8; < 35 GiB 2048 / 24 (80 with tp >= 4); < 60 GiB
4096 / 32 (160); < 160 GiB 8192 / 256 (512); else 16384 / 512. H100 80 GB (81,559 MiB), TP 1:
reserved 13,440 MiB -> 0.835.

0.5.23 (``srt/arg_groups/memory_hook.py``, ``default_mem_fraction_0523``): the < 35 GiB tier
is 4096 / 48 (160 with tp >= 4), tiers by gpu_MiB; the graph reserve
(``reserve_for_graph_mb``) adds, while the breakable prefill CUDA graph is on (the CUDA default,
``cuda_graph_config.default_prefill_backend``), 1,536 MiB for MLA models (DSA included) or
8 MiB per prefill capture bucket otherwise, and 1,024 MiB more with DeepEP. DeepSeek-V3.2 on
8 x B200 (183,359 MiB): 512 + 24,576 + 1,024 + 2 x 512 + 1,536 = 28,672 MiB -> 0.844 (late
2025: 0.852).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import PurePath

from ..core.budget import Budget, BudgetInputs, assemble
from ..core.errors import InputError
from ..core.units import GiB, MiB
from .base import version_tuple

LATE_2025 = "late-2025 main"
RELEASE_0523 = "0.5.23"


def rules_release(version: str, sparse_mla: bool = False) -> str:
    """The read copy whose rules plan SGLang ``version``: ``main`` -> ``LATE_2025`` (the
    default; kvplan has not moved it to 0.5.23) except for a DSA model (``sparse_mla``), whose
    cache kvplan plans as 0.5.23 lays it out (engines/sglang_dsa) and so its budget too;
    0.5.23 -> ``RELEASE_0523``; a release before 0.5.23 -> ``LATE_2025`` (explicitly: those
    releases were not read)."""
    if version == "main":
        return RELEASE_0523 if sparse_mla else LATE_2025
    return RELEASE_0523 if version_tuple(version) >= (0, 5, 23) else LATE_2025


def default_chunk_tokens(version: str, total_bytes: int, smi_total_mib: int | None, tp: int,
                         sparse_mla: bool) -> int:
    """SGLang's default ``--chunked-prefill-size`` (the tokens a prefill step takes) on this
    GPU, by the release's tiers (main plans a DSA model by 0.5.23's, as its budget)."""
    if rules_release(version, sparse_mla) == RELEASE_0523:
        return gpu_defaults_0523(_gpu_mib(total_bytes, smi_total_mib), tp)[0]
    return gpu_defaults(total_bytes, tp)[0]


# ---- late-2025 main --------------------------------------------------------------------------

def gpu_defaults(total_bytes: int, tp: int) -> tuple[int, int]:
    """Late-2025 main: (chunked_prefill_size, cuda_graph_max_bs) for a GPU of ``total_bytes``
    (kvplan's reading tiers by the driver total)."""
    gib = total_bytes / GiB
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _gpu_mib(total_bytes: int, smi_total_mib: int | None) -> int:
    gpu_mib = smi_total_mib or total_bytes // MiB
    if gpu_mib < 1:
        raise InputError(f"a GPU of {total_bytes:,} B has no whole MiB for SGLang's "
                         "mem_fraction_static", field="--total-memory")
    return gpu_mib


def _round3(gpu_mib: int, reserved: Fraction) -> Fraction:
    return Fraction(round((gpu_mib - reserved) / gpu_mib, 3)).limit_denominator(1000)


def default_mem_fraction(total_bytes: int, tp: int, pp: int,
                         smi_total_mib: int | None = None, dp: int = 1, deepep_mib: int = 0,
                         cuda_graphs: bool = True) -> tuple[Fraction, str]:
    """Late-2025 main. SGLang reads the GPU size from ``nvidia-smi --query-gpu=memory.total``
    (MiB); without that figure the driver total is used (a few hundred MiB less: 0.001 lower on
    an H100). ``tp`` is SGLang's (every GPU of a stage); with DP attention over ``dp`` ranks
    SGLang reserves ``cuda_graph_max_bs x dp x 3`` MiB more (x 1.5 more when max_bs > 300) "for
    padding" (PR #10975), before the 10 GiB floor. With DeepEP, ``deepep_mib`` more after the
    floor; without CUDA graphs (DeepEP normal mode) no ``2 x cuda_graph_max_bs`` graph
    reserve."""
    chunk, graph_bs = gpu_defaults(total_bytes, tp)
    gpu_mib = _gpu_mib(total_bytes, smi_total_mib)
    reserved = (Fraction(512) + Fraction(3, 2) * max(chunk, 2048)
                + (2 * graph_bs if cuda_graphs else 0) + Fraction(tp * pp * 1024, 8))
    if dp > 1:
        reserved += graph_bs * dp * 3 + (Fraction(3, 2) * graph_bs * dp if graph_bs > 300 else 0)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, Fraction(10 * 1024))
    reserved += deepep_mib
    f = _round3(gpu_mib, reserved)
    how = (f"round(({gpu_mib:,} MiB - {float(reserved):,.0f} MiB reserved) / {gpu_mib:,} MiB, 3) "
           f"(chunked_prefill {chunk}, cuda_graph_max_bs {graph_bs}"
           + ("" if cuda_graphs else " without CUDA graphs")
           + (f", DP attention over {dp} ranks" if dp > 1 else "")
           + (f", {deepep_mib:,} MiB for DeepEP" if deepep_mib else "") + ")")
    return f, how


# ---- 0.5.23 -----------------------------------------------------------------------------------

def gpu_defaults_0523(gpu_mib: int, tp: int) -> tuple[int, int]:
    """0.5.23 (``memory_hook.handle_gpu_memory_settings``): (chunked_prefill_size, decode
    cuda_graph max_bs) by gpu_MiB: < 20 GiB 2048 / 8; < 35 GiB 4096 / 48 (160 with tp >= 4);
    < 60 GiB 4096 / 32 (160); < 90 GiB and < 160 GiB 8192 / 256 (512); else 16384 / 512. An
    RTX 4090 (nvidia-smi 24,564 MiB) at TP 1: 4096 / 48 (late 2025: 2048 / 24)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_graph_buckets(max_tokens: int) -> list[int]:
    """0.5.23's prefill capture sizes up to ``max_tokens`` (``cuda_graph_hook.
    generate_prefill_cuda_graph_batch_sizes``): steps of 4 to 32, 16 to 256, 32 to 512, 64 to
    1,024, 256 to 4,096, then 512. 4,096 tokens: 8 + 14 + 8 + 8 + 12 = 50 buckets; 8,192: 58."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256),
             (4608, max_tokens, 512))
    return [n for first, last, step in steps for n in range(first, last + 1, step)
            if n <= max_tokens]


#: architectures SGLang 0.5.23 serves text-only unless --enable-multimodal
#: (``configs/model_config.py`` ``mm_disabled_models``): no multimodal budget terms
MIMO_V2_MM_ARCHS = frozenset({"MiMoV2ForCausalLM"})  # text-only without both sub-configs
MM_DISABLED_ARCHS = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                               "Step3VLForConditionalGeneration", "InklingForConditionalGeneration"})
#: ``configs/model_config.py`` ``multimodal_model_archs`` (0.5.23, with
#: ``MIMO_V2_MULTIMODAL_ARCHS``): SGLang treats these architectures as multimodal.
MULTIMODAL_ARCHS = frozenset({
    "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
    "BailingMoeV3VLForConditionalGeneration", "CLIPModel", "Cohere2VisionForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration", "DeepseekOCRForCausalLM", "DeepseekVL2ForCausalLM",
    "DiffusionGemmaForBlockDiffusion", "Dots3NoteForCausalLM", "DotsOCRForCausalLM",
    "DotsVLMForCausalLM", "EmbeddingGemma2Model", "Ernie4_5_VLMoeForConditionalGeneration",
    "Gemma3ForConditionalGeneration", "Gemma3nForConditionalGeneration",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration",
    "Glm5NextForConditionalGeneration", "GlmAsrForConditionalGeneration",
    "GlmImageForConditionalGeneration", "GlmOcrForConditionalGeneration", "Grok1AForCausalLM",
    "Grok1VForCausalLM", "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration",
    "InternS2MobiusForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "InternVLChatModel", "JetVLMForConditionalGeneration", "KimiK25ForConditionalGeneration",
    "KimiVLForConditionalGeneration", "Lfm2VlForConditionalGeneration",
    "LightOnOCRForConditionalGeneration", "Llama4ForConditionalGeneration",
    "LlavaForConditionalGeneration", "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM",
    "LlavaQwenForCausalLM", "LlavaVidForCausalLM", "LocateAnythingForConditionalGeneration",
    "MiDashengLMModel", "MiMoV2ASRForCausalLM", "MiMoV2ForCausalLM", "MiniCPMO", "MiniCPMV",
    "MiniMaxM3SparseForConditionalGeneration", "Mistral3ForConditionalGeneration",
    "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "MultiModalityCausalLM",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
    "NVILAForConditionalGeneration", "NVILALiteForConditionalGeneration",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3",
    "POINTSV15ChatModel", "PaddleOCRVLForConditionalGeneration", "Phi4MMForCausalLM",
    "PixtralForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ASRForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Sarashina2VisionForCausalLM",
    "Step3VLForConditionalGeneration", "Step3p7ForConditionalGeneration",
    "StepVLForConditionalGeneration", "UnlimitedOCRForCausalLM",
    "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration"})


@dataclass(frozen=True)
class GraphReserve:
    """What 0.5.23's ``reserve_for_graph_mb`` reads about the model and launch, at the moment
    ``handle_gpu_memory_settings`` runs (after ``handle_cuda_graph_config``, before the model
    overrides, the attention backend and ``handle_a2a_moe``)."""

    mla: bool  # ModelConfig.attention_arch == MLA (DSA included)
    prefill_graph: bool  # the breakable prefill CUDA graph is still on
    why_no_prefill_graph: str = ""
    llama2: bool = False  # "llama-2" in --model-path: prefill capture capped at 4,096 tokens
    deepep: bool = False  # --moe-a2a-backend deepep (any --deepep-mode)


def _model_path(model) -> str:
    """The --model-path kvplan's launch line passes (``launch.model_ref``): the Hub id, else
    the folder of a local config, else the source or name."""
    if model.hub_id:
        return model.hub_id
    if model.source and PurePath(model.source).suffix == ".json":
        return str(PurePath(model.source).parent)
    return model.source or model.name


def graph_reserve(i: BudgetInputs) -> GraphReserve:
    """The 0.5.23 graph-reserve facts of one plan (``i.model`` and ``i.gpu`` are needed).

    - MLA: SGLang decides by architecture (``ModelConfig._derive_model_shapes``); kvplan takes
      a model with MLA layers (``kind == "mla"``) as one, the DSA models included.
    - The breakable prefill graph is on by default on CUDA (``default_prefill_backend``) and
      off by the time memory is sized (``cuda_graph_hook.apply_cuda_graph_compatibility``)
      with pipeline parallelism and for KDA hybrids (``uses_kda_attention``); kvplan plans no
      DCP, two-batch overlap or DeepSeek-V4 on SGLang, the other rules there.
    - DeepEP: ``deepep_reserve_mib`` (low-latency / auto) or no CUDA graphs (normal mode) both
      mean ``--moe-a2a-backend deepep``; normal mode turns the graphs off only in
      ``moe_hook.handle_a2a_moe``, after the fraction is computed, so 0.5.23's reserve keeps
      the decode graph, the DeepEP 2,048 MiB and the prefill graph's DeepEP 1,024 MiB.
    Refused: ROCm GPUs (no prefill graph off CUDA, but the aiter attention backend scales
    mem_fraction_static by 0.85 above 8,192 tokens of context, given or default, and model
    overrides choose the backend: not modelled) and multimodal architectures
    (``adjust_mem_fraction_for_vlm``, ``mm_runtime_reservation_gb``'s 100 MiB out of the pool
    and the breakable-graph allowlist: not modelled)."""
    model, gpu = i.model, i.gpu
    if model is None or gpu is None:
        raise InputError("SGLang 0.5.23's memory budget reads the model (MLA or not, its "
                         "architecture) and the GPU (CUDA or ROCm): pass both", field="--engine")
    if gpu.vendor != "nvidia":
        raise InputError(
            f"kvplan models SGLang 0.5.23's memory budget on NVIDIA GPUs only; on {gpu.name} its "
            "default prefill graph is off, its aiter attention backend scales "
            "mem_fraction_static (even a given one) by 0.85 when the context length exceeds "
            "8,192 tokens (attention_hook.py) and model overrides choose the backend, which "
            "kvplan has not modelled; plan it with --engine sglang", field="--gpu")
    archs = [a for a in (model.config.get("architectures") or []) if isinstance(a, str)]
    multimodal = next((a for a in archs if a in MULTIMODAL_ARCHS), None)
    text_only = bool(archs) and (archs[0] in MM_DISABLED_ARCHS or (
        archs[0] in MIMO_V2_MM_ARCHS and not ("vision_config" in model.config
                                               and "audio_config" in model.config)))
    if not text_only and (multimodal or any(k in model.config
                                            for k in ("vision_config", "audio_config"))):
        raise InputError(
            f"kvplan has not modelled SGLang 0.5.23's budget for multimodal models such as "
            f"{model.name} ({multimodal or 'a vision/audio sub-config'}): it scales "
            "mem_fraction_static for the vision tower (adjust_mem_fraction_for_vlm), keeps "
            "SGLANG_VLM_CACHE_SIZE_MB out of the pool and allowlists the prefill CUDA graph; plan "
            "it with --engine sglang (kvplan's late-2025 rules, which model none of these)",
            field="--engine")
    kinds = {s.kind for s in model.cache_layers}
    why = ("pipeline parallelism (breakable prefill graphs are opt-in with PP)" if i.pp > 1
           else "a KDA hybrid (uses_kda_attention)" if "kda" in kinds else "")
    return GraphReserve(mla="mla" in kinds, prefill_graph=not why, why_no_prefill_graph=why,
                        llama2="llama-2" in _model_path(model).lower(),
                        deepep=i.deepep_reserve_mib > 0 or not i.cuda_graphs)


def default_mem_fraction_0523(gpu_mib: int, tp: int, pp: int, dp: int,
                              g: GraphReserve) -> tuple[Fraction, str]:
    """0.5.23's default ``mem_fraction_static`` (``memory_hook.handle_gpu_memory_settings``
    with ``reserve_for_graph_mb`` and ``reserve_for_deepep_a2a_mb``), without
    ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING`` (default False; set, it keeps only 1,536 MiB +
    tp x pp / 8 GiB):

    reserved = 512 + 1.5 x max(chunk, 2048) + tp x pp / 8 x 1024 + 2 x max_bs
      [+ max_bs x dp x 3 (+ 1.5 x max_bs x dp if max_bs > 300) under DP attention]
      [+ prefill graph: 1,536 MLA, else 8 x buckets up to chunk (4,096 for Llama-2); + 1,024
      with DeepEP], at least 10,240 on GPUs over 60 GiB, + 2,048 with DeepEP.
    Llama-3.1-70B on 4 x H100 (81,559 MiB): 512 + 12,288 + 512 + 1,024 + 58 x 8 = 14,800 ->
    round(66,759 / 81,559, 3) = 0.819 (late 2025: 0.824)."""
    chunk, max_bs = gpu_defaults_0523(gpu_mib, tp)
    reserved = Fraction(512) + Fraction(3, 2) * max(chunk, 2048) + Fraction(tp * pp * 1024, 8)
    parts = [f"chunked_prefill {chunk}", f"decode graphs to {max_bs} ({2 * max_bs:,} MiB)"]
    graph = Fraction(2 * max_bs)
    if dp > 1:
        pad = max_bs * dp * 3 + (Fraction(3, 2) * max_bs * dp if max_bs > 300 else 0)
        graph += pad
        parts.append(f"DP attention over {dp} ranks ({float(pad):,.0f} MiB)")
    if g.prefill_graph:
        if g.mla:
            graph += 1536
            parts.append("breakable prefill graph, MLA 1,536 MiB")
        elif g.deepep:  # cuda_graph_hook.apply_deepep_adjustments runs first: max_bs 2,048
            # (prefill max_bs unresolved there), sizes rounded up to multiples of 8: 38 buckets
            n = len({(b + 7) // 8 * 8 for b in prefill_graph_buckets(2048)})
            graph += 8 * n
            parts.append(f"breakable prefill graph, {n} DeepEP-aligned buckets to 2,048 tokens "
                         "x 8 MiB")
        else:
            top = min(chunk, 4096) if g.llama2 else chunk
            n = len(prefill_graph_buckets(top))
            graph += 8 * n
            parts.append(f"breakable prefill graph, {n} buckets to {top:,} tokens x 8 MiB"
                         + (" (Llama-2 cap)" if g.llama2 else ""))
        if g.deepep:
            graph += 1024
            parts.append("prefill graph with DeepEP 1,024 MiB")
    else:
        parts.append(f"no prefill graph: {g.why_no_prefill_graph}")
    reserved += graph
    if gpu_mib > 60 * 1024 and reserved < 10 * 1024:
        reserved = Fraction(10 * 1024)
        parts.append("10 GiB floor")
    if g.deepep:
        reserved += 2048
        parts.append("DeepEP 2,048 MiB")
    f = _round3(gpu_mib, reserved)
    how = (f"round(({gpu_mib:,} MiB - {float(reserved):,.0f} MiB reserved) / {gpu_mib:,} MiB, 3) "
           f"(SGLang 0.5.23: {', '.join(parts)})")
    return f, how


def context_overhead(tp: int) -> int:
    """CUDA context (+ NCCL with TP) allocated before SGLang reads its free memory."""
    return GiB // 2 + (GiB if tp > 1 else 0)


def sglang_budget(i: BudgetInputs, version: str, activation: tuple[int, str]) -> Budget:
    release = rules_release(version, i.model is not None and i.model.sparse_mla)
    dsa_main = version == "main" and release == RELEASE_0523
    g = graph_reserve(i) if release == RELEASE_0523 else None  # 0.5.23 refusals apply to all
    if i.utilization is not None:
        f, how = Fraction(i.utilization).limit_denominator(1000), "given"
    elif g is not None:
        f, how = default_mem_fraction_0523(_gpu_mib(i.total_bytes, i.smi_total_mib), i.tp, i.pp,
                                           i.attention_dp, g)
    else:
        f, how = default_mem_fraction(i.total_bytes, i.tp, i.pp, i.smi_total_mib, i.attention_dp,
                                      i.deepep_reserve_mib, i.cuda_graphs)
    overhead = (i.runtime_overhead_bytes if i.runtime_overhead_bytes is not None
                else context_overhead(i.tp))
    free_before = i.total_bytes - overhead
    static = int(free_before * f)
    notes = []
    if dsa_main:
        notes.append("SGLang main is planned with 0.5.23's mem_fraction_static for this DSA model "
                     "(its cache is planned as 0.5.23 lays it out; the older rules lack the "
                     "1,536 MiB prefill CUDA-graph reserve)")
    if version not in ("main", RELEASE_0523):
        notes.append(f"SGLang {version} is planned with kvplan's {release} rules for the default "
                     f"mem_fraction_static (mapped explicitly: releases before 0.5.23 were not "
                     f"read, so which one took up 0.5.23's prefill-graph reserve is not "
                     f"established)")
    reserve = free_before - static
    act = i.activation_bytes if i.activation_bytes is not None else activation[0]
    later = act + i.ep_buffers_bytes + i.ep_transient_bytes
    overflow = ""
    if later > reserve and later > act:  # buffers SGLang makes after sizing its pool
        overflow = (f"does not fit: SGLang's reserve (1 - mem_fraction_static) = "
                    f"{reserve / GiB:.2f} GiB cannot hold the activation peak "
                    f"({act / GiB:.2f} GiB) and the expert-parallel buffers made after the pool "
                    f"({(i.ep_buffers_bytes + i.ep_transient_bytes) / GiB:.2f} GiB); lower "
                    "--gpu-memory-utilization (mem_fraction_static)")
    elif act > reserve:
        notes.append(f"the activation estimate ({act / GiB:.2f} GiB) exceeds SGLang's reserve "
                     f"(1 - mem_fraction_static) = {reserve / GiB:.2f} GiB: lower "
                     "--mem-fraction-static or --chunked-prefill-size")
    return assemble(
        i, engine=f"sglang {version}",
        rules=f"SGLang {version} ({_rules_label(version, release)}): pool = mem_fraction_static "
              "x (total - CUDA context) - weights",
        usable=static, usable_label=f"x mem_fraction_static {float(f):g}",
        usable_how=f"(total - overhead) x {float(f):g}; f = {how}", act=activation,
        overhead=(overhead, "CUDA context 0.5 GiB" + (" + NCCL 1 GiB" if i.tp > 1 else "")),
        pool=(static - i.weights_bytes, "usable - weights"), subtracts_activation=False,
        subtracts_ep=False, notes=tuple(notes), overflow=overflow)


def _rules_label(version: str, release: str) -> str:
    if version == "main" and release == RELEASE_0523:
        return f"a DSA model: SGLang {RELEASE_0523}'s budget, as its cache"
    if version == "main":
        return (f"kvplan's {release} reading; SGLang 0.5.23's budget: --engine "
                f"sglang@{RELEASE_0523}")
    return "as read" if release == version else f"{release} rules"


SWA_FULL_TOKENS_RATIO = Fraction(4, 5)  # --swa-full-tokens-ratio default


def sglang_pool_tokens(pool_bytes: int, cell_bytes: int, page_tokens: int, full_layers: int,
                       swa_layers: int) -> tuple[int, int]:
    """(full-layer tokens, sliding-layer tokens) of SGLang's pools.

    ``max_total_num_tokens = pool // cell`` (cell: K + V of every layer for one token), floored
    to the page size. A hybrid sliding-window model splits that into two pools
    (``set_num_tokens_hybrid_swa``): ``total = max_total x layers``, ``full = int(total /
    (ratio x swa_layers + full_layers))``, ``swa = int(full x ratio)``, both page-floored, with
    ``--swa-full-tokens-ratio`` 0.8."""
    tokens = pool_bytes // cell_bytes // page_tokens * page_tokens if cell_bytes else 0
    if not swa_layers or not full_layers:
        return tokens, tokens
    total = tokens * (full_layers + swa_layers)
    full = int(total / (SWA_FULL_TOKENS_RATIO * swa_layers + full_layers))
    swa = int(full * SWA_FULL_TOKENS_RATIO)
    return full // page_tokens * page_tokens, swa // page_tokens * page_tokens
