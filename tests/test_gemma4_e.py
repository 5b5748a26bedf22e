"""Gemma-4's E models (google/gemma-4-E2B-it, google/gemma-4-E4B-it; fixtures
tests/fixtures/configs/google__gemma-4-E2B-it.json, the Hub file as vendored, and
google__gemma-4-E4B-it.json, a transformers 5.12.1 re-save: see SOURCES.md): KV bytes
(kvplan size) and the parameter inventory (kvplan fit, kvplan/loaders/params_gemma4.py),
every number derived by hand from the configs as vLLM 0.34 builds the model
(vllm/model_executor/models/gemma4.py, gemma4_mm.py).

Independent checks: transformers 5.24's Gemma4ForConditionalGeneration on the meta device
counts 5,104,297,504 (E2B) and 7,941,100,832 (E4B) parameters (recorded in
tests/fixtures/transformers_param_counts.json); kvplan's totals are those plus the loaded
buffers transformers keeps apart (4 bounds on each of the 232 clipped linears, one layer
scalar per layer). Google's published sizes, "5.1B" and "8B with embeddings", are the
checkpoints, which also hold the KV-sharing layers' k / v / k_norm (vLLM drops them): E2B
5,104,298,467 + 18,880,512 = 5,123,178,979 parameters, 10,246,357,958 B in bf16, against the
10,246,621,918 B model.safetensors of a download listing quoted in a public repository (the
263,960 B more are the safetensors header).
"""

from __future__ import annotations

import json

import pytest
from family_helpers import BF16, FP8, covers, kinds, load, raw, row

import kvplan
from kvplan.core.errors import ConfigError, KvplanError
from kvplan.core.weights import weight_bytes
from kvplan.planning.footprint import kv_footprint

E2B, E4B = "google__gemma-4-E2B-it.json", "google__gemma-4-E4B-it.json"
V = 262_144  # vocab_size = vocab_size_per_layer_input
P = 256  # hidden_size_per_layer_input


