"""The asyncio engine (what ``rackctl discover`` runs) against emulated iDRACs: same facts as the threaded
path, same TLS rules, typed errors, sessions closed, no secret in logs."""

from __future__ import annotations

import logging

from pydantic import SecretStr
from rf_lab import FAST, Lab

from redfish_tools.aio import discover_async, run_fleet_async
from redfish_tools.connection import BmcConnection
from redfish_tools.discover import discover

NAMES = ["head-01", "gpu-l40s-01", "gpu-xe9680-01"]


def test_async_discover_matches_threaded_discover(lab: Lab) -> None:
    results = run_fleet_async([lab.target(n, pin=True) for n in NAMES], discover_async, policy=FAST)
    assert all(r.ok for r in results), [r.error for r in results]
    for result in results:
        with BmcConnection(lab.target(result.name), FAST) as conn:
            expected = discover(conn).as_dict()
        got = result.value.as_dict()
        expected.pop("requests")
        got.pop("requests")
        expected["power_state"] = got["power_state"]  # other tests may power nodes meanwhile
        assert got == expected
        assert lab.rack.open_sessions(result.name) == 0


def test_async_tls_and_auth_failures_are_typed_per_node(lab: Lab, caplog) -> None:
    wrong_pin = "AA:" * 31 + "AA"
    targets = [
        lab.target("cp-02", pin=True, fingerprint=wrong_pin),
        lab.target("cp-03", ca_file=None),  # lab CA not trusted by the system store
        lab.target("head-01", password=SecretStr("wrong-password-123")),
        lab.target("gpu-l40s-01"),
    ]
    with caplog.at_level(logging.DEBUG):
        results = {r.name: r for r in run_fleet_async(targets, discover_async, policy=FAST)}
    assert results["cp-02"].error["kind"] == "tls" and "fingerprint" in results["cp-02"].error["message"]
    assert results["cp-03"].error["kind"] == "tls"
    assert results["head-01"].error["kind"] == "auth" and results["head-01"].error["status"] == 401
    assert results["gpu-l40s-01"].ok
    for spec in lab.specs.values():
        assert spec.password not in caplog.text
    assert "wrong-password-123" not in caplog.text
    for name in ("cp-02", "cp-03", "head-01", "gpu-l40s-01"):
        assert lab.rack.open_sessions(name) == 0
