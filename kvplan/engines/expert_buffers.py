"""Memory that expert parallelism adds on each GPU beyond one copy of each routed expert:
EPLB's redundant experts and staging buffer, and DeepEP's all-to-all buffers. Pure.

**EPLB** (expert-parallel load balancing: vLLM ``--enable-eplb --eplb-config``, from 0.12;
SGLang ``--enable-eplb --ep-num-redundant-experts``). Every MoE layer holds ``E + R`` physical
expert slots, ``(E + R) / ep`` on each GPU, and ``(E + R) % ep`` must be 0:
- vLLM ``fused_moe/layer.py`` ("EPLB currently only supports even distribution of experts
  across ranks"); ``R`` defaults to 0 up to 0.33 and, from 0.34, to the smallest value that
  divides (``ParallelConfig``: ``(ep - E % ep) % ep``); EP must be on ("enable_expert_parallel
  must be True to use EPLB"); the experts' quantization method must support EPLB
  (``supports_eplb``: unquantized, fp8, ModelOpt, mxfp4 and compressed-tensors fp8 / nvfp4;
  not the Marlin int4 kernels of GPTQ / AWQ nor bitsandbytes); the model must implement
  ``MixtureOfExperts`` (gpt-oss does not: vLLM silently runs it without EPLB).
- vLLM keeps a staging copy of one MoE layer's local experts for the rebalancing transfers,
  allocated at load (``eplb_state.py``: ``expert_buffer = [torch.empty_like(w) for w in
  model.expert_weights[0]]``), so it comes out of the KV pool. DeepSeek-V3 (fp8, 128 x 128
  block scales) at EP 8: 32 local experts x 3 matrices of 2,048 x 7,168 x 1 B + 16 x 56 x 4 B
  = 32 x 3 x 14,683,648 = 1,409,630,208 B.
- SGLang allocates its staging copy only while it rebalances
  (``expert_location_updater.py`` ``create_temp_buffers``), from the ``1 - mem_fraction_static``
  reserve; ``R`` defaults to 0 and ``(E + R) % ep`` is asserted (``expert_location.py``).

**DeepEP** (all-to-all kernels; DeepEP v1.2.1 ``csrc/config.hpp``, ``deep_ep/buffer.py``,
``csrc/deep_ep.cpp``). One process-wide buffer per GPU: ``nvl`` bytes of NVLink IPC memory
(+ 160 B of peer pointers and barrier signals), ``rdma`` bytes of NVSHMEM memory, and a 32 MiB
workspace. The DeepEP kernels take EP groups of fewer than 8 GPUs or a multiple of 8.
- Low-latency RDMA size, for ``T`` tokens per rank, hidden ``H`` and ``E`` physical experts
  (``get_low_latency_rdma_size_hint``): dispatch message ``16 + max(2H, H + 4 H/128)``,
  combine message ``4 H/128 + 2H``; send ``max(T x disp, E x T x comb)``, receive
  ``E x T x max(disp, comb)``, signals ``align(4E, 128)``; total ``2 (send + recv + signals)``,
  then ``((total + 128) // 128) x 128``. DeepSeek-V3 (H 7,168, E 256), T 128:
  disp 14,352 B, comb 14,560 B, send = recv = 256 x 128 x 14,560 = 477,102,080 B,
  signals 1,024 B: 1,908,410,368 -> 1,908,410,496 B (1.78 GiB).
- Normal (high-throughput) mode sizes (``Config.get_nvl_buffer_size_hint`` /
  ``get_rdma_buffer_size_hint``, with the per-EP-size dispatch and combine configs of
  ``Buffer.get_dispatch_config`` / ``get_combine_config`` and 20 SMs = 10 channels):
  NVL ``10 x nvl_ranks x (4 (2 rdma_ranks + 3) + recv_tokens x (2H + 8 + 1,024 + 512 + 512))``
  rounded up to 128 B; RDMA (only past 8 ranks) ``10 x rdma_ranks x (144 + recv x (2H + 8 +
  1,024 + 512 + 512 + 16) x 2)`` with recv rounded up to a multiple of the send tokens.
  DeepSeek-V3 (2H = 14,336 B) at EP 8: 10 x 8 x (20 + 256 x 16,392) = 335,709,760 ->
  335,709,824 B NVL, no RDMA; EP 16: NVL 377,673,984 B, RDMA 10 x 2 x (144 + 140 x 32,816)
  = 91,887,680 -> 91,887,744 B.
- vLLM (``distributed/device_communicators/all2all.py``; ``--all2all-backend``, from 0.12):
  ``deepep_high_throughput`` takes ``VLLM_DEEPEP_BUFFER_SIZE_MB`` = 1,024 MiB of NVL memory,
  and as much RDMA memory when the group spans nodes; ``deepep_low_latency`` 1,024 MiB NVL
  plus the low-latency RDMA size with ``T`` = the MoE layer's ``max_num_tokens``:
  ``VLLM_MOE_DP_CHUNK_SIZE`` = 256 in 0.12 / 0.13, the scheduler's ``max_num_batched_tokens``
  in 0.34 (whose default becomes 256 for ``deepep_low_latency`` with DP > 1:
  ``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP``). Releases 0.14 to 0.33
  were not read and are refused. The buffers are created while the model loads, after the
  memory snapshot, so profiling counts them: they come out of the KV pool.
- SGLang (``layers/moe/token_dispatcher/deepep.py``, read in 0.5.23; ``--moe-a2a-backend
  deepep --deepep-mode``): ``normal`` takes the normal-mode NVL / RDMA sizes (max over the
  dispatch and combine configs, 2-byte hidden), ``low_latency`` the low-latency RDMA size with
  ``T`` = ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK`` = 128, ``auto`` both. SGLang
  forces ``ep_size = tp_size`` (every GPU of a stage) and creates the buffer at the first
  dispatch, from the reserve; its default ``mem_fraction_static`` reserves 2,048 MiB more for
  it when decode CUDA graphs run (``memory_hook.py`` ``reserve_for_deepep_a2a_mb``), which
  ``normal`` mode turns off.
Not counted: the CUDA allocator's rounding of each allocation and NVSHMEM's own bootstrap
state (not quantified in the sources; measure it and pass ``--overhead-memory``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from ..core.errors import ParallelismError
from ..core.units import MiB
from .base import version_tuple

#: kvplan's names for the all-to-all backends (``--all2all``)
ALL2ALL = ("default", "deepep_high_throughput", "deepep_low_latency", "deepep_auto")
WORKSPACE_BYTES = 32 * MiB  # NUM_WORKSPACE_BYTES
NVL_META_BYTES = 8 * 4 + 8 * 8 + 8 * 8  # barrier signals, buffer pointers, signal pointers
VLLM_DEEPEP_BUFFER_BYTES = 1024 * MiB  # VLLM_DEEPEP_BUFFER_SIZE_MB default
VLLM_DP_CHUNK_TOKENS = 256  # VLLM_MOE_DP_CHUNK_SIZE (0.12, 0.13)
VLLM_BATCHED_DP_TOKENS = 256  # DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP (0.34)
SGLANG_LL_TOKENS = 128  # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK
SGLANG_DEEPEP_RESERVE_MIB = 2048  # reserve_for_deepep_a2a_mb
NUM_SMS = 20  # deep_ep.Buffer.num_sms
#: Buffer.get_dispatch_config / get_combine_config by EP size: (num_max_nvl_chunked_recv_tokens,
#: num_max_rdma_chunked_send_tokens, num_max_rdma_chunked_recv_tokens) of each
NORMAL_CONFIGS = {
    2: ((256, 6, 128), (256, 6, 128)), 4: ((256, 6, 128), (256, 6, 128)),
    8: ((256, 6, 128), (256, 6, 128)), 16: ((288, 20, 128), (288, 12, 128)),
    24: ((288, 32, 128), (288, 8, 128)), 32: ((288, 32, 128), (288, 8, 128)),
    64: ((288, 28, 128), (288, 20, 128)), 128: ((560, 32, 128), (560, 12, 128)),
    144: ((720, 12, 128), (720, 8, 128)), 160: ((720, 12, 128), (720, 8, 128)),
}
#: kvplan weight schemes whose vLLM MoE method has supports_eplb: 0.12 (unquantized, Fp8,
#: compressed-tensors W8A8-FP8), 0.13 (+ ModelOpt NVFP4; kept for the unread 0.14-0.33),
#: 0.34 (+ ModelOpt FP8, mxfp4)
VLLM_EPLB_SCHEMES = {(0, 12): ("dense", "fp8", "fp8_channel", "fp8_block"),
                     (0, 13): ("dense", "fp8", "fp8_channel", "fp8_block", "nvfp4"),
                     (0, 34): ("dense", "fp8", "fp8_channel", "fp8_block", "fp8_modelopt",
                               "mxfp4", "nvfp4")}
#: hidden sizes vLLM's DeepEP low-latency path takes, the model's rounded up to the next
#: (prepare_finalize/deepep_ll.py SUPPORTED_HIDDEN_SIZES)
VLLM_LL_HIDDEN = (2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192)
#: DeepEP's normal mode: at most NUM_MAX_NVL_PEERS x NUM_MAX_RDMA_PEERS ranks (deep_ep.cpp)
NORMAL_MAX_RANKS = 8 * 20
#: model types whose SGLang model class gives EPLB its expert locations
#: (get_model_config_for_expert_location; eplb/expert_location.py)
SGLANG_EPLB = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "qwen2_moe",
               "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_vl_moe_text", "glm4_moe",
               "glm4_moe_lite", "gpt_oss", "minimax_m2", "mimo_v2_flash", "nemotron_h"}
#: model types whose vLLM model class does not implement MixtureOfExperts
VLLM_NO_EPLB = {"gpt_oss": "gpt_oss.py"}


def _refuse(message: str, field: str = "eplb") -> NoReturn:
    raise ParallelismError(message, field=field)


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def low_latency_rdma_bytes(tokens: int, hidden: int, experts: int) -> int:
    """DeepEP ``get_low_latency_rdma_size_hint`` (independent of the EP size)."""
    scales = hidden // 128
    dispatch = 16 + max(2 * hidden, hidden + 4 * scales)
    combine = 4 * scales + 2 * hidden
    send = max(tokens * dispatch, experts * tokens * combine)
    recv = max(experts * tokens * dispatch, experts * tokens * combine)
    signals = _align(4 * experts, 128)
    total = 2 * send + 2 * recv + 2 * signals
    return (total + 128) // 128 * 128


def normal_buffer_bytes(hidden_bytes: int, ranks: int) -> tuple[int, int]:
    """(NVL, RDMA) bytes of DeepEP's normal mode for ``ranks`` GPUs: the larger of the dispatch
    and combine configs' hints. ``Config`` first rounds the RDMA receive tokens up to a
    multiple of the RDMA send tokens (EP 16 dispatch: 128 -> 140)."""
    if ranks not in NORMAL_CONFIGS:
        _refuse(f"DeepEP's normal mode has configs for EP {sorted(NORMAL_CONFIGS)} only "
                f"(Buffer.get_dispatch_config), not {ranks}", field="ep")
    channels = NUM_SMS // 2
    rdma_ranks, nvl_ranks = max(ranks // 8, 1), min(ranks, 8)
    per_token = hidden_bytes + 8 + 128 * 8 + 128 * 4 + 128 * 4  # data, source meta, top-k, scales
    nvl = rdma = 0
    for nvl_recv, rdma_send, rdma_recv in NORMAL_CONFIGS[ranks]:
        nvl = max(nvl, _align(channels * nvl_ranks * ((2 * rdma_ranks + 3) * 4
                                                      + nvl_recv * per_token), 128))
        if ranks > 8:
            recv = _align(rdma_recv, rdma_send)
            rdma = max(rdma, _align(channels * rdma_ranks * ((8 * 2 + 2) * 2 * 4
                                                             + recv * (per_token + 16) * 2), 128))
    return nvl, rdma


@dataclass(frozen=True)
class ExpertParallelMemory:
    """What EPLB and the all-to-all backend add on each GPU of one engine's stage."""

    physical_experts: int  # E + R slots per MoE layer
    redundant_experts: int
    all2all: str  # kvplan's name (ALL2ALL)
    buffer_bytes: int  # DeepEP buffers (+ vLLM's EPLB staging copy), per GPU
    buffer_how: str
    in_reserve: bool = False  # SGLang: allocated later, from the 1 - mem_fraction_static reserve
    transient_bytes: int = 0  # SGLang's EPLB staging copy while it rebalances (in the reserve)
    reserve_mib: int = 0  # what SGLang's default mem_fraction_static sets aside for DeepEP
    cuda_graphs: bool = True  # SGLang's deepep normal mode runs without CUDA graphs
    eplb: bool = False


