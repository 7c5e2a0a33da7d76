"""The callback receiver over real HTTP: one-time tokens, per-node reports, timeouts, nothing secret kept."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import pytest

from bootstrap.provision.callback import CallbackReceiver


def call(receiver: CallbackReceiver, path: str, data: bytes | None = None) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{receiver.upstream}{path}", data=data, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def receiver():
    with CallbackReceiver() as rx:
        yield rx


def test_token_is_accepted_once_and_the_report_kept(receiver: CallbackReceiver) -> None:
    receiver.arm("gpu-01", "tok-1")
    assert call(receiver, "/callback/gpu-01?token=tok-1&status=ok&detail=written%201073741824%20bytes")[0] == 200
    report = receiver.wait("gpu-01", timeout=1)
    assert report is not None and report.ok and report.detail == "written 1073741824 bytes"
    code, text = call(receiver, "/callback/gpu-01?token=tok-1&status=error&detail=replayed")
    assert code == 409 and "already reported" in text
    assert receiver.report("gpu-01").ok  # the replay changed nothing


def test_wrong_token_unknown_node_and_bad_status_are_refused(receiver: CallbackReceiver) -> None:
    receiver.arm("gpu-01", "right")
    assert call(receiver, "/callback/gpu-01?token=wrong&status=ok")[0] == 403
    assert call(receiver, "/callback/gpu-09?token=right&status=ok")[0] == 404
    assert call(receiver, "/callback/gpu-01?token=right&status=maybe")[0] == 400
    assert receiver.wait("gpu-01", timeout=0.2) is None
    reasons = {(r["hostname"], r["reason"]) for r in receiver.rejected}
    assert reasons == {("gpu-01", "bad token"), ("gpu-09", "no install expected")}
    assert "right" not in repr(receiver.rejected) and "wrong" not in repr(receiver.rejected)


def test_error_reports_and_post_bodies(receiver: CallbackReceiver) -> None:
    receiver.arm("gpu-02", "t2")
    code, _ = call(receiver, "/callback/gpu-02", data=b"token=t2&status=error&detail=sha256+mismatch")
    assert code == 200
    report = receiver.wait("gpu-02", timeout=1)
    assert report is not None and not report.ok and report.detail == "sha256 mismatch"


def test_wait_wakes_on_report_and_times_out_without(receiver: CallbackReceiver) -> None:
    receiver.arm("a", "ta")
    receiver.arm("b", "tb")
    threading.Timer(0.3, lambda: call(receiver, "/callback/a?token=ta&status=ok")).start()
    start = time.monotonic()
    assert receiver.wait("a", timeout=10) is not None
    assert time.monotonic() - start < 5
    start = time.monotonic()
    assert receiver.wait("b", timeout=0.5) is None
    assert time.monotonic() - start >= 0.5


def test_disarm_burns_the_token(receiver: CallbackReceiver) -> None:
    receiver.arm("gpu-03", "t3")
    receiver.disarm("gpu-03")
    assert call(receiver, "/callback/gpu-03?token=t3&status=ok")[0] == 404
    assert receiver.report("gpu-03") is None
