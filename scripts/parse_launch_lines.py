"""Parse kvplan's launch lines with the engines' real argument parsers (issue 15).

1. In kvplan's environment, write the lines (built-in models x a few GPU setups):
       python scripts/parse_launch_lines.py emit > /tmp/lines.json
2. In a virtual environment holding the engine (see tests/fixtures/engine_flags/README.md):
       VLLM_TARGET_DEVICE=cpu python scripts/parse_launch_lines.py vllm /tmp/lines.json
       python scripts/parse_launch_lines.py sglang /tmp/lines.json
   Each line goes through the engine's own parser (vLLM: make_arg_parser, plus its
   QUANTIZATION_METHODS and CacheConfig checks; SGLang: prepare_server_args); the script prints
   how many parsed and every refusal, and exits 1 on any.
"""

from __future__ import annotations

import json
import shlex
import sys

SETUPS = [("h100", "auto", None, 1, 1), ("h200", "fp8", "fp8", 2, 1), ("b200", "nvfp4", None, 4, 1),
          ("mi300x", "auto", None, 1, 2), ("l40s", "fp8", "awq", 2, 2)]


def emit() -> None:
    from kvplan.core.errors import KvplanError
    from kvplan.loaders import builtins
    from kvplan.loaders.hardware import load_gpu
    from kvplan.loaders.hf_params import weight_inventory
    from kvplan.loaders.quant_config import weight_format
    from kvplan.loaders.resolve import load_model
    from kvplan.planning.fit import plan_fit
    from kvplan.planning.fit_types import FitRequest
    from kvplan.planning.launch import launch_commands

    lines = []
    for name in sorted({builtins._load(p)["name"] for p in builtins.index().values()}):
        model = load_model(name)
        for gpu, kv, wd, tp, pp in SETUPS:
            ctx = min(8192, model.context_limit.tokens) if model.context_limit else 8192
            try:
                r = plan_fit(FitRequest(
                    model=model, weights=weight_inventory(model),
                    weight_format=weight_format(model, wd), gpu=load_gpu(gpu), tp=tp, pp=pp,
                    kv_dtype=kv, context_tokens=ctx, search=False, allow_emulated=True,
                    concurrency=4))
            except KvplanError:
                continue
            for engine, line in launch_commands(r).items():
                if not line.startswith("#"):
                    lines.append({"engine": engine, "model": name, "gpu": gpu, "line": line})
    json.dump(lines, sys.stdout, indent=1)


def _argv(line: str, prefix: int) -> list[str]:
    words = shlex.split(line, comments=True)
    while "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return words[prefix:]


def parse_vllm(lines: list[dict]) -> list[str]:
    from vllm.config import CacheConfig
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    bad = []
    for x in lines:
        argv = _argv(x["line"], 2)  # vllm serve
        try:
            ns = parser.parse_args(argv)
            if ns.quantization is not None and ns.quantization not in QUANTIZATION_METHODS:
                raise ValueError(f"quantization {ns.quantization}")
            CacheConfig(cache_dtype=ns.kv_cache_dtype,
                        gpu_memory_utilization=ns.gpu_memory_utilization,
                        **({"block_size": ns.block_size} if ns.block_size else {}))
        except (SystemExit, Exception) as e:  # argparse exits; pydantic raises
            bad.append(f"{x['model']} {x['gpu']}: {type(e).__name__} {e}: {x['line']}")
    return bad


def parse_sglang(lines: list[dict]) -> list[str]:
    from sglang.srt.server_args import prepare_server_args

    bad = []
    for x in lines:
        try:
            prepare_server_args(_argv(x["line"], 3))  # python -m sglang.launch_server
        except (SystemExit, Exception) as e:
            bad.append(f"{x['model']} {x['gpu']}: {type(e).__name__} {e}: {x['line']}")
    return bad


def main() -> int:
    if sys.argv[1] == "emit":
        emit()
        return 0
    engine, path = sys.argv[1], sys.argv[2]
    lines = [x for x in json.load(open(path, encoding="utf-8")) if x["engine"] == engine]
    bad = {"vllm": parse_vllm, "sglang": parse_sglang}[engine](lines)
    print(f"{engine}: {len(lines) - len(bad)} of {len(lines)} lines parse")
    for b in bad:
        print(f"  {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
