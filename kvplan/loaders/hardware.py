"""Known GPUs: ``hardware_specs/*.yaml`` plus any folders named in ``KVPLAN_HARDWARE_PATH``
(``os.pathsep``-separated; searched first, so a user's file can replace a built-in one), or a
path to a YAML file. Lookup is exact after normalising case, separators and a leading vendor
word (``H200-SXM``, ``h200_sxm``, ``nvidia-h200-sxm`` are one key); never by substring.
"""

from __future__ import annotations

import os
import re
from functools import cache, lru_cache
from pathlib import Path

from ..core.errors import GpuSpecError, UnknownGpuError
from ..core.gpu import GpuSpec
from ..core.suggest import close_matches
from .data_dirs import data_dir

ENV_VAR = "KVPLAN_HARDWARE_PATH"
VENDOR_WORDS = ("nvidia", "amd", "instinct", "geforce")


def builtin_dir() -> Path:
    return data_dir("hardware_specs")


def search_dirs() -> list[Path]:
    extra = [Path(p).expanduser() for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    for d in extra:
        if not d.is_dir():
            raise GpuSpecError("not a folder", source=str(d), field=ENV_VAR)
    return [*extra, builtin_dir()]


def normalize(name: str) -> str:
    key = name.strip().lower()
    for ch in "-_ ":
        key = key.replace(ch, "")
    for word in VENDOR_WORDS:
        if key.startswith(word) and len(key) > len(word):
            key = key[len(word):]
    return key


def _files(dirs: tuple[Path, ...]) -> list[Path]:
    return [p for d in dirs for p in sorted(d.glob("*.y*ml")) if p.suffix in (".yaml", ".yml")]


@cache
def _load(path: Path) -> GpuSpec:
    from .gpu_yaml import gpu_from_file

    return gpu_from_file(path)


_NAME = re.compile(r"^name:\s*(.+?)\s*(?:#.*)?$", re.MULTILINE)
_ALIASES = re.compile(r"^aliases:\s*\[(.*)\]\s*(?:#.*)?$", re.MULTILINE)


def _names(path: Path) -> list[str]:
    """The key, name and aliases of one file, read without schema validation (the chosen
    file is validated when loaded). One-line ``name:`` and flow-list ``aliases: [...]`` (the
    style of the built-in files) are read with a regular expression; anything else with
    the bounded YAML reader."""
    from .files import read_text
    from .yaml_file import read_yaml

    try:
        text = read_text(path, GpuSpecError)
    except GpuSpecError:
        text = None  # read_yaml below raises the one-line error
    name, aliases = (_NAME.search(text), _ALIASES.search(text)) if text else (None, None)
    if name and aliases and not any(c in aliases.group(1) for c in "[]{}\"'"):
        return [path.stem, name.group(1).strip("\"'"),
                *(a.strip() for a in aliases.group(1).split(",") if a.strip())]
    data, _ = read_yaml(path, GpuSpecError)  # bounded (depth, aliases); one line on errors
    if not isinstance(data, dict):
        return [path.stem]
    aliases = data.get("aliases")
    listed = [str(a) for a in aliases] if isinstance(aliases, list) else []
    return [path.stem, str(data.get("name", "")), *listed]


@lru_cache(maxsize=4)
def _index(dirs: tuple[Path, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    owner: dict[str, Path] = {}
    for path in _files(dirs):
        for key in {normalize(k) for k in _names(path) if k}:
            if key in out:
                if owner[key] == path.parent and out[key] != path:
                    raise GpuSpecError(f"alias {key!r} is claimed by {out[key].name} too",
                                       source=str(path), field="aliases")
                continue  # an earlier folder (KVPLAN_HARDWARE_PATH) wins
            out[key], owner[key] = path, path.parent
    return out


def all_gpus() -> list[GpuSpec]:
    """One spec per key, earlier folders first-come."""
    seen: dict[str, GpuSpec] = {}
    for path in _files(tuple(search_dirs())):
        seen.setdefault(path.stem, _load(path))
    return list(seen.values())


def load_gpu(name: str) -> GpuSpec:
    """A GPU by key, alias or YAML path."""
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") or os.sep in name:
        if path.exists() and not path.is_file():
            raise UnknownGpuError(f"{name!r} is not a regular file (a GPU spec is a YAML file)",
                                  field="--gpu")
        if not path.is_file():
            raise UnknownGpuError(f"no such GPU spec file {name!r}", field="--gpu")
        return _load(path.resolve())
    dirs = tuple(search_dirs())
    for d in dirs:  # a file stem needs no index
        for suffix in (".yaml", ".yml"):
            direct = d / f"{name.strip().lower()}{suffix}"
            if direct.is_file():
                return _load(direct)
    index = _index(dirs)
    hit = index.get(normalize(name))
    if hit is not None:
        return _load(hit)
    keys = sorted({p.stem for p in index.values()})
    close = close_matches(normalize(name), {k: None for k in index}, n=5, cutoff=0.6)
    names = sorted({index[k].stem for k in close})
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise UnknownGpuError(f"unknown GPU {name!r}{hint} (known: {', '.join(keys)}; see "
                          "`kvplan gpus`, or pass a YAML file)", field="--gpu")
