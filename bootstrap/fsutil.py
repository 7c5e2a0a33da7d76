"""Filesystem helpers: every file a user owns is written whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same directory and an atomic rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> Path:
    """Text variant of :func:`atomic_write_bytes` (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode)
