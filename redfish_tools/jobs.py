"""The iDRAC job queue: list, wait, clear; and creating the BIOS apply-on-reset job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service, find_action, link, odata_id
from redfish_tools.tasks import TaskOutcome, task_state, wait_for
from redfish_tools.views import Task

PENDING_STATES = {
    "Scheduled",
    "Running",
    "New",
    "Scheduling",
    "Waiting",
    "Paused",
    "Downloading",
    "ReadyForExecution",
}


@dataclass
class Job:
    id: str
    uri: str
    state: str
    job_type: str | None
    message: str
    target: str | None
    percent: int | None
    name: str = ""

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "pending": self.pending}


def jobs_uri(svc: Service) -> str:
    """The Dell job collection (manager OEM link, else the DMTF JobService, else ``<manager>/Jobs``)."""
    manager = svc.manager()
    uri = svc.oem_dell_link(manager, "Jobs")
    if uri:
        return uri
    job_service = svc.service_uri("JobService")
    if job_service:
        uri = link(svc.get(job_service), "Jobs")
        if uri:
            return uri
    return svc.manager_uri().rstrip("/") + "/Jobs"


def _job(body: dict[str, Any]) -> Job:
    task = Task.from_json(body)
    state, message, _mid, pct = task_state(task)
    return Job(
        id=str(task.id),
        uri=odata_id(body),
        state=state,
        job_type=task.job_type,
        message=message,
        target=task.target_settings_uri or None,
        percent=pct,
        name=str(task.name or ""),
    )


def list_jobs(conn: BmcConnection, svc: Service | None = None) -> list[Job]:
    """Every job in the queue (fresh read, expanded in one request when supported)."""
    svc = svc or Service(conn)
    uri = jobs_uri(svc)
    svc.forget(uri)
    svc.forget(f"{uri}?$expand=.($levels=1)")
    return [_job(body) for body in svc.members(uri)]


def wait_job(conn: BmcConnection, job_id: str, svc: Service | None = None, **kwargs: Any) -> TaskOutcome:
    """Wait for a job by id (through its job resource; survives an iDRAC reset)."""
    svc = svc or Service(conn)
    return wait_for(conn, f"{jobs_uri(svc).rstrip('/')}/{job_id}", **kwargs)


def clear_jobs(conn: BmcConnection, svc: Service | None = None) -> int:
    """Empty the job queue (``DellJobService.DeleteJobQueue`` with ``JID_CLEARALL``, else DELETE each job).

    Returns the number of jobs that were queued. Idempotent: clearing an empty queue does nothing.
    """
    svc = svc or Service(conn)
    queued = list_jobs(conn, svc)
    if not queued:
        return 0
    manager = svc.manager()
    service_uri = svc.oem_dell_link(manager, "DellJobService")
    action = find_action(svc.get(service_uri), "DeleteJobQueue") if service_uri else ""
    if action:
        conn.post(action, {"JobID": "JID_CLEARALL"}, idempotent=True)
    else:
        for job in queued:
            conn.delete(job.uri or f"{jobs_uri(svc)}/{job.id}")
    left = list_jobs(conn, svc)
    if left:
        raise E.OperationNotConfirmed(
            f"{len(left)} job(s) still queued after clearing", bmc=conn.target.name, uri=jobs_uri(svc)
        )
    return len(queued)


def create_settings_job(conn: BmcConnection, settings_uri: str, svc: Service | None = None) -> Job:
    """Create the apply-on-reset configuration job for ``settings_uri``, or return the one already pending.

    Not retried blindly: a pending job for the same target is looked up first, and again after an
    ambiguous failure, so a job is never created twice.
    """
    svc = svc or Service(conn)
    existing = pending_job_for(conn, settings_uri, svc)
    if existing:
        return existing
    uri = jobs_uri(svc)
    try:
        resp = conn.post(uri, {"TargetSettingsURI": settings_uri})
    except (E.TransportError, E.InvalidRequestError):
        existing = pending_job_for(conn, settings_uri, svc)
        if existing:
            return existing
        raise
    job_uri = resp.location or odata_id(resp.body)
    job_id = job_uri.rstrip("/").rsplit("/", 1)[-1] if job_uri else str(Task.from_json(resp.body).id or "")
    body = conn.get(f"{uri.rstrip('/')}/{job_id}")
    return _job(body)


def pending_job_for(conn: BmcConnection, settings_uri: str, svc: Service | None = None) -> Job | None:
    """A queued (not finished) job whose target is ``settings_uri``."""
    for job in list_jobs(conn, svc):
        if job.pending and job.target and job.target.rstrip("/") == settings_uri.rstrip("/"):
            return job
    return None