NO_EP_MEMORY = ExpertParallelMemory(physical_experts=0, redundant_experts=0, all2all="default",
                                    buffer_bytes=0, buffer_how="")


def expert_parallel_memory(engine: str, version: str, all2all: str, *, hidden: int,
                           experts: int, redundant: int, eplb: bool, ep: int, dp: int,
                           stage_gpus: int, batched_tokens: int,
                           staging_bytes: int) -> ExpertParallelMemory:
    """The buffers of one stage's GPUs (``staging_bytes``: one MoE layer's experts on the
    busiest GPU, with the redundant slots)."""
    physical = experts + redundant
    if engine == "vllm":
        total, how = vllm_buffers(version, all2all, hidden, physical, ep, batched_tokens, dp)
        if eplb:
            how = "; ".join(p for p in (how, f"EPLB staging copy of one MoE layer's local "
                                        f"experts {staging_bytes:,} B (eplb_state.py)") if p)
            total += staging_bytes
        return ExpertParallelMemory(physical, redundant, all2all, total, how, eplb=eplb)
    if engine == "sglang":
        total, how = sglang_buffers(all2all, hidden, physical, ep, stage_gpus)
        graphs = all2all != "deepep_high_throughput"
        return ExpertParallelMemory(
            physical, redundant, all2all, total, how, in_reserve=True,
            transient_bytes=staging_bytes if eplb else 0,
            reserve_mib=SGLANG_DEEPEP_RESERVE_MIB if all2all != "default" and graphs else 0,
            cuda_graphs=graphs, eplb=eplb)
    return ExpertParallelMemory(physical, redundant, all2all, 0, "", eplb=eplb)


