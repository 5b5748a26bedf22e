"""Launch lines that realise the plan (issue 15): the weights the plan assumed, the model as
the engine takes it, the sequence cap only when one was planned, the lines of the layout that
fits, ``--require-fit``; and the output files and messages around them."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from kvplan.cli.main import run

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def fit(capsys, *args: str) -> dict:
    assert run(["fit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def argv(line: str) -> list[str]:
    """The command's words, without a trailing comment."""
    return shlex.split(line, comments=True)


def value(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def test_weights_quantised_online_or_from_a_named_checkpoint(capsys):
    # the example: 27.65 GiB of fp8 weights per GPU on 8 x L40S, from a bf16 repo
    d = fit(capsys, "qwen3-235b-a22b", "--gpu", "l40s", "--tp", "8", "--weight-dtype", "fp8",
            "-c", "32k")
    vllm, sglang, trt = (argv(d["launch"][k]) for k in ("vllm", "sglang", "trtllm"))
    assert vllm[:3] == ["vllm", "serve", "Qwen/Qwen3-235B-A22B"]
    assert value(vllm, "--quantization") == "fp8"  # vLLM quantises a 16-bit checkpoint online
    assert value(sglang, "--quantization") == "fp8"
    # trtllm-serve has no online quantisation: the line names the checkpoint it assumes
    assert trt[trt.index("trtllm-serve") + 1] == "./Qwen3-235B-A22B-FP8"
    assert d["launch"]["trtllm"].endswith(
        "# assumes ./Qwen3-235B-A22B-FP8 holds Qwen/Qwen3-235B-A22B quantised as fp8 "
        "(Qwen/Qwen3-235B-A22B itself is bf16; trtllm reads the format from the folder's "
        "quantization config)")
    # int4 AWQ: no engine quantises online, so every line points at an AWQ checkpoint folder
    d = fit(capsys, "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--weight-dtype", "awq")
    for engine in ("vllm", "sglang", "trtllm"):
        assert "./Llama-3.1-70B-AWQ" in argv(d["launch"][engine]), engine
        assert "--quantization" not in argv(d["launch"][engine])
    assert d["launch"]["llama.cpp"].startswith("# llama.cpp runs GGUF weights")


def test_a_quantised_checkpoint_needs_no_flag(capsys):
    d = fit(capsys, "qwen3-235b-a22b-fp8", "--gpu", "h200", "--tp", "4", "-c", "32k")
    vllm = argv(d["launch"]["vllm"])
    assert vllm[2] == "Qwen/Qwen3-235B-A22B-FP8" and "--quantization" not in vllm
    assert "#" not in d["launch"]["vllm"]


def test_the_model_is_the_folder_the_engine_takes(capsys):
    d = fit(capsys, str(CONFIGS / "deepseek-ai__DeepSeek-V3.2.json"), "--gpu", "h200", "--tp",
            "8", "-c", "32k", "--kv-dtype", "fp8")
    assert argv(d["launch"]["vllm"])[2] == str(CONFIGS)


def test_the_sequence_cap_is_set_only_when_planned(capsys):
    # gpt-oss-120b at 128k on one H100 holds one full-length sequence: the line does not cap
    # the engine at 1 (a real mix of shorter requests shares the pool), and says why
    d = fit(capsys, "gpt-oss-120b", "--gpu", "h100", "-c", "128k")
    assert d["max_concurrency"] == 1
    assert "--max-num-seqs" not in argv(d["launch"]["vllm"])
    assert "--max-running-requests" not in argv(d["launch"]["sglang"])
    assert d["launch_note"] == (
        "the lines leave the engine's sequence cap at its default (1,024, as the budget "
        "assumed): the pool holds 1 full-length 131,072-token sequence and more when requests "
        "are shorter; pass --concurrency N to cap it")
    # --concurrency decides it, and the budget is planned with that cap (its sampler warm-up)
    d = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "-c", "32k", "--concurrency", "8")
    assert value(argv(d["launch"]["vllm"]), "--max-num-seqs") == "8"
    assert value(argv(d["launch"]["sglang"]), "--max-running-requests") == "8"
    assert d["max_num_seqs"] == 8
    assert d["launch_note"] == "the lines cap the engine at 8 running sequences (--concurrency)"


