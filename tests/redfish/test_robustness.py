"""The one engine's out-of-band robustness, against emulated iDRACs and real local servers: pagination and
RAC0218 fallback in the fleet path, 403 reported (never a re-login), total deadlines against trickling and
silent BMCs, no session left after an interrupted operation, and no dependency on ``bootstrap``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import SecretStr
from rf_lab import FAST, Lab, api
from rf_proxy import SlowServer, bmc_proxy

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection, BmcTarget, ConnectionPolicy
from redfish_tools.discover import discover
from redfish_tools.fleet import run_fleet

ROOT = Path(__file__).resolve().parents[2]


def _logins(lab: Lab, name: str, since: int) -> list[dict]:
    return [r for r in lab.rack.request_log(name)[since:] if r["method"] == "POST" and r["path"].endswith("/Sessions")]


def test_redfish_tools_imports_nothing_from_bootstrap() -> None:
    code = (
        "import importlib, pkgutil, sys, redfish_tools\n"
        "for m in pkgutil.iter_modules(redfish_tools.__path__):\n"
        "    if m.name not in ('peer',):\n"
        "        importlib.import_module('redfish_tools.' + m.name)\n"
        "print(sorted(n for n in sys.modules if n == 'bootstrap' or n.startswith('bootstrap.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == []
    assert "redfish_tools.aio" not in out.stdout


def test_fleet_follows_members_nextlink_pages(lab: Lab) -> None:
    names = ["gpu-l40s-01", "gpu-xe9680-01"]
    direct = {r.name: r.value.as_dict() for r in run_fleet([lab.target(n) for n in names], discover, policy=FAST)}
    with (
        bmc_proxy(lab.endpoints[names[0]].url, lab.endpoints[names[0]].ca_file) as p0,
        bmc_proxy(lab.endpoints[names[1]].url, lab.endpoints[names[1]].ca_file) as p1,
    ):
        p0.page_size = p1.page_size = 1  # every collection of more than one member comes in pages of one
        targets = [replace(lab.target(names[0]), url=p0.url), replace(lab.target(names[1]), url=p1.url)]
        paged = {r.name: r for r in run_fleet(targets, discover, policy=FAST)}
        assert p0.pages_served >= 5 and p1.pages_served >= 5, "no collection was paged: the test proves nothing"
    for name in names:
        assert paged[name].ok, paged[name].error
        got, want = paged[name].value.as_dict(), direct[name]
        for key in ("requests", "power_state"):
            got.pop(key), want.pop(key)
        assert got == want  # same GPUs, NICs, DIMMs, drives and firmware as unpaged
        assert paged[name].value.gpu_count in (4, 8)
        assert lab.rack.open_sessions(name) == 0


def test_fleet_falls_back_to_basic_auth_on_rac0218(lab: Lab, spare: str) -> None:
    lab.rack.set_faults(spare, api.FaultSpec(session_exhausted=True))
    since = len(lab.rack.request_log(spare))
    [result] = run_fleet([lab.target(spare)], discover, policy=FAST)
    assert result.ok, result.error
    assert result.value.service_tag == "SPARE00"
    log = lab.rack.request_log(spare)[since:]
    assert len(_logins(lab, spare, since)) == 1
    assert all(r["auth"] == "basic" for r in log if r["path"].startswith("/redfish/v1/Systems"))
    assert lab.rack.open_sessions(spare) == 0


def test_403_is_a_permission_error_not_a_relogin(lab: Lab) -> None:
    name = "cp-02"
    bios = "/redfish/v1/Systems/System.Embedded.1/Bios"
    since = len(lab.rack.request_log(name))
    with bmc_proxy(lab.endpoints[name].url, lab.endpoints[name].ca_file) as proxy:
        proxy.forbidden.add(("GET", bios))
        with BmcConnection(replace(lab.target(name), url=proxy.url), FAST) as conn:
            assert conn.get("/redfish/v1/Systems")["Members"]
            with pytest.raises(E.PermissionDeniedError) as info:
                conn.get(bios)
            assert conn.get("/redfish/v1/Systems")["Members"]  # the session still works
    err = info.value
    assert (err.status, err.bmc, err.uri, err.message_id) == (403, name, bios, "InsufficientPrivilege")
    assert err.kind == "permission" and "HTTP 403" in str(err)
    assert len(_logins(lab, name, since)) == 1  # one session created: no re-login on 403
    assert lab.rack.open_sessions(name) == 0


def test_deadline_cuts_trickling_and_silent_bmcs_while_healthy_nodes_finish(lab: Lab) -> None:
    trickle, silent = SlowServer("trickle", interval_s=0.3), SlowServer("silent")
    policy = replace(FAST, read_timeout=1.0, deadline_s=2.0)  # each trickled byte arrives well within 1 s
    slow = [
        BmcTarget("trickler", trickle.url, "root", SecretStr("x")),
        BmcTarget("silent", silent.url, "root", SecretStr("x")),
    ]
    healthy = [lab.target(n) for n in ("head-01", "cp-03", "gpu-l40s-01")]
    reported: dict[str, float] = {}
    start = time.monotonic()
    try:
        results = {
            r.name: r
            for r in run_fleet(
                slow + healthy,
                discover,
                policy=policy,
                progress=lambda r: reported.setdefault(r.name, time.monotonic() - start),
            )
        }
    finally:
        trickle.close()
        silent.close()
    elapsed = time.monotonic() - start
    assert elapsed < 2.0 + 1.5, elapsed  # not the trickle's forever nor retries x read timeouts
    for name in ("trickler", "silent"):
        err = results[name].error
        assert not results[name].ok and err["kind"] == "deadline", err
        assert "deadline exceeded after 2 s" in err["message"]
        assert 1.9 <= reported[name] < 3.5, reported
    for target in healthy:
        assert results[target.name].ok, results[target.name].error
        assert reported[target.name] < reported["trickler"]  # reported at once, not after the slow ones
        assert lab.rack.open_sessions(target.name) == 0


def test_request_deadline_bounds_one_trickled_request() -> None:
    server = SlowServer("trickle", interval_s=0.2)
    policy = ConnectionPolicy(connect_timeout=1, read_timeout=1, request_deadline_s=1.5, retries=3)
    conn = BmcConnection(BmcTarget("trickler", server.url, "root", SecretStr("x")), policy)
    start = time.monotonic()
    try:
        with pytest.raises(E.DeadlineExceeded, match=r"deadline exceeded after 1\.5 s"), conn:
            pass
    finally:
        server.close()
    assert time.monotonic() - start < 1.5 + 1.0


def test_keyboard_interrupt_in_an_operation_logs_out(lab: Lab) -> None:
    name = "cp-03"
    with pytest.raises(KeyboardInterrupt), BmcConnection(lab.target(name), FAST) as conn:
        conn.get("/redfish/v1/Systems")
        assert lab.rack.open_sessions(name) == 1
        raise KeyboardInterrupt
    assert lab.rack.open_sessions(name) == 0


def test_login_whose_answer_is_lost_leaves_no_session(lab: Lab, spare: str) -> None:
    since = len(lab.rack.request_log(spare))
    with bmc_proxy(lab.endpoints[spare].url, lab.endpoints[spare].ca_file) as proxy:
        proxy.login_delay_s = 1.5  # the emulator makes the session at once; its answer comes after the timeout
        policy = replace(FAST, read_timeout=0.5)
        with pytest.raises(E.RedfishTimeout), BmcConnection(replace(lab.target(spare), url=proxy.url), policy):
            pass
    assert len(_logins(lab, spare, since)) == 1, "the login POST is never repeated"
    deletes = [r for r in lab.rack.request_log(spare)[since:] if r["method"] == "DELETE"]
    assert deletes and deletes[-1]["status"] == 200 and deletes[-1]["auth"] == "basic"
    assert lab.rack.open_sessions(spare) == 0


def test_ctrl_c_during_login_leaves_no_session(lab: Lab, spare: str) -> None:
    with bmc_proxy(lab.endpoints[spare].url, lab.endpoints[spare].ca_file) as proxy:
        proxy.login_delay_s = 2.0
        main = threading.main_thread().ident
        assert main == threading.get_ident()
        timer = threading.Timer(0.6, signal.pthread_kill, args=(main, signal.SIGINT))  # a real Ctrl-C
        entered = []
        since = len(lab.rack.request_log(spare))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt), BmcConnection(replace(lab.target(spare), url=proxy.url), FAST):
                entered.append(True)
                time.sleep(5)
        finally:
            timer.cancel()
        assert not entered, "the interrupt came after the login: the test proves nothing"
        assert len(_logins(lab, spare, since)) == 1  # the session was made on the emulator
        assert lab.rack.open_sessions(spare) == 0


def test_cli_prints_a_redfish_error_as_a_message_with_exit_1() -> None:
    import click
    from click.testing import CliRunner

    from bootstrap.cli import flags
    from bootstrap.cli.common import handle_errors

    @click.command()
    @flags.json
    @handle_errors()
    def cmd(as_json: bool) -> None:
        raise E.PermissionDeniedError("not allowed", bmc="cp-02", uri="/redfish/v1/x", status=403, message_id="X1")

    for args in ([], ["--json"]):
        result = CliRunner().invoke(cmd, args)
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output and result.exception is not None
        assert "cp-02 /redfish/v1/x: not allowed (HTTP 403, X1)" in result.output


def test_a_node_cut_at_its_deadline_is_reported_before_its_logout(lab: Lab, spare: str) -> None:
    lab.rack.set_latency(spare, 400)  # root + login take 0.8 s, discovery far more than the deadline
    policy = replace(FAST, deadline_s=1.5)
    reported: list[float] = []
    start = time.monotonic()
    [result] = run_fleet(
        [lab.target(spare)], discover, policy=policy, progress=lambda r: reported.append(time.monotonic() - start)
    )
    done = time.monotonic() - start
    assert not result.ok and result.error["kind"] == "deadline", result.error
    assert "deadline exceeded after 1.5 s" in result.error["message"]
    assert 1.4 <= reported[0] < 1.5 + 0.4, reported
    assert done >= reported[0] + 0.35  # the logout (one 400 ms DELETE) came after the report
    assert lab.rack.open_sessions(spare) == 0


def test_401_on_a_session_logs_in_once_more_and_deletes_the_old_session(lab: Lab) -> None:
    name = "head-01"
    systems = "/redfish/v1/Systems"
    since = len(lab.rack.request_log(name))
    ep = lab.endpoints[name]
    with bmc_proxy(ep.url, ep.ca_file) as proxy, BmcConnection(replace(lab.target(name), url=proxy.url), FAST) as conn:
        old = conn._session_uri
        proxy.unauthorized_once.add(("GET", systems))
        assert conn.get(systems)["Members"]  # answered after one re-login
        assert conn._session_uri != old
        assert lab.rack.open_sessions(name) == 1  # the old session was deleted, not left to expire
        new = conn._session_uri
    log = lab.rack.request_log(name)[since:]
    assert len(_logins(lab, name, since)) == 2  # one re-login, not a loop
    assert [(r["path"], r["status"]) for r in log if r["method"] == "DELETE"] == [(old, 200), (new, 200)]
    assert lab.rack.open_sessions(name) == 0