def redundant_experts(engine: str, version: str, experts: int, ep: int, eplb: bool,
                      redundant: int | None, model_type: str, weight_scheme: str) -> int:
    """R, checked against ``engine``'s EPLB rules (one ``ParallelismError`` line)."""
    if redundant is not None and not eplb:
        _refuse("--redundant-experts needs --eplb (vLLM: \"num_redundant_experts is set but "
                "EPLB is not enabled\")")
    if not eplb:
        return 0
    if redundant is not None and redundant < 0:
        _refuse(f"--redundant-experts must be >= 0, got {redundant}")
    if not experts:
        _refuse("EPLB balances routed experts; this model has none")
    if ep < 2:
        _refuse("EPLB moves experts between expert-parallel ranks: it needs --ep > 1 (vLLM: "
                "\"enable_expert_parallel must be True to use EPLB\")")
    if engine == "vllm":
        if version_tuple(version) < (0, 12):
            _refuse(f"kvplan models vLLM's EPLB from 0.12 (--eplb-config; read in 0.12.0, "
                    f"0.13.0 and 0.34.0), not {version}")
        if model_type in VLLM_NO_EPLB:
            _refuse(f"vLLM's {VLLM_NO_EPLB[model_type]} does not implement MixtureOfExperts: "
                    "--enable-eplb has no effect on this model")
        schemes = next(s for v, s in sorted(VLLM_EPLB_SCHEMES.items(), reverse=True)
                       if version_tuple(version) >= v)
        if weight_scheme not in schemes:
            _refuse(f"vLLM {version}'s MoE kernels for {weight_scheme} weights do not support "
                    "EPLB (supports_eplb is False: the layer raises NotImplementedError)")
        if redundant is None:
            redundant = (ep - experts % ep) % ep if version_tuple(version) >= (0, 34) else 0
        if redundant > 1023:
            _refuse(f"vLLM allows at most 1,023 redundant experts (MAX_EXPERT_REDUNDANCY), "
                    f"got {redundant:,}")
        if (experts + redundant) % ep:
            _refuse(f"vLLM's EPLB needs the {experts} + {redundant} redundant = "
                    f"{experts + redundant} expert slots to divide by ep ({ep}): \"EPLB "
                    "currently only supports even distribution of experts across ranks\"")
        return redundant
    if engine == "sglang":
        if model_type not in SGLANG_EPLB:
            _refuse(f"SGLang's {model_type!r} model gives EPLB no expert locations "
                    "(get_model_config_for_expert_location; the expert distribution recorder "
                    "asserts them)")
        redundant = redundant or 0
        if redundant > 1023:  # SGLang sets no bound; vLLM's MAX_EXPERT_REDUNDANCY
            _refuse(f"kvplan plans at most 1,023 redundant experts, got {redundant:,}")
        if (experts + redundant) % ep:
            _refuse(f"SGLang needs the {experts} + {redundant} redundant = {experts + redundant} "
                    f"expert slots to divide by ep ({ep}): assert num_physical_experts % ep_size == 0 "
                    "(eplb/expert_location.py)")
        return redundant
    _refuse(f"kvplan models EPLB for vllm and sglang, not {engine} (TensorRT-LLM's MoE load "
            "balancer is not read)")


