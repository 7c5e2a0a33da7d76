"""Server Configuration Profiles: export and import through the Dell OEM manager actions (202 + task)."""

from __future__ import annotations

import json
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.lc import wait_lc_ready
from redfish_tools.resources import Service, require_action
from redfish_tools.tasks import TaskOutcome, wait_for

SCP_TARGETS = ("ALL", "IDRAC", "BIOS", "NIC", "RAID")


def _task_uri(conn: BmcConnection, resp_location: str | None, body: dict[str, Any], uri: str) -> str:
    if resp_location:
        return resp_location
    raise E.RedfishError("the BMC accepted the SCP request but gave no task monitor", bmc=conn.target.name, uri=uri)


def export_scp(
    conn: BmcConnection, *, target: str = "ALL", timeout: float = 600.0, poll: float = 1.0
) -> dict[str, Any]:
    """Export the system configuration as JSON (the SCP document)."""
    if target not in SCP_TARGETS:
        raise E.ValidationError(f"SCP target {target!r} is not one of {', '.join(SCP_TARGETS)}")
    svc = Service(conn)
    action = require_action(svc, svc.manager(), "ExportSystemConfiguration", svc.manager_uri())
    resp = conn.post(action, {"ExportFormat": "JSON", "ShareParameters": {"Target": target}})
    outcome = wait_for(conn, _task_uri(conn, resp.location, resp.body, action), timeout=timeout, poll=poll)
    body = outcome.body
    if "SystemConfiguration" in body:
        return body["SystemConfiguration"]
    if "Components" in body:
        return body
    # Some firmware puts the document in the task's message payload.
    for key in ("ExportBuffer", "Message"):
        if isinstance(body.get(key), str) and body[key].lstrip().startswith("{"):
            return json.loads(body[key])
    return body


def import_scp(
    conn: BmcConnection,
    document: dict[str, Any] | str,
    *,
    target: str = "ALL",
    shutdown_type: str = "Graceful",
    host_power_state: str = "On",
    timeout: float = 1800.0,
    poll: float = 1.0,
) -> TaskOutcome:
    """Import an SCP (JSON): waits for the Lifecycle Controller, posts it, waits for the job."""
    svc = Service(conn)
    wait_lc_ready(conn, svc)
    action = require_action(svc, svc.manager(), "ImportSystemConfiguration", svc.manager_uri())
    buffer = document if isinstance(document, str) else json.dumps({"SystemConfiguration": document})
    resp = conn.post(
        action,
        {
            "ImportBuffer": buffer,
            "ShareParameters": {"Target": target},
            "ShutdownType": shutdown_type,
            "HostPowerState": host_power_state,
        },
    )
    return wait_for(conn, _task_uri(conn, resp.location, resp.body, action), timeout=timeout, poll=poll)
