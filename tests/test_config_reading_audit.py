"""Config reading fixes from the issue-13 audit: an unknown model_type with MLA and indexer keys
is read as sparse MLA (not MLA alone), ``index_topk_pattern`` as a list, error lines that name
only keys no rule reads, the standard-decoder reading described as it is, and ``RULE_KEYS``
kept complete against every fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import fail

from kvplan.cli.main import run
from kvplan.loaders.hf_config import parse_config
from kvplan.loaders.kv_keys import RULE_KEYS, is_kv_relevant

FIX = Path(__file__).parent / "fixtures" / "configs"
V32 = FIX / "deepseek-ai__DeepSeek-V3.2.json"
# DeepSeek-V3.2: 61 layers; MLA latent kv_lora_rank 512 + qk_rope 64 = 576 values x 2 B = 1,152 B;
# indexer key index_head_dim 128 x 1 B (fp8) + one fp32 scale per 128 values (4 B) = 132 B
MLA = 61 * (512 + 64) * 2  # 70,272
INDEXER = 61 * (128 + 4)  # 8,052


def _write(tmp_path: Path, name: str, doc: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def _size(capsys, path: str, *flags: str) -> dict:
    assert run(["size", path, "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_unknown_type_with_mla_and_indexer_keys_is_sparse_mla(tmp_path, capsys):
    doc = json.loads(V32.read_text()) | {"model_type": "acme_unknown"}
    d = _size(capsys, _write(tmp_path, "v32.json", doc))
    assert d["bytes_per_token"] == MLA + INDEXER == 78_324
    assert any("sparse multi-head latent attention" in a for a in d["assumptions"])


def test_unknown_type_with_mla_keys_only_is_mla(tmp_path, capsys):
    doc = {k: v for k, v in json.loads(V32.read_text()).items() if not k.startswith("index")}
    d = _size(capsys, _write(tmp_path, "mla.json", doc | {"model_type": "acme_unknown"}))
    assert d["bytes_per_token"] == MLA


@pytest.mark.parametrize("skips,indexers", [(0, 61), (30, 31)])
def test_index_topk_pattern_as_a_list(tmp_path, capsys, skips, indexers):
    # vLLM deepseek_v2.py indexes the pattern (``pattern[layer_id] == "S"``): a list works too
    doc = json.loads(V32.read_text()) | {"index_topk_pattern": ["S"] * skips + ["F"] * (61 - skips)}
    d = _size(capsys, _write(tmp_path, "v32p.json", doc))
    assert d["bytes_per_token"] == MLA + indexers * 132  # 30 skipped: 70,272 + 4,092 = 74,364


def test_a_bad_list_names_only_keys_no_rule_reads(tmp_path, capsys):
    # Gemma-4-26B with one layer_types entry dropped: the error stops before the global-layer
    # keys are read; they are kvplan's own keys and are not listed as uninterpreted, while a
    # key of a name no rule knows is
    doc = json.loads((FIX / "google__gemma-4-26B-A4B.json").read_text())
    doc["text_config"]["layer_types"] = doc["text_config"]["layer_types"][:-1]
    msg = fail(capsys, "size", _write(tmp_path, "g4.json", doc))
    assert "text_config.layer_types: has 29 entries for 30 layers" in msg
    assert "global_head_dim" not in msg and "no kvplan rule interprets" not in msg
    doc["text_config"]["global_kv_width_x"] = 3
    msg = fail(capsys, "size", _write(tmp_path, "g4x.json", doc))
    assert "global_kv_width_x" in msg and "global_head_dim" not in msg


def test_standard_reading_is_described_as_it_is(tmp_path, capsys):
    # gpt-oss-20b under an unknown type: the standard reading follows layer_types and the window
    doc = json.loads((FIX / "openai__gpt-oss-20b.json").read_text()) | {"model_type": "acme_oss"}
    path = _write(tmp_path, "oss.json", doc)
    msg = fail(capsys, "size", path)
    assert "unknown model_type 'acme_oss'" in msg and "windowed" in msg
    d = _size(capsys, path, "--assume-standard-attention")
    assert d["assumed_standard_attention"] is True
    assert any("layer_types / sliding_window" in a for a in d["assumptions"])
    assert not any("every layer full attention" in a for a in d["assumptions"])


def test_rule_keys_hold_every_key_a_fixture_parse_reads():
    missing = set()
    for p in sorted(FIX.glob("*.json")):
        try:
            m = parse_config(json.loads(p.read_text()), name=p.stem, source=str(p))
        except Exception:  # noqa: BLE001 - partial fixtures of other tests
            continue
        missing |= {k.rsplit(".", 1)[-1] for k in m.keys_read
                    if is_kv_relevant(k.rsplit(".", 1)[-1])} - RULE_KEYS
    assert not missing, sorted(missing)
