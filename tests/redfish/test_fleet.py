"""Fleet fan-out with a fifth of the BMCs misbehaving: healthy nodes complete, faulty ones are reported
with their cause, no session stays open, and no password or token shows up anywhere."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import pytest
from rf_lab import make_spec

from redfish_tools.connection import ConnectionPolicy
from redfish_tools.discover import discover
from redfish_tools.fleet import run_fleet
from redfish_tools.secrets import REDACTED

api = pytest.importorskip("rackctl_lab.idrac.api")

FAULTY = {
    "node-00": ("transport", api.FaultSpec(always_fail=True)),  # dead BMC: 500 on everything
    "node-03": ("ok", api.FaultSpec(session_exhausted=True)),  # RAC0218: basic auth, still discovered
    "node-02": ("timeout", api.FaultSpec(timeout_rate=1.0, hang_s=3.0)),
}
TRANSIENT = api.FaultSpec(status_503_rate=0.08, swc0700_rate=0.08)


@pytest.fixture(scope="module")
def fleet_rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[api.EmulatedRack, list, dict]]:
    specs = []
    for i in range(15):
        spec = make_spec(f"node-{i:02d}", "R760xa", f"FLT{i:04d}", "NVIDIA L40S", 4, index=40 + i)
        spec.faults = FAULTY[spec.name][1] if spec.name in FAULTY else TRANSIENT
        spec.latency_ms = 20
        specs.append(spec)
    rack = api.EmulatedRack(specs, tmp_path_factory.mktemp("fleet"), processes=1)
    endpoints = rack.start()
    try:
        yield rack, specs, {e.name: e for e in endpoints}
    finally:
        rack.stop()


def test_partial_failure_is_reported_per_node(fleet_rack, caplog: pytest.LogCaptureFixture) -> None:
    from rf_lab import target_of

    rack, specs, endpoints = fleet_rack
    targets = [target_of(s, endpoints[s.name]) for s in specs]
    policy = ConnectionPolicy(
        connect_timeout=2,
        read_timeout=1,
        retries=6,
        backoff=0.02,
        backoff_max=0.1,
        retry_after_max=0.1,
    )
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        results = run_fleet(targets, discover, policy=policy, progress=lambda r: seen.append(r.name))
    assert sorted(seen) == sorted(s.name for s in specs)  # progress once per node
    by_name = {r.name: r for r in results}
    for spec in specs:
        result = by_name[spec.name]
        if spec.name in FAULTY and FAULTY[spec.name][0] != "ok":
            assert not result.ok
            expected = FAULTY[spec.name][0]
            assert result.error["bmc"] == spec.name
            if expected == "transport":
                assert result.error["status"] == 500  # the cause: the BMC answers 500 to everything
            else:
                assert result.error["kind"] == expected, result.error
        else:
            assert result.ok, result.error
            assert result.value.service_tag == spec.service_tag and result.value.gpu_count == 4
    assert any(r["auth"] == "basic" for r in rack.request_log("node-03"))  # the RAC0218 node used basic auth
    for spec in specs:
        assert rack.open_sessions(spec.name) == 0 or spec.name == "node-00", spec.name
    blob = json.dumps([r.as_dict(lambda f: f.as_dict()) for r in results]) + caplog.text
    for spec in specs:
        assert spec.password not in blob
    # The client's own DEBUG log (the DMTF library logs every request's headers): the precondition is that
    # the session headers were logged at all; every token value in them is masked.
    tokens = re.findall(r"X-Auth-Token:\s*(\S+)", caplog.text)
    assert tokens, "the library logged no X-Auth-Token header"
    assert set(tokens) == {REDACTED}, "a session token reached the log"
