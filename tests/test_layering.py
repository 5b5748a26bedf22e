"""The house rules that keep the core pure and the `size` path fast, checked in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "pandas", "huggingface_hub", "matplotlib", "numpy")
CORE = (
    "kvplan.core.units",
    "kvplan.core.formats",
    "kvplan.core.layers",
    "kvplan.core.model",
    "kvplan.core.parallel",
    "kvplan.core.tokens",
    "kvplan.core.dtypes",
    "kvplan.planning.footprint",
    "kvplan.engines",
    "kvplan.planning.fit",
    "kvplan.core.perf",
    "kvplan.planning.curve",
    "kvplan.core.workload",
    "kvplan.planning.scenario_eval",
    "kvplan.core.scenario_spec",
    "kvplan.report.svg",
)


def loaded_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_core_imports_no_io_or_ui_libraries():
    mods = loaded_after("\n".join(f"import {m}" for m in CORE))
    for banned in (*HEAVY, "pydantic", "yaml", "typer", "rich"):
        assert banned not in mods, banned


def test_size_command_path_stays_light():
    mods = loaded_after(
        "from kvplan.cli.main import run\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert run(['size', 'llama-3-70b']) == 0\n"
    )
    for banned in (*HEAVY, "pydantic", "yaml"):
        assert banned not in mods, banned


def test_plan_command_needs_no_pandas_numpy_or_matplotlib(tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "chat-shared-prompt.yaml"
    mods = loaded_after(
        "from kvplan.cli.main import run\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert run(['plan', {str(example)!r}, '--format', 'html', '--samples', '50']) == 0\n"
    )
    for banned in HEAVY:
        assert banned not in mods, banned
