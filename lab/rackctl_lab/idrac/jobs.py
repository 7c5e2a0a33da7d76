"""Lifecycle Controller jobs of one emulated iDRAC: Scheduled -> Running -> Completed, advanced lazily.

A job's clock is checked whenever the BMC is asked anything (:meth:`JobQueue.refresh`), so no
background thread is needed. A BIOS job has no start time until the host boots (``start_now``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MANAGER = "/redfish/v1/Managers/iDRAC.Embedded.1"
FINAL_STATES = ("Completed", "CompletedWithErrors", "Failed")

#: What a job's completion callback returns: (JobState, Message, MessageId).
Outcome = tuple[str, str, str]

_ids = itertools.count(int(time.time()) % 10**9 * 10)


def new_job_id() -> str:
    """A Dell-style job id, ``JID_`` + 12 digits, unique within the process."""
    return f"JID_{next(_ids) % 10**12:012d}"


@dataclass
class Job:
    """One job (also viewed as a task and as a DMTF JobService job)."""

    id: str
    job_type: str
    name: str
    duration_s: float
    target_settings_uri: str = ""
    state: str = "Scheduled"
    message: str = "Task successfully scheduled."
    message_id: str = "IDRAC.2.8.JCP001"
    start_at: float | None = None
    end_at: float | None = None
    on_start: Callable[[Job], None] | None = None
    on_complete: Callable[[Job], Outcome] | None = None
    result: Any = None
    created: float = field(default_factory=time.time)
    at_boot: bool = False
    """Scheduled until the host next boots (a BIOS job, a firmware update staged ``OnReset``)."""

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def percent(self) -> int:
        if self.finished:
            return 100
        if self.state != "Running" or self.start_at is None or self.end_at is None:
            return 0
        span = max(self.end_at - self.start_at, 1e-6)
        return min(99, int(100 * (time.time() - self.start_at) / span))

    def start_now(self, now: float | None = None) -> None:
        """Give the job a start time (a BIOS job when the host boots)."""
        now = time.time() if now is None else now
        if self.start_at is None and self.state == "Scheduled":
            self.start_at = now

    def refresh(self, now: float) -> None:
        """Advance the state machine to ``now``."""
        if self.state == "Scheduled" and self.start_at is not None and now >= self.start_at:
            self.state = "Running"
            self.end_at = self.start_at + self.duration_s
            self.message, self.message_id = "Job in progress.", "IDRAC.2.8.PR19"
            if self.on_start:
                self.on_start(self)
        if self.state == "Running" and self.end_at is not None and now >= self.end_at:
            outcome: Outcome = ("Completed", "Job completed successfully.", "IDRAC.2.8.PR19")
            if self.on_complete:
                outcome = self.on_complete(self)
            self.state, self.message, self.message_id = outcome

    def dell_job(self) -> dict[str, Any]:
        """The ``DellJob`` view (``Managers/iDRAC.Embedded.1/Jobs/<id>``)."""
        return {
            "@odata.id": f"{MANAGER}/Jobs/{self.id}",
            "@odata.type": "#DellJob.v1_5_0.DellJob",
            "Id": self.id,
            "Name": self.name,
            "JobType": self.job_type,
            "JobState": self.state,
            "PercentComplete": self.percent,
            "Message": self.message,
            "MessageId": self.message_id,
            "TargetSettingsURI": self.target_settings_uri or None,
            "StartTime": "TIME_NOW",
            "EndTime": "TIME_NA",
            "CompletionTime": _iso(self.end_at) if self.finished else None,
        }

    def task(self) -> dict[str, Any]:
        """The ``Task`` view (``TaskService/Tasks/<id>``), Dell job in ``Oem.Dell``."""
        task_state = {
            "Scheduled": "Starting",
            "Running": "Running",
            "Completed": "Completed",
            "CompletedWithErrors": "Completed",
            "Failed": "Exception",
        }[self.state]
        status = {"Completed": "OK", "CompletedWithErrors": "Warning", "Failed": "Critical"}.get(self.state, "OK")
        return {
            "@odata.id": f"/redfish/v1/TaskService/Tasks/{self.id}",
            "@odata.type": "#Task.v1_5_1.Task",
            "Id": self.id,
            "Name": self.name,
            "TaskState": task_state,
            "TaskStatus": status,
            "PercentComplete": self.percent,
            "Messages": [{"Message": self.message, "MessageId": self.message_id}],
            "Oem": {"Dell": self.dell_job()},
        }

    def dmtf_job(self) -> dict[str, Any]:
        """The DMTF ``Job`` view (``JobService/Jobs/<id>``)."""
        state = {
            "Scheduled": "New",
            "Running": "Running",
            "Completed": "Completed",
            "CompletedWithErrors": "Completed",
            "Failed": "Exception",
        }[self.state]
        return {
            "@odata.id": f"/redfish/v1/JobService/Jobs/{self.id}",
            "@odata.type": "#Job.v1_2_1.Job",
            "Id": self.id,
            "Name": self.name,
            "JobState": state,
            "PercentComplete": self.percent,
            "Messages": [{"Message": self.message, "MessageId": self.message_id}],
        }


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


class JobQueue:
    """The iDRAC's job queue."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def add(self, job: Job) -> Job:
        self.jobs[job.id] = job
        return job

    def refresh(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for job in list(self.jobs.values()):
            job.refresh(now)

    def active_config_job(self) -> Job | None:
        """A configuration job that is pending or running (blocks another one: LC068)."""
        for job in self.jobs.values():
            if not job.finished and job.job_type in ("BIOSConfiguration", "ImportConfiguration"):
                return job
        return None

    def running(self) -> Job | None:
        return next((j for j in self.jobs.values() if j.state == "Running"), None)

    def scheduled_bios_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.job_type == "BIOSConfiguration" and j.state == "Scheduled"]

    def scheduled_at_boot(self) -> list[Job]:
        """Jobs waiting for the host's next boot: BIOS configuration and firmware staged ``OnReset``."""
        waiting = (j for j in self.jobs.values() if j.state == "Scheduled")
        return [j for j in waiting if j.at_boot or j.job_type == "BIOSConfiguration"]

    def delete(self, job_id: str) -> bool:
        return self.jobs.pop(job_id, None) is not None

    def clear(self) -> None:
        self.jobs.clear()
