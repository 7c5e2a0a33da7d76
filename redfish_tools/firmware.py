"""Firmware inventory and single-image SimpleUpdate with its task (fleet rollout is day-2 work)."""

from __future__ import annotations

from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.lc import wait_lc_ready
from redfish_tools.resources import Service, link, require_action
from redfish_tools.tasks import TaskOutcome, wait_for

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
    return [
        {
            "id": i.get("Id"),
            "name": i.get("Name"),
            "version": i.get("Version"),
            "updateable": i.get("Updateable"),
        }
        for i in svc.members(coll)
    ]


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