def sliding_peak_tokens(window: int, block: int) -> int:
    """Worst case a vLLM sliding layer holds: the blocks spanning the last W - 1 tokens,
    cdiv(W - 1 + B - 1, B) of them."""
    return -(-(window - 1 + block - 1) // block) * block


# --------------------------------------------------------------------------------------------
# KV cache (kvplan size)
# --------------------------------------------------------------------------------------------


@covers(E2B)
def test_e2b_kv_sharing_and_two_geometries():
    m = load(E2B)
    # layer_types: 4 sliding then 1 full, 7 times (35 layers); num_kv_shared_layers 20: layers
    # 15..34 read layer 13's (sliding) or 14's (full) K and V and hold nothing
    full_at = {4, 9, 14, 19, 24, 29, 34}
    assert kinds(m) == [(("full_attention",) if i in full_at else ("sliding_window",))
                        if i < 15 else () for i in range(35)]
    assert m.kv_shared_layers == 20
    fp = kv_footprint(m, [4096])
    # layers 0..14: 12 sliding (1 KV head x head_dim 256), 3 full (1 KV head x global_head_dim
    # 512: attention_k_eq_v false, so num_key_value_heads, not num_global_key_value_heads)
    s, f = row(fp, "sliding_window"), row(fp, "full_attention")
    assert (s.count, s.kv_heads, s.head_dim_k, s.window_tokens) == (12, 1, 256, 512)
    assert (f.count, f.kv_heads, f.head_dim_k, f.window_tokens) == (3, 1, 512, None)
    assert s.bytes_per_token == 2 * 1 * 256 * BF16 == 1_024  # K + V, one layer
    assert f.bytes_per_token == 2 * 1 * 512 * BF16 == 2_048
    assert fp.bytes_per_token == 3 * 2_048 == 6_144  # growing: the full layers
    # vLLM unifies pages: a sliding page (16 x 1,024 B) is half a full one (16 x 2,048 B), so
    # the sliding layers take 32-token blocks; 4,096 tokens: 3 x 4,096 x 2,048 + 12 sliding
    # layers x cdiv(511 + 31, 32) x 32 = 544 tokens x 1,024
    assert s.block_multiple == 2
    assert fp.sequences[0].per_gpu_bytes == 3 * 4096 * 2048 + 12 * sliding_peak_tokens(512, 32) * 1024
    assert fp.sequences[0].per_gpu_bytes == 31_850_496
    # TP 8: 8 query heads split 1 per rank; the 1 KV head cannot split, and vLLM's
    # Gemma4Attention (tp % kv_heads == 0) gives every rank max(1, 1 // 8) = 1 head: per GPU
    # the same bytes as TP 1, the 8 GPUs together 8 copies
    tp8 = kv_footprint(m, [4096], tp=8)
    assert row(tp8, "sliding_window").bytes_per_token_per_rank == 2 * 1 * 256 * BF16
    assert row(tp8, "full_attention").bytes_per_token_per_rank == 2 * 1 * 512 * BF16
    assert tp8.sequences[0].per_gpu_bytes == 31_850_496
    assert tp8.sequences[0].total_bytes == 8 * 31_850_496
    # fp8: one byte per element, every page halves (the block multiple stays 2)
    for tp in (1, 8):
        f8 = kv_footprint(m, [4096], kv_dtype="fp8", tp=tp)
        assert f8.bytes_per_token == 3 * 2 * 1 * 512 * FP8 == 3_072
        assert f8.sequences[0].per_gpu_bytes == (3 * 4096 * 1024
                                                 + 12 * sliding_peak_tokens(512, 32) * 512)
        assert f8.sequences[0].per_gpu_bytes == 15_925_248


@covers(E4B)
def test_e4b_kv_sharing_and_two_geometries():
    m = load(E4B)
    # layer_types: 5 sliding then 1 full, 7 times (42 layers); num_kv_shared_layers 18: layers
    # 24..41 share layer 22's (sliding) or 23's (full) K and V
    assert kinds(m) == [(("full_attention",) if (i + 1) % 6 == 0 else ("sliding_window",))
                        if i < 24 else () for i in range(42)]
    assert m.kv_shared_layers == 18
    fp = kv_footprint(m, [4096])
    s, f = row(fp, "sliding_window"), row(fp, "full_attention")
    # layers 0..23: 20 sliding (2 KV heads x 256), 4 full (2 KV heads x 512)
    assert (s.count, s.kv_heads, s.head_dim_k, s.window_tokens) == (20, 2, 256, 512)
    assert (f.count, f.kv_heads, f.head_dim_k) == (4, 2, 512)
    assert s.bytes_per_token == 2 * 2 * 256 * BF16 == 2_048
    assert f.bytes_per_token == 2 * 2 * 512 * BF16 == 4_096
    assert fp.bytes_per_token == 4 * 4_096 == 16_384
    assert s.block_multiple == 2  # sliding pages 16 x 2,048 B, full 16 x 4,096 B
    assert fp.sequences[0].per_gpu_bytes == 4 * 4096 * 4096 + 20 * sliding_peak_tokens(512, 32) * 2048
    assert fp.sequences[0].per_gpu_bytes == 89_391_104
    # TP 8: 2 KV heads < 8, 8 % 2 == 0: max(1, 2 // 8) = 1 head per rank (each head on 4 GPUs)
    tp8 = kv_footprint(m, [4096], tp=8)
    assert row(tp8, "sliding_window").bytes_per_token_per_rank == 2 * 1 * 256 * BF16
    assert row(tp8, "full_attention").bytes_per_token_per_rank == 2 * 1 * 512 * BF16
    assert tp8.sequences[0].per_gpu_bytes == (4 * 4096 * 2048
                                              + 20 * sliding_peak_tokens(512, 32) * 1024)
    assert tp8.sequences[0].per_gpu_bytes == 44_695_552
    f8 = kv_footprint(m, [4096], kv_dtype="fp8", tp=8)
    assert f8.bytes_per_token == 4 * 2 * 2 * 512 * FP8 == 8_192  # whole model, unsharded
    assert f8.sequences[0].per_gpu_bytes == 44_695_552 // 2 == 22_347_776
    assert kv_footprint(m, [4096], kv_dtype="fp8").sequences[0].per_gpu_bytes == 44_695_552


@pytest.mark.parametrize("name, tp", [(E2B, 16), (E4B, 16), (E4B, 3)])
def test_tp_must_divide_the_eight_query_heads(name, tp):
    with pytest.raises(KvplanError, match="attention heads \\(8\\) must divide"):
        kv_footprint(load(name), [4096], tp=tp)


# --------------------------------------------------------------------------------------------
# Parameters (kvplan fit)
# --------------------------------------------------------------------------------------------


def attention(h: int, heads: int, kv: int, d: int, own_kv: bool) -> int:
    """q_proj, o_proj, q_norm; on a layer that computes K and V also k_proj, v_proj, k_norm."""
    return heads * d * h + h * heads * d + d + ((2 * kv * d * h + d) if own_kv else 0)


def per_layer(h: int) -> int:
    """Four norms, per_layer_input_gate [P, h], per_layer_projection [h, P],
    post_per_layer_input_norm [h], the loaded layer_scalar."""
    return 4 * h + P * h + h * P + h + 1


def text(h: int, layers: int, first_shared: int, heads: int, kv: int, mlp: int, double: bool,
         full: set[int]) -> int:
    """embed_tokens (tied LM head), the per-layer embedding [V, L x P], per_layer_model_projection
    [L x P, h], its norm [P], the final norm [h], and the layers."""
    total = V * h + V * layers * P + layers * P * h + P + h
    for i in range(layers):
        d = 512 if i in full else 256  # global_head_dim / head_dim
        shared = i >= first_shared
        width = mlp * (2 if double and shared else 1)
        total += attention(h, heads, kv, d, not shared) + 3 * width * h + per_layer(h)
    return total


# the towers (transformers 5.24 modeling_gemma4.py), the same in E2B and E4B
# vision: width 768, 16 layers, 12 heads x 64 (12 KV heads), MLP 3072, patch 16, 2 x 10,240
# position rows, no standardize; 7 clipped linears a layer with 4 loaded bounds each
VW = 768
VISION = (VW * 3 * 16 * 16 + 2 * 10_240 * VW
          + 16 * (4 * VW * VW + 2 * 64 + 3 * 3072 * VW + 4 * VW + 7 * 4))
# audio: d 1024, 8 heads (128 wide), 12 layers, kernel 5, channels 1 -> 128 -> 32 (3 x 3
# convs), input_proj [1024, (128 // 4) x 32], output_proj [1536, 1024] + bias; per layer
# 24 d^2 (feed-forwards 2 x 8 d^2, q / k / v / post / relative_k 5 d^2, light conv 3 d^2),
# 9 norms, per_dim_scale 128, the depthwise conv d x 5, 10 clipped linears x 4 bounds
AD = 1024
AUDIO = (128 * 9 + 32 * 128 * 9 + 128 + 32 + AD * (32 * 32)
         + 12 * (24 * AD * AD + 9 * AD + 128 + AD * 5 + 10 * 4) + 1536 * AD + 1536)


def towers(h: int) -> int:
    """Both towers and their projections to the text width (embed_vision, embed_audio)."""
    return VISION + VW * h + AUDIO + 1536 * h


def inventory(name: str, cfg: dict | None = None):
    return kvplan.weight_inventory(load(name, cfg))


def test_e2b_parameters_by_hand():
    # h 1536, 35 layers, 15 compute K / V, 8 heads, 1 KV head, MLP 6144 doubled (12,288) on
    # the 20 sharing layers, full layers every 5th
    full = {4, 9, 14, 19, 24, 29, 34}
    t = text(1536, 35, 15, 8, 1, 6144, True, full)
    assert t == (V * 1536 + V * 8960 + 8960 * 1536 + 256 + 1536
                 + 12 * (7_078_400 + 28_311_552 + 794_113)  # own-KV sliding layers
                 + 3 * (14_156_800 + 28_311_552 + 794_113)  # own-KV full layers
                 + 16 * (6_291_712 + 56_623_104 + 794_113)  # sharing sliding layers
                 + 4 * (12_583_424 + 56_623_104 + 794_113))  # sharing full layers
    w = inventory(E2B)
    assert w.params_total == t + towers(1536) == 5_104_298_467
    # transformers 5.24 counts 5,104,297,504: + 232 clipped linears x 4 bounds + 35 scalars
    assert w.params_total == 5_104_297_504 + 232 * 4 + 35
    assert w.params_active == w.params_total and w.num_experts == 0
    assert w.tied_embeddings
    assert any("audio tower (Conformer)" in n for n in w.notes)


def test_e4b_parameters_by_hand():
    # h 2560, 42 layers, 24 compute K / V, 8 heads, 2 KV heads, MLP 10,240 everywhere
    # (use_double_wide_mlp false), full layers every 6th
    full = {5, 11, 17, 23, 29, 35, 41}
    t = text(2560, 42, 24, 8, 2, 10_240, False, full)
    w = inventory(E4B)
    assert w.params_total == t + towers(2560) == 7_941_101_802
    assert w.params_total == 7_941_100_832 + 232 * 4 + 42


def test_double_wide_mlp_only_on_the_sharing_layers():
    # E4B with use_double_wide_mlp: the 18 sharing layers' MLPs double (3 x 10,240 x 2560 more
    # each); with no sharing layers nothing doubles (vLLM: layer_idx >= first_kv_shared > 0)
    cfg = raw(E4B)
    cfg["text_config"] = {**cfg["text_config"], "use_double_wide_mlp": True}
    assert inventory(E4B, cfg).params_total == 7_941_101_802 + 18 * 3 * 10_240 * 2560
    cfg["text_config"] = {**cfg["text_config"], "num_kv_shared_layers": 0}
    # no sharing: every layer computes K and V (18 x 2 KV heads x (2 x d x 2560) + d more)
    extra = 15 * (2 * 2 * 256 * 2560 + 256) + 3 * (2 * 2 * 512 * 2560 + 512)
    assert inventory(E4B, cfg).params_total == 7_941_101_802 + extra


def test_text_only_config_has_no_towers():
    """A bare gemma4_text config (vLLM's Gemma4ForCausalLM): the text model only."""
    cfg = raw(E2B)["text_config"]
    w = inventory(E2B, cfg)
    assert w.params_total == text(1536, 35, 15, 8, 1, 6144, True, {4, 9, 14, 19, 24, 29, 34})
    assert w.params_total == 5_104_298_467 - towers(1536)


def test_bytes_tp1_tp2_tp8_by_hand():
    """bf16 throughout. TP 2 (E2B): the vocabularies, per_layer_model_projection, q / o and the
    MLPs halve; the single KV head's k / v stay whole on each rank, as do the norms, the
    per-layer gates and projections (ReplicatedLinear), the scalars and both towers. TP 8
    (E4B): the same split by 8, the 2 KV heads' k / v to one head per rank."""
    m = load(E2B)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    assert (fmt.scheme, fmt.base_dtype) == ("dense", "bf16")
    h, full = 1536, {4, 9, 14, 19, 24, 29, 34}
    split = V * h + V * 8960 + 8960 * h
    for i in range(35):
        d = 512 if i in full else 256
        split += 2 * 8 * d * h + 3 * 6144 * (2 if i >= 15 else 1) * h
    whole = w.params_total - split
    assert weight_bytes(w, fmt, tp=1).per_gpu_bytes == 2 * w.params_total == 10_208_596_934
    assert weight_bytes(w, fmt, tp=2).per_gpu_bytes == 2 * (split // 2 + whole) == 5_621_994_438

    m = load(E4B)
    w = kvplan.weight_inventory(m)
    h, full = 2560, {5, 11, 17, 23, 29, 35, 41}
    split, kv = V * h + V * 10_752 + 10_752 * h, 0
    for i in range(42):
        d = 512 if i in full else 256
        split += 2 * 8 * d * h + 3 * 10_240 * h
        kv += 2 * 2 * d * h if i < 24 else 0
    whole = w.params_total - split - kv
    assert weight_bytes(w, fmt, tp=8).per_gpu_bytes == 2 * (split // 8 + kv // 2 + whole)
    assert weight_bytes(w, fmt, tp=8).per_gpu_bytes == 2_974_298_580


def test_pipeline_stages_each_hold_the_embeddings():
    """vLLM's Gemma4Model builds embed_tokens (the tied head), the per-layer embedding, its
    projection and norm and the final norm on every pipeline stage; the towers sit on the
    first. E2B at PP 2: vLLM's get_pp_indices gives 35 // 2 = 17 layers each, the one left
    over to the first stage (layers 0..17, then 18..34). The placement rule only: vLLM refuses
    this split at load (layers 18..34 read layers 13 / 14's K and V on stage 0), and so does
    kvplan fit (test_vllm_refuses_a_kv_sharing_target_on_another_stage); E4B's pp 2 loads."""
    m = load(E2B)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    h, full = 1536, {4, 9, 14, 19, 24, 29, 34}
    every = V * h + V * 8960 + 8960 * h + 256 + h

    def layer(i: int) -> int:
        d = 512 if i in full else 256
        return (attention(h, 8, 1, d, i < 15) + 3 * 6144 * (2 if i >= 15 else 1) * h
                + per_layer(h))

    first = every + towers(h) + sum(layer(i) for i in range(18))
    second = every + sum(layer(i) for i in range(18, 35))
    assert first + second == w.params_total + every
    assert weight_bytes(w, fmt, pp=2).per_stage_bytes == (2 * first, 2 * second)
    assert (2 * first, 2 * second) == (7_992_159_652, 7_746_892_834)


def test_fit_needs_no_weight_memory(capsys):
    from kvplan.cli.main import run

    assert run(["fit", str(load(E2B).source), "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 5,104,298,467" in out
    # the weights row: 2 B per parameter + vLLM's per_layer_embeddings buffer (gemma4_mm.py),
    # 8,192 tokens (the H100's max_num_batched_tokens) x 35 layers x 256 x 2 B
    assert 8192 * 35 * 256 * 2 == 146_800_640
    assert f"{2 * 5_104_298_467 + 146_800_640:,}" in out
    assert "per-layer-embedding buffer: 8,192 tokens" in out


def _text_cfg(name: str, **changes) -> dict:
    cfg = raw(name)
    cfg["text_config"] = {**cfg["text_config"], **changes}
    return cfg


BAD_WEIGHTS = [
    (_text_cfg(E2B, num_experts=128, top_k_experts=8, moe_intermediate_size=704),
     "text_config.num_experts", "MoE block beside per-layer embeddings"),
    (_text_cfg(E2B, enable_moe_block=True), "text_config.enable_moe_block", "MoE block"),
    ({k: v for k, v in raw(E2B).items() if k != "vision_config"}, "vision_config", "missing"),
    ({**raw(E2B), "audio_config": {**raw(E2B)["audio_config"], "num_attention_heads": 7}},
     "audio_config.num_attention_heads", "does not divide hidden_size = 1024"),
    ({**raw(E2B), "audio_config": {**raw(E2B)["audio_config"],
                                   "subsampling_conv_channels": [128]}},
     "audio_config.subsampling_conv_channels", "expected two channel counts"),
    ({**raw(E4B), "audio_config": {**raw(E4B)["audio_config"], "model_type": "gemma3n_audio"}},
     "audio_config.model_type", "expected gemma4_audio"),
]


@pytest.mark.parametrize("cfg, field, words", BAD_WEIGHTS, ids=[b[1] for b in BAD_WEIGHTS])
def test_weights_refuse_what_is_not_established(cfg, field, words):
    with pytest.raises(ConfigError) as e:
        kvplan.weight_inventory(kvplan.parse_config(cfg, name="g4e", source="g4e.json"))
    assert (e.value.source, e.value.field) == ("g4e.json", field)
    assert words in str(e.value)


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file and key, exit 2 (size and fit)
# --------------------------------------------------------------------------------------------

BAD = [
    (E2B, 35, "35 shared layers leave none of the 35 layers to hold the cache"),
    (E2B, 40, "40 shared layers leave none of the 35 layers to hold the cache"),
    (E4B, 42, "42 shared layers leave none of the 42 layers to hold the cache"),
    # 31 sharing layers leave layers 0..3, all sliding: full layer 4 has none to read
    (E2B, 31, "31 shared layers leave no full layer before layer 4 for layer 4 to share"),
]


@pytest.mark.parametrize("name, shared, says", BAD, ids=[f"{b[0]}:{b[1]}" for b in BAD])
@pytest.mark.parametrize("command", [["size"], ["fit", "--gpu", "h100"]])
def test_bad_sharing_is_one_line_exit_2(tmp_path, capsys, name, shared, says, command):
    from cli_helpers import fail

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_text_cfg(name, num_kv_shared_layers=shared)))
    line = fail(capsys, command[0], str(path), *command[1:])
    assert line == f"kvplan: error: {path}: text_config.num_kv_shared_layers: {says}"


# --------------------------------------------------------------------------------------------
# Pipeline parallelism under vLLM: a KV-sharing layer must sit on its target's stage; the
# untied LM head and the 26B-A4B / 31B embeddings also on every stage (review of 3998db3)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, pp, says", [
    # E2B: 35 layers at pp 2 are 18 + 17 (vLLM get_pp_indices: the remainder to the stages
    # before the last); layer 18 (sliding) reads layer 13, the last sliding layer below 15
    (E2B, 2, "pp=2: stage 1 (layers 18-34) holds KV-sharing layer 18, which reads layer 13's "
             "K and V on stage 0"),
    # E4B: 42 layers at pp 3 are 14 each; layer 28 (sliding: 28 % 6 = 4) reads layer 22
    (E4B, 3, "pp=3: stage 2 (layers 28-41) holds KV-sharing layer 28, which reads layer 22's "
             "K and V on stage 1"),
])
def test_vllm_refuses_a_kv_sharing_target_on_another_stage(capsys, name, pp, says):
    from cli_helpers import fail

    line = fail(capsys, "fit", str(load(name).source), "--gpu", "h100", "--pp", str(pp))
    assert line.startswith(f"kvplan: error: pp: {says}; vLLM's Attention refuses")
    assert "validate_kv_sharing_target" in line


def test_e4b_pp2_keeps_every_sharing_layer_beside_its_target(capsys):
    """E4B at pp 2: stages 0-20 and 21-41; the targets 22 (sliding) and 23 (full) and all
    sharing layers 24-41 on stage 1, so vLLM loads it. Stage 0 holds the towers; both hold
    embed_tokens (tied head), the per-layer embedding, its projection and norm, the final norm."""
    from kvplan.cli.main import run

    m = load(E4B)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    h, full = 2560, {5, 11, 17, 23, 29, 35, 41}
    every = V * h + V * 42 * P + 42 * P * h + P + h

    def layer(i: int) -> int:
        d = 512 if i in full else 256
        return attention(h, 8, 2, d, i < 24) + 3 * 10_240 * h + per_layer(h)

    first = every + towers(h) + sum(layer(i) for i in range(21))
    second = every + sum(layer(i) for i in range(21, 42))
    assert first + second == w.params_total + every
    assert weight_bytes(w, fmt, pp=2).per_stage_bytes == (2 * first, 2 * second)
    assert run(["fit", str(m.source), "--gpu", "h100", "--pp", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # the busiest stage (0, with the towers) + the per-layer-embedding buffer on every rank:
    # 8,192 tokens x 42 layers x 256 x 2 B
    assert d["busiest_stage"] == 0 and first > second
    assert d["memory"]["weights_bytes"] == 2 * first + 8192 * 42 * 256 * 2


def test_untied_lm_head_is_read_on_the_last_stage_and_held_on_every_one():
    """tie_word_embeddings false (no released E model): Gemma4ForCausalLM's own lm_head
    [vocab, h], built on every rank; a head tensor (read by every decode step), not a lookup."""
    cfg = _text_cfg(E2B, tie_word_embeddings=False)
    m = load(E2B, cfg)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    assert w.params_total == 5_104_298_467 + V * 1536 and not w.tied_embeddings
    (head,) = [t for t in w.tensors if t.name == "lm_head"]
    assert (head.place, head.every_stage, head.rows, head.cols) == ("head", True, V, 1536)
    tied = kvplan.weight_inventory(load(E2B))
    for pp in (1, 2):
        a = weight_bytes(w, fmt, pp=pp).per_stage_bytes
        b = weight_bytes(tied, fmt, pp=pp).per_stage_bytes
        assert [x - y for x, y in zip(a, b, strict=True)] == [2 * V * 1536] * pp


def test_gemma4_26b_embedding_and_norm_on_every_vllm_stage():
    """26B-A4B (no E features: hf_params' rules) is the same Gemma4Model: vLLM builds the tied
    embed_tokens [262,144, 2816] and the final norm [2816] on every stage. At pp 4 against the
    first / last rule (SGLang gemma4_causal.py: embed on the first rank, lm_head on the last):
    stage 0 holds the norm more, stages 1 and 2 the embedding and the norm, stage 3 nothing."""
    name = "google__gemma-4-26B-A4B.json"
    m = load(name)
    w, fmt = kvplan.weight_inventory(m), kvplan.weight_format(m, None)
    h = 2816
    vllm = weight_bytes(w, fmt, pp=4).per_stage_bytes
    first_last = weight_bytes(w, fmt, pp=4, every_stage=False).per_stage_bytes
    diff = [a - b for a, b in zip(vllm, first_last, strict=True)]
    assert diff == [2 * h, 2 * (V * h + h), 2 * (V * h + h), 0]
    assert 2 * (V * h + h) == 1_476_400_640
    assert weight_bytes(w, fmt, pp=1).per_stage_bytes == \
        weight_bytes(w, fmt, pp=1, every_stage=False).per_stage_bytes
