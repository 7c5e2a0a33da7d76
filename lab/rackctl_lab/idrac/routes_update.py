"""Firmware inventory and SimpleUpdate, task monitors, the DMTF JobService, virtual media.

sushy-tools' update service accepts SimpleUpdate but changes no version, and its virtual media downloads
the image from the network (the lab has none): the iDRAC layer does both itself. Images are never
fetched: the component is named by the image file name, the new version parsed from it. A repository's
catalog (InstallFromRepository) is the one thing read from a share: a small XML file.
"""

from __future__ import annotations

import re
import time
import urllib.request
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from xml.etree import ElementTree

from rackctl_lab.idrac.jobs import Job, Outcome, new_job_id
from rackctl_lab.idrac.replies import Reply, redfish_error, success
from rackctl_lab.idrac.uris import MGR, SEG, SYS, V1, collection

if TYPE_CHECKING:
    from rackctl_lab.idrac.bmc import EmulatedIdrac

FW = f"{V1}/UpdateService/FirmwareInventory"
TASKS = f"{V1}/TaskService/Tasks"
VMEDIA = f"{SYS}/VirtualMedia"
IMAGE_KEYWORDS = (
    ("idrac", "iDRAC"),
    ("bios", "BIOS"),
    ("network", "NIC"),
    ("nic", "NIC"),
    ("perc", "RAID"),
    ("raid", "RAID"),
    ("nvidia", "GPU"),
    ("gpu", "GPU"),
)
APPLY_TIMES = ("Immediate", "OnReset")
VERSION_RE = re.compile(r"[_-](\d+(?:\.\d+){1,3}(?:-\d+)?)(?=[_.-][A-Za-z]|$)")


def _inventory_id(prefix: str, comp: dict[str, Any]) -> str:
    suffix = f"__{comp['FQDD']}" if comp.get("FQDD") else ""
    return f"{prefix}-{comp['ComponentId']}-{comp['Version']}{suffix}"


def _inventory(bmc: EmulatedIdrac) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for prefix, comps in (("Installed", bmc.firmware), ("Previous", bmc.previous_firmware)):
        for comp in comps.values():
            fid = _inventory_id(prefix, comp)
            out[fid] = {
                "@odata.id": f"{FW}/{fid}",
                "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory",
                "Id": fid,
                "Name": comp["Name"],
                "Version": comp["Version"],
                "SoftwareId": comp["ComponentId"],
                "Updateable": comp["Updateable"],
                "Status": {"State": "Enabled" if prefix == "Installed" else "StandbyOffline", "Health": "OK"},
                "Oem": {
                    "Dell": {
                        "DellSoftwareInventory": {
                            "ComponentID": comp["ComponentId"],
                            "FQDD": comp.get("FQDD", comp["Name"]),
                        }
                    }
                },
            }
    return out


def update_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    base = f"{V1}/UpdateService"
    return Reply(
        200,
        {
            "@odata.id": base,
            "@odata.type": "#UpdateService.v1_11_0.UpdateService",
            "Id": "UpdateService",
            "ServiceEnabled": True,
            "FirmwareInventory": {"@odata.id": FW},
            "Actions": {
                "#UpdateService.SimpleUpdate": {
                    "target": f"{base}/Actions/UpdateService.SimpleUpdate",
                    "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS", "NFS", "CIFS", "TFTP"],
                    "@Redfish.OperationApplyTimeSupport": {
                        "@odata.type": "#Settings.v1_3_3.OperationApplyTimeSupport",
                        "SupportedValues": list(APPLY_TIMES),
                    },
                }
            },
        },
    )


def firmware_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        collection(
            FW,
            "Firmware Inventory Collection",
            [m["@odata.id"] for m in _inventory(bmc).values()],
            "SoftwareInventoryCollection",
        ),
    )


def firmware_get(bmc: EmulatedIdrac, fid: str, **_: Any) -> Reply:
    inv = _inventory(bmc)
    if fid in inv:
        return Reply(200, inv[fid])
    return redfish_error(
        404,
        "Base.1.12.ResourceMissingAtURI",
        f"The resource FirmwareInventory/{fid} was not found.",
        "Read the FirmwareInventory collection again.",
    )


