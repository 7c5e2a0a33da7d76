"""Fixtures: a small emulated rack with a firmware baseline (real HTTPS iDRAC emulators on loopback)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (fwlab) under --import-mode=importlib

from fwlab import FwLab, start_lab


@pytest.fixture
def fwlab(tmp_path: Path) -> Iterator[FwLab]:
    """Six nodes: three control planes (R660) and three GPU workers, every one below the baseline."""
    lab = start_lab(tmp_path, 6)
    try:
        yield lab
    finally:
        lab.rack.stop()
