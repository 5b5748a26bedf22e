"""MODEL string -> Model: a built-in name, a local config.json (or folder holding one), or (a
later capability) a Hub repo id. The returned model's ``source`` says which was used."""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import builtins
from .errors import ConfigError, UnknownModelError
from .loaders.files import read_text
from .loaders.hf_config import parse_config
from .model import Model

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def read_config_file(path: Path) -> dict:
    """Read one config.json; malformed JSON names the file, line and column."""
    text = read_text(path, ConfigError, encoding="utf-8-sig")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}",
                          source=str(path)) from None


def load_model(model: str) -> Model:
    """Resolve ``model`` in order: built-in name, local path, Hub id."""
    spec = builtins.find(model)
    if spec is not None:
        return parse_config(spec["config"], name=spec["name"], hub_id=spec.get("hub_id"),
                            source=f"built-in {spec['name']} (model_specs/{spec['name']}.json)")
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError("folder has no config.json", source=str(path.parent))
    if path.is_file():
        return parse_config(read_config_file(path), name=path.parent.name if path.name ==
                            "config.json" else path.stem, source=str(path))
    close = builtins.suggestions(model)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    if HUB_ID.match(model):
        raise UnknownModelError(
            f"{model!r} is not a built-in model or a local path, and fetching Hub ids is not "
            f"supported yet{hint} (see `kvplan models`, or pass a path to its config.json)",
            field="MODEL")
    raise UnknownModelError(f"unknown model {model!r}{hint} (see `kvplan models`, or pass a "
                            "path to a config.json)", field="MODEL")
