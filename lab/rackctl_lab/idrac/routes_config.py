"""Configuration paths of the emulated iDRAC: BIOS (+ registry, pending settings), jobs, LC status, SCP.

sushy-tools' fake driver has no BIOS, no jobs and no Dell OEM: all of this is the iDRAC layer's.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rackctl_lab.idrac import bios
from rackctl_lab.idrac.jobs import Job, Outcome, new_job_id
from rackctl_lab.idrac.replies import Reply, redfish_error, success
from rackctl_lab.idrac.uris import MGR, SEG, SYS, V1, collection

if TYPE_CHECKING:
    from rackctl_lab.idrac.bmc import EmulatedIdrac

BIOS_SETTINGS = f"{SYS}/Bios/Settings"
APPLY_TIMES = ("Immediate", "OnReset")


def bios_get(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": f"{SYS}/Bios",
            "@odata.type": "#Bios.v1_2_1.Bios",
            "Id": "Bios",
            "Name": "BIOS Configuration",
            "AttributeRegistry": bios.REGISTRY_ID,
            "Attributes": dict(bmc.bios_current),
            "@Redfish.Settings": {
                "@odata.type": "#Settings.v1_3_5.Settings",
                "SettingsObject": {"@odata.id": BIOS_SETTINGS},
                "SupportedApplyTimes": list(APPLY_TIMES),
            },
            "Links": {"Oem": {"Dell": {"BiosRegistry": {"@odata.id": f"{SYS}/Bios/BiosRegistry"}}}},
            "Oem": {"Dell": {"BiosRegistry": {"@odata.id": f"{SYS}/Bios/BiosRegistry"}}},
        },
    )


def bios_settings_get(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": BIOS_SETTINGS,
            "@odata.type": "#Bios.v1_2_1.Bios",
            "Id": "Settings",
            "Name": "BIOS Configuration Pending Settings",
            "Attributes": dict(bmc.bios_pending),
            "Actions": {
                "Oem": {
                    "#DellManager.ClearPending": {"target": f"{BIOS_SETTINGS}/Actions/Oem/DellManager.ClearPending"}
                }
            },
        },
    )


def bios_registry(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(200, bios.registry_document())


def registries(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        collection(
            f"{V1}/Registries",
            "Registry File Collection",
            [f"{V1}/Registries/BiosRegistry"],
            "MessageRegistryFileCollection",
        ),
    )


def registry_file(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": f"{V1}/Registries/BiosRegistry",
            "Id": "BiosRegistry",
            "Registry": bios.REGISTRY_ID,
            "Location": [{"Language": "en", "Uri": f"{SYS}/Bios/BiosRegistry"}],
        },
    )


def _lc068() -> Reply:
    return redfish_error(
        400,
        "IDRAC.2.8.LC068",
        "Unable to complete the operation because a configuration job is already pending or in progress.",
        "Wait for the job to complete or delete it.",
    )


def _bios_job(bmc: EmulatedIdrac) -> Job:
    """A BIOS configuration job: Scheduled until the host boots, then applies the pending values."""

    def complete(job: Job) -> Outcome:
        bmc.bios_current, rejected = bios.apply_pending(bmc.bios_current, bmc.bios_pending)
        bmc.bios_pending = {}
        if rejected:
            why = ", ".join(f"{k} ({v})" for k, v in sorted(rejected.items()))
            job.result = {"NotApplied": rejected}
            return (
                "CompletedWithErrors",
                f"Job completed with errors: attributes not applied: {why}.",
                "IDRAC.2.8.SYS053",
            )
        return "Completed", "Job completed successfully.", "IDRAC.2.8.PR19"

    job = Job(
        new_job_id(),
        "BIOSConfiguration",
        "Configure: BIOS.Setup.1-1",
        bmc.spec.job_seconds,
        target_settings_uri=BIOS_SETTINGS,
        on_start=_reset_hook(bmc),
        on_complete=complete,
    )
    return bmc.jobs.add(job)


def _reset_hook(bmc: EmulatedIdrac) -> Callable[[Job], None]:
    def on_start(_job: Job) -> None:
        if bmc.faults.reset_during_job:
            bmc.reset_idrac()

    return on_start


def _reboot_host(bmc: EmulatedIdrac) -> None:
    """Restart the host through sushy (power it on if it is off) so a pending job runs."""
    reset = "ForceRestart" if bmc.power_state() == "On" else "On"
    bmc.sushy("POST", f"{SYS}/Actions/ComputerSystem.Reset", {"ResetType": reset})


def bios_settings_patch(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """Stage attributes; with ``@Redfish.SettingsApplyTime`` also create the job (202 + Location)."""
    if not isinstance(data, dict) or "Attributes" not in data:
        return redfish_error(400, "Base.1.12.PropertyMissing", "The property Attributes is a required property.")
    if bmc.jobs.active_config_job() is not None:
        return redfish_error(
            400,
            "IDRAC.2.8.SYS011",
            "Pending configuration values are already committed, unable to perform another set operation.",
            "Wait for or delete the job.",
        )
    errors = bios.validate_patch(data["Attributes"])
    apply_time = (data.get("@Redfish.SettingsApplyTime") or {}).get("ApplyTime")
    if apply_time is not None and apply_time not in APPLY_TIMES:
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {apply_time!r} for ApplyTime is not supported by the lab: {', '.join(APPLY_TIMES)}.",
        )
    if errors:
        reply = redfish_error(400, errors[0].message_id, errors[0].message)
        reply.body["error"]["@Message.ExtendedInfo"] = [
            {
                "MessageId": e.message_id,
                "Message": e.message,
                "RelatedProperties": [f"#/Attributes/{e.attribute}"],
                "Severity": "Warning",
            }
            for e in errors
        ]
        return reply
    bmc.bios_pending.update(data["Attributes"])
    if apply_time is None:
        return success(200)
    job = _bios_job(bmc)
    if apply_time == "Immediate":
        _reboot_host(bmc)
    return success(202, {"Location": f"{MGR}/Jobs/{job.id}"})


def bios_clear_pending(bmc: EmulatedIdrac, **_: Any) -> Reply:
    if bmc.jobs.active_config_job() is not None:
        return redfish_error(
            400,
            "IDRAC.2.8.SYS011",
            "Pending configuration values are already committed.",
            "Delete the job first (DellJobService.DeleteJobQueue).",
        )
    bmc.bios_pending = {}
    return success(200)


def jobs_list(bmc: EmulatedIdrac, base: str = f"{MGR}/Jobs", **_: Any) -> Reply:
    members = [f"{base}/{job_id}" for job_id in bmc.jobs.jobs]
    return Reply(200, collection(base, "JobQueue", members, "DellJobCollection"))


def job_create(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """POST Jobs {"TargetSettingsURI": .../Bios/Settings}: the older flow (200 + Location)."""
    target = data.get("TargetSettingsURI") if isinstance(data, dict) else None
    if target != BIOS_SETTINGS:
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {target!r} for TargetSettingsURI is not supported; use {BIOS_SETTINGS}.",
        )
    if bmc.jobs.active_config_job() is not None:
        return _lc068()
    if not bmc.bios_pending:
        return redfish_error(
            400,
            "IDRAC.2.8.SYS020",
            "No pending configuration data to create a job.",
            "PATCH Bios/Settings first.",
        )
    job = _bios_job(bmc)
    return success(200, {"Location": f"{MGR}/Jobs/{job.id}"})


def _delete_job(bmc: EmulatedIdrac, job_id: str) -> Reply:
    if job_id in ("JID_CLEARALL", "JID_CLEARALL_FORCE"):
        bmc.jobs.clear()
        bmc.bios_pending = {}
        return success(200)
    job = bmc.jobs.jobs.get(job_id)
    if job is None:
        return redfish_error(400, "IDRAC.2.8.SUP011", f"Job ID {job_id} is invalid.", "Check the job id.")
    if job.state == "Running":
        return redfish_error(
            400,
            "IDRAC.2.8.SUP016",
            f"Unable to delete the running job {job_id}.",
            "Wait for the job to complete.",
        )
    if job.job_type == "BIOSConfiguration" and not job.finished:
        bmc.bios_pending = {}
    bmc.jobs.delete(job_id)
    return success(200)


def job_get(bmc: EmulatedIdrac, jid: str, **_: Any) -> Reply:
    job = bmc.jobs.jobs.get(jid)
    if job is None:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The job {jid} was not found.")
    return Reply(200, job.dell_job())


def job_delete(bmc: EmulatedIdrac, jid: str, **_: Any) -> Reply:
    return _delete_job(bmc, jid)


def dell_jobs_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return jobs_list(bmc, base=f"{MGR}/Oem/Dell/Jobs")


def job_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    base = f"{MGR}/Oem/Dell/DellJobService"
    return Reply(
        200,
        {
            "@odata.id": base,
            "Id": "Job Service",
            "Actions": {"#DellJobService.DeleteJobQueue": {"target": f"{base}/Actions/DellJobService.DeleteJobQueue"}},
        },
    )


def delete_job_queue(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    job_id = data.get("JobID") if isinstance(data, dict) else None
    if not isinstance(job_id, str):
        return redfish_error(
            400, "Base.1.12.ActionParameterMissing", "The action DeleteJobQueue requires the parameter JobID."
        )
    return _delete_job(bmc, job_id)


def lc_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    base = f"{MGR}/Oem/Dell/DellLCService"
    return Reply(
        200,
        {
            "@odata.id": base,
            "Id": "DellLCService",
            "Actions": {
                "#DellLCService.GetRemoteServicesAPIStatus": {
                    "target": f"{base}/Actions/DellLCService.GetRemoteServicesAPIStatus"
                }
            },
        },
    )


def lc_status(bmc: EmulatedIdrac, **_: Any) -> Reply:
    """LC readiness: ``InUse``/``NotReady`` while a job runs, ``Ready`` otherwise."""
    busy = bmc.jobs.running() is not None
    power = bmc.power_state()
    return Reply(
        200,
        {
            "LCStatus": "InUse" if busy else "Ready",
            "RTStatus": "Ready",
            "ServerStatus": "PoweredOff" if power != "On" else ("InPOST" if busy else "OutOfPOST"),
            "Status": "NotReady" if busy else "Ready",
            "@Message.ExtendedInfo": [
                {
                    "MessageId": "IDRAC.2.8.LC061" if not busy else "IDRAC.2.8.LC062",
                    "Message": "Lifecycle Controller Remote Services is ready."
                    if not busy
                    else "Lifecycle Controller Remote Services is not ready.",
                }
            ],
        },
    )


# ----- Server Configuration Profiles ------------------------------------------------------------------


def _scp_document(bmc: EmulatedIdrac, target: str) -> dict[str, Any]:
    components = []
    if target in ("ALL", "BIOS"):
        components.append(
            {
                "FQDD": "BIOS.Setup.1-1",
                "Attributes": [{"Name": k, "Value": v} for k, v in bmc.bios_current.items()],
            }
        )
    if target in ("ALL", "NIC"):
        for fqdd, mac in bmc.mac_by_fqdd.items():
            components.append({"FQDD": fqdd, "Attributes": [{"Name": "VirtMacAddr", "Value": mac}]})
    if target in ("ALL", "IDRAC"):
        components.append(
            {
                "FQDD": "iDRAC.Embedded.1",
                "Attributes": [
                    {"Name": "Users.2#UserName", "Value": bmc.spec.username},
                    {"Name": "Users.2#Password", "Value": "******"},
                ],
            }
        )
    return {
        "SystemConfiguration": {
            "Model": f"PowerEdge {bmc.spec.model}",
            "ServiceTag": bmc.spec.service_tag,
            "TimeStamp": time.strftime("%a %b %d %H:%M:%S %Y"),
            "Components": components,
        }
    }


def _scp_xml(doc: dict[str, Any]) -> str:
    conf = doc["SystemConfiguration"]
    root = ET.Element("SystemConfiguration", Model=conf["Model"], ServiceTag=conf["ServiceTag"])
    for comp in conf["Components"]:
        node = ET.SubElement(root, "Component", FQDD=comp["FQDD"])
        for attr in comp["Attributes"]:
            ET.SubElement(node, "Attribute", Name=attr["Name"]).text = str(attr["Value"])
    return ET.tostring(root, encoding="unicode")


def _scp_bios_attributes(buffer: str) -> dict[str, Any]:
    """BIOS attributes from an SCP import buffer (JSON or XML); ValueError if it cannot be parsed."""
    text = buffer.strip()
    if text.startswith("{"):
        comps = json.loads(text)["SystemConfiguration"]["Components"]
        pairs = [(c.get("FQDD", ""), a["Name"], a["Value"]) for c in comps for a in c.get("Attributes", [])]
    else:
        root = ET.fromstring(text)  # noqa: S314 - the lab parses its own test data
        if root.tag != "SystemConfiguration":
            raise ValueError("root element is not SystemConfiguration")
        pairs = [
            (c.get("FQDD", ""), a.get("Name", ""), a.text or "")
            for c in root.iter("Component")
            for a in c.iter("Attribute")
        ]
    out: dict[str, Any] = {}
    for fqdd, name, value in pairs:
        if fqdd.startswith("BIOS."):
            attr = bios.BY_NAME.get(name)
            out[name] = int(value) if attr is not None and attr.type == "Integer" else value
    return out


def _task_reply(job: Job) -> Reply:
    location = f"{V1}/TaskService/Tasks/{job.id}"
    return Reply(202, job.task(), {"Location": location, "Retry-After": "1"})


def scp_export(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    data = data if isinstance(data, dict) else {}
    fmt = str(data.get("ExportFormat", "XML")).upper()
    target = str((data.get("ShareParameters") or {}).get("Target", "ALL")).upper()
    if fmt not in ("XML", "JSON") or target not in ("ALL", "BIOS", "NIC", "IDRAC", "RAID"):
        return redfish_error(
            400,
            "Base.1.12.ActionParameterValueNotInList",
            "ExportFormat must be XML or JSON and ShareParameters.Target one of ALL, BIOS, NIC, IDRAC, RAID.",
        )

    def complete(job: Job) -> Outcome:
        doc = _scp_document(bmc, target)
        job.result = (
            (json.dumps(doc, indent=2), "application/json") if fmt == "JSON" else (_scp_xml(doc), "application/xml")
        )
        return "Completed", "Successfully exported Server Configuration Profile.", "IDRAC.2.8.SYS043"

    job = Job(
        new_job_id(),
        "ExportConfiguration",
        "Export: Server Configuration Profile",
        bmc.spec.job_seconds,
        on_start=_reset_hook(bmc),
        on_complete=complete,
    )
    job.start_at = time.time()
    bmc.jobs.add(job)
    return _task_reply(job)


def _scp_import(bmc: EmulatedIdrac, data: Any, preview: bool) -> Reply:
    buffer = data.get("ImportBuffer") if isinstance(data, dict) else None
    if not isinstance(buffer, str) or not buffer.strip():
        return redfish_error(
            400,
            "Base.1.12.ActionParameterMissing",
            "The action ImportSystemConfiguration requires the parameter ImportBuffer (a local share only in the lab).",
        )
    try:
        attrs = _scp_bios_attributes(buffer)
    except (ValueError, KeyError, TypeError, ET.ParseError) as exc:
        return redfish_error(
            400,
            "IDRAC.2.8.SYS041",
            f"Unable to parse the import buffer: {exc}.",
            "Provide a valid SCP (XML or JSON).",
        )
    errors = bios.validate_patch(attrs)
    if not preview and bmc.jobs.active_config_job() is not None:
        return _lc068()
    host_on = str(data.get("HostPowerState", "On")) == "On"

    def complete(job: Job) -> Outcome:
        if errors:
            why = "; ".join(e.message for e in errors)
            return "Failed", f"Import failed: {why}", errors[0].message_id
        if preview:
            return (
                "Completed",
                f"Preview: {len(attrs)} BIOS attribute(s) would be applied.",
                "IDRAC.2.8.SYS081",
            )
        bmc.bios_current, rejected = bios.apply_pending(bmc.bios_current, attrs)
        if host_on and bmc.power_state() != "On":
            bmc.sushy("POST", f"{SYS}/Actions/ComputerSystem.Reset", {"ResetType": "On"})
        if rejected:
            job.result = {"NotApplied": rejected}
            why = ", ".join(f"{k} ({v})" for k, v in sorted(rejected.items()))
            return "CompletedWithErrors", f"Imported with errors: not applied: {why}.", "IDRAC.2.8.SYS055"
        return (
            "Completed",
            "Successfully imported and applied Server Configuration Profile.",
            "IDRAC.2.8.SYS053",
        )

    kind = "ConfigurationPreview" if preview else "ImportConfiguration"
    job = Job(
        new_job_id(),
        kind,
        f"{'Preview' if preview else 'Import'}: Server Configuration Profile",
        bmc.spec.job_seconds,
        on_start=_reset_hook(bmc),
        on_complete=complete,
    )
    job.start_at = time.time()
    bmc.jobs.add(job)
    return _task_reply(job)


def scp_import(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    return _scp_import(bmc, data, preview=False)


def scp_import_preview(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    return _scp_import(bmc, data, preview=True)


JOB = SEG.format("jid")
ROUTES = [
    ("GET", f"{SYS}/Bios", bios_get),
    ("GET", BIOS_SETTINGS, bios_settings_get),
    ("PATCH", BIOS_SETTINGS, bios_settings_patch),
    ("POST", f"{BIOS_SETTINGS}/Actions/Oem/DellManager.ClearPending", bios_clear_pending),
    ("GET", f"{SYS}/Bios/BiosRegistry", bios_registry),
    ("GET", f"{V1}/Registries", registries),
    ("GET", f"{V1}/Registries/BiosRegistry", registry_file),
    ("GET", f"{MGR}/Jobs", jobs_list),
    ("POST", f"{MGR}/Jobs", job_create),
    ("GET", f"{MGR}/Jobs/{JOB}", job_get),
    ("DELETE", f"{MGR}/Jobs/{JOB}", job_delete),
    ("GET", f"{MGR}/Oem/Dell/Jobs", dell_jobs_list),
    ("GET", f"{MGR}/Oem/Dell/Jobs/{JOB}", job_get),
    ("DELETE", f"{MGR}/Oem/Dell/Jobs/{JOB}", job_delete),
    ("GET", f"{MGR}/Oem/Dell/DellJobService", job_service),
    ("POST", f"{MGR}/Oem/Dell/DellJobService/Actions/DellJobService.DeleteJobQueue", delete_job_queue),
    ("GET", f"{MGR}/Oem/Dell/DellLCService", lc_service),
    ("POST", f"{MGR}/Oem/Dell/DellLCService/Actions/DellLCService.GetRemoteServicesAPIStatus", lc_status),
    ("POST", f"{MGR}/Actions/Oem/EID_674_Manager.ExportSystemConfiguration", scp_export),
    ("POST", f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfiguration", scp_import),
    ("POST", f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfigurationPreview", scp_import_preview),
]
