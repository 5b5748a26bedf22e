"""Measured calibration run files (``calibrate/runs/*.json``, written by the harness; schema
in ``calibrate/runs_io.py``): the built-in runs, and one run read and checked for its schema,
version and list of cases, with one error line naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import KvplanError
from .data_dirs import data_dir

SCHEMA = "kvplan-calibration-run"
SUPPORTED_VERSIONS = (1,)


class RunFileError(KvplanError):
    """A run file that is unreadable, corrupt or of a schema this kvplan does not know."""


def load_run(path: Path) -> dict:
    from .files import read_text

    text = read_text(path, RunFileError)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:  # long integers, deep nesting
        raise RunFileError(f"corrupt run file ({type(e).__name__}: {e})".splitlines()[0][:200],
                           source=str(path)) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RunFileError(f"not a kvplan calibration run (schema {SCHEMA!r} expected)",
                           source=str(path), field="schema")
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise RunFileError(f"expected an integer schema version, got {str(version)[:40]!r}",
                           source=str(path), field="version")
    if version not in SUPPORTED_VERSIONS:
        raise RunFileError(f"run schema version {doc.get('version')!r} is newer than this kvplan "
                           f"reads ({', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade kvplan",
                           source=str(path), field="version")
    if not isinstance(doc.get("cases"), list):
        raise RunFileError("missing the list of cases", source=str(path), field="cases")
    return doc


def default_runs() -> list[Path]:
    folder = data_dir("calibrate/runs")
    return sorted(folder.glob("*.json")) if folder.is_dir() else []
