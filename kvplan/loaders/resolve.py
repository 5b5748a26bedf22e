"""MODEL string -> Model: a built-in name, a local config.json (or folder holding one), or a
Hugging Face Hub repo id ``org/name`` with an optional ``@revision``. The returned model's
``source`` says which was used. A Hub id that is also a built-in's id resolves to the built-in
unless a revision is asked for."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from ..core.errors import ConfigError, UnknownModelError
from ..core.model import Model
from . import builtins
from .files import read_text
from .hf_config import parse_config

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def read_config_file(path: Path) -> dict:
    """Read one config.json; malformed JSON names the file, line and column."""
    text = read_text(path, ConfigError, encoding="utf-8-sig")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}",
                          source=str(path)) from None
    except (ValueError, RecursionError) as e:  # integers over 4,300 digits, deep nesting
        raise ConfigError(f"unreadable JSON ({type(e).__name__}: {e})"[:200],
                          source=str(path)) from None


def with_modelopt_file(config: object, path: Path) -> object:
    """Older ModelOpt checkpoints keep their quantisation in ``hf_quant_config.json`` beside a
    config.json that has none; vLLM reads it, so it is merged as the config's
    ``quantization_config`` (``quant_method: modelopt``)."""
    side = path.parent / "hf_quant_config.json"
    if not isinstance(config, dict) or config.get("quantization_config") or not side.is_file():
        return config
    q = read_config_file(side)
    inner = q.get("quantization") if isinstance(q, dict) else None
    if not isinstance(inner, dict):
        raise ConfigError("expected an object with a quantization block", source=str(side),
                          field="quantization")
    return {**config, "quantization_config": {"quant_method": "modelopt", **inner}}


def load_model(model: str, *, revision: str | None = None, token: str | None = None,
               refresh: bool = False, assume_standard_attention: bool = False) -> Model:
    """Resolve ``model`` in order: built-in name, local path, Hub id.
    ``assume_standard_attention`` accepts the standard-decoder reading of a config whose
    cache layout kvplan cannot establish (``kvplan.loaders.hf_config.parse_config``)."""
    std = assume_standard_attention
    pinned = revision is not None or ("@" in model and HUB_ID.match(model) is not None)
    spec = None if pinned else builtins.find(model)
    if spec is not None:
        return parse_config(spec["config"], name=spec["name"], hub_id=spec.get("hub_id"),
                            source=f"built-in {spec['name']} (model_specs/{spec['name']}.json)",
                            assume_standard_attention=std)
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError("folder has no config.json", source=str(path.parent))
    if path.is_file():
        config = with_modelopt_file(read_config_file(path), path)
        return parse_config(config, name=path.parent.name if path.name ==
                            "config.json" else path.stem, source=str(path),
                            assume_standard_attention=std)
    if path.exists():  # a FIFO, a device, a socket: never read, never taken for a Hub id
        raise ConfigError("not a regular file or a folder", source=str(path))
    if HUB_ID.match(model):
        return load_hub_model(model, revision=revision, token=token, refresh=refresh,
                              assume_standard_attention=std)
    close = builtins.suggestions(model)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownModelError(f"unknown model {model!r}{hint} (see `kvplan models`, pass a path "
                            "to a config.json, or a Hub id such as org/name)", field="MODEL")


def load_hub_model(model: str, *, revision: str | None = None, token: str | None = None,
                   refresh: bool = False, assume_standard_attention: bool = False) -> Model:
    from .hub import fetch_config

    repo_id, _, at = model.partition("@")
    if at and revision and at != revision:
        raise UnknownModelError(f"{model!r} names revision {at!r} but --revision says "
                                f"{revision!r}", field="--revision")
    cfg = fetch_config(repo_id, revision or at or None, token=token, refresh=refresh)
    how = "cached" if cfg.cached else "fetched"
    source = (f"Hub {repo_id}@{cfg.revision} (commit {cfg.commit[:12]}, {how}, "
              f"{cfg.endpoint})")
    m = parse_config(cfg.config, name=repo_id.rsplit("/", 1)[-1], hub_id=repo_id, source=source,
                     assume_standard_attention=assume_standard_attention)
    warnings = m.warnings
    if "auto_map" in cfg.config:
        warnings = (*warnings, "config has auto_map (remote code): read as JSON only, no "
                    "repository code is loaded or run")
    return replace(m, warnings=warnings, hub_revision=cfg.commit)
