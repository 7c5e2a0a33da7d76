"""Filesystem helpers: every file a user owns is written whole or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
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


def replace_tree(
    out_dir: str | os.PathLike[str], files: Mapping[str, str], dirs: Iterable[str] = (), mode: int = 0o755
) -> Path:
    """Write a whole directory at once: build it beside ``out_dir``, then swap it in by rename.

    Readers see the old tree or the new one, never a mix; files inside the staging tree need no
    per-file fsync+rename because nothing can see them until the swap.
    """
    target = Path(out_dir).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for rel in dirs:
            (staging / rel).mkdir(parents=True, exist_ok=True)
        for rel, text in files.items():
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        os.chmod(staging, mode)
        swap_in(staging, target)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
        raise
    return target


def swap_in(staging: Path, target: Path) -> None:
    """Replace ``target`` by the finished ``staging`` tree with renames (readers see old or new, never a mix)."""
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
