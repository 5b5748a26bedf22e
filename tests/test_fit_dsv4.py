"""``kvplan fit`` for DeepSeek-V4 on vLLM 0.34 (kvplan/planning/fit_dsv4.py): the packed block
pool, the memory budget and the engine's figures, each derived here by hand from the config
(tests/fixtures/configs) and the rules read in vLLM 0.34.0:

- pages (``vllm/v1/kv_cache_interface.py`` ``_apply_alignment_padding``: 576-B multiples) and
  groups (``vllm/v1/core/kv_cache_planning.py`` ``_get_packed_kv_cache_groups``);
- ``num_blocks = available // bytes_per_block`` (``get_kv_cache_configs``), one null block
  (``block_pool.py``);
- "Maximum concurrency" = num_blocks / the per-request reservation
  (``kv_cache_utils.py`` ``get_max_concurrency_for_kv_cache_config``), sliding groups at
  ``cdiv(min(W - 1 + 2 x max_num_batched_tokens, L), b) + 1`` blocks (async scheduling);
- the budget: ``int(total x 0.92)`` - weights (mxfp4 experts, fp8 128 x 128 blocks with 1-byte
  scales, bf16 / fp32 elsewhere, as ``vllm/models/deepseek_v4`` allocates them, plus the
  int32 top-k index buffer) - activation (kvplan's vLLM estimate + the sparse workspace) -
  non-torch - CUDA graphs.
"""

from __future__ import annotations

import json
import shlex
from fractions import Fraction
from pathlib import Path

import pytest
from cli_helpers import fail
from test_launch_flags import problems

from kvplan.cli.main import run
from kvplan.core.errors import InputError
from kvplan.core.perf import kv_read_bytes
from kvplan.loaders.hardware import load_gpu
from kvplan.loaders.hf_params import weight_inventory
from kvplan.loaders.quant_config import weight_format
from kvplan.loaders.resolve import load_model
from kvplan.planning.fit import plan_fit
from kvplan.planning.fit_pools import concurrency_at
from kvplan.planning.fit_types import FitRequest
from kvplan.planning.launch import launch_commands
from kvplan.planning.perf_model import step_model

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
FLASH = CONFIGS / "deepseek-ai__DeepSeek-V4-Flash.json"
PRO = CONFIGS / "deepseek-ai__DeepSeek-V4-Pro.json"
GiB, MiB = 2**30, 2**20
L = 131_072  # the planned context and max_model_len
# vllm serve's defaults on a >= 160 GiB GPU from 0.28 (arg_utils.py get_batch_defaults): B200
MNBT, MNS = 16384, 1024
B200_TOTAL = 191_501_854_310  # the B200 spec's cudaMemGetInfo total (kvplan gpus b200)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad576(n: int) -> int:
    return cdiv(n, 576) * 576


def fp8(rows: int, cols: int) -> int:
    """An fp8 128 x 128 block linear on one rank: a byte a value, a byte (e8m0) a block."""
    return rows * cols + cdiv(rows, 128) * cdiv(cols, 128)


