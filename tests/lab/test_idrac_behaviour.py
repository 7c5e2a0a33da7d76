"""Behaviour of one emulated iDRAC over HTTPS with plain ``requests``: identity, sessions, inventory,
power, boot override, BIOS and jobs, LC status, SCP, firmware, virtual media."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.lab

SYS = "/redfish/v1/Systems/System.Embedded.1"
MGR = "/redfish/v1/Managers/iDRAC.Embedded.1"
SESSIONS = "/redfish/v1/SessionService/Sessions"


def links_in(doc: object) -> set[str]:
    """Every ``@odata.id`` inside a document (excluding the document's own id at top level)."""
    found: set[str] = set()
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "@odata.id" and isinstance(value, str):
                found.add(value)
            else:
                found |= links_in(value)
    elif isinstance(doc, list):
        for item in doc:
            found |= links_in(item)
    return found


def test_service_root_is_dell_and_unauthenticated(bmc, specs):
    client = bmc("head-01")
    root = client.get("/redfish/v1", auth=False).json()
    assert root["Vendor"] == "Dell"
    assert root["Oem"]["Dell"]["ServiceTag"] == specs["head-01"].service_tag
    assert root["Links"]["Sessions"]["@odata.id"] == SESSIONS
    assert client.get(SYS, auth=False).status_code == 401


def test_every_link_from_the_root_resolves_to_dell_ids(bmc):
    """Crawl every link reachable from the service root: all answer 200, none leaks a sushy UUID."""
    client = bmc("gpu-xe9680")
    assert client.login().status_code == 201
    seen: set[str] = set()
    todo = ["/redfish/v1"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:300])
        doc = resp.json()
        assert "4c4c4544-" not in json.dumps(sorted(links_in(doc) | {doc.get("Id", "")})), path
        todo.extend(link.split("#")[0] for link in links_in(doc) if link.startswith("/redfish/v1"))
    assert f"{SYS}/Processors" in seen and f"{MGR}/Oem/Dell/Jobs" in seen and f"{SYS}/Bios/BiosRegistry" in seen
    assert len(seen) > 50


def test_inventory_matches_the_model(bmc, specs):
    for name, cpus_gpus in (("head-01", 0), ("gpu-l40s", 2), ("gpu-xe8640", 4), ("gpu-xe9680", 8)):
        client = bmc(name)
        spec = specs[name]
        system = client.json(SYS)
        assert system["Model"] == f"PowerEdge {spec.model}"
        assert system["SKU"] == spec.service_tag
        procs = client.json(f"{SYS}/Processors?$expand=*($levels=1)")["Members"]
        gpus = [p for p in procs if p["ProcessorType"] == "GPU"]
        assert len(gpus) == cpus_gpus == spec.gpu_count
        assert all(g["Model"] == spec.gpu_model for g in gpus)
        assert len([p for p in procs if p["ProcessorType"] == "CPU"]) == 2
        nics = client.json(f"{SYS}/EthernetInterfaces?$expand=.($levels=1)")["Members"]
        assert {n["Id"]: n["MACAddress"] for n in nics} == spec.nics
        assert all(n["LinkStatus"] == "LinkUp" and n["SpeedMbps"] > 0 for n in nics)
        dimms = client.json(f"{SYS}/Memory")["Members@odata.count"]
        assert sum(m["CapacityMiB"] for m in client.json(f"{SYS}/Memory?$expand=*")["Members"]) == (
            system["MemorySummary"]["TotalSystemMemoryGiB"] * 1024
        )
        assert dimms >= 16
    pcie = bmc("gpu-xe9680").json("/redfish/v1/Chassis/System.Embedded.1/PCIeDevices?$expand=*")["Members"]
    assert len([d for d in pcie if d["Name"] == "NVIDIA NVSwitch"]) == 4