def simple_update(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """SimpleUpdate: 202 + task; when the task completes the component's version changes.

    An iDRAC image runs at once, and the iDRAC resets when it completes (as the real one does: connections
    drop for ``reset_s``, sessions are lost, then the job reads Completed). A host component (BIOS, NIC,
    GPU, RAID) sent with ``@Redfish.OperationApplyTime: OnReset`` is staged: its job stays Scheduled until
    the host next boots, then runs; without it (or ``Immediate``) it runs at once.
    """
    uri = data.get("ImageURI") if isinstance(data, dict) else None
    if not isinstance(uri, str) or urlparse(uri).scheme not in ("http", "https", "nfs", "cifs", "tftp"):
        return redfish_error(
            400,
            "Base.1.12.ActionParameterMissing",
            "SimpleUpdate requires ImageURI as an http(s)/nfs/cifs/tftp URI.",
        )
    apply_time = str(data.get("@Redfish.OperationApplyTime") or "Immediate")
    if apply_time not in APPLY_TIMES:
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {apply_time!r} for @Redfish.OperationApplyTime is not in the list of acceptable values.",
            f"Use one of {', '.join(APPLY_TIMES)}.",
        )
    filename = urlparse(uri).path.rsplit("/", 1)[-1]
    kind = next((k for word, k in IMAGE_KEYWORDS if word in filename.lower()), None)
    keys = [key for key in bmc.firmware if kind and (key == kind or key.startswith(f"{kind}:"))]
    version_match = VERSION_RE.search(filename)
    if kind is None or not keys or version_match is None:
        return redfish_error(
            400,
            "IDRAC.2.8.SUP029",
            f"Unable to update the firmware because the package {filename!r} is not applicable to this system.",
            "Use an update package for a component this system has.",
        )
    version = version_match.group(1)
    job = _update_job(bmc, uri, kind, version, staged=kind != "iDRAC" and apply_time == "OnReset", via="SimpleUpdate")
    return Reply(202, job.task(), {"Location": f"{TASKS}/{job.id}", "Retry-After": "1"})


def _keys_of(bmc: EmulatedIdrac, kind: str) -> list[str]:
    return [key for key in bmc.firmware if key == kind or key.startswith(f"{kind}:")]


def _update_job(bmc: EmulatedIdrac, uri: str, kind: str, version: str, *, staged: bool, via: str) -> Job:
    """The update job of one package: at once, or Scheduled until the host next boots (``staged``)."""
    keys = _keys_of(bmc, kind)
    fail = _draw_update_failure(bmc, kind)

    def complete(job: Job) -> Outcome:
        if fail:
            return (
                "Failed",
                f"Unable to complete the firmware update of {kind}: the package failed to apply.",
                ("IDRAC.2.8.SUP0518"),
            )
        if all(bmc.firmware[k]["Version"] == version for k in keys):
            return "Completed", f"The version {version} is already installed.", "IDRAC.2.8.SUP024"
        for key in keys:
            bmc.previous_firmware[key] = dict(bmc.firmware[key])
            bmc.firmware[key]["Version"] = version
        if kind == "iDRAC":
            bmc.reset_idrac()
        return "Completed", "Job completed successfully.", "IDRAC.2.8.RED001"

    def on_start(_job: Job) -> None:
        if bmc.faults.reset_during_job:
            bmc.reset_idrac()

    job = Job(
        new_job_id(),
        "FirmwareUpdate",
        f"Firmware Update: {kind}",
        bmc.spec.job_seconds,
        on_start=on_start,
        on_complete=complete,
        at_boot=staged,
    )
    if not staged:
        job.start_now()
    bmc.jobs.add(job)
    bmc.firmware_updates.append(
        {
            "time": time.time(),
            "image": uri,
            "component": kind,
            "version": version,
            "apply_time": "OnReset" if staged else "Immediate",
            "via": via,
            "job": job.id,
        }
    )
    return job


def _draw_update_failure(bmc: EmulatedIdrac, kind: str) -> bool:
    """Whether this update job fails (``fail_update_components``, counted per faults setting)."""
    faults = bmc.faults
    if kind not in faults.fail_update_components:
        return False
    if bmc.update_failures_for is not faults:  # new faults set: count afresh
        bmc.update_failures_for, bmc.update_failures = faults, 0
    if faults.fail_update_count and bmc.update_failures >= faults.fail_update_count:
        return False
    bmc.update_failures += 1
    return True


def task_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": f"{V1}/TaskService",
            "@odata.type": "#TaskService.v1_2_0.TaskService",
            "Id": "TaskService",
            "ServiceEnabled": True,
            "Tasks": {"@odata.id": TASKS},
        },
    )


def tasks_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    members = [f"{TASKS}/{jid}" for jid in bmc.jobs.jobs]
    return Reply(200, collection(TASKS, "Task Collection", members, "TaskCollection"))


