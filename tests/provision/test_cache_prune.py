"""``rackctl image prune``: the cache keeps the most recently used entries of each kind, removes the rest.

A real cache layout in a temporary ``$RACKCTL_CACHE`` (entries are plain directories of files here; what
is in them does not matter to pruning), run through the CLI.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.provision.ramdisk import mark_used

DAY = 86400


def entry(cache: Path, rel: str, days_ago: float, size: int = 1000) -> Path:
    path = cache / rel
    path.mkdir(parents=True)
    (path / "payload").write_bytes(b"x" * size)
    when = time.time() - days_ago * DAY
    os.utime(path, (when, when))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    for i, days in enumerate((9, 3, 1)):
        entry(root, f"image/disk-{i:016x}", days)
    entry(root, "image/rootfs-bookworm-0000000000000001", 30)
    for i, days in enumerate((20, 5, 2)):
        entry(root, f"ramdisk/lab-{i:016x}", days)
    entry(root, "ramdisk/dell-00000000000000aa", 40)  # the only dell ramdisk: kept, whatever its age
    entry(root, "image/.disk.inprogress", 50)  # a build's work directory
    entry(root, "kernel/linux-image-6.1", 60)  # not pruned
    monkeypatch.setenv("RACKCTL_CACHE", str(root))
    return root


def prune(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["image", "prune", *args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}


def names(items: list[dict]) -> set[str]:
    return {Path(i["path"]).name for i in items}


def test_plan_lists_the_oldest_beyond_keep_per_kind_and_removes_nothing(cache: Path) -> None:
    code, data = prune("--plan")
    assert code == 0 and data["plan"] is True
    assert names(data["would_remove"]) == {"disk-0000000000000000", "lab-0000000000000000"}
    assert data["would_free_bytes"] == 2000
    assert all((cache / d).exists() for d in ("image/disk-0000000000000000", "ramdisk/lab-0000000000000000"))


def test_prune_removes_them_and_leaves_work_dirs_and_the_kernel_alone(cache: Path) -> None:
    code, data = prune("--keep", "1")
    assert code == 0 and data["freed_bytes"] == 4000
    left = {p.name for p in (cache / "image").iterdir()} | {p.name for p in (cache / "ramdisk").iterdir()}
    assert {"disk-0000000000000002", "lab-0000000000000002", "rootfs-bookworm-0000000000000001"} <= left
    assert "dell-00000000000000aa" in left and ".disk.inprogress" in left
    assert not {"disk-0000000000000000", "disk-0000000000000001", "lab-0000000000000001"} & left
    assert (cache / "kernel" / "linux-image-6.1").is_dir()
    assert names(data["kept"]) >= {"disk-0000000000000002", "dell-00000000000000aa"}


def test_a_reused_entry_counts_as_recent(cache: Path) -> None:
    mark_used(cache / "image" / "disk-0000000000000000")  # what a build that reuses it does
    _, data = prune("--plan", "--keep", "2")
    assert "disk-0000000000000001" in names(data["would_remove"])
    assert "disk-0000000000000000" not in names(data["would_remove"])


def test_bytes_also_linked_elsewhere_are_not_counted_as_freed(cache: Path, tmp_path: Path) -> None:
    os.link(cache / "image" / "disk-0000000000000000" / "payload", tmp_path / "artefact-copy")
    _, data = prune("--plan")
    assert data["would_free_bytes"] == 1000  # only the old lab ramdisk's file


def test_keep_must_be_at_least_one() -> None:
    result = CliRunner().invoke(cli, ["image", "prune", "--keep", "0"])
    assert result.exit_code == 2 and "--keep" in result.output