def test_session_limit_rac0218_and_logout(bmc, rack, util):
    clients = [bmc("sess-a") for _ in range(8)]
    for client in clients:
        assert client.login().status_code == 201
    assert rack.open_sessions("sess-a") == 8
    extra = bmc("sess-a")
    refused = extra.login()
    assert refused.status_code == 400
    assert any(mid.endswith("RAC0218") for mid in util.extended_ids(refused))
    # Basic auth still works while sessions are exhausted, as on an iDRAC.
    assert extra.get(SYS).status_code == 200
    token = clients[0].token
    clients[0].logout()
    assert rack.open_sessions("sess-a") == 7
    stale = clients[0].http.get(f"{clients[0].ep.url}{SYS}", headers={"X-Auth-Token": token}, timeout=5)
    assert stale.status_code == 401
    assert extra.login().status_code == 201
    for client in [*clients[1:], extra]:
        client.logout()
    assert rack.open_sessions("sess-a") == 0


def test_wrong_password_is_rejected_for_login_and_basic(bmc, util):
    client = bmc("sess-b")
    client.spec = type(client.spec)(**{**client.spec.__dict__, "password": "wrong"})
    assert client.login().status_code == 401
    assert client.get(SYS).status_code == 401
    other_bmc_password = util.make_spec(0, "head-01", "R660", None, 0).password
    client.spec = type(client.spec)(**{**client.spec.__dict__, "password": other_bmc_password})
    assert client.get(SYS).status_code == 401


def test_power_transitions_and_conflicts(bmc, rack, util):
    client = bmc("power-a")
    reset = f"{SYS}/Actions/ComputerSystem.Reset"
    assert client.json(SYS)["PowerState"] == "Off"
    off_again = client.post(reset, {"ResetType": "ForceOff"})
    assert off_again.status_code == 409
    assert client.post(reset, {"ResetType": "On"}).status_code == 204
    util.wait_for(lambda: client.json(SYS)["PowerState"] == "On")
    assert client.post(reset, {"ResetType": "On"}).status_code == 409
    boots = rack.state("power-a")["boot"]["boot_count"]
    assert client.post(reset, {"ResetType": "PowerCycle"}).status_code == 204
    util.wait_for(lambda: rack.state("power-a")["boot"]["boot_count"] == boots + 1)
    assert client.json(SYS)["PowerState"] == "On"
    assert client.post(reset, {"ResetType": "GracefulShutdown"}).status_code == 204
    util.wait_for(lambda: client.json(SYS)["PowerState"] == "Off")
    bad = client.post(reset, {"ResetType": "Explode"})
    assert bad.status_code == 400 and "ResetType" in bad.text