def task_get(bmc: EmulatedIdrac, jid: str, **_: Any) -> Reply:
    """A task monitor: 202 while running; 200 when done (an SCP export's task returns the profile)."""
    job = bmc.jobs.jobs.get(jid)
    if job is None:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The task {jid} was not found.")
    if not job.finished:
        return Reply(202, job.task(), {"Location": f"{TASKS}/{jid}", "Retry-After": "1"})
    if job.job_type == "ExportConfiguration" and isinstance(job.result, tuple):
        text, content_type = job.result
        return Reply(200, text, content_type=content_type)
    return Reply(200, job.task())


def dmtf_job_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": f"{V1}/JobService",
            "Id": "JobService",
            "ServiceEnabled": True,
            "Jobs": {"@odata.id": f"{V1}/JobService/Jobs"},
        },
    )


def dmtf_jobs(bmc: EmulatedIdrac, **_: Any) -> Reply:
    base = f"{V1}/JobService/Jobs"
    return Reply(200, collection(base, "Job Collection", [f"{base}/{j}" for j in bmc.jobs.jobs], "JobCollection"))


def dmtf_job(bmc: EmulatedIdrac, jid: str, **_: Any) -> Reply:
    job = bmc.jobs.jobs.get(jid)
    if job is None:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The job {jid} was not found.")
    return Reply(200, job.dmtf_job())


def _vmedia_doc(bmc: EmulatedIdrac, vid: str) -> dict[str, Any]:
    media = bmc.virtual_media[vid]
    base = f"{VMEDIA}/{vid}"
    return {
        "@odata.id": base,
        "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
        "Id": vid,
        **media,
        "ConnectedVia": "URI" if media["Inserted"] else "NotConnected",
        "Actions": {
            "#VirtualMedia.InsertMedia": {"target": f"{base}/Actions/VirtualMedia.InsertMedia"},
            "#VirtualMedia.EjectMedia": {"target": f"{base}/Actions/VirtualMedia.EjectMedia"},
        },
    }


def vmedia_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    members = [f"{VMEDIA}/{vid}" for vid in bmc.virtual_media]
    return Reply(200, collection(VMEDIA, "Virtual Media Collection", members, "VirtualMediaCollection"))


def vmedia_get(bmc: EmulatedIdrac, vid: str, **_: Any) -> Reply:
    if vid not in bmc.virtual_media:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The virtual media {vid} was not found.")
    return Reply(200, _vmedia_doc(bmc, vid))


def vmedia_insert(bmc: EmulatedIdrac, vid: str, data: Any, **_: Any) -> Reply:
    if vid not in bmc.virtual_media:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The virtual media {vid} was not found.")
    image = data.get("Image") if isinstance(data, dict) else None
    if not isinstance(image, str) or urlparse(image).scheme not in ("http", "https", "nfs", "cifs"):
        return redfish_error(
            400,
            "Base.1.12.PropertyValueFormatError",
            f"The value {image!r} for Image is not an http(s), nfs or cifs URI.",
        )
    media = bmc.virtual_media[vid]
    if media["Inserted"]:
        return redfish_error(
            400, "IDRAC.2.8.VRM0021", "Virtual media is already attached or in use.", "Eject the media first."
        )
    media.update(Image=image, Inserted=True, WriteProtected=bool(data.get("WriteProtected", True)))
    return Reply(204)


def vmedia_eject(bmc: EmulatedIdrac, vid: str, **_: Any) -> Reply:
    if vid not in bmc.virtual_media:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The virtual media {vid} was not found.")
    media = bmc.virtual_media[vid]
    if not media["Inserted"]:
        return redfish_error(400, "IDRAC.2.8.VRM0021", "Virtual media is detached.", "Nothing to eject.")
    media.update(Image=None, Inserted=False)
    return success(200)


SWINSTALL = f"{MGR}/Oem/Dell/DellSoftwareInstallationService"
CATALOG_TIMEOUT_S = 3.0


def software_installation_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": SWINSTALL,
            "@odata.type": "#DellSoftwareInstallationService.v1_4_0.DellSoftwareInstallationService",
            "Id": "DellSoftwareInstallationService",
            "Actions": {
                "#DellSoftwareInstallationService.InstallFromRepository": {
                    "target": f"{SWINSTALL}/Actions/DellSoftwareInstallationService.InstallFromRepository"
                }
            },
        },
    )


