"""Built-in models: ``model_specs/<name>.json`` files, looked up by name, alias or Hub id.

Each file holds ``name``, ``hub_id``, ``aliases``, ``family``, ``source`` and ``config`` (the
model's config.json as published, or its leading cache-relevant keys). Lookup is exact after
normalising case and separators (``Llama-3-70B``, ``llama_3_70b`` and ``llama-3-70b`` are one
key; dots are kept so ``qwen2.5-7b`` and ``qwen2-57b`` stay apart); never by substring.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..core.errors import ConfigError
from ..core.suggest import close_matches
from .data_dirs import data_dir


def specs_dir() -> Path:
    """``kvplan/_data/model_specs`` in an installed wheel, else the repository's folder."""
    return data_dir("model_specs")


def normalize(name: str) -> str:
    key = name.strip().lower()
    for ch in "-_ ":
        key = key.replace(ch, "")
    return key


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}",
                          source=str(path)) from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"unreadable JSON ({type(e).__name__})", source=str(path)) from None
    for key in ("name", "hub_id", "config"):
        if key not in data:
            raise ConfigError(f"missing required field {key}", source=str(path), field=key)
    return data


def _keys(spec: dict) -> list[str]:
    hub = spec.get("hub_id") or ""
    names = [spec["name"], hub, hub.rsplit("/", 1)[-1], *spec.get("aliases", [])]
    return [normalize(n) for n in names if n]


@lru_cache(maxsize=1)
def index() -> dict[str, Path]:
    """Every normalised key -> spec file. Two models claiming one key is a data error."""
    out: dict[str, Path] = {}
    for path in sorted(specs_dir().glob("*.json")):
        for key in _keys(_load(path)):
            if key in out and out[key] != path:
                raise ConfigError(f"alias {key!r} is claimed by {out[key].name} too",
                                  source=str(path), field="aliases")
            out[key] = path
    return out


def find(name: str) -> dict | None:
    """The spec for ``name``, or None. A name equal to a file stem is read without an index;
    path-like names (``./x``, ``~/x``, ``/x``) never match a built-in."""
    stem = name.strip().lower()
    if stem.startswith((".", "~", "/")) or "\\" in stem:
        return None
    direct = specs_dir() / f"{stem}.json"
    if "/" not in stem and direct.is_file():
        return _load(direct)
    path = index().get(normalize(name))
    return _load(path) if path else None


def all_specs() -> list[dict]:
    return [_load(p) for p in sorted(specs_dir().glob("*.json"))]


def suggestions(name: str, n: int = 3) -> list[str]:
    names: dict[str, str] = {}
    for spec in all_specs():
        for label in [spec["name"], spec.get("hub_id") or "", *spec.get("aliases", [])]:
            if label:
                names.setdefault(normalize(label), spec["name"])
    close = close_matches(normalize(name), names, n=n * 2)
    return list(dict.fromkeys(names[c] for c in close))[:n]
