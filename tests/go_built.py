"""What a test does when a part the lab builds with Go cannot be built here (no Go toolchain)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from bootstrap.errors import EnvironmentMissing


def unbuildable(what: str, exc: EnvironmentMissing) -> NoReturn:
    """Skip the test; with RACKCTL_REQUIRE_COMPONENTS=1 (scripts/test.sh, CI) fail it instead."""
    if os.environ.get("RACKCTL_REQUIRE_COMPONENTS") == "1":
        pytest.fail(f"{what} cannot be built: {exc.message}")
    pytest.skip(f"{what} cannot be built: {exc.message}")
