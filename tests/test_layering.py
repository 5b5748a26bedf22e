"""The house rules: one folder per layer with imports pointing down only, a pure core, and a
light `size` path - the imports read from the source, the loaded modules checked in a subprocess."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kvplan"
#: the layers, bottom first: a module may import from its own folder and the folders before it
LAYERS = ("core", "engines", "loaders", "planning", "report", "cli")
HEAVY = ("torch", "pandas", "huggingface_hub", "matplotlib", "numpy")
CORE_BANNED = (*HEAVY, "pydantic", "yaml", "typer", "rich")


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["kvplan", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def kvplan_imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported kvplan module or name) for every import in the file, lazy ones and
    ``TYPE_CHECKING`` ones included."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "kvplan":  # ``from kvplan import x``: x is a layer or the facade's name
                found += [(node.lineno, f"kvplan.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, t) for line, t in found if t == "kvplan" or t.startswith("kvplan.")]


def layer_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_lives_in_a_layer_folder():
    loose = [n for n in modules() if n != "kvplan" and layer_of(n) is None]
    assert loose == []


def test_imports_point_down_only():
    problems = []
    for name, path in modules().items():
        own = layer_of(name)
        if own is None:  # the package facade, ``kvplan/__init__.py``, sits above every layer
            continue
        for line, target in kvplan_imports(name, path):
            theirs = layer_of(target)
            if theirs is None:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {own} imports "
                                f"{target} (the facade, not a layer)")
            elif LAYERS.index(theirs) > LAYERS.index(own):
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {own} imports {target}")
    assert problems == []


#: Third-party libraries each layer may import at all (top level or inside a function).
ALLOWED_LIBRARIES = {
    "core": set(),
    "engines": set(),
    "loaders": {"pydantic", "yaml", "huggingface_hub"},
    "planning": {"numpy"},
    "report": {"numpy", "pandas", "matplotlib", "pyarrow"},
    "cli": {"typer", "rich"},
}
WATCHED = {"pydantic", "yaml", "huggingface_hub", "numpy", "pandas", "matplotlib", "pyarrow",
           "typer", "rich", "torch"}


def third_party_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return [(line, m) for line, m in found if m in WATCHED]


def test_heavy_libraries_stay_in_their_layers():
    """Lazy imports too: the source says what a function would load when it runs."""
    problems = []
    for name, path in modules().items():
        own = layer_of(name)
        if own is None:
            continue
        for line, lib in third_party_imports(path):
            if lib not in ALLOWED_LIBRARIES[own]:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {own} imports {lib}")
    assert problems == []


def test_the_library_checker_sees_a_lazy_import(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    import yaml\n    from pandas import DataFrame\n")
    assert third_party_imports(bad) == [(2, "yaml"), (3, "pandas")]


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rule above can fail: a core module importing planning is caught, relative or not."""
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from ..planning.fit import plan_fit\n    import kvplan.report\n")
    found = kvplan_imports("kvplan.core.x", bad)
    assert found == [(2, "kvplan.planning.fit"), (3, "kvplan.report")]
    assert [layer_of(t) for _, t in found] == ["planning", "report"]


def loaded_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_core_loads_only_itself():
    """Every core module imported together loads no other kvplan layer (not even through the
    package facade) and none of the I/O, UI or heavy libraries."""
    core = sorted(n for n in modules() if layer_of(n) == "core")
    mods = loaded_after("\n".join(f"import {m}" for m in core))
    assert {m for m in mods if m.startswith("kvplan.")} - set(core) == set()
    for banned in CORE_BANNED:
        assert banned not in mods, banned


@pytest.mark.parametrize("layer", ["engines", "loaders", "planning"])
def test_a_layer_loads_nothing_above_it(layer):
    names = sorted(n for n in modules() if layer_of(n) == layer)
    mods = loaded_after("\n".join(f"import {m}" for m in names))
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    assert sorted(m for m in mods if layer_of(m) in above) == []
    for banned in ("pandas", "matplotlib", "typer", "rich", "torch"):
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


def test_plan_command_needs_no_pandas_or_matplotlib(tmp_path):
    """numpy evaluates each candidate over the sampled requests (issue 15: plan speed), so the
    plan command may load it; pandas and torch stay out, and matplotlib too except for the
    HTML report's charts."""
    example = Path(__file__).resolve().parent.parent / "examples" / "chat-shared-prompt.yaml"
    mods = loaded_after(
        "from kvplan.cli.main import run\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert run(['plan', {str(example)!r}, '--format', 'markdown', '--samples', '50']) == 0\n"
    )
    for banned in HEAVY:
        assert banned == "numpy" or banned not in mods, banned


def test_the_public_api_answers_from_kvplan_itself():
    """``kvplan.<name>`` for every public name, each from the module that defines it, and
    ``import kvplan`` alone loads no layer."""
    assert loaded_after("import kvplan") & {f"kvplan.{x}" for x in LAYERS} == set()
    import kvplan

    for name in kvplan.__all__:
        value = getattr(kvplan, name)
        assert getattr(value, "__name__", name) == name
    model = kvplan.load_model("llama-3-70b")
    assert kvplan.kv_footprint(model, [4096]).bytes_per_token == 2 * 80 * 8 * 128 * 2
    with pytest.raises(AttributeError):
        kvplan.not_a_public_name  # noqa: B018
