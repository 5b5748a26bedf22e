"""Where kvplan's own data lives: ``kvplan/_data/<name>`` in an installed wheel (see
``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml), else the folder of that
name at the root of a source checkout (``model_specs``, ``hardware_specs``, ``calibrate/runs``)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def search_path(env: str, name: str) -> list[Path]:
    """The folders of the ``env`` variable (``os.pathsep``-separated, searched first), then
    kvplan's own ``name`` folder."""
    import os

    extra = [Path(p).expanduser() for p in os.environ.get(env, "").split(os.pathsep) if p]
    return [*extra, data_dir(name)]


def data_dir(name: str) -> Path:
    packaged = _PACKAGE / "_data" / name
    return packaged if packaged.is_dir() else _PACKAGE.parent / name
