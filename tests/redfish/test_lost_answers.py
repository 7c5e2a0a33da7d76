"""The BMC acts but its answer is lost (the emulator's ``lose_answer_*`` fault): the engine never repeats a
POST blindly, and a PATCH sent again is read back instead of failing (policy in
:mod:`redfish_tools.connection`'s docstring)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from rf_lab import FAST, Lab, api

from redfish_tools import errors as E
from redfish_tools.bios import apply_bios
from redfish_tools.connection import BmcConnection
from redfish_tools.jobs import clear_jobs
from redfish_tools.power import power_state, set_power
from tests import timing

SYS = "/redfish/v1/Systems/System.Embedded.1"
RESET = f"{SYS}/Actions/ComputerSystem.Reset"
BIOS_SETTINGS = f"{SYS}/Bios/Settings"


@pytest.fixture
def bmc(lab: Lab) -> Iterator[str]:
    """spare-1, faults off and job queue empty before and after."""
    name = "spare-1"

    def reset() -> None:
        lab.rack.set_faults(name, api.FaultSpec())
        with BmcConnection(lab.target(name), FAST) as conn:
            clear_jobs(conn)

    reset()
    yield name
    reset()


def _log_since(lab: Lab, name: str, start: int, method: str, path: str) -> list[dict]:
    return [e for e in lab.rack.request_log(name)[start:] if e["method"] == method and e["path"] == path]


def test_lost_answer_fault_acts_then_drops(lab: Lab, bmc: str) -> None:
    """The emulator itself: the handler ran (state changed), the client got no answer."""
    with BmcConnection(lab.target(bmc), FAST) as conn:
        if power_state(conn) != "Off":
            set_power(conn, "off")
    lab.rack.set_faults(bmc, api.FaultSpec(lose_answer_paths=(RESET,), lose_answer_count=0))
    start = len(lab.rack.request_log(bmc))
    with BmcConnection(lab.target(bmc), FAST) as conn, pytest.raises(E.AnswerLost) as info:
        set_power(conn, "on")
    assert info.value.kind == "answer_lost" and "not sent again" in info.value.message
    posts = _log_since(lab, bmc, start, "POST", RESET)
    assert len(posts) == 1, posts  # a POST is never sent twice
    assert posts[0]["fault"] == "lost_answer" and posts[0]["status"] == 0 and posts[0]["acted_status"] < 300
    deadline = time.monotonic() + 10
    while lab.rack.state(bmc)["power_state"] != "On":  # the BMC did act
        assert time.monotonic() < deadline, "the lost POST was not carried out"
        time.sleep(0.1)
    assert lab.rack.open_sessions(bmc) == 0


def test_rerun_after_a_lost_post_reads_the_state_instead_of_repeating(lab: Lab, bmc: str) -> None:
    with BmcConnection(lab.target(bmc), FAST) as conn:
        if power_state(conn) != "Off":
            set_power(conn, "off")
    lab.rack.set_faults(bmc, api.FaultSpec(lose_answer_paths=(RESET,), lose_answer_count=1))
    start = len(lab.rack.request_log(bmc))
    with BmcConnection(lab.target(bmc), FAST) as conn:
        with pytest.raises(E.AnswerLost):
            set_power(conn, "on")
        # the lost action completes on the BMC (after the spec's power_delay_s): read from the emulator's state
        timing.wait_for(lambda: lab.rack.state(bmc)["power_state"] == "On", timeout=10, what="the lost POST acted")
        again = set_power(conn, "on")
    assert again.changed is False and again.before == "On"
    assert len(_log_since(lab, bmc, start, "POST", RESET)) == 1


def test_lost_patch_answer_is_resent_and_read_back(lab: Lab, bmc: str) -> None:
    """The PATCH that staged BIOS values (and made their job) lost its answer: the engine sends it again,
    the iDRAC refuses the second one (a job is pending), and apply_bios reads back its own staged values
    and job instead of failing; exactly one job exists."""
    with BmcConnection(lab.target(bmc), FAST) as conn:
        current = conn.get(f"{SYS}/Bios")["Attributes"]["ProcVirtualization"]
    wanted = "Disabled" if current == "Enabled" else "Enabled"
    lab.rack.set_faults(bmc, api.FaultSpec(lose_answer_paths=(BIOS_SETTINGS,), lose_answer_count=1))
    start = len(lab.rack.request_log(bmc))
    with BmcConnection(lab.target(bmc), FAST) as conn:
        result = apply_bios(conn, {"ProcVirtualization": wanted})
    assert result.state == "scheduled" and result.job is not None
    patches = _log_since(lab, bmc, start, "PATCH", BIOS_SETTINGS)
    assert [p["fault"] for p in patches] == ["lost_answer", None], patches  # resent once, as the policy says
    state = lab.rack.state(bmc)
    assert state["bios_pending"].get("ProcVirtualization") == wanted
    bios_jobs = [j for j in state["jobs"] if j.get("JobState") not in ("Completed", "Failed")]
    assert len(bios_jobs) == 1 and bios_jobs[0]["Id"] == result.job.id, state["jobs"]
    assert lab.rack.open_sessions(bmc) == 0
