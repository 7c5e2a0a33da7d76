"""Inventories for the cluster render tests (the shipped example, edited per test).

The real kube-apiserver (``kube_apiserver``, ``kubeconfig``, ``kube``) is a session fixture of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.fixture
def write_inventory(tmp_path: Path) -> Callable[..., Path]:
    """Write the example inventory with ``edit(data)`` applied; return its path."""

    def write(edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
        data = yaml.safe_load(EXAMPLE.read_text())
        if edit is not None:
            edit(data)
        path = tmp_path / "cluster.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write
