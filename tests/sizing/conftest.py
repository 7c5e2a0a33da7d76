"""Shared fixtures of the sizing tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.sizing.tables import DesignGuideTables, load_tables

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "inventory" / "examples" / "sizing"


@pytest.fixture(scope="session")
def tables() -> DesignGuideTables:
    return load_tables()