def test_boot_override_once_is_cleared_after_one_boot(bmc, rack, util):
    client = bmc("boot-a")
    reset = f"{SYS}/Actions/ComputerSystem.Reset"
    resp = client.patch(SYS, {"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}})
    assert resp.status_code == 200
    boot = client.json(SYS)["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == ("Pxe", "Once")
    assert client.post(reset, {"ResetType": "On"}).status_code == 204
    util.wait_for(lambda: client.json(SYS)["PowerState"] == "On")
    system = client.json(SYS)
    assert system["Oem"]["Rackctl"]["LastBootSource"] == "Pxe"
    assert system["Boot"]["BootSourceOverrideEnabled"] == "Disabled"
    assert system["Boot"]["BootSourceOverrideTarget"] == "None"
    assert client.post(reset, {"ResetType": "ForceRestart"}).status_code == 204
    util.wait_for(lambda: rack.state("boot-a")["boot"]["boot_count"] == 2)
    assert client.json(SYS)["Oem"]["Rackctl"]["LastBootSource"] == "Hdd"
    bad = client.patch(SYS, {"Boot": {"BootSourceOverrideTarget": "Network"}})
    assert bad.status_code == 400 and "BootSourceOverrideTarget" in bad.text


def test_bios_pending_job_applied_at_reset(bmc, rack, util):
    """PATCH Settings with OnReset -> job Scheduled; power on -> Running -> Completed; values read back;
    the read-only and the dependency-locked attribute do not take and the job says so."""
    client = bmc("bios-a")
    lc = client.post(f"{MGR}/Oem/Dell/DellLCService/Actions/DellLCService.GetRemoteServicesAPIStatus", {})
    assert lc.json()["LCStatus"] == "Ready"
    wanted = {
        "ProcVirtualization": "Enabled",
        "SriovGlobalEnable": "Enabled",
        "SysProfile": "PerfOptimized",
        "WorkloadProfile": "HpcProfile",
        "SystemServiceTag": "HACKED1",
    }
    resp = client.patch(
        f"{SYS}/Bios/Settings", {"Attributes": wanted, "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}
    )
    assert resp.status_code == 202
    job_uri = resp.headers["Location"]
    assert client.json(f"{SYS}/Bios/Settings")["Attributes"] == wanted
    assert client.json(job_uri)["JobState"] == "Scheduled"
    assert client.json(f"{SYS}/Bios")["Attributes"]["ProcVirtualization"] == "Disabled"
    again = client.patch(f"{SYS}/Bios/Settings", {"Attributes": {"LogicalProc": "Disabled"}})
    assert again.status_code == 400 and "SYS011" in again.text
    job_id = job_uri.rsplit("/", 1)[1]
    assert job_id in {m["@odata.id"].rsplit("/", 1)[1] for m in client.json(f"{MGR}/Oem/Dell/Jobs")["Members"]}
    assert client.post(f"{SYS}/Actions/ComputerSystem.Reset", {"ResetType": "On"}).status_code == 204
    job = util.wait_for(lambda: (j := client.json(job_uri))["JobState"] not in ("Scheduled", "Running") and j)
    assert job["JobState"] == "CompletedWithErrors"
    assert "WorkloadProfile" in job["Message"] and "SystemServiceTag" in job["Message"]
    current = client.json(f"{SYS}/Bios")["Attributes"]
    assert current["ProcVirtualization"] == "Enabled" and current["SriovGlobalEnable"] == "Enabled"
    assert current["SysProfile"] == "PerfOptimized"
    assert current["WorkloadProfile"] == "NotConfigured"
    assert current["SystemServiceTag"] == rack.state("bios-a")["bios"]["SystemServiceTag"] != "HACKED1"
    assert client.json(f"{SYS}/Bios/Settings")["Attributes"] == {}


def test_bios_dependency_takes_when_unlocked_with_older_job_flow(bmc, util):
    """PATCH without apply time, then POST Jobs (TargetSettingsURI); LC068 for a second job."""
    client = bmc("bios-b")
    attrs = {"SysProfile": "Custom", "WorkloadProfile": "LowLatencyOptimizedProfile"}
    assert client.patch(f"{SYS}/Bios/Settings", {"Attributes": attrs}).status_code == 200
    jobs = f"{MGR}/Jobs"
    created = client.post(jobs, {"TargetSettingsURI": f"{SYS}/Bios/Settings"})
    assert created.status_code == 200
    second = client.post(jobs, {"TargetSettingsURI": f"{SYS}/Bios/Settings"})
    assert second.status_code == 400 and any(m.endswith("LC068") for m in util.extended_ids(second))
    client.post(f"{SYS}/Actions/ComputerSystem.Reset", {"ResetType": "On"})
    util.wait_for(lambda: client.json(created.headers["Location"])["JobState"] == "Completed")
    current = client.json(f"{SYS}/Bios")["Attributes"]
    assert current["SysProfile"] == "Custom" and current["WorkloadProfile"] == "LowLatencyOptimizedProfile"


def test_bios_patch_validation_names_attribute_and_values(bmc):
    client = bmc("bios-c")
    resp = client.patch(
        f"{SYS}/Bios/Settings",
        {"Attributes": {"BootMode": "Floppy", "NoSuchAttr": 1, "AcPwrRcvryUserDelay": 5}},
    )
    assert resp.status_code == 400
    infos = resp.json()["error"]["@Message.ExtendedInfo"]
    by_attr = {i["RelatedProperties"][0]: i for i in infos}
    assert "Uefi" in by_attr["#/Attributes/BootMode"]["Message"]
    assert by_attr["#/Attributes/NoSuchAttr"]["MessageId"].endswith("PropertyUnknown")
    assert by_attr["#/Attributes/AcPwrRcvryUserDelay"]["MessageId"].endswith("PropertyValueOutOfRange")
    assert client.json(f"{SYS}/Bios/Settings")["Attributes"] == {}
    registry = client.json(f"{SYS}/Bios/BiosRegistry")["RegistryEntries"]
    assert any(a["AttributeName"] == "SystemServiceTag" and a["ReadOnly"] for a in registry["Attributes"])
    assert registry["Dependencies"][0]["DependencyFor"] == "WorkloadProfile"
    # Clear pending and the job queue.
    assert client.patch(f"{SYS}/Bios/Settings", {"Attributes": {"LogicalProc": "Disabled"}}).status_code == 200
    clear = f"{SYS}/Bios/Settings/Actions/Oem/DellManager.ClearPending"
    assert client.post(clear, {}).status_code == 200
    assert client.json(f"{SYS}/Bios/Settings")["Attributes"] == {}
    client.patch(
        f"{SYS}/Bios/Settings",
        {"Attributes": {"LogicalProc": "Disabled"}, "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}},
    )
    assert client.json(f"{MGR}/Jobs")["Members@odata.count"] == 1
    delete = f"{MGR}/Oem/Dell/DellJobService/Actions/DellJobService.DeleteJobQueue"
    assert client.post(delete, {"JobID": "JID_CLEARALL"}).status_code == 200
    assert client.json(f"{MGR}/Jobs")["Members@odata.count"] == 0
    assert client.json(f"{SYS}/Bios/Settings")["Attributes"] == {}


def test_scp_export_and_import_through_task_monitors(bmc, util):
    client = bmc("scp-a")
    export = client.post(
        f"{MGR}/Actions/Oem/EID_674_Manager.ExportSystemConfiguration",
        {"ExportFormat": "XML", "ShareParameters": {"Target": "ALL"}},
    )
    assert export.status_code == 202
    monitor = export.headers["Location"]
    assert client.get(monitor).status_code == 202
    lc = client.post(f"{MGR}/Oem/Dell/DellLCService/Actions/DellLCService.GetRemoteServicesAPIStatus", {}).json()
    assert (lc["LCStatus"], lc["Status"]) == ("InUse", "NotReady")  # a job runs for 1.5 s
    done = util.wait_for(lambda: (r := client.get(monitor)).status_code == 200 and r)
    root = ET.fromstring(done.text)
    assert root.get("ServiceTag") == client.spec.service_tag
    fqdds = {c.get("FQDD") for c in root.iter("Component")}
    assert "BIOS.Setup.1-1" in fqdds and "NIC.Embedded.1-1-1" in fqdds
    assert client.spec.password not in done.text
    # Import a profile changing two BIOS attributes.
    bios = root.find("Component[@FQDD='BIOS.Setup.1-1']")
    bios.find("Attribute[@Name='ProcVirtualization']").text = "Enabled"
    bios.find("Attribute[@Name='LogicalProc']").text = "Disabled"
    profile = ET.tostring(root, encoding="unicode")
    imp = client.post(
        f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfiguration",
        {
            "ImportBuffer": profile,
            "ShareParameters": {"Target": "BIOS"},
            "ShutdownType": "Graceful",
            "HostPowerState": "Off",
        },
    )
    assert imp.status_code == 202
    task = util.wait_for(lambda: (r := client.get(imp.headers["Location"])).status_code == 200 and r.json())
    assert task["TaskState"] == "Completed", task
    lc = client.post(f"{MGR}/Oem/Dell/DellLCService/Actions/DellLCService.GetRemoteServicesAPIStatus", {}).json()
    assert lc["LCStatus"] == "Ready"
    current = client.json(f"{SYS}/Bios")["Attributes"]
    assert (current["ProcVirtualization"], current["LogicalProc"]) == ("Enabled", "Disabled")
    broken = client.post(
        f"{MGR}/Actions/Oem/EID_674_Manager.ImportSystemConfiguration",
        {"ImportBuffer": "<SystemConfiguration><Component", "ShareParameters": {}},
    )
    assert broken.status_code == 400 and "SYS041" in broken.text


def test_firmware_update_changes_version_through_task(bmc, rack, util):
    client = bmc("fw-a")
    inventory = client.json("/redfish/v1/UpdateService/FirmwareInventory?$expand=*($levels=1)")["Members"]
    bios = next(m for m in inventory if m["Name"] == "BIOS")
    assert bios["Version"] == client.spec.bios_version
    resp = client.post(
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        {"ImageURI": "http://10.0.0.1/repo/BIOS_XYZ12_WN64_2.4.8.EXE", "TransferProtocol": "HTTP"},
    )
    assert resp.status_code == 202
    task = util.wait_for(lambda: (r := client.get(resp.headers["Location"])).status_code == 200 and r.json())
    assert task["TaskState"] == "Completed"
    assert client.json(SYS)["BiosVersion"] == "2.4.8"
    ids = [
        m["@odata.id"].rsplit("/", 1)[1] for m in client.json("/redfish/v1/UpdateService/FirmwareInventory")["Members"]
    ]
    assert "Installed-159-2.4.8" in ids and f"Previous-159-{client.spec.bios_version}" in ids
    assert rack.state("fw-a")["firmware"]["BIOS"] == "2.4.8"
    wrong = client.post(
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        {"ImageURI": "http://10.0.0.1/repo/Toaster_Firmware_1.0.EXE"},
    )
    assert wrong.status_code == 400 and "SUP029" in wrong.text


def test_idrac_self_update_resets_the_idrac(bmc, rack, util):
    client = bmc("fw-b")
    assert client.login().status_code == 201
    resp = client.post(
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        {"ImageURI": "https://10.0.0.1/iDRAC-with-Lifecycle-Controller_Firmware_7.20.10.50.EXE"},
    )
    assert resp.status_code == 202
    util.wait_for(lambda: rack.state("fw-b")["firmware"]["iDRAC"] == "7.20.10.50")
    assert rack.open_sessions("fw-b") == 0  # the reset dropped every session
    client.token = client.location = None
    util.wait_for(lambda: _answers(client), timeout=15)
    assert client.json(MGR)["FirmwareVersion"] == "7.20.10.50"


def _answers(client) -> bool:
    import requests

    try:
        return client.get("/redfish/v1", auth=False, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_virtual_media_insert_eject(bmc, util):
    client = bmc("vm-a")
    cd = f"{SYS}/VirtualMedia/1"
    insert = f"{cd}/Actions/VirtualMedia.InsertMedia"
    assert client.post(insert, {"Image": "http://10.0.0.1/boot.iso", "Inserted": True}).status_code == 204
    media = client.json(cd)
    assert media["Inserted"] is True and media["Image"] == "http://10.0.0.1/boot.iso"
    busy = client.post(insert, {"Image": "http://10.0.0.1/other.iso"})
    assert busy.status_code == 400 and any(m.endswith("VRM0021") for m in util.extended_ids(busy))
    assert client.post(f"{cd}/Actions/VirtualMedia.EjectMedia", {}).status_code == 200
    assert client.json(cd)["Inserted"] is False
    assert client.post(insert, {"Image": "file:///etc/passwd"}).status_code == 400