def batched_dp_tokens(engine: str, version: str, all2all: str, dp: int, ep: int) -> int | None:
    """vLLM 0.34's default ``max_num_batched_tokens`` under DeepEP low-latency with DP
    (``use_batched_dp_moe``), None where the engine keeps its usual default."""
    if (engine == "vllm" and all2all == "deepep_low_latency" and dp > 1 and ep > 1
            and version_tuple(version) >= (0, 34)):
        return VLLM_BATCHED_DP_TOKENS
    return None


def vllm_buffers(version: str, all2all: str, hidden: int, physical_experts: int, ep: int,
                 batched_tokens: int, dp: int) -> tuple[int, str]:
    """(bytes, derivation) of vLLM's DeepEP buffers (``batched_tokens``: the planned
    ``max_num_batched_tokens``)."""
    if all2all == "default":
        return 0, ""
    if dp < 2:
        _refuse("vLLM runs its all-to-all kernels only under data parallelism "
                "(FusedMoEParallelConfig.use_all2all_kernels: EP and dp > 1): --all2all needs "
                "--dp > 1", field="all2all")
    if all2all == "deepep_auto":
        _refuse("vLLM has no automatic DeepEP mode: use deepep_high_throughput or "
                "deepep_low_latency", field="all2all")
    v = version_tuple(version)
    if v < (0, 12) or (0, 14) <= v < (0, 34):
        _refuse(f"kvplan models vLLM's --all2all-backend buffers as read in 0.12.0, 0.13.0 and "
                f"0.34.0, not {version}", field="all2all")
    if all2all == "deepep_high_throughput":
        rdma = VLLM_DEEPEP_BUFFER_BYTES if ep > 8 else 0
        total = VLLM_DEEPEP_BUFFER_BYTES + NVL_META_BYTES + rdma + WORKSPACE_BYTES
        how = (f"DeepEP high-throughput: NVL {VLLM_DEEPEP_BUFFER_BYTES:,} B (VLLM_DEEPEP_BUFFER_"
               f"SIZE_MB 1024) + {NVL_META_BYTES} B + RDMA {rdma:,} B"
               + (" (the group spans nodes)" if rdma else " (within a node)")
               + f" + workspace {WORKSPACE_BYTES:,} B")
        return total, how
    if v >= (0, 34):
        tokens, source = batched_tokens, "max_num_batched_tokens"
    else:
        tokens, source = VLLM_DP_CHUNK_TOKENS, "VLLM_MOE_DP_CHUNK_SIZE"
    width = next((x for x in VLLM_LL_HIDDEN if x >= hidden), None)
    if width is None:
        _refuse(f"vLLM's DeepEP low-latency kernels take hidden sizes up to "
                f"{VLLM_LL_HIDDEN[-1]:,}, not {hidden:,}", field="all2all")
    rdma = low_latency_rdma_bytes(tokens, width, physical_experts)
    total = VLLM_DEEPEP_BUFFER_BYTES + NVL_META_BYTES + rdma + WORKSPACE_BYTES
    rounded = f"hidden {hidden:,} rounded up to {width:,}" if width != hidden else \
        f"hidden {hidden:,}"
    how = (f"DeepEP low-latency: NVL {VLLM_DEEPEP_BUFFER_BYTES:,} B + {NVL_META_BYTES} B + RDMA "
           f"{rdma:,} B ({tokens:,} tokens per rank = {source}, {rounded}, "
           f"{physical_experts} experts) + workspace {WORKSPACE_BYTES:,} B")
    return total, how


