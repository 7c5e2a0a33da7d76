"""Housekeeping of the build cache (``~/.cache/rackctl``): which built images and ramdisks ``rackctl image
prune`` removes, and removing them under the same locks the builds take.

Every distinct input (admin keys, recipe, kernel, profile) builds a new entry, so the cache only grows: a lab
rebuilt with new keys adds a 230 MB image each time. Entries are grouped by what replaces what (OS images;
debootstrap trees per suite; ramdisks per profile) and the ``keep`` most recently used of each group stay.
A build that reuses an entry marks it used (:func:`bootstrap.provision.ramdisk.mark_used`), so "recent"
means used, not built.
The kernel package tree and the kube-apiserver build are left alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bootstrap.provision.ramdisk import cache_lock, remove_tree

#: the cache sub-directories pruned: OS images (and their debootstrap trees), deploy ramdisks
IMAGE_DIR, RAMDISK_DIR = "image", "ramdisk"


@dataclass(frozen=True)
class CacheEntry:
    """One built entry: its group (what replaces what), where it is, the bytes its removal frees, when last used."""

    group: str
    path: Path
    size: int
    used: float

    def as_dict(self, now: float | None = None) -> dict[str, object]:
        age = (now or time.time()) - self.used
        return {"group": self.group, "path": str(self.path), "bytes": self.size, "age_days": round(age / 86400, 1)}


def _size(path: Path) -> int:
    """The bytes removing ``path`` frees: files linked from elsewhere too (a copy in ``--out``) do not count."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = (Path(root) / name).lstat()
            except OSError:
                continue
            if st.st_nlink == 1:
                total += st.st_size
    return total


def _group(kind: str, name: str) -> str | None:
    if kind == IMAGE_DIR:
        if name.startswith("disk-"):
            return "image"
        if name.startswith("rootfs-"):
            return "rootfs-" + name.removeprefix("rootfs-").rsplit("-", 1)[0]  # rootfs-<suite>
        return None
    profile, sep, _key = name.rpartition("-")
    return f"ramdisk-{profile}" if sep and profile else None


def entries(cache: Path) -> Iterator[CacheEntry]:
    """The prunable entries of ``cache`` (work directories of builds in progress, ``.``-names, are skipped)."""
    for kind in (IMAGE_DIR, RAMDISK_DIR):
        folder = cache / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            group = _group(kind, path.name)
            if path.name.startswith(".") or not path.is_dir() or path.is_symlink() or group is None:
                continue
            yield CacheEntry(group, path, _size(path), path.stat().st_mtime)


def to_prune(found: Iterator[CacheEntry] | list[CacheEntry], keep: int) -> list[CacheEntry]:
    """The entries beyond the ``keep`` most recently used of each group, oldest first."""
    groups: dict[str, list[CacheEntry]] = {}
    for entry in found:
        groups.setdefault(entry.group, []).append(entry)
    out: list[CacheEntry] = []
    for members in groups.values():
        out.extend(sorted(members, key=lambda e: e.used, reverse=True)[keep:])
    return sorted(out, key=lambda e: e.used)


def prune(cache: Path, keep: int, *, apply: bool) -> tuple[list[CacheEntry], list[CacheEntry]]:
    """(pruned or to be pruned, kept): with ``apply``, the old entries are deleted.

    Holds the image and ramdisk build locks, so no build writes or picks an entry while it is removed.
    """
    with ExitStack() as stack:
        for kind in (IMAGE_DIR, RAMDISK_DIR):
            if (cache / kind).is_dir():
                stack.enter_context(cache_lock(cache / kind))
        found = list(entries(cache))
        gone = to_prune(found, keep)
        if apply:
            for entry in gone:
                remove_tree(entry.path)
    kept = [e for e in found if e not in gone]
    return gone, kept
