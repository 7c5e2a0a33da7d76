"""The URL table of an emulated iDRAC and the handlers for identity, sessions, system, chassis, manager.

Handlers take the BMC first, then ``data`` (parsed JSON body), ``headers`` and the path's named groups.
Configuration (BIOS, jobs, LC, SCP) is in :mod:`routes_config`; firmware, tasks and virtual media in
:mod:`routes_update`.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from rackctl_lab.idrac import hardware
from rackctl_lab.idrac import routes_config as cfg
from rackctl_lab.idrac import routes_update as upd
from rackctl_lab.idrac.replies import MAX_SESSIONS, SESSIONS, Reply, redfish_error, success
from rackctl_lab.idrac.uris import CH, MGR, SEG, SYS, V1, collection

if TYPE_CHECKING:
    from rackctl_lab.idrac.bmc import EmulatedIdrac, Handler


DELL_BOOT_TARGETS = (
    "None",
    "Pxe",
    "Floppy",
    "Cd",
    "Hdd",
    "BiosSetup",
    "Utilities",
    "UefiTarget",
    "SDCard",
    "UefiHttp",
)
BOOT_ENABLED = ("Once", "Continuous", "Disabled")
RESET_TYPES = (
    "On",
    "ForceOff",
    "ForceRestart",
    "GracefulRestart",
    "GracefulShutdown",
    "PushPowerButton",
    "Nmi",
    "PowerCycle",
)


# ----- identity and sessions ------------------------------------------------------------------------


def service_root(bmc: EmulatedIdrac, **_: Any) -> Reply:
    """sushy's service root, made Dell's (vendor, service tag, sessions, the services the layer adds)."""
    _status, doc = bmc.sushy("GET", f"{V1}/")
    doc = dict(doc or {})
    doc.pop("@Redfish.Copyright", None)
    doc.update(
        {
            "@odata.id": f"{V1}",
            "Id": "RootService",
            "UUID": bmc.uuid.replace("4c4c4544", "5c4c4544", 1),
            "Name": "Root Service",
            "Vendor": "Dell",
            "Product": "Integrated Dell Remote Access Controller",
            "RedfishVersion": "1.17.0",
            "Oem": {
                "Dell": {
                    "ServiceTag": bmc.spec.service_tag,
                    "ManagerMACAddress": "",
                    "@odata.type": "#DellServiceRoot.v1_0_0.DellServiceRoot",
                }
            },
            "SessionService": {"@odata.id": f"{V1}/SessionService"},
            "Links": {"Sessions": {"@odata.id": SESSIONS}},
            "TaskService": {"@odata.id": f"{V1}/TaskService"},
            "JobService": {"@odata.id": f"{V1}/JobService"},
            "UpdateService": {"@odata.id": f"{V1}/UpdateService"},
            "Registries": {"@odata.id": f"{V1}/Registries"},
            "ProtocolFeaturesSupported": {
                "ExpandQuery": {
                    "ExpandAll": True,
                    "Levels": True,
                    "Links": True,
                    "NoLinks": True,
                    "MaxLevels": 1,
                },
                "SelectQuery": False,
            },
        }
    )
    doc.pop("CertificateService", None)
    return Reply(200, doc)


def redfish_version(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(200, {"v1": f"{V1}/"})


def session_service(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": f"{V1}/SessionService",
            "@odata.type": "#SessionService.v1_1_8.SessionService",
            "Id": "SessionService",
            "ServiceEnabled": True,
            "SessionTimeout": 1800,
            "Sessions": {"@odata.id": SESSIONS},
        },
    )


def sessions_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    members = [f"{SESSIONS}/{s.id}" for s in bmc.sessions.values()]
    return Reply(200, collection(SESSIONS, "Session Collection", members, "SessionCollection"))


def session_login(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """POST Sessions: 201 + X-Auth-Token + Location; RAC0218 past 8 sessions (or when faulted)."""
    if not isinstance(data, dict) or "UserName" not in data or "Password" not in data:
        return redfish_error(
            400,
            "Base.1.12.PropertyMissing",
            "The property UserName or Password is a required property and must be included in the request.",
        )
    if not bmc.check_credentials(str(data["UserName"]), str(data["Password"])):
        return redfish_error(
            401,
            "Base.1.12.InsufficientPrivilege",
            "There are insufficient privileges for the "
            "account or credentials associated with the current session to perform the "
            "requested operation.",
            "Check the user name and password.",
        )
    if bmc.faults.session_exhausted or len(bmc.sessions) >= MAX_SESSIONS:
        return redfish_error(
            400,
            "IDRAC.2.8.RAC0218",
            "The maximum number of user sessions is reached.",
            "Close one or more sessions and retry the operation.",
        )
    token, sess = bmc.new_session(str(data["UserName"]))
    location = f"{SESSIONS}/{sess.id}"
    body = {
        "@odata.id": location,
        "@odata.type": "#Session.v1_6_0.Session",
        "Id": sess.id,
        "Name": "User Session",
        "UserName": sess.user,
    }
    return Reply(201, body, {"X-Auth-Token": token, "Location": location})


def _session_by_id(bmc: EmulatedIdrac, sid: str) -> str | None:
    return next((token for token, s in bmc.sessions.items() if s.id == sid), None)


def session_get(bmc: EmulatedIdrac, sid: str, **_: Any) -> Reply:
    token = _session_by_id(bmc, sid)
    if token is None:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"Session {sid} does not exist.")
    sess = bmc.sessions[token]
    return Reply(200, {"@odata.id": f"{SESSIONS}/{sid}", "Id": sid, "Name": "User Session", "UserName": sess.user})


def session_delete(bmc: EmulatedIdrac, sid: str, **_: Any) -> Reply:
    token = _session_by_id(bmc, sid)
    if token is None:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"Session {sid} does not exist.")
    del bmc.sessions[token]
    return success(200)


# ----- system ---------------------------------------------------------------------------------------


def systems(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(200, collection(f"{V1}/Systems", "Computer System Collection", [SYS], "ComputerSystemCollection"))


def system_get(bmc: EmulatedIdrac, **_: Any) -> Reply:
    """sushy's system (power state, boot mode, NIC link) with Dell's identity and inventory links."""
    status, doc = bmc.sushy("GET", SYS)
    if status != 200:
        return Reply(status, doc)
    hw = hardware.model_hardware(bmc.spec.model)
    for key in ("@Redfish.Copyright", "SimpleStorage", "SecureBoot", "IndicatorLED"):
        doc.pop(key, None)
    boot = doc.get("Boot", {})
    doc.update(
        {
            "Id": "System.Embedded.1",
            "Name": "System",
            "HostName": bmc.spec.name,
            "Manufacturer": "Dell Inc.",
            "Model": f"PowerEdge {bmc.spec.model}",
            "SKU": bmc.spec.service_tag,
            "SerialNumber": f"CNIVC00{bmc.spec.service_tag}",
            "BiosVersion": bmc.firmware["BIOS"]["Version"],
            "Boot": {
                "BootSourceOverrideEnabled": bmc.boot_enabled,
                "BootSourceOverrideTarget": bmc.boot_target,
                "BootSourceOverrideTarget@Redfish.AllowableValues": list(DELL_BOOT_TARGETS),
                "BootSourceOverrideMode": boot.get("BootSourceOverrideMode", bmc.boot_mode),
            },
            "ProcessorSummary": {
                "Count": 2,
                "Model": hw.cpu_model,
                "LogicalProcessorCount": hw.cpu_cores * 4,
                "Status": {"State": "Enabled", "Health": "OK"},
            },
            "MemorySummary": {
                "TotalSystemMemoryGiB": hardware.total_memory_gib(bmc.spec),
                "Status": {"State": "Enabled", "Health": "OK"},
            },
            "Bios": {"@odata.id": f"{SYS}/Bios"},
            "Processors": {"@odata.id": f"{SYS}/Processors"},
            "Memory": {"@odata.id": f"{SYS}/Memory"},
            "Storage": {"@odata.id": f"{SYS}/Storage"},
            "EthernetInterfaces": {"@odata.id": f"{SYS}/EthernetInterfaces"},
            "VirtualMedia": {"@odata.id": f"{SYS}/VirtualMedia"},
            "PCIeDevices": [{"@odata.id": d["@odata.id"]} for d in bmc.pcie.values()],
            "Links": {"Chassis": [{"@odata.id": CH}], "ManagedBy": [{"@odata.id": MGR}]},
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": f"{SYS}/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
                }
            },
            "Oem": {
                "Dell": {
                    "DellSystem": {
                        "ChassisServiceTag": bmc.spec.service_tag,
                        "LastSystemInventoryTime": "2026-01-01T00:00:00+00:00",
                    }
                },
                "Rackctl": {"LastBootSource": bmc.last_boot_source, "BootCount": bmc.boot_count},
            },
        }
    )
    return Reply(200, doc)


def system_patch(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """Boot override: validated here, target stored by sushy; ``Once`` honoured by the layer."""
    boot = data.get("Boot") if isinstance(data, dict) else None
    if not isinstance(boot, dict):
        return redfish_error(
            400,
            "Base.1.12.PropertyMissing",
            "PATCH of the system supports only the Boot "
            "property (BootSourceOverrideTarget, BootSourceOverrideEnabled).",
        )
    target = boot.get("BootSourceOverrideTarget")
    enabled = boot.get("BootSourceOverrideEnabled")
    mode = boot.get("BootSourceOverrideMode")
    if target is not None and target not in DELL_BOOT_TARGETS:
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {target!r} for the property "
            f"BootSourceOverrideTarget is not in the list of acceptable values: "
            f"{', '.join(DELL_BOOT_TARGETS)}.",
        )
    if enabled is not None and enabled not in BOOT_ENABLED:
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {enabled!r} for the property "
            f"BootSourceOverrideEnabled is not in the list of acceptable values: "
            f"{', '.join(BOOT_ENABLED)}.",
        )
    if mode is not None and mode not in ("UEFI", "Legacy"):
        return redfish_error(
            400,
            "Base.1.12.PropertyValueNotInList",
            f"The value {mode!r} for the property "
            "BootSourceOverrideMode is not in the list of acceptable values: UEFI, Legacy.",
        )
    sushy_boot: dict[str, str] = {}
    if target is not None:
        sushy_boot["BootSourceOverrideTarget"] = target
        bmc.boot_target = target
        if enabled is None and bmc.boot_enabled == "Disabled" and target != "None":
            bmc.boot_enabled = "Once"
    if mode is not None:
        sushy_boot["BootSourceOverrideMode"] = mode
        bmc.boot_mode = mode
    if enabled is not None:
        bmc.boot_enabled = enabled
    if bmc.boot_enabled == "Disabled" or bmc.boot_target == "None":
        bmc.boot_enabled, bmc.boot_target = "Disabled", "None"
    if sushy_boot:
        status, doc = bmc.sushy("PATCH", SYS, {"Boot": sushy_boot})
        if status >= 400:
            return Reply(status, doc)
    return success(200)


def system_reset(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """ComputerSystem.Reset through sushy, with iDRAC semantics on top (state conflicts, cycle, button)."""
    reset_type = data.get("ResetType") if isinstance(data, dict) else None
    if reset_type not in RESET_TYPES:
        return redfish_error(
            400,
            "Base.1.12.ActionParameterValueNotInList",
            f"The value {reset_type!r} for the "
            f"parameter ResetType is not in the list of acceptable values: "
            f"{', '.join(RESET_TYPES)}.",
        )
    power = bmc.power_state()
    is_on = power == "On"
    if reset_type == "Nmi":
        return Reply(204)
    if reset_type == "PushPowerButton":
        reset_type = "GracefulShutdown" if is_on else "On"
    elif reset_type == "PowerCycle":
        reset_type = "ForceRestart" if is_on else "On"
    if (reset_type == "On" and is_on) or (reset_type in ("ForceOff", "GracefulShutdown") and not is_on):
        return redfish_error(
            409,
            "IDRAC.2.8.PSU501",
            f"Unable to perform {reset_type}: the server is already powered {'on' if is_on else 'off'}.",
            "Read PowerState before resetting.",
        )
    if reset_type in ("ForceRestart", "GracefulRestart") and not is_on:
        return redfish_error(
            409,
            "IDRAC.2.8.PSU501",
            f"Unable to perform {reset_type}: the server is powered off.",
            "Power the server on instead.",
        )
    status, doc = bmc.sushy("POST", f"{SYS}/Actions/ComputerSystem.Reset", {"ResetType": reset_type})
    if status >= 400:
        return Reply(status, doc)
    return Reply(204)


def nics(bmc: EmulatedIdrac, **_: Any) -> Reply:
    status, doc = bmc.sushy("GET", f"{SYS}/EthernetInterfaces")
    if status == 200:
        doc.pop("Oem", None)
        doc["Description"] = "Collection of Ethernet Interfaces for this System"
    return Reply(status, doc)


def nic(bmc: EmulatedIdrac, fqdd: str, **_: Any) -> Reply:
    mac = bmc.mac_by_fqdd.get(fqdd)
    if mac is None:
        return redfish_error(
            404, "Base.1.12.ResourceMissingAtURI", f"The resource EthernetInterfaces/{fqdd} was not found."
        )
    status, doc = bmc.sushy("GET", f"{SYS}/EthernetInterfaces/{mac}")
    if status != 200:
        return Reply(status, doc)
    doc.update(
        {
            "@odata.id": f"{SYS}/EthernetInterfaces/{fqdd}",
            "@odata.type": "#EthernetInterface.v1_9_0.EthernetInterface",
            "Id": fqdd,
            "Name": f"System Ethernet Interface {fqdd}",
            "Description": "Network Interface View",
            "LinkStatus": "LinkUp",
            "SpeedMbps": hardware.nic_speed_mbps(fqdd),
            "AutoNeg": True,
            "FullDuplex": True,
            "Oem": {"Dell": {"FQDD": fqdd}},
        }
    )
    return Reply(200, doc)


def _member_collection(base: str, name: str, members: dict[str, dict], otype: str) -> Reply:
    return Reply(200, collection(base, name, [m["@odata.id"] for m in members.values()], otype))


def _member(members: dict[str, dict], key: str, what: str) -> Reply:
    if key in members:
        return Reply(200, members[key])
    return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The resource {what}/{key} was not found.")


def processors(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return _member_collection(f"{SYS}/Processors", "Processors Collection", bmc.processors, "ProcessorCollection")


def processor(bmc: EmulatedIdrac, pid: str, **_: Any) -> Reply:
    return _member(bmc.processors, pid, "Processors")


def memory(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return _member_collection(f"{SYS}/Memory", "Memory Collection", bmc.memory, "MemoryCollection")


def dimm(bmc: EmulatedIdrac, did: str, **_: Any) -> Reply:
    return _member(bmc.memory, did, "Memory")


def storage_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    ctl = bmc.storage_controller["@odata.id"]
    return Reply(200, collection(f"{SYS}/Storage", "Storage Collection", [ctl], "StorageCollection"))


def storage_get(bmc: EmulatedIdrac, ctl: str, **_: Any) -> Reply:
    return _member({bmc.storage_controller["Id"]: bmc.storage_controller}, ctl, "Storage")


def drive(bmc: EmulatedIdrac, ctl: str, did: str, **_: Any) -> Reply:
    if ctl != bmc.storage_controller["Id"]:
        return redfish_error(404, "Base.1.12.ResourceMissingAtURI", f"The resource Storage/{ctl} was not found.")
    return _member(bmc.drives, did, "Drives")


# ----- chassis and manager ----------------------------------------------------------------------------


def chassis_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(200, collection(f"{V1}/Chassis", "Chassis Collection", [CH], "ChassisCollection"))


def chassis_get(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(
        200,
        {
            "@odata.id": CH,
            "@odata.type": "#Chassis.v1_21_0.Chassis",
            "Id": "System.Embedded.1",
            "Name": "Computer System Chassis",
            "ChassisType": "RackMount",
            "Manufacturer": "Dell Inc.",
            "Model": f"PowerEdge {bmc.spec.model}",
            "SKU": bmc.spec.service_tag,
            "PowerState": bmc.power_state(),
            "PCIeDevices": {"@odata.id": f"{CH}/PCIeDevices"},
            "Links": {"ComputerSystems": [{"@odata.id": SYS}], "ManagedBy": [{"@odata.id": MGR}]},
            "Status": {"State": "Enabled", "Health": "OK"},
        },
    )


def pcie_list(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return _member_collection(f"{CH}/PCIeDevices", "PCIeDevice Collection", bmc.pcie, "PCIeDeviceCollection")


def pcie_get(bmc: EmulatedIdrac, dev: str, **_: Any) -> Reply:
    return _member(bmc.pcie, dev, "PCIeDevices")


def managers(bmc: EmulatedIdrac, **_: Any) -> Reply:
    return Reply(200, collection(f"{V1}/Managers", "Manager Collection", [MGR], "ManagerCollection"))


def manager_get(bmc: EmulatedIdrac, **_: Any) -> Reply:
    """sushy's manager made iDRAC.Embedded.1, with Dell's OEM services and SCP actions."""
    status, doc = bmc.sushy("GET", MGR)
    if status != 200:
        return Reply(status, doc)
    doc.pop("@Redfish.Copyright", None)
    dell_links = {
        "DellJobService": {"@odata.id": f"{MGR}/Oem/Dell/DellJobService"},
        "DellLCService": {"@odata.id": f"{MGR}/Oem/Dell/DellLCService"},
        "DellSoftwareInstallationService": {"@odata.id": f"{MGR}/Oem/Dell/DellSoftwareInstallationService"},
        "Jobs": {"@odata.id": f"{MGR}/Oem/Dell/Jobs"},
    }
    scp = "#OemManager.v1_4_0.OemManager#OemManager."
    doc.update(
        {
            "Id": "iDRAC.Embedded.1",
            "Name": "Manager",
            "Model": "16G Monolithic",
            "Description": "BMC",
            "FirmwareVersion": bmc.firmware["iDRAC"]["Version"],
            "ManagerType": "BMC",
            "Links": {
                "ManagerForServers": [{"@odata.id": SYS}],
                "ManagerForChassis": [{"@odata.id": CH}],
                "Oem": {"Dell": dell_links},
            },
            "Oem": {"Dell": dict(dell_links)},
            "Actions": {
                "#Manager.Reset": {
                    "target": f"{MGR}/Actions/Manager.Reset",
                    "ResetType@Redfish.AllowableValues": ["GracefulRestart"],
                },
                "Oem": {
                    f"{scp}ExportSystemConfiguration": {
                        "target": f"{MGR}/Actions/Oem/EID_674_Manager.ExportSystemConfiguration"
                    },
                    f"{scp}ImportSystemConfiguration": {
                        "target": f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfiguration"
                    },
                    f"{scp}ImportSystemConfigurationPreview": {
                        "target": f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfigurationPreview"
                    },
                },
            },
        }
    )
    doc.pop("VirtualMedia", None)
    return Reply(200, doc)


def manager_reset(bmc: EmulatedIdrac, data: Any, **_: Any) -> Reply:
    """Manager.Reset: the iDRAC restarts (connections dropped, sessions lost for ``reset_s``)."""
    if not isinstance(data, dict) or data.get("ResetType") != "GracefulRestart":
        return redfish_error(400, "Base.1.12.ActionParameterValueNotInList", "ResetType must be GracefulRestart.")
    bmc.reset_idrac()
    return Reply(204)


def build_routes(bmc: EmulatedIdrac) -> list[tuple[str, re.Pattern[str], Handler]]:
    """Every (method, path pattern, handler) the iDRAC answers."""

    table: list[tuple[str, str, Any]] = [
        ("GET", "/redfish", redfish_version),
        ("GET", V1, service_root),
        ("GET", f"{V1}/SessionService", session_service),
        ("GET", SESSIONS, sessions_list),
        ("POST", SESSIONS, session_login),
        ("GET", f"{SESSIONS}/{SEG.format('sid')}", session_get),
        ("DELETE", f"{SESSIONS}/{SEG.format('sid')}", session_delete),
        ("GET", f"{V1}/Systems", systems),
        ("GET", SYS, system_get),
        ("PATCH", SYS, system_patch),
        ("POST", f"{SYS}/Actions/ComputerSystem.Reset", system_reset),
        ("GET", f"{SYS}/EthernetInterfaces", nics),
        ("GET", f"{SYS}/EthernetInterfaces/{SEG.format('fqdd')}", nic),
        ("GET", f"{SYS}/Processors", processors),
        ("GET", f"{SYS}/Processors/{SEG.format('pid')}", processor),
        ("GET", f"{SYS}/Memory", memory),
        ("GET", f"{SYS}/Memory/{SEG.format('did')}", dimm),
        ("GET", f"{SYS}/Storage", storage_list),
        ("GET", f"{SYS}/Storage/{SEG.format('ctl')}", storage_get),
        ("GET", f"{SYS}/Storage/{SEG.format('ctl')}/Drives/{SEG.format('did')}", drive),
        ("GET", f"{V1}/Chassis", chassis_list),
        ("GET", CH, chassis_get),
        ("GET", f"{CH}/PCIeDevices", pcie_list),
        ("GET", f"{CH}/PCIeDevices/{SEG.format('dev')}", pcie_get),
        ("GET", f"{V1}/Managers", managers),
        ("GET", MGR, manager_get),
        ("POST", f"{MGR}/Actions/Manager.Reset", manager_reset),
        *cfg.ROUTES,
        *upd.ROUTES,
    ]
    return [(method, re.compile(pattern), functools.partial(fn, bmc)) for method, pattern, fn in table]
