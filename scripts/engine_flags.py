"""Record the command-line flags of an installed engine (vLLM or SGLang) as JSON: every option
string, whether it takes a value, its argparse choices, and the values the engine checks
outside argparse (vLLM's quantization methods and KV cache dtypes). The tests check kvplan's
launch lines against these files (tests/fixtures/engine_flags/), so they need no engine.

Run in a virtual environment holding the engine (see docs/fit.md section 6 for the pip lines):
    VLLM_TARGET_DEVICE=cpu python scripts/engine_flags.py vllm > tests/fixtures/engine_flags/vllm.json
    python scripts/engine_flags.py sglang > tests/fixtures/engine_flags/sglang.json
"""

from __future__ import annotations

import argparse
import json
import sys


def _options(parser: argparse.ArgumentParser) -> dict:
    out = {}
    # every string the parser accepts, hidden ones too (vLLM 0.34's EnableDisableAction keeps
    # --no-enable-X registered but out of the action's option_strings)
    strings: dict[argparse.Action, list[str]] = {}
    for s, a in parser._option_string_actions.items():
        strings.setdefault(a, []).append(s)
    for a, option_strings in strings.items():
        if isinstance(a, argparse._HelpAction):
            continue
        takes = a.nargs != 0 and not isinstance(a, (argparse._StoreTrueAction,
                                                   argparse._StoreFalseAction,
                                                   argparse._StoreConstAction))
        entry = {"value": bool(takes)}
        if a.choices is not None:
            entry["choices"] = sorted(str(c) for c in a.choices)
        for s in option_strings:
            out[s] = entry
    return dict(sorted(out.items()))


def vllm() -> dict:
    import vllm as v
    from vllm.config.cache import KV_CACHE_DTYPES  # type: ignore[attr-defined]
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    return {"engine": "vllm", "version": v.__version__, "command": "vllm serve MODEL",
            "options": _options(parser),
            "checked_values": {"--quantization": sorted(QUANTIZATION_METHODS),
                               "--kv-cache-dtype": sorted(KV_CACHE_DTYPES)}}


def sglang() -> dict:
    import sglang as s
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return {"engine": "sglang", "version": s.__version__,
            "command": "python -m sglang.launch_server", "options": _options(parser),
            "checked_values": {}}


if __name__ == "__main__":
    data = {"vllm": vllm, "sglang": sglang}[sys.argv[1]]()
    data["source"] = (f"recorded by scripts/engine_flags.py from the {data['engine']} "
                      f"{data['version']} wheel on PyPI (its own argument parser, Apache-2.0)")
    print(json.dumps(data, indent=1, sort_keys=True))
