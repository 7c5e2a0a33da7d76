"""Fixtures: a small emulated iDRAC rack (real HTTPS servers on loopback) and targets for it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (rf_lab) under --import-mode=importlib

from rf_lab import NODES, Lab, api, make_spec


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The sample inventory's five nodes plus two spare BMCs for fault tests, all healthy at start."""
    specs = [make_spec(*n, index=i) for i, n in enumerate(NODES)]
    specs += [make_spec(f"spare-{i}", "R660", f"SPARE0{i}", None, 0, index=10 + i) for i in range(2)]
    rack = api.EmulatedRack(specs, tmp_path_factory.mktemp("rack"), processes=1)
    endpoints = rack.start()
    try:
        yield Lab(rack, specs, endpoints)
    finally:
        rack.stop()


@pytest.fixture
def spare(lab: Lab) -> Iterator[str]:
    """A spare BMC whose faults and latency are reset after the test."""
    name = "spare-0"
    yield name
    lab.rack.set_faults(name, api.FaultSpec())
    lab.rack.set_latency(name, 0)