def test_a_layout_that_does_not_fit_launches_the_suggestion_or_nothing(capsys):
    # Llama-3.1-70B bf16 at 32k does not fit one H100; the smallest layout that does is PP 3
    d = fit(capsys, "llama-3.1-70b", "--gpu", "h100", "-c", "32k")
    assert d["fits"] is False and d["suggestion"]["tp"] * d["suggestion"]["pp"] == 3
    assert d["launch_layout"] == {"tp": d["suggestion"]["tp"], "pp": d["suggestion"]["pp"],
                                  "dp": 1, "ep": 1, "dcp": 1, "suggested": True}
    vllm = argv(d["launch"]["vllm"])
    assert value(vllm, "--pipeline-parallel-size") == str(d["suggestion"]["pp"])
    # DeepSeek-V3 in bf16 fits no TP x PP up to 8 x 8 on L4s: no launch line at all
    d = fit(capsys, "deepseek-v3", "--gpu", "l4", "--weight-dtype", "bf16", "-c", "128k")
    assert d["fits"] is False and d["suggestion"] is None
    assert d["launch"] == {} and d["launch_layout"] is None
    assert run(["fit", "deepseek-v3", "--gpu", "l4", "--weight-dtype", "bf16", "-c",
                "128k"]) == 0
    assert "launch: none (this layout does not fit, and none on L4 does: searched tp up to 8" in \
        capsys.readouterr().out


def test_require_fit_exits_1_when_it_does_not_fit(capsys):
    assert run(["fit", "llama-3.1-70b", "--gpu", "h100", "-c", "32k", "--require-fit"]) == 1
    assert run(["fit", "llama-3.1-8b", "--gpu", "h100", "-c", "32k", "--require-fit"]) == 0
    assert run(["fit", "llama-3.1-70b", "--gpu", "h100", "-c", "32k"]) == 0  # the default
    capsys.readouterr()


