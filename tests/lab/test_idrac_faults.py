"""Faults, latency, TLS and secrecy of the emulated iDRACs."""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import time

import pytest
import requests

from rackctl_lab.idrac import FaultSpec

pytestmark = pytest.mark.lab

SYS = "/redfish/v1/Systems/System.Embedded.1"
MGR = "/redfish/v1/Managers/iDRAC.Embedded.1"


def test_503_rate_is_per_bmc_and_carries_retry_after(bmc, rack):
    faulty, healthy = bmc("fault-a"), bmc("head-01")
    rack.set_faults("fault-a", FaultSpec(status_503_rate=0.5))
    try:
        statuses = [faulty.get(SYS).status_code for _ in range(80)]
        assert {200, 503} == set(statuses)
        assert 20 <= statuses.count(503) <= 60
        resp = next(r for r in (faulty.get(SYS) for _ in range(50)) if r.status_code == 503)
        assert resp.headers["Retry-After"] == "1"
        assert all(healthy.get(SYS).status_code == 200 for _ in range(10))
    finally:
        rack.set_faults("fault-a", FaultSpec())
    assert faulty.get(SYS).status_code == 200
    log = rack.request_log("fault-a")
    assert {e["fault"] for e in log} >= {"503", None}


def test_swc0700_and_dead_bmc(bmc, rack, util):
    client = bmc("fault-b")
    rack.set_faults("fault-b", FaultSpec(swc0700_rate=1.0))
    resp = client.get(SYS)
    assert resp.status_code == 503 and any(m.endswith("SWC0700") for m in util.extended_ids(resp))
    rack.set_faults("fault-b", FaultSpec(always_fail=True))
    assert client.get("/redfish/v1", auth=False).status_code == 500
    rack.set_faults("fault-b", FaultSpec())
    assert client.get(SYS).status_code == 200


def test_session_exhaustion_fault(bmc, rack, util):
    client = bmc("fault-c")
    rack.set_faults("fault-c", FaultSpec(session_exhausted=True))
    try:
        resp = client.login()
        assert resp.status_code == 400 and any(m.endswith("RAC0218") for m in util.extended_ids(resp))
        assert rack.open_sessions("fault-c") == 0
    finally:
        rack.set_faults("fault-c", FaultSpec())
    assert client.login().status_code == 201


def test_timeout_fault_hangs_past_the_read_timeout(bmc, rack):
    client = bmc("fault-d")
    rack.set_faults("fault-d", FaultSpec(timeout_rate=1.0, hang_s=3.0, fault_exempt_paths=("/redfish/v1/Session",)))
    try:
        assert client.login().status_code == 201  # exempt path
        with pytest.raises(requests.exceptions.ReadTimeout):
            client.get(SYS, timeout=(2, 0.5))
    finally:
        rack.set_faults("fault-d", FaultSpec())
    assert client.get(SYS).status_code == 200
    assert "timeout" in {e["fault"] for e in rack.request_log("fault-d")}


def test_reset_during_job_drops_connections_and_sessions(bmc, rack, util):
    client = bmc("fault-e")
    rack.set_faults("fault-e", FaultSpec(reset_during_job=True, reset_s=1.5))
    assert client.login().status_code == 201
    export = client.post(
        f"{MGR}/Actions/Oem/EID_674_Manager.ExportSystemConfiguration",
        {"ExportFormat": "JSON", "ShareParameters": {"Target": "BIOS"}},
    )
    assert export.status_code == 202
    with pytest.raises(requests.exceptions.ConnectionError):
        client.get(export.headers["Location"], timeout=3)
    assert rack.open_sessions("fault-e") == 0
    client.token = client.location = None

    def answers() -> requests.Response | None:
        try:
            return client.get(export.headers["Location"], timeout=3)
        except requests.RequestException:
            return None

    done = util.wait_for(lambda: (r := answers()) is not None and r.status_code == 200 and r, timeout=10)
    assert json.loads(done.text)["SystemConfiguration"]["ServiceTag"] == client.spec.service_tag
    rack.set_faults("fault-e", FaultSpec())


def test_latency_is_added_per_bmc(bmc, rack):
    slow, fast = bmc("fault-f"), bmc("head-01")
    rack.set_latency("fault-f", 300)
    try:
        slow.get("/redfish/v1", auth=False)  # connection set up
        started = time.perf_counter()
        assert slow.get("/redfish/v1", auth=False).status_code == 200
        assert time.perf_counter() - started >= 0.3
    finally:
        rack.set_latency("fault-f", 0)
    fast.get("/redfish/v1", auth=False)
    started = time.perf_counter()
    fast.get("/redfish/v1", auth=False)
    assert time.perf_counter() - started < 0.3


def test_tls_is_verified_with_the_lab_ca_and_pinned_fingerprint(endpoints):
    ep = endpoints["head-01"]
    host, port = ep.url.removeprefix("https://").rsplit(":", 1)
    system_trust = requests.Session()
    system_trust.trust_env = False
    with pytest.raises(requests.exceptions.SSLError):
        system_trust.get(f"{ep.url}/redfish/v1", timeout=5)  # default trust store: not the lab CA
    ctx = ssl.create_default_context(cafile=str(ep.ca_file))
    with (
        socket.create_connection((host, int(port)), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest()) == ep.fingerprint
    others = {e.fingerprint for e in endpoints.values()}
    assert len(others) == len(endpoints)  # every BMC has its own certificate


def test_emulator_records_headers_but_no_secret(bmc, rack, specs):
    """The emulator's own records (request log, worker logs, files) keep request headers but never a
    credential. This is the emulator's property; that rackctl's (the client's) logs hold no token is
    checked on the client side, in ``tests/redfish/test_connection.py::test_no_secret_in_debug_logs``."""
    client = bmc("head-01")
    assert client.login().status_code == 201
    token = client.token
    assert token
    client.get(SYS)
    basic = bmc("head-01")
    basic.get(SYS)  # basic auth
    client.logout()
    log = rack.request_log("head-01")
    # Preconditions: the emulator did record the requests' headers, and saw both kinds of credential.
    authed = [e for e in log if e["auth"] in {"session", "basic"}]
    assert {e["auth"] for e in authed} >= {"session", "basic"}
    assert all(e["headers"] for e in authed) and any("Accept" in e["headers"] for e in authed), authed
    log_text = json.dumps(log)
    assert token not in log_text
    assert specs["head-01"].password not in log_text
    assert "Authorization" not in log_text and "X-Auth-Token" not in log_text
    for path in rack.workdir.rglob("*"):
        if path.is_file() and path.suffix != ".sqlite":
            text = path.read_text(errors="replace")
            assert all(s.password not in text for s in specs.values()), path
            assert token not in text, path
