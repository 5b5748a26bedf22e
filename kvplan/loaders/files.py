"""Reading a user's text file with one clear error line (file and reason) on failure."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import KvplanError


def read_text(path: Path, error: type[KvplanError], encoding: str = "utf-8") -> str:
    try:
        return path.read_text(encoding=encoding)
    except OSError as e:
        raise error(f"cannot read file: {e.strerror}", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise error(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
