"""The files of a model's source directory: names and sizes (what a plan needs), and their sha256."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import InvalidInput, Problem

CHUNK = 1 << 20


@dataclass(frozen=True)
class SourceFile:
    rel: str
    size: int
    sha256: str


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
            if on_bytes:
                on_bytes(len(block))
    return digest.hexdigest()


#: Directories of a model directory that are never the model: a git clone's own (with git-lfs, a second
#: copy of every weight file).
NOT_MODEL_DIRS = (".git",)


def source_sizes(source: Path) -> list[tuple[str, int]]:
    """Every file under ``source`` (relative path, size), in path order, without ``.git``; a symlink to a
    file counts as that file (a Hugging Face cache snapshot is links to its blobs), a symlink to a
    directory or to nothing is refused. Reads no file's content: what the render's check
    that the source still lists the delivered version's files needs."""
    out = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if rel.parts[0] in NOT_MODEL_DIRS:
            continue
        if path.is_symlink() and not path.is_file():
            raise InvalidInput(
                f"{path} is a symlink to a directory or to nothing",
                problems=[
                    Problem(str(path), "a symlink in the model directory that is not a file's", "copy what it names")
                ],
            )
        if path.is_file():
            out.append((str(rel), path.stat().st_size))
    return out


def source_files(source: Path, on_bytes: Callable[[int], None] | None = None) -> list[SourceFile]:
    """Every regular file under ``source`` with its size and sha256, in path order (symlinks refused);
    ``on_bytes`` is told each block hashed (progress)."""
    return [SourceFile(rel, size, sha256_file(source / rel, on_bytes)) for rel, size in source_sizes(source)]
