"""Writing a user's output file: atomically (a temporary file in the same folder, then a link
or rename) and never over an existing file unless ``force``. The only place kvplan writes
reports; ``calibrate`` writes its runs through it too."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputError


def refuse_existing(path: Path, force: bool, flag: str = "--output") -> None:
    """Fail before any work is done when ``path`` exists and ``force`` is not given."""
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it", field=flag)


def write_atomic(path: Path, data: str | bytes, *, force: bool = False, flag: str = "--output") -> Path:
    folder = path.parent if str(path.parent) else Path(".")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}", field=flag) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails rather than overwrite if the name appeared meanwhile
            except FileExistsError:
                raise InputError(f"{path} exists; pass --force to overwrite it", field=flag) from None
            os.unlink(tmp)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}", field=flag) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
