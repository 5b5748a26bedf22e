"""Hub ids against a real local HTTP server (tests/hub_fixture/server.py): huggingface_hub is not
mocked; HF_ENDPOINT points at the server and the cache lives in a temporary HF_HOME."""

from __future__ import annotations

import json
import socket

import pytest
from hub_fixture.repos import GRANTED_TOKEN, build
from hub_fixture.server import HubServer, commit_of

from kvplan.cli.main import run


@pytest.fixture
def hub(tmp_path, monkeypatch):
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "KVPLAN_HUB_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path / "kvplan"))
    with HubServer(build()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = run(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def size_json(capsys, *args) -> dict:
    rc, out, err = cli(capsys, "size", *args, "--json", "-c", "4k")
    assert rc == 0, err
    return json.loads(out)


def test_first_fetch_then_cached_offline(hub, capsys, monkeypatch):
    d = size_json(capsys, "kvplan-test/llama3-8b")
    assert d["bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # Llama-3-8B, bf16
    paths = [p for _, p, _ in hub.state.requests]
    assert "/kvplan-test/llama3-8b/resolve/main/config.json" in paths
    before = len(hub.state.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = size_json(capsys, "kvplan-test/llama3-8b")
    assert again["bytes_per_token"] == d["bytes_per_token"]
    assert len(hub.state.requests) == before  # served from huggingface_hub's cache


def test_cached_works_with_the_server_down(hub, capsys, monkeypatch):
    size_json(capsys, "kvplan-test/gemma2")
    hub.httpd.shutdown()
    hub.httpd.server_close()
    d = size_json(capsys, "kvplan-test/gemma2")  # no HF_HUB_OFFLINE needed: cache first
    assert d["model"] == "gemma2"


def test_source_says_hub_and_commit(hub, capsys):
    rc, out, err = cli(capsys, "size", "kvplan-test/gemma2", "-c", "4k")
    assert rc == 0, err
    assert f"Hub kvplan-test/gemma2@main (commit {commit_of('gemma-main')[:12]}, fetched" in out


def test_revision_pinning(hub, capsys):
    # gemma-2: 21 sliding + 21 global layers, 8 KV heads x 256, bf16, 16-token blocks;
    # at 16k the sliding layers hold their window: 4096 (main) or 8192 (tag v1)
    def sliding_bytes(*args):
        rc, out, err = cli(capsys, "size", *args, "-c", "16k", "--json")
        assert rc == 0, err
        d = json.loads(out)
        full = 21 * 16384 * 8 * 256 * 2 * 2
        return d["sequences"][0]["per_gpu_bytes"] - full

    per_token = 21 * 8 * 256 * 2 * 2

    def held(window):  # worst case: cdiv(W - 1 + B - 1, B) whole 16-token blocks
        return -(-(window - 1 + 15) // 16) * 16 * per_token

    assert sliding_bytes("kvplan-test/gemma2") == held(4096) == 257 * 16 * per_token
    assert sliding_bytes("kvplan-test/gemma2@v1") == held(8192)
    assert sliding_bytes("kvplan-test/gemma2", "--revision", "v1") == held(8192)
    assert sliding_bytes(f"kvplan-test/gemma2@{commit_of('gemma-v1')}") == held(8192)


def test_gated_without_token(hub, capsys):
    rc, out, err = cli(capsys, "size", "kvplan-test/gated")
    assert rc == 2 and out == ""
    assert err.startswith("kvplan: error: kvplan-test/gated@main (")
    assert "gated repo: accept its licence" in err and "--token" in err
    assert err.count("\n") == 1


def test_gated_with_token_is_sent_never_printed(hub, capsys, monkeypatch, tmp_path):
    rc, out, err = cli(capsys, "size", "kvplan-test/gated", "--token", GRANTED_TOKEN, "-c", "4k")
    assert rc == 0, err
    assert ("GET", "/kvplan-test/gated/resolve/main/config.json", f"Bearer {GRANTED_TOKEN}") in \
        hub.state.requests
    assert GRANTED_TOKEN not in out + err
    # a wrong token, with a traceback asked for: the token is still never printed
    monkeypatch.setenv("KVPLAN_DEBUG", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_wrongTokenValue987")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    rc, out, err = cli(capsys, "size", "kvplan-test/gated")
    assert rc == 2 and "Traceback" in err
    assert "hf_wrongTokenValue987" not in out + err


def test_env_token_is_sent(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    size_json(capsys, "kvplan-test/gated")
    assert any(a == f"Bearer {GRANTED_TOKEN}" for _, _, a in hub.state.requests)


@pytest.mark.parametrize("model,needle", [
    ("kvplan-test/missing", "repo kvplan-test/missing not found"),
    ("kvplan-test/gemma2@nope", "revision 'nope' not found in kvplan-test/gemma2"),
    ("kvplan-test/no-config", "the repo has no config.json"),
])
def test_not_found(hub, capsys, model, needle):
    rc, out, err = cli(capsys, "size", model)
    assert rc == 2 and out == "" and needle in err and err.count("\n") == 1


def test_offline_with_nothing_cached(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, _, err = cli(capsys, "size", "kvplan-test/llama3-8b")
    assert rc == 2 and "HF_HUB_OFFLINE is set" in err and "not in the cache" in err
    assert hub.state.requests == []


def test_server_down(hub, capsys, monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "1")
    rc, _, err = cli(capsys, "size", "kvplan-test/llama3-8b")
    assert rc == 2 and f"cannot reach the Hub at http://127.0.0.1:{port}" in err
    assert err.count("\n") == 1


def test_slow_server_times_out(hub, capsys, monkeypatch):
    hub.state.delay_s = 3.0
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "0.5")
    rc, _, err = cli(capsys, "size", "kvplan-test/llama3-8b")
    assert rc == 2 and "no answer within the 0.5 s timeout" in err and err.count("\n") == 1


def test_remote_code_config_is_parsed_as_json(hub, capsys):
    rc, out, err = cli(capsys, "size", "kvplan-test/remote-code", "-c", "4k", "--json")
    assert rc == 2 and "unknown model_type 'my_custom_llm'" in err
    rc, out, err = cli(capsys, "size", "kvplan-test/remote-code", "-c", "4k", "--json",
                       "--assume-standard-attention")
    assert rc == 0
    assert "auto_map (remote code): read as JSON only" in err
    d = json.loads(out)
    assert d["assumed_standard_attention"] and "model_type 'my_custom_llm'" in d["assumptions"][0]
    assert d["bytes_per_token"] == 2 * 32 * 8 * 128 * 2


def test_multimodal_repo_plans_the_text_model(hub, capsys):
    d = size_json(capsys, "kvplan-test/gemma3-4b")
    # Gemma-3-4b text model: 34 layers (5 sliding : 1 global), 4 KV heads x 256, bf16
    assert d["layers"][0]["kind"] in ("sliding_window", "full_attention")
    assert sum(r["count"] for r in d["layers"]) == 34


def test_fit_reports_the_checkpoint_from_safetensors_headers(hub, capsys, monkeypatch):
    rc, out, err = cli(capsys, "fit", "kvplan-test/llama3-8b", "--gpu", "h100", "--json")
    assert rc == 0, err
    d = json.loads(out)
    ck = d["checkpoint"]
    # hand count: embed + lm_head 2 x 128256 x 4096; 32 layers x (2 x 4096^2 + 2 x 1024 x 4096
    # + 3 x 14336 x 4096 + 2 x 4096); final norm 4096
    params = 2 * 128256 * 4096 + 32 * (2 * 4096**2 + 2 * 1024 * 4096 + 3 * 14336 * 4096
                                        + 2 * 4096) + 4096
    assert ck == {"params_total": params, "params_by_dtype": {"BF16": params},
                  "bytes_total": 2 * params, "files": 4, "config_params_difference": 0}
    assert d["params_total"] == params == 8_030_261_248
    ranges = [p for m, p, _ in hub.state.requests if p.endswith(".safetensors")]
    assert len(ranges) >= 4  # one header request per shard, never the weights
    # second run offline: the summary comes from kvplan's cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = cli(capsys, "fit", "kvplan-test/llama3-8b", "--gpu", "h100", "--json")
    assert rc == 0, err and json.loads(out)["checkpoint"]["params_total"] == params


def test_builtin_wins_unless_a_revision_is_asked(hub, capsys):
    d = size_json(capsys, "meta-llama/Meta-Llama-3-8B")
    assert d["model"] == "llama-3-8b" and hub.state.requests == []


def test_huggingface_hub_is_imported_only_on_the_hub_path(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom kvplan.cli.main import run\n"
            "run(['size', 'llama-3-70b', '--json'])\n"
            "run(['size', 'tests/fixtures/configs/google__gemma-2-9b.json', '--json'])\n"
            "run(['fit', 'llama-3-8b', '--gpu', 'h100', '--json'])\n"
            "print('HUB' if 'huggingface_hub' in sys.modules else 'NOHUB', file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert done.stderr.strip().endswith("NOHUB"), done.stderr


def test_fit_goes_on_when_the_headers_cannot_be_read(hub, capsys, monkeypatch):
    size_json(capsys, "kvplan-test/llama3-8b")  # config cached
    hub.httpd.shutdown()
    hub.httpd.server_close()
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "0.5")
    rc, out, err = cli(capsys, "fit", "kvplan-test/llama3-8b", "--gpu", "h100", "--json")
    assert rc == 0 and json.loads(out)["checkpoint"] is None
    assert "warning: safetensors headers not read" in err
