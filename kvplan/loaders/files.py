"""Reading a user's file with one clear error line (file and reason) on failure, and bounded:
only a regular file is read (a FIFO would block, ``/dev/zero`` never ends), and only up to
``MAX_FILE_BYTES``, checked before the read and again while reading (a file that grows)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.errors import KvplanError

#: the largest file kvplan reads (configs, scenarios, GPU specs, runs, traces, benchmarks)
MAX_FILE_BYTES = 256 * 2**20


def read_bytes(path: Path, error: type[KvplanError], limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; anything but a regular file of at most ``limit`` bytes is ``error``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise error(f"cannot read file: {e.strerror}", source=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error("not a regular file (a FIFO, device or folder is not read)",
                        source=str(path))
        if info.st_size > limit:
            raise error(f"{info.st_size:,} bytes is over kvplan's limit of {limit:,} bytes for "
                        "a file", source=str(path))
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise error(f"over kvplan's limit of {limit:,} bytes for a file",
                            source=str(path))
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise error(f"cannot read file: {e.strerror}", source=str(path)) from None
    finally:
        os.close(fd)


def read_text(path: Path, error: type[KvplanError], encoding: str = "utf-8",
              limit: int = MAX_FILE_BYTES) -> str:
    try:
        return read_bytes(path, error, limit).decode(encoding)
    except UnicodeDecodeError as e:
        raise error(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
