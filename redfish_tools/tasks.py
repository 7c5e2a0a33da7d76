"""Waiting for long operations: Redfish task monitors (202 + Location) and Dell jobs.

An iDRAC may reset or answer "not ready" while a job runs; waiting tolerates transport errors and
``SWC0700`` until the deadline and re-reads the job afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection, Response
from redfish_tools.views import Task

DONE_OK = {"Completed"}
DONE_BAD = {"Exception", "Killed", "Cancelled", "Failed", "CompletedWithErrors", "Interrupted"}


@dataclass
class TaskOutcome:
    """How a task or job ended."""

    id: str
    state: str
    message: str = ""
    message_id: str | None = None
    percent: int | None = None
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state in DONE_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "message": self.message,
            "message_id": self.message_id,
            "percent": self.percent,
        }


def task_state(task: Task) -> tuple[str, str, str | None, int | None]:
    """(state, message, message_id, percent) of a Task or a Dell Job resource."""
    state = str(task.job_state or task.dell_job_state or task.task_state or "")
    if state in ("Running", "New", "Starting", "Pending", "Scheduling", "Downloading") and task.task_state in (
        "Completed",
        "Exception",
    ):
        state = str(task.task_state)
    message = str(task.message or task.dell_message or "") or str(task.first_message)
    mid = task.message_id or task.dell_message_id
    pct = task.percent_complete
    return (
        state,
        message,
        (str(mid).rsplit(".", 1)[-1] if mid else None),
        (int(pct) if isinstance(pct, int | float) else None),
    )


def wait_for(
    conn: BmcConnection,
    uri: str,
    *,
    timeout: float = 600.0,
    poll: float = 1.0,
    on_progress: Callable[[TaskOutcome], None] | None = None,
    raise_on_failure: bool = True,
) -> TaskOutcome:
    """Poll a task monitor or job URI until it ends; return its outcome.

    A 202 answer means "still running" (``Retry-After`` honoured). A 200 answer is the task (or, for a
    task monitor whose operation returns data, the result: treated as Completed with that body).
    """
    deadline = time.monotonic() + timeout
    job_id = uri.rstrip("/").rsplit("/", 1)[-1]
    last_error: E.RedfishError | None = None
    while True:
        delay = poll
        try:
            resp: Response = conn.request("GET", uri)
            last_error = None
            if resp.status == 202:
                ra = resp.headers.get("retry-after")
                delay = float(ra) if ra and ra.replace(".", "", 1).isdigit() else poll
                state, message, mid, pct = task_state(Task.from_json(resp.body))
                outcome = TaskOutcome(job_id, state or "Running", message, mid, pct, resp.body)
            else:
                state, message, mid, pct = task_state(Task.from_json(resp.body))
                if not state:  # a monitor answering with the operation's result
                    state = "Completed"
                outcome = TaskOutcome(job_id, state, message, mid, pct, resp.body)
            if on_progress:
                on_progress(outcome)
            if outcome.state in DONE_OK:
                return outcome
            if outcome.state in DONE_BAD:
                if raise_on_failure:
                    raise E.JobFailedError(
                        f"job {job_id} ended {outcome.state}: {outcome.message}".rstrip(": "),
                        bmc=conn.target.name,
                        uri=uri,
                        status=resp.status,
                        message_id=mid,
                    )
                return outcome
        except (E.TransportError, E.NotReadyError, E.AuthError) as exc:
            # The iDRAC may reset while a job runs: keep waiting (sessions are renewed by the connection),
            # unless the operation's own deadline is spent.
            if conn.deadline_passed:
                raise
            last_error = exc
        if time.monotonic() + delay > deadline:
            cause = f" (last error: {last_error.reason})" if last_error else ""
            raise E.JobFailedError(
                f"job {job_id} did not finish within {timeout:.0f}s{cause}", bmc=conn.target.name, uri=uri
            )
        time.sleep(delay)