def sglang_buffers(all2all: str, hidden: int, physical_experts: int, ep: int,
                   stage_gpus: int) -> tuple[int, str]:
    """(bytes, derivation) of SGLang's DeepEP buffer (allocated from the reserve)."""
    if all2all == "default":
        return 0, ""
    if ep != stage_gpus:
        _refuse(f"SGLang's DeepEP backend sets ep_size = tp_size: every one of the {stage_gpus} "
                f"GPUs of a stage (arg_groups/overrides.py); use --ep {stage_gpus}", field="ep")
    nvl = rdma = 0
    parts = []
    if all2all in ("deepep_high_throughput", "deepep_auto"):
        nvl, rdma = normal_buffer_bytes(2 * hidden, ep)
        parts.append(f"normal mode NVL {nvl:,} B, RDMA {rdma:,} B (EP {ep}, 10 channels)")
    if all2all in ("deepep_low_latency", "deepep_auto"):
        ll = low_latency_rdma_bytes(SGLANG_LL_TOKENS, hidden, physical_experts)
        parts.append(f"low-latency RDMA {ll:,} B ({SGLANG_LL_TOKENS} tokens per rank, hidden "
                     f"{hidden:,}, {physical_experts} experts)")
        rdma = max(rdma, ll)
    meta = NVL_META_BYTES if nvl else 0
    total = nvl + meta + rdma + WORKSPACE_BYTES
    how = ("DeepEP " + "; ".join(parts) + f" -> NVL {nvl + meta:,} B + RDMA {rdma:,} B + "
           f"workspace {WORKSPACE_BYTES:,} B")
    return total, how