def test_wording_singular_and_pool_per_group(capsys):
    assert run(["fit", "gpt-oss-120b", "--gpu", "h100", "-c", "128k"]) == 0
    out = capsys.readouterr().out
    assert "1 whole sequence;" in out and "FITS: 1 concurrent 131,072-token sequence\n" in out
    assert run(["fit", "gemma-3-27b-it", "--gpu", "h100", "-c", "32k", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert run(["fit", "gemma-3-27b-it", "--gpu", "h100", "-c", "32k"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    blocks, tokens = d["kv_pool_blocks"], d["kv_pool_tokens"]
    assert tokens == blocks // 7 * 16  # vLLM's "GPU KV cache size" is per KV-cache group
    assert (f"{blocks:,} blocks shared by 7 KV-cache groups: {tokens:,} tokens per group "
            f"({blocks:,} // 7 x 16 tokens per block)") in out


def test_sweep_output_is_never_replaced_without_force(capsys, tmp_path):
    target = tmp_path / "s.csv"
    target.write_text("keep\n", encoding="utf-8")
    args = ["sweep", "llama-3.1-8b", "--gpu", "h100", "-c", "8k", "--output", str(target)]
    assert run(args) == 2
    assert capsys.readouterr().err.strip() == (f"kvplan: error: --output: {target} exists; pass "
                                               "--force to overwrite it")
    assert target.read_text(encoding="utf-8") == "keep\n"
    assert run([*args, "--force"]) == 0
    assert target.read_text(encoding="utf-8").startswith("model,gpu,")
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]  # no temporary file left
    capsys.readouterr()
    assert run(["sweep", "llama-3.1-8b", "--gpu", "h100", "--output", "/dev/null", "--force"]) == 2
    assert "/dev/null is not a regular file" in capsys.readouterr().err


def test_curve_plot_is_never_replaced_without_force(capsys, tmp_path):
    target = tmp_path / "c.png"
    target.write_bytes(b"keep")
    args = ["curve", "llama-3.1-8b", "--gpu", "h100", "--x", "batch", "--y", "tpot",
            "--points", "1,8", "--plot", str(target)]
    assert run(args) == 2
    assert target.read_bytes() == b"keep"
    assert run([*args, "--force"]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()


def test_parquet_without_pyarrow_names_the_extra(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert run(["sweep", "llama-3.1-8b", "--gpu", "h100", "--format", "parquet", "--output",
                str(tmp_path / "s.parquet")]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvplan: error: --format: parquet needs pyarrow: pip install 'kvplan[parquet]'")


def test_calibrate_without_torch_is_one_line():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from kvplan.cli.main import run\n"
            "sys.exit(run(['calibrate', '--quick']))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == ("kvplan: error: calibrate: the harness needs torch and the "
                                "repository's calibrate/ package (torch missing): pip install "
                                "'kvplan[calibrate]'")


def test_prices_name_their_source_and_date(capsys):
    assert run(["gpus", "--json"]) == 0
    specs = {g["key"]: g for g in json.loads(capsys.readouterr().out)}
    h100 = specs["h100-sxm"]
    assert (h100["price_usd_per_gpu_hour"], h100["price_source"], h100["price_as_of"]) == (
        3.99, "Lambda on-demand, lambda.ai/instances", "2026-09-20")
    assert all(g["price_source"] and g["price_as_of"] for g in specs.values())
    # every FLOP/s figure at FP32 accumulate: the RTX 4090's fp8 is 2x its bf16 (Ada
    # whitepaper: 330.3 FP8 with FP32 accumulate, 165.2 BF16), not the FP16-accumulate 660.6
    rtx = specs["rtx-4090"]
    assert rtx["dense_flops_per_s"]["fp8"] == 330_300_000_000_000  # 2.0x bf16 (rounded figures)
    assert round(rtx["dense_flops_per_s"]["fp8"] / rtx["dense_flops_per_s"]["bf16"], 2) == 2.0
    assert specs["rtx-5090"]["dense_flops_per_s"]["fp8"] == 2 * specs["rtx-5090"][
        "dense_flops_per_s"]["bf16"] == 419_000_000_000_000
    assert set(rtx["dense_flops_accumulate"].values()) == {"fp32", "int32"}
    assert run(["gpus"]) == 0
    assert "h100-sxm Lambda on-demand, lambda.ai/instances, 2026-09-20" in \
        " ".join(capsys.readouterr().out.split())


def test_review_fixes_for_launch_lines(capsys, tmp_path, monkeypatch):
    # a given block size is always passed on (the plan used it; vLLM's backend decides)
    d = fit(capsys, "llama-3.1-8b", "--gpu", "h100", "--block-size", "48")
    assert value(argv(d["launch"]["vllm"]), "--block-size") == "48"
    # asking for the format the checkpoint already has serves the checkpoint itself
    d = fit(capsys, "qwen3-235b-a22b-fp8", "--gpu", "h200", "--tp", "4", "--weight-dtype",
            "fp8_block", "-c", "32k")
    assert argv(d["launch"]["vllm"])[2] == "Qwen/Qwen3-235B-A22B-FP8"
    # a relative config path: the absolute folder, and a file not named config.json is said
    work = tmp_path / "m"
    work.mkdir()
    (work / "config.json").write_text((CONFIGS / "CohereForAI__c4ai-command-r7b-12-2024.json")
                                      .read_text(encoding="utf-8"), encoding="utf-8")
    (work / "other.json").write_text((work / "config.json").read_text(encoding="utf-8"),
                                     encoding="utf-8")
    monkeypatch.chdir(work)
    d = fit(capsys, "config.json", "--gpu", "h100", "--weight-dtype", "awq")
    assert argv(d["launch"]["vllm"])[2] == "./m-AWQ"
    d = fit(capsys, "other.json", "--gpu", "h100")
    assert argv(d["launch"]["vllm"])[2] == str(work)
    assert d["launch"]["vllm"].endswith(f"# the engine reads {work}/config.json: put other.json "
                                        "there as config.json")
    # fp32 weights: SGLang is told too
    d = fit(capsys, "llama-3.2-1b", "--gpu", "h100", "--weight-dtype", "fp32")
    assert value(argv(d["launch"]["sglang"]), "--dtype") == "float32"
    # a --dp / --ep plan that does not fit is searched like any other: Qwen3-30B-A3B bf16
    # (61 GB of weights) at 32k on L4s fits TP 4 first; 1,000 sequences fit no layout searched
    d = fit(capsys, "qwen3-30b-a3b", "--gpu", "l4", "--dp", "2", "--ep", "2", "-c", "32k")
    assert d["fits"] is False and d["launch_layout"] == {"tp": 4, "pp": 1, "dp": 1, "ep": 1,
                                                         "dcp": 1, "suggested": True}
    d = fit(capsys, "qwen3-30b-a3b", "--gpu", "l4", "--dp", "2", "--ep", "2", "-c", "32k",
            "--concurrency", "1000")
    assert d["fits"] is False and d["launch"] == {}
    assert d["launch_note"] == ("no launch line: this layout does not fit, and none on L4 does: "
                                "searched tp up to 8 x pp up to 8, and dp 2/4/8 with ep = tp x "
                                "dp within 8 GPUs")


def test_sweep_with_every_context_past_the_limit(capsys):
    assert run(["sweep", "llama-3-8b", "--gpu", "h100", "-c", "16k,32k", "--batch", "1",
                "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["context_tokens"] for r in rows] == [16_384, 32_768]
    for r in rows:
        assert r["fits"] is False and r["max_concurrency"] == 0
        assert r["error"].startswith("context exceeds llama-3-8b's limit of 8,192 tokens")
