"""BmcConnection against emulated iDRACs: sessions, TLS, retries, typed errors, no leaked secrets."""

from __future__ import annotations

import logging
import time

import pytest
import requests
from pydantic import SecretStr
from rf_lab import FAST, Lab, api

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection, ConnectionPolicy
from redfish_tools.discover import discover
from tests.timing import wait_for


def test_session_login_is_reused_and_always_logged_out(lab: Lab) -> None:
    name = "head-01"
    before = len(lab.rack.request_log(name))
    with BmcConnection(lab.target(name), FAST) as conn:
        assert conn.auth_mode == "session"
        assert lab.rack.open_sessions(name) == 1
        for _ in range(3):
            conn.get("/redfish/v1/Systems")
    assert lab.rack.open_sessions(name) == 0
    log = lab.rack.request_log(name)[before:]
    logins = [r for r in log if r["method"] == "POST" and r["path"].endswith("/Sessions")]
    assert len(logins) == 1
    assert all(r["auth"] == "session" for r in log if r["path"] == "/redfish/v1/Systems")
    assert log[-1]["method"] == "DELETE"


def test_logout_happens_even_when_the_operation_raises(lab: Lab) -> None:
    name = "cp-02"
    with pytest.raises(E.NotFoundError) as info, BmcConnection(lab.target(name), FAST) as conn:
        conn.get("/redfish/v1/Systems/NoSuchSystem")
    assert info.value.status == 404 and info.value.bmc == name and info.value.uri.endswith("NoSuchSystem")
    assert lab.rack.open_sessions(name) == 0


def test_pinned_fingerprint_is_checked(lab: Lab) -> None:
    with BmcConnection(lab.target("head-01", pin=True), FAST) as conn:
        assert conn.get("/redfish/v1/Systems")["Members"]
    wrong = "AA:" * 31 + "AA"
    with (
        pytest.raises(E.TLSError, match="fingerprint"),
        BmcConnection(lab.target("head-01", pin=True, fingerprint=wrong), FAST),
    ):
        pass


def test_tls_is_verified_by_default(lab: Lab) -> None:
    # No CA bundle and no pin: the lab CA is not in the system store, so the handshake must fail.
    with pytest.raises(E.TLSError), BmcConnection(lab.target("head-01", ca_file=None), FAST):
        pass
    # Explicitly insecure works (and is only reachable through the flag).
    with BmcConnection(lab.target("head-01", ca_file=None, insecure=True), FAST) as conn:
        assert conn.root.get("Vendor") == "Dell"


def test_wrong_password_is_an_auth_error_and_not_retried(lab: Lab) -> None:
    name = "cp-03"
    before = len(lab.rack.request_log(name))
    with (
        pytest.raises(E.AuthError) as info,
        BmcConnection(lab.target(name, password=SecretStr("not-the-password")), FAST),
    ):
        pass
    assert info.value.status == 401
    logins = [r for r in lab.rack.request_log(name)[before:] if r["method"] == "POST"]
    assert len(logins) == 1  # never hammer a BMC with a wrong password (lockout)


def test_session_exhaustion_falls_back_to_basic_auth(lab: Lab, spare: str) -> None:
    lab.rack.set_faults(spare, api.FaultSpec(session_exhausted=True))
    before = len(lab.rack.request_log(spare))
    with BmcConnection(lab.target(spare), FAST) as conn:
        assert conn.auth_mode == "basic"
        assert conn.get("/redfish/v1/Systems")["Members"]
    log = lab.rack.request_log(spare)[before:]
    posts = [r for r in log if r["method"] == "POST"]
    assert len(posts) == 1 and posts[0]["status"] == 400  # one RAC0218, no login storm
    systems = [r for r in log if r["path"] == "/redfish/v1/Systems"]
    assert systems and all(r["auth"] == "basic" and r["status"] == 200 for r in systems)
    assert lab.rack.open_sessions(spare) == 0


def test_503_and_swc0700_are_retried_until_success(lab: Lab, spare: str) -> None:
    lab.rack.set_faults(
        spare,
        api.FaultSpec(status_503_rate=0.3, swc0700_rate=0.2, fault_exempt_paths=("/redfish/v1/SessionService",)),
    )
    policy = ConnectionPolicy(
        connect_timeout=2, read_timeout=3, retries=8, backoff=0.01, backoff_max=0.05, retry_after_max=0.05
    )
    with BmcConnection(lab.target(spare), policy) as conn:
        for _ in range(15):
            assert conn.get("/redfish/v1/Systems/System.Embedded.1")["Id"] == "System.Embedded.1"
    faults = [r for r in lab.rack.request_log(spare) if r.get("fault")]
    assert faults, "the emulator injected no fault: the test proves nothing"
    assert lab.rack.open_sessions(spare) == 0


