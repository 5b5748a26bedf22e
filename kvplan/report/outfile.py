"""Writing a user's output file: atomically (a temporary file in the same folder, then a link
or rename) and never over an existing file unless ``force``. The only place kvplan writes
reports; ``calibrate`` writes its runs through it too."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..core.errors import InputError


def refuse_existing(path: Path, force: bool, flag: str = "--output") -> None:
    """Fail before any work is done when ``path`` exists and ``force`` is not given, or is
    anything but a regular file (a device, a FIFO, a folder: never replaced, even with
    ``force``)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise InputError(f"{path} is not a regular file; kvplan replaces only regular files",
                         field=flag)
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it", field=flag)


def write_atomic(path: Path, data: str | bytes, *, force: bool = False, flag: str = "--output") -> Path:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, flushed to
    disk, then published by name; the temporary file is removed on any failure."""
    path = Path(path)
    refuse_existing(path, force, flag)
    folder = path.parent if str(path.parent) else Path(".")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}", field=flag) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        if force:
            os.replace(tmp, path)
        else:
            _publish_new(tmp, path, flag)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}", field=flag) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _publish_new(tmp: str, path: Path, flag: str) -> None:
    """Move ``tmp`` to ``path`` only if ``path`` does not exist: a hard link fails rather than
    overwrite; where the file system has no hard links, claim the name with O_EXCL first."""
    exists = InputError(f"{path} exists; pass --force to overwrite it", field=flag)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise exists from None
    except OSError:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            raise exists from None
        try:
            os.replace(tmp, path)
        except BaseException:
            os.unlink(path)  # the empty file that claimed the name: nothing half-written stays
            raise
        return
    os.unlink(tmp)
