"""Fixtures of the provisioning tests: the lab inventory and stand-in artefacts for rendering."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab_inventory() -> Inventory:
    """``inventory/lab.yml``: it loads before ``lab up`` made its files (rules never look at this machine)."""
    return load_inventory(REPO / "inventory" / "lab.yml")


@pytest.fixture
def artefacts(tmp_path: Path) -> dict[str, Path]:
    """Small stand-in kernel, initrd and gzipped image: rendering only links them, never runs them."""
    folder = tmp_path / "artefacts"
    folder.mkdir()
    kernel, initrd, image = folder / "vmlinuz", folder / "initrd.img", folder / "disk.raw.gz"
    kernel.write_bytes(b"kernel")
    initrd.write_bytes(b"initrd")
    image.write_bytes(gzip.compress(b"\0" * 4096 + b"rackctl"))
    return {"kernel": kernel, "initrd": initrd, "image": image}
