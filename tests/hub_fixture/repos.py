"""The repos the test Hub serves: real configs from tests/fixtures/configs and safetensors
headers whose tensor names and shapes are written out by hand from the models' published
checkpoints (Meta-Llama-3-8B: 4 bf16 shards)."""

from __future__ import annotations

import json
from pathlib import Path

from .server import HubState, Repo, commit_of, safetensors_header

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
GRANTED_TOKEN = "hf_kvplanTestSecretToken123"


def _config(name: str, **changes) -> bytes:
    data = json.loads((CONFIGS / name).read_text())
    data.update(changes)
    return json.dumps(data, indent=2).encode()


def llama3_8b_shards() -> dict[str, dict[str, tuple[str, list[int]]]]:
    """Meta-Llama-3-8B's tensors (hidden 4096, 32 layers, 8 KV heads x 128, MLP 14336,
    vocab 128256, untied) over four shards."""
    shards: dict[str, dict[str, tuple[str, list[int]]]] = {}
    for s in range(4):
        name = f"model-0000{s + 1}-of-00004.safetensors"
        t: dict[str, tuple[str, list[int]]] = {}
        if s == 0:
            t["model.embed_tokens.weight"] = ("BF16", [128256, 4096])
        for i in range(8 * s, 8 * s + 8):
            p = f"model.layers.{i}."
            t[p + "self_attn.q_proj.weight"] = ("BF16", [4096, 4096])
            t[p + "self_attn.k_proj.weight"] = ("BF16", [1024, 4096])
            t[p + "self_attn.v_proj.weight"] = ("BF16", [1024, 4096])
            t[p + "self_attn.o_proj.weight"] = ("BF16", [4096, 4096])
            t[p + "mlp.gate_proj.weight"] = ("BF16", [14336, 4096])
            t[p + "mlp.up_proj.weight"] = ("BF16", [14336, 4096])
            t[p + "mlp.down_proj.weight"] = ("BF16", [4096, 14336])
            t[p + "input_layernorm.weight"] = ("BF16", [4096])
            t[p + "post_attention_layernorm.weight"] = ("BF16", [4096])
        if s == 3:
            t["model.norm.weight"] = ("BF16", [4096])
            t["lm_head.weight"] = ("BF16", [128256, 4096])
        shards[name] = t
    return shards


def build() -> HubState:
    state = HubState()
    llama = _config("meta-llama__Meta-Llama-3-8B.json")
    files: dict[str, bytes] = {"config.json": llama}
    weight_map = {}
    for shard, tensors in llama3_8b_shards().items():
        files[shard] = safetensors_header(tensors)
        weight_map.update({name: shard for name in tensors})
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": 16060522496}, "weight_map": weight_map}).encode()
    c = commit_of("llama-main")
    state.repos["kvplan-test/llama3-8b"] = Repo({"main": c}, {c: files})

    # Gemma-2-9b with two revisions: main (window 4096) and tag v1 (window 8192)
    c_main, c_v1 = commit_of("gemma-main"), commit_of("gemma-v1")
    state.repos["kvplan-test/gemma2"] = Repo(
        {"main": c_main, "v1": c_v1},
        {c_main: {"config.json": _config("google__gemma-2-9b.json")},
         c_v1: {"config.json": _config("google__gemma-2-9b.json", sliding_window=8192)}})

    c = commit_of("gated")
    state.repos["kvplan-test/gated"] = Repo(
        {"main": c}, {c: {"config.json": _config("mistralai__Mistral-7B-v0.1.json")}},
        gated_token=GRANTED_TOKEN)

    c = commit_of("no-config")
    state.repos["kvplan-test/no-config"] = Repo({"main": c}, {c: {"README.md": b"# empty\n"}})

    c = commit_of("remote-code")
    remote = _config("meta-llama__Meta-Llama-3-8B.json", model_type="my_custom_llm",
                     auto_map={"AutoModelForCausalLM": "modeling_custom.CustomLM"},
                     architectures=["CustomLM"])
    state.repos["kvplan-test/remote-code"] = Repo({"main": c}, {c: {"config.json": remote}})

    c = commit_of("gemma3")
    state.repos["kvplan-test/gemma3-4b"] = Repo(
        {"main": c}, {c: {"config.json": _config("google__gemma-3-4b-it.json")}})
    return state
