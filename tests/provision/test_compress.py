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


def test_a_failing_pigz_is_an_error_not_a_short_image(tmp_path: Path) -> None:
    """The real pigz, writing to a full disk (``/dev/full``), stops mid-stream: an error, never an image."""
    disk = tmp_path / "disk.raw"
    disk.write_bytes(os.urandom(16 << 20))
    with pytest.raises(subprocess.CalledProcessError) as caught:
        compress(disk, Path("/dev/full"), lambda _: None)
    assert caught.value.returncode != 0
