"""Fixtures: a valid inventory (the shipped sample) as data to mutate, and a checker."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory import validate_data
from bootstrap.inventory.loader import LoadResult

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"
_SAMPLE_DATA = yaml.safe_load(SAMPLE.read_text())


@pytest.fixture
def data(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A deep copy of the valid sample inventory (with its password variable set)."""
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "not-used-here")
    return copy.deepcopy(_SAMPLE_DATA)


def problems_of(data: dict[str, Any], source: Path | None = None) -> list[Problem]:
    """The errors the inventory has; [] if it is valid."""
    try:
        validate_data(data, source)
    except InvalidInput as exc:
        return exc.problems
    return []


def valid(data: dict[str, Any], source: Path | None = None) -> LoadResult:
    """Validate data that must be valid."""
    return validate_data(data, source)


def expect(data: dict[str, Any], path: str, *words: str, source: Path | None = None) -> Problem:
    """Assert exactly one error at ``path`` whose message+fix contains every word; return it."""
    found = [p for p in problems_of(data, source) if p.path == path]
    assert found, f"no problem at {path}; got {[str(p) for p in problems_of(data, source)]}"
    text = " ".join(f"{p.message} {p.fix}" for p in found)
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    return found[0]
