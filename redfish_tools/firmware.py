"""Firmware inventory, SimpleUpdate (at once, or staged for the next reboot) with its task, the update jobs in
the queue, and Dell's InstallFromRepository. The fleet rollout is ``bootstrap.firmware``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.jobs import Job, list_jobs
from redfish_tools.lc import wait_lc_ready
from redfish_tools.resources import Service, link, odata_id, require_action
from redfish_tools.tasks import TaskOutcome, wait_for
from redfish_tools.views import SoftwareInventory

PROTOCOLS = ("HTTP", "HTTPS", "NFS", "CIFS", "TFTP")


def firmware_inventory(conn: BmcConnection, svc: Service | None = None) -> list[dict[str, Any]]:
    """Installed firmware: id, name, version, updateable (fresh read)."""
    svc = svc or Service(conn)
    update = svc.service_uri("UpdateService")
    if not update:
        raise E.NotFoundError("the service root has no UpdateService", bmc=conn.target.name, uri="/redfish/v1/")
    coll = link(svc.get(update, fresh=True), "FirmwareInventory")
    svc.forget(coll)
    svc.forget(f"{coll}?$expand=.($levels=1)")
    return [_installed(SoftwareInventory.from_json(i)) for i in svc.members(coll)]


def _installed(item: SoftwareInventory) -> dict[str, Any]:
    return {
        "id": item.id,
        "name": item.name,
        "version": item.version,
        "updateable": item.updateable,
        "component_id": item.component_id,
        "fqdd": item.dell_fqdd,
    }


def simple_update(
    conn: BmcConnection,
    image_uri: str,
    *,
    protocol: str = "HTTP",
    timeout: float = 3600.0,
    poll: float = 2.0,
) -> TaskOutcome:
    """Start ``UpdateService.SimpleUpdate`` for one image and wait for its task (iDRAC resets tolerated)."""
    if protocol not in PROTOCOLS:
        raise E.ValidationError(f"transfer protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    svc = Service(conn)
    wait_lc_ready(conn, svc)
    update_uri = svc.service_uri("UpdateService")
    action = require_action(svc, svc.get(update_uri), "SimpleUpdate", update_uri)
    resp = conn.post(action, {"ImageURI": image_uri, "TransferProtocol": protocol})
    task = resp.location or link(resp.body, "Task") or ""
    if not task:
        raise E.RedfishError("SimpleUpdate gave no task to follow", bmc=conn.target.name, uri=action)
    return wait_for(conn, task, timeout=timeout, poll=poll)


APPLY_TIMES = ("Immediate", "OnReset")


def start_update(conn: BmcConnection, image_uri: str, *, apply_time: str = "Immediate", protocol: str = "HTTP") -> str:
    """POST SimpleUpdate for one image and return its task URI without waiting (LC must be Ready first).

    ``apply_time="OnReset"`` stages a host component: its job stays Scheduled until the host reboots. Not
    retried: a lost answer is resolved by the caller from the job queue (:func:`update_jobs`).
    """
    if protocol not in PROTOCOLS:
        raise E.ValidationError(f"transfer protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if apply_time not in APPLY_TIMES:
        raise E.ValidationError(f"apply time {apply_time!r} is not one of {', '.join(APPLY_TIMES)}")
    svc = Service(conn)
    update_uri = svc.service_uri("UpdateService")
    action = require_action(svc, svc.get(update_uri), "SimpleUpdate", update_uri)
    body: dict[str, Any] = {"ImageURI": image_uri, "TransferProtocol": protocol}
    if apply_time != "Immediate":
        body["@Redfish.OperationApplyTime"] = apply_time
    resp = conn.post(action, body)
    task = resp.location or link(resp.body, "Task") or odata_id(resp.body)
    if not task:
        raise E.RedfishError("SimpleUpdate gave no task to follow", bmc=conn.target.name, uri=action)
    return task


def update_jobs(conn: BmcConnection, svc: Service | None = None) -> list[Job]:
    """Firmware update jobs in the iDRAC's queue (any state), oldest first."""
    return [j for j in list_jobs(conn, svc) if (j.job_type or "") in UPDATE_JOB_TYPES or "update" in j.name.lower()]


UPDATE_JOB_TYPES = ("FirmwareUpdate", "RepositoryUpdate")


def install_from_repository(
    conn: BmcConnection, share_url: str, catalog: str = "Catalog.xml", svc: Service | None = None
) -> list[str]:
    """``DellSoftwareInstallationService.InstallFromRepository``: apply what the catalog has newer (updates
    staged for the next reboot, ``RebootNeeded: false``); returns the URIs of the jobs it created."""
    svc = svc or Service(conn)
    parsed = urlparse(share_url)
    if parsed.scheme not in ("http", "https", "nfs", "cifs") or not parsed.hostname:
        raise E.ValidationError(f"repository share {share_url!r} is not an http(s)/nfs/cifs URL")
    manager = svc.manager()
    service_uri = svc.oem_dell_link(manager, "DellSoftwareInstallationService")
    if not service_uri:
        raise E.NotFoundError(
            "the manager has no DellSoftwareInstallationService", bmc=conn.target.name, uri=svc.manager_uri()
        )
    action = require_action(svc, svc.get(service_uri), "InstallFromRepository", service_uri)
    body = {
        "IPAddress": parsed.hostname if parsed.port is None else f"{parsed.hostname}:{parsed.port}",
        "ShareType": parsed.scheme.upper(),
        "ShareName": parsed.path.strip("/"),
        "CatalogFile": catalog,
        "ApplyUpdate": "True",
        "RebootNeeded": False,
    }
    resp = conn.post(action, body)
    found = resp.body.get("JobIds") or resp.body.get("JobIDs") if isinstance(resp.body, dict) else None
    if found:
        return [str(j) for j in found]
    return [resp.location] if resp.location else []
