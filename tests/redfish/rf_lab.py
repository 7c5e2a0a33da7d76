"""Helpers for the redfish tests: emulated BMC specs, targets, the Lab wrapper (imported by tests)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic import SecretStr

from redfish_tools.connection import BmcTarget, ConnectionPolicy

api = pytest.importorskip("rackctl_lab.idrac.api", reason="the emulated iDRAC rack is not available")

#: The sample inventory's five nodes (3 x R660, R760xa with 4 x L40S, XE9680).
NODES = [
    ("head-01", "R660", "HD01R66", None, 0),
    ("cp-02", "R660", "CP02R66", None, 0),
    ("cp-03", "R660", "CP03R66", None, 0),
    ("gpu-l40s-01", "R760xa", "GL01R76", "NVIDIA L40S", 4),
    ("gpu-xe9680-01", "XE9680", "GX01X96", "NVIDIA H100 80GB HBM3", 8),
]


def mac_for(index: int, port: int) -> str:
    return f"b0:7b:25:00:{index:02x}:{port:02x}"


def make_spec(name: str, model: str, tag: str, gpu: str | None, count: int, *, index: int) -> api.EmulatedBmcSpec:
    nics = {"NIC.Embedded.1-1-1": mac_for(index, 1), "NIC.Integrated.1-1-1": mac_for(index, 2)}
    if model != "R660":
        nics["NIC.Slot.1-1-1"] = mac_for(index, 3)
    return api.EmulatedBmcSpec(
        name=name,
        model=model,
        service_tag=tag,
        gpu_model=gpu,
        gpu_count=count,
        nics=nics,
        username="root",
        password=f"pw-{secrets.token_hex(8)}",  # a distinct, recognisable secret per BMC
        power_delay_s=0.2,
        job_seconds=0.5,
    )


def target_of(spec: api.EmulatedBmcSpec, endpoint: api.BmcEndpoint, *, pin: bool = False) -> BmcTarget:
    return BmcTarget(
        name=spec.name,
        url=endpoint.url,
        username=spec.username,
        password=SecretStr(spec.password),
        ca_file=None if pin else endpoint.ca_file,
        fingerprint=endpoint.fingerprint if pin else None,
    )


#: Fast policy for tests: short timeouts and backoff, still bounded retries.
FAST = ConnectionPolicy(
    connect_timeout=2,
    read_timeout=3,
    retries=4,
    backoff=0.05,
    backoff_max=0.3,
    retry_after_max=0.3,
)


class Lab:
    """The running rack plus its specs and endpoints by name."""

    def __init__(self, rack: api.EmulatedRack, specs: list[api.EmulatedBmcSpec], endpoints: list) -> None:
        self.rack = rack
        self.specs = {s.name: s for s in specs}
        self.endpoints = {e.name: e for e in endpoints}

    def target(self, name: str, *, pin: bool = False, **changes: object) -> BmcTarget:
        t = target_of(self.specs[name], self.endpoints[name], pin=pin)
        return replace(t, **changes) if changes else t

    @property
    def passwords(self) -> list[str]:
        return [s.password for s in self.specs.values()]


def assert_no_secret(text: str, secrets_: list[str]) -> None:
    for value in secrets_:
        assert value not in text, "a secret leaked into the output"


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One emulated iDRAC per :data:`NODES` for a module: (rack, specs by name, endpoints by name)."""
    specs = [make_spec(*n, index=i) for i, n in enumerate(NODES)]
    emulated = api.EmulatedRack(specs, tmp_path_factory.mktemp("rack"), processes=1)
    endpoints = emulated.start()
    try:
        yield emulated, {s.name: s for s in specs}, {e.name: e for e in endpoints}
    finally:
        emulated.stop()