def weights_by_hand(c: dict, tp: int) -> int:
    """Parameter bytes on one GPU at tensor parallelism ``tp`` (no expert parallelism), as
    vLLM 0.34's DeepseekV4ForCausalLM holds them (tests/test_weights_2026.py checks the
    parameter counts and each group's format)."""
    h, vocab, heads, hd = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["head_dim"]
    q_lora, o_lora, groups = c["q_lora_rank"], c["o_lora_rank"], c["o_groups"]
    ih, idim, hc = c["index_n_heads"], c["index_head_dim"], c["hc_mult"]
    experts, inter = c["n_routed_experts"], c["moe_intermediate_size"]
    top_k = c["num_experts_per_tok"]
    n_layers = c["num_hidden_layers"]
    # attention: fp32 sinks split with the heads, fused wq_a + wkv replicated, wq_b and wo_a
    # split by rows (columns of the output), wo_b by columns; q_norm, kv_norm bf16
    attn = (heads // tp * 4 + fp8(q_lora + hd, h) + 2 * q_lora + fp8(heads * hd // tp, q_lora)
            + 2 * hd + fp8(groups * o_lora // tp, heads * hd // groups)
            + fp8(h, groups * o_lora // tp))

    def compressor(dim: int, r: int) -> int:  # fp32 ape, bf16 fused wkv + wgate, bf16 norm
        coff = 2 if r == 4 else 1
        return 4 * r * coff * dim + 2 * 2 * coff * dim * h + 2 * dim

    indexer = fp8(ih * idim, q_lora) + 2 * ih * h + compressor(idim, 4)  # replicated
    w = inter // tp
    routed = experts * 3 * (w * h // 2 + w * h // 32)  # mxfp4: half a byte a value + e8m0 per 32
    shared = 2 * fp8(w, h) + fp8(h, w)  # one shared expert, fp8, split like a dense MLP
    router = 2 * experts * h  # bf16, replicated
    rest = 2 * 2 * h + 2 * 4 * ((2 + hc) * hc * hc * h + (2 + hc) * hc + 3)  # norms, 2 hyper-conn.
    total = 0
    for i, r in enumerate(c["compress_ratios"][:n_layers]):
        hashed = i < c["num_hash_layers"]
        total += attn + (compressor(hd, r) if r else 0) + (indexer if r == 4 else 0)
        total += router + (4 * vocab * top_k if hashed else 4 * experts) + routed + shared + rest
    head = 2 * 2 * (vocab // tp) * h + 2 * h + 4 * (hc * hc * h + hc + 1)  # embed, LM head, norm, hyper-head
    return total + head


def buffers_by_hand(c: dict) -> int:
    """The int32 top-k index buffer every indexer shares: [max_num_batched_tokens, index_topk]."""
    return MNBT * c["index_topk"] * 4


def activation_by_hand(c: dict, tp: int) -> int:
    """kvplan's vLLM estimate, max(forward, sampler), + DeepSeek-V4's sparse workspace."""
    # the widest dense MLP row is the shared expert's 2,048 (Flash) / 3,072 (Pro), over tp
    forward = MNBT * (3 * cdiv(c["moe_intermediate_size"], tp) + 6 * c["hidden_size"]) * 2
    sampler = int(Fraction(1545, 100) * MNS * c["vocab_size"])
    # FlashMLA's prefill gather on a ratio-4 layer, M = L / 4 + window + batched tokens
    m = L // 4 + c["sliding_window"] + MNBT
    flashmla = 4 * m * c["head_dim"] * 2 + MNBT * cdiv(c["index_topk"] + 128, 128) * 128 * 4 \
        + MNBT * 4
    # the indexer's K gather: T = L x 8 x 5 // 4 rows of 128 fp8 + 4 scale bytes, + 1 MiB
    t = L * 8 * 5 // 4
    indexer = t * c["index_head_dim"] + t * 4 + MiB
    return max(forward, sampler) + max(flashmla, indexer)


def overhead_by_hand(c: dict) -> int:
    """non-torch 2.1 GiB with TP + CUDA graphs 768 MiB + 5 MiB a layer + 384 MiB with TP."""
    return 21 * GiB // 10 + 768 * MiB + 5 * MiB * c["num_hidden_layers"] + 384 * MiB


def block_bytes_by_hand(c: dict) -> int:
    """One block id: the compressed group, the widest (r = 4: 64 entries of 584 B and 64
    indexer keys of 132 B; r = 128: 2 entries), each page padded to 576 B."""
    ratios = c["compress_ratios"][:c["num_hidden_layers"]]
    row = 448 + 2 * 64 + 7 + 1  # fp8_ds_mla: fp8 NoPE, bf16 RoPE, UE8M0 scales, pad
    return ratios.count(4) * (pad576(64 * row) + pad576(64 * 132)) + ratios.count(128) * pad576(2 * row)


def request(path: Path, gpu: str = "b200", tp: int = 8, **kw) -> FitRequest:
    m = load_model(str(path))
    return FitRequest(model=m, weights=weight_inventory(m), weight_format=weight_format(m, None),
                      gpu=load_gpu(gpu), tp=tp, context_tokens=L, **kw)


# held blocks of a 131,072-token sequence, worst case over every length up to it: the
# compressed group ceil(131,072 / 256) = 512; each window group's 128 tokens in 64-token blocks
# span at most cdiv(128 + 63, 64) = 3; the r = 4 compressor states (8 tokens, 4-token blocks)
# cdiv(8 + 3, 4) = 3; the r = 128 states (128 tokens, 8-token blocks) cdiv(128 + 7, 8) = 17
HELD = 512 + 2 * 3 + 3 + 17
# the reservation at 131,072 tokens with 2 x 16,384 in-flight tokens: 512 + 2 window groups x
# (cdiv(127 + 32,768, 64) + 1) + (cdiv(7 + 32,768, 4) + 1) + (cdiv(127 + 32,768, 8) + 1)
RESERVED = 512 + 2 * (cdiv(127 + 32_768, 64) + 1) + (cdiv(7 + 32_768, 4) + 1) \
    + (cdiv(127 + 32_768, 8) + 1)


def test_flash_on_8_b200_pool_by_hand():
    c = json.loads(FLASH.read_text())
    r = plan_fit(request(FLASH))
    b = r.budget
    assert load_gpu("b200").memory_driver_total_bytes == B200_TOTAL
    usable = B200_TOTAL * 92 // 100
    assert b.usable_bytes == usable == 176_181_705_965
    assert b.weights_bytes == weights_by_hand(c, 8) + buffers_by_hand(c) \
        == 20_644_891_260 + 16_384 * 512 * 4
    # sampler 15.45 x 1,024 x 129,280 = 2,045,313,024 > forward; FlashMLA's workspace
    # 4 x 49,280 x 512 x 2 + 16,384 x 640 x 4 + 16,384 x 4 = 243,859,456 > the indexer's
    assert b.activation_bytes == activation_by_hand(c, 8) == 2_045_313_024 + 243_859_456
    assert b.runtime_overhead_bytes == overhead_by_hand(c) == 2_254_857_830 + 1_433_403_392
    pool = usable - b.weights_bytes - b.activation_bytes - b.runtime_overhead_bytes
    assert b.kv_pool_bytes == pool == 149_525_826_571
    block = block_bytes_by_hand(c)
    assert block == 21 * (37_440 + 8_640) + 20 * 1_728 == 1_002_240
    blocks = pool // block
    assert r.stages[0].num_blocks == blocks == 149_191
    assert r.block_size_tokens == 256
    assert HELD == 538 and RESERVED == 512 + 2 * 515 + 8_195 + 4_113 == 13_850
    assert r.per_sequence_bytes == HELD * block == 539_205_120
    # every block but the null block, 538 each, would hold (149,190) // 538 = 277; but vLLM
    # admits a request only while its 13,850-block reservation is free, so the last admitted
    # needs 13,850: (149,190 - 13,850) // 538 + 1 = 252 run together
    assert (blocks - 1) // HELD == 277
    assert r.max_concurrency == (blocks - 1 - RESERVED) // HELD + 1 == 252
    assert r.engine_max_concurrency == blocks / RESERVED  # vLLM's 10.77x
    assert r.kv_pool_tokens == int(blocks / RESERVED * L)  # "GPU KV cache size: N tokens"
    assert r.fits and r.verdict == "fits: 252 concurrent 131,072-token sequences"
    assert any("with every prompt this long 252 run together (the blocks alone would hold 277)"
               in n for n in r.notes)
    assert concurrency_at(r, L) == 252  # curve / sweep / plan read the same pool
    # at 4,096 tokens: 42 held (16 + 2 x 3 + 3 + 17); reserved 16 + 2 x (cdiv(4,096, 64) + 1)
    # + (cdiv(4,096, 4) + 1) + (cdiv(4,096, 8) + 1) = 16 + 130 + 1,025 + 513 = 1,684
    assert concurrency_at(r, 4096) == (blocks - 1 - 1_684) // 42 + 1 == 3_513


def test_pro_on_8_b200_pool_by_hand():
    c = json.loads(PRO.read_text())
    r = plan_fit(request(PRO))
    b = r.budget
    usable = B200_TOTAL * 92 // 100
    assert b.weights_bytes == weights_by_hand(c, 8) + buffers_by_hand(c)
    assert b.activation_bytes == activation_by_hand(c, 8)
    assert b.runtime_overhead_bytes == overhead_by_hand(c)
    pool = usable - b.weights_bytes - b.activation_bytes - b.runtime_overhead_bytes
    assert b.kv_pool_bytes == pool
    block = block_bytes_by_hand(c)
    assert block == 30 * (37_440 + 8_640) + 31 * 1_728 == 1_435_968
    blocks = pool // block
    assert r.stages[0].num_blocks == blocks
    # 61 layers, no window-only layer: 2 window groups (of 31 and 30) as for Flash, so the same
    # 538 blocks held and 13,850 reserved per 131,072-token sequence
    assert r.per_sequence_bytes == HELD * block
    assert r.max_concurrency == min((blocks - 1) // HELD, (blocks - 1 - RESERVED) // HELD + 1)
    assert r.engine_max_concurrency == blocks / RESERVED
    assert r.fits and r.max_concurrency >= 1


def test_packed_groups_of_vllm_034():
    """Flash's buckets: 43 windows (37,440 B), 21 + 21 ratio-4 states (32,832 and 8,640 B),
    20 ratio-128 states (32,832 B) - balanced - and the compressed caches 21 x 37,440 + 21 x
    8,640 + 20 x 1,728 (unbalanced). Repeats: the d >= 21 (the ratio-4 states, the balanced
    bucket mixing page sizes) padding 43, 21, 20 least: d = 22 (1 + 1 + 2), d = 21 pads 20 + 0
    + 1. So 2 window groups (22 and 21 layers), one of each other bucket."""
    r = plan_fit(request(FLASH))
    g = r.stages[0].dsv4.groups
    shape = sorted((x.kind, x.block_tokens, x.window_tokens or 0, x.layers, x.page_bytes) for x in g)
    assert shape == sorted([
        ("window", 64, 128, 22, 22 * 37_440), ("window", 64, 128, 21, 21 * 37_440),
        ("compressed", 256, 0, 62, 1_002_240),
        ("state", 4, 8, 42, 21 * (32_832 + 8_640)), ("state", 8, 128, 20, 20 * 32_832)])
    assert pad576(4 * 2 * 2 * 512 * 4) == 32_832 and pad576(4 * 2 * 2 * 128 * 4) == 8_640


def test_shared_prefix_and_start_up_check():
    r = plan_fit(request(FLASH, shared_prefix_tokens=65_536))
    blocks = r.stages[0].num_blocks
    shared = 65_536 // 256  # whole compressed blocks, held once
    # k run together while 256 + (k - 1) x 282 + (13,850 - 256) <= 149,190:
    # (149,190 - 13,850) // 282 + 1 = 480 (the blocks alone: (149,190 - 256) // 282 = 528)
    assert (blocks - 1 - shared) // (HELD - shared) == 528
    assert r.max_concurrency == (blocks - 1 - RESERVED) // (HELD - shared) + 1 == 480
    # a 5 GiB pool: 5,356 blocks, fewer than one 131,072-token request's 13,850 + the null block
    small = plan_fit(request(FLASH, kv_cache_memory_bytes=5 * GiB, search=False))
    assert small.stages[0].num_blocks == 5 * GiB // 1_002_240 == 5_356
    assert not small.fits and small.max_concurrency == 0
    assert "vLLM refuses to start" in small.verdict and "13,850 blocks" in small.verdict


def test_launch_lines():
    r = plan_fit(request(FLASH))
    lines = launch_commands(r)
    vllm = lines["vllm"]
    assert problems("vllm", vllm) == []
    words = shlex.split(vllm, comments=True)
    # fp8 (vLLM rewrites it to fp8_ds_mla), the 256-token block its kernels take, TP 8; the
    # tokenizer mode (deepseek_v4) and the quantisation (deepseek_v4_fp8) are vLLM's own picks
    for flag, value in (("--kv-cache-dtype", "fp8"), ("--block-size", "256"),
                        ("--tensor-parallel-size", "8"), ("--max-model-len", str(L))):
        assert words[words.index(flag) + 1] == value
    assert "--quantization" not in words and "--tokenizer-mode" not in words
    for engine in ("sglang", "trtllm", "llama.cpp"):
        assert lines[engine].startswith("# DeepSeek-V4 is not planned on"), lines[engine]


def test_decode_step_reads_by_hand():
    """Per sequence per step at 131,072 tokens on one GPU (nothing split by TP): windows
    43 x 128 x 584, the ratio-4 layers' 512 selected entries 21 x 512 x 584 and indexer keys
    21 x 32,768 x 132, the ratio-128 layers' entries 20 x 1,024 x 584, the compressors' rows
    21 x (3 x 8,192 + 3 x 2,048) + 20 x 2 x 4,096."""
    sm = step_model(plan_fit(request(FLASH)))
    hand = (43 * 128 * 584 + 21 * 512 * 584 + 21 * 32_768 * 132 + 20 * 1_024 * 584
            + 21 * (3 * 8_192 + 3 * 2_048) + 20 * 2 * 4_096)
    assert hand == 113_095_680
    assert kv_read_bytes(sm, L) == pytest.approx(hand, rel=1e-12)
    assert sm.indexer_layers == 21  # the ratio-4 layers run their own indexer


@pytest.mark.parametrize("kv", ["bf16", "nvfp4", "int8_per_token"])
def test_other_kv_formats_refused(kv):
    with pytest.raises(InputError, match="vLLM forces DeepSeek-V4's KV cache to fp8_ds_mla"):
        plan_fit(request(FLASH, kv_dtype=kv))


@pytest.mark.parametrize("kv", ["auto", "fp8", "fp8_ds_mla", "fp8_e5m2"])
def test_forced_format_accepted(kv):
    assert plan_fit(request(FLASH, kv_dtype=kv)).kv_format == "fp8_ds_mla"


def test_cli_exit_codes(capsys):
    args = ["fit", str(FLASH), "--gpu", "b200", "--tp", "8", "-c", "128k"]
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "149,191 blocks of 256 tokens, 1,002,240 B each" in out
    assert "538 blocks x 1,002,240 B = 539,205,120 B" in out
    assert "252 whole sequences" in out and "10.77x" in out
    assert run([*args, "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["kv_pool_blocks"], rec["max_concurrency"], rec["block_size_tokens"]) == (149_191, 252, 256)
    # a plan that does not fit exits 1 under --require-fit
    assert run([*args, "--kv-cache-memory", "5GiB", "--require-fit"]) == 1
    capsys.readouterr()
    line = fail(capsys, *args, "--kv-dtype", "bf16")
    assert "--kv-dtype" in line and "vLLM forces" in line
    assert "256-token blocks only" in fail(capsys, *args, "--block-size", "64")
    assert "not planned on SGLang" in fail(capsys, *args, "--engine", "sglang")
    assert "not planned on TensorRT-LLM" in fail(capsys, *args, "--engine", "trtllm")
    assert "not planned on llama.cpp" in fail(capsys, *args, "--engine", "llama.cpp")
    assert "vllm@0.33's are not read" in fail(capsys, *args, "--engine", "vllm@0.33")
    assert "SM 9.x and 10.x only" in fail(capsys, "fit", str(FLASH), "--gpu", "a100", "--tp", "8")
    assert run([*args, "--engine", "vllm@0.34"]) == 0
    capsys.readouterr()