def catalog_packages(text: str, model: str) -> list[tuple[str, str]]:
    """(package path, version) of a Dell catalog's SoftwareComponents that apply to ``model``."""
    root = ElementTree.fromstring(text)  # noqa: S314 - a catalog the test or lab serves on loopback
    out = []
    for comp in root.iter("SoftwareComponent"):
        models = [m.findtext("Display", "").strip() for m in comp.iter("Model")]
        if models and model not in models:
            continue
        path, version = comp.get("path"), comp.get("vendorVersion")
        if path and version:
            out.append((path, version))
    return out


def install_from_repository(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """Read the catalog from the share (the one thing the emulator fetches: a small XML file), then one update
    job per package for a component this system has at another version: the iDRAC's at once, the rest
    Scheduled for the next boot (``RebootNeeded`` false, as rackctl sends it). 202 + the repository job."""
    body = data if isinstance(data, dict) else {}
    share_type = str(body.get("ShareType") or "").lower()
    if share_type not in ("http", "https") or not body.get("IPAddress") or not body.get("CatalogFile"):
        return redfish_error(
            400,
            "Base.1.12.ActionParameterMissing",
            "InstallFromRepository needs IPAddress, ShareType (HTTP/HTTPS here), ShareName and CatalogFile.",
        )
    name = str(body.get("ShareName") or "").strip("/")
    share = f"{share_type}://{body['IPAddress']}/" + (f"{name}/" if name else "")
    url = share + str(body["CatalogFile"])
    try:
        with urllib.request.urlopen(url, timeout=CATALOG_TIMEOUT_S) as resp:  # noqa: S310 - http(s) only
            text = resp.read(2_000_000).decode("utf-8", "replace")
        packages = catalog_packages(text, bmc.spec.model)
    except (OSError, ElementTree.ParseError) as exc:
        return redfish_error(
            400, "IDRAC.2.8.RED014", f"Unable to read the catalog {url}: {exc}.", "Check the repository share."
        )
    jobs = []
    for path, version in packages:
        filename = path.rsplit("/", 1)[-1]
        kind = next((k for word, k in IMAGE_KEYWORDS if word in filename.lower()), None)
        keys = _keys_of(bmc, kind) if kind else []
        if not keys or all(bmc.firmware[k]["Version"] == version for k in keys):
            continue
        if any(not j.finished and j.name == f"Firmware Update: {kind}" for j in bmc.jobs.jobs.values()):
            continue  # one update of a component queued at a time
        staged = kind != "iDRAC"
        jobs.append(_update_job(bmc, share + path, str(kind), version, staged=staged, via="InstallFromRepository"))
    repo_job = Job(new_job_id(), "RepositoryUpdate", "Repository Update", 0.0)
    repo_job.start_now()
    repo_job.on_complete = lambda _j: (
        "Completed",
        f"Repository update: {len(jobs)} update job(s) created.",
        "IDRAC.2.8.RED001",
    )
    bmc.jobs.add(repo_job)
    return Reply(
        202,
        {**repo_job.task(), "JobIds": [j.id for j in jobs]},
        {"Location": f"{TASKS}/{repo_job.id}", "Retry-After": "1"},
    )


JID = SEG.format("jid")
VID = SEG.format("vid")
ROUTES = [
    ("GET", f"{V1}/UpdateService", update_service),
    ("GET", FW, firmware_list),
    ("GET", f"{FW}/{SEG.format('fid')}", firmware_get),
    ("POST", f"{V1}/UpdateService/Actions/UpdateService.SimpleUpdate", simple_update),
    ("GET", f"{V1}/TaskService", task_service),
    ("GET", TASKS, tasks_list),
    ("GET", f"{TASKS}/{JID}", task_get),
    ("GET", f"{V1}/JobService", dmtf_job_service),
    ("GET", f"{V1}/JobService/Jobs", dmtf_jobs),
    ("GET", f"{V1}/JobService/Jobs/{JID}", dmtf_job),
    ("GET", VMEDIA, vmedia_list),
    ("GET", f"{VMEDIA}/{VID}", vmedia_get),
    ("POST", f"{VMEDIA}/{VID}/Actions/VirtualMedia.InsertMedia", vmedia_insert),
    ("POST", f"{VMEDIA}/{VID}/Actions/VirtualMedia.EjectMedia", vmedia_eject),
    ("GET", SWINSTALL, software_installation_service),
    ("POST", f"{SWINSTALL}/Actions/DellSoftwareInstallationService.InstallFromRepository", install_from_repository),
]
