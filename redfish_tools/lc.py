"""Lifecycle Controller readiness: the gate before any iDRAC configuration job."""

from __future__ import annotations

import time
from dataclasses import dataclass

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service, require_action
from redfish_tools.views import RemoteServicesStatus


@dataclass
class LcStatus:
    lc_status: str | None
    server_status: str | None
    rt_status: str | None

    @property
    def ready(self) -> bool:
        return self.lc_status == "Ready"

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "ready": self.ready}


def lc_service_uri(svc: Service) -> str:
    """URI of ``DellLCService`` (from the manager's Dell OEM links)."""
    manager = svc.manager()
    uri = svc.oem_dell_link(manager, "DellLCService")
    if not uri:
        raise E.NotFoundError("the manager has no DellLCService link", bmc=svc.name, uri=svc.manager_uri())
    return uri


def lc_status(conn: BmcConnection, svc: Service | None = None) -> LcStatus:
    """Ask ``GetRemoteServicesAPIStatus`` (a read: safe to retry)."""
    svc = svc or Service(conn)
    uri = lc_service_uri(svc)
    target = require_action(svc, svc.get(uri), "GetRemoteServicesAPIStatus", uri)
    answer = RemoteServicesStatus.from_json(conn.post(target, {}, idempotent=True).body)
    return LcStatus(answer.lc_status, answer.server_status, answer.rt_status)


def wait_lc_ready(
    conn: BmcConnection, svc: Service | None = None, *, timeout: float = 300.0, poll: float = 2.0
) -> LcStatus:
    """Wait until the Lifecycle Controller reports Ready; raise :class:`NotReadyError` at the deadline."""
    svc = svc or Service(conn)
    deadline = time.monotonic() + timeout
    while True:
        status = lc_status(conn, svc)
        if status.ready:
            return status
        if time.monotonic() + poll > deadline:
            raise E.NotReadyError(
                f"Lifecycle Controller is {status.lc_status!r}, not Ready, after {timeout:.0f}s",
                bmc=conn.target.name,
                uri=lc_service_uri(svc),
            )
        time.sleep(poll)