def check_all2all(engine: str, all2all: str, ep: int, domain_gpus: int | None) -> None:
    if all2all not in ALL2ALL:
        _refuse(f"unknown all-to-all backend {all2all!r}; kvplan models {', '.join(ALL2ALL)}",
                field="all2all")
    if all2all == "default":
        return
    if engine not in ("vllm", "sglang"):
        _refuse(f"kvplan models DeepEP buffers for vllm and sglang, not {engine}",
                field="all2all")
    if ep < 2:
        _refuse(f"{all2all} dispatches tokens between expert-parallel ranks: it needs --ep > 1",
                field="all2all")
    if ep > 8 and ep % 8:
        _refuse(f"DeepEP takes groups of fewer than 8 GPUs or a multiple of 8, not {ep} "
                "(deep_ep.cpp: num_ranks % NUM_MAX_NVL_PEERS == 0)", field="ep")
    if all2all != "deepep_low_latency" and ep > NORMAL_MAX_RANKS:
        _refuse(f"DeepEP's normal (high-throughput) mode takes at most {NORMAL_MAX_RANKS} ranks, "
                f"not {ep} (deep_ep.cpp)", field="ep")
    if domain_gpus is not None and domain_gpus > 8:
        _refuse("DeepEP over a multi-node NVLink domain (GB200 / GB300 NVL72: MNNVL) is not "
                "modelled; kvplan reads its buffers for 8-GPU NVLink nodes", field="all2all")
