"""The disk image's compression (``bootstrap.provision.image.compress``): the real pigz, one read of the disk
for its checksum and pigz both, and a line per tenth done, since a full disk takes minutes and was silent."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bootstrap.provision.image import compress

pytestmark = pytest.mark.skipif(shutil.which("pigz") is None, reason="pigz missing")


def test_the_disk_is_gzipped_with_its_checksum_and_each_tenth_said(tmp_path: Path) -> None:
    disk = tmp_path / "disk.raw"
    with disk.open("wb") as fh:  # data, then a hole, then data: as sparse as a fresh disk image
        fh.write(os.urandom(3 << 20))
        fh.seek(40 << 20)
        fh.write(os.urandom(1 << 20))
    said: list[str] = []
    digest = compress(disk, tmp_path / "disk.raw.gz", said.append)
    raw = disk.read_bytes()
    assert digest == hashlib.sha256(raw).hexdigest()
    assert gzip.decompress((tmp_path / "disk.raw.gz").read_bytes()) == raw
    assert said == [f"compressing the disk: {p} % of 41 MiB" for p in range(10, 101, 10)]


def test_a_failing_pigz_is_an_error_not_a_short_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pigz").write_text("#!/bin/sh\necho 'pigz: write error' >&2\nexit 3\n")  # stops at once
    (bin_dir / "pigz").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    disk = tmp_path / "disk.raw"
    disk.write_bytes(os.urandom(16 << 20))
    with pytest.raises(subprocess.CalledProcessError) as caught:
        compress(disk, tmp_path / "disk.raw.gz", lambda _: None)
    assert caught.value.returncode == 3