def test_persistent_not_ready_ends_as_typed_error(lab: Lab, spare: str) -> None:
    with BmcConnection(lab.target(spare), FAST) as conn:
        lab.rack.set_faults(spare, api.FaultSpec(swc0700_rate=1.0, fault_exempt_paths=("/redfish/v1/SessionService",)))
        with pytest.raises(E.NotReadyError) as info:
            conn.get("/redfish/v1/Systems")
    assert info.value.message_id == "SWC0700" and info.value.status in (500, 503)
    assert lab.rack.open_sessions(spare) == 0


def test_timeouts_are_bounded_and_a_post_is_not_retried(lab: Lab, spare: str) -> None:
    policy = ConnectionPolicy(connect_timeout=1, read_timeout=0.5, retries=2, backoff=0.01, backoff_max=0.02)
    conn = BmcConnection(lab.target(spare), policy)
    with conn:
        lab.rack.set_faults(
            spare,
            api.FaultSpec(timeout_rate=1.0, hang_s=2.0, fault_exempt_paths=("/redfish/v1/SessionService",)),
        )
        before = len(lab.rack.request_log(spare))
        start = time.monotonic()
        with pytest.raises(E.RedfishTimeout):
            conn.get("/redfish/v1/Systems")
        assert time.monotonic() - start < 3 * 0.5 + 1.5
        with pytest.raises(E.RedfishTimeout):
            conn.post("/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset", {"ResetType": "On"})

        def sent() -> tuple[list[dict], list[dict]] | None:
            """The GETs and POSTs in the emulator's log once the GET's tries and a POST are there."""
            log = lab.rack.request_log(spare)[before:]
            gets = [r for r in log if r["method"] == "GET" and r["path"] == "/redfish/v1/Systems"]
            posts = [r for r in log if r["method"] == "POST" and "ComputerSystem.Reset" in r["path"]]
            return (gets, posts) if len(gets) >= 1 + policy.retries and posts else None

        # the emulator logs a request when it arrives, before it hangs: every try the client made before it
        # raised is in the log as soon as the emulator read it (no need to wait out the hang)
        gets, posts = wait_for(sent, what="the GET's tries and the POST in the emulator's request log")
        lab.rack.set_faults(spare, api.FaultSpec())
    assert len(gets) == 1 + policy.retries
    assert len(posts) == 1  # a POST that may have taken effect is never repeated
    assert lab.rack.open_sessions(spare) == 0


def test_at_most_two_requests_in_flight_per_bmc(lab: Lab, spare: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    lab.rack.set_latency(spare, 300)
    with BmcConnection(lab.target(spare), FAST) as conn:
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: conn.get("/redfish/v1/Systems"), range(6)))
        elapsed = time.monotonic() - start
    # 6 requests at 300 ms with 2 in flight take >= 3 x 300 ms; unbounded they would take ~300 ms.
    assert elapsed >= 0.85, elapsed


def test_no_secret_in_debug_logs(lab: Lab) -> None:
    """A real discover with the DMTF library at DEBUG: it logs every request's and the login answer's
    headers (precondition, so the test fails if that logging never happened), and the session token the
    emulator issued (checked against the emulator: it answers that token) and the password never show."""
    name = "gpu-l40s-01"
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with BmcConnection(lab.target(name), FAST) as conn:
            token = conn._token
            assert token
            issued = requests.get(
                f"{lab.endpoints[name].url}/redfish/v1/Systems",
                headers={"X-Auth-Token": token},
                verify=str(lab.endpoints[name].ca_file),
                timeout=5,
            )
            assert issued.status_code == 200  # the emulator's own session token, not a client-side value
            assert discover(conn).service_tag
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    text = "\n".join(formatter.format(r) for r in records)
    library = [r.getMessage() for r in records if r.name == "redfish.rest.v1" and r.levelno == logging.DEBUG]
    login = [m for m in library if m.startswith("HTTP RESPONSE for /redfish/v1/SessionService/Sessions")]
    reads = [m for m in library if m.startswith("HTTP REQUEST (GET)") and "X-Auth-Token:" in m]
    assert login and "X-Auth-Token:" in login[0], "the library did not log the login answer's headers"
    assert len(reads) >= 3, "the library did not log the session-authenticated requests' headers"
    assert token not in text
    assert lab.specs[name].password not in text
    assert lab.specs[name].password not in repr(lab.target(name))
