"""Built-in hardware of each emulated PowerEdge model: CPUs, DIMMs, GPUs, PCIe devices, storage, firmware.

Figures follow Dell's published configurations closely enough for discovery tests; they are not a
specification. A spec's ``gpu_model``/``gpu_count`` override the model's default GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackctl_lab.idrac.spec import SUPPORTED_MODELS, EmulatedBmcSpec

SYSTEM = "/redfish/v1/Systems/System.Embedded.1"
CHASSIS = "/redfish/v1/Chassis/System.Embedded.1"


@dataclass(frozen=True)
class ModelHardware:
    """What one model carries besides its NICs (which come from the inventory)."""

    cpu_model: str
    cpu_cores: int
    cpu_speed_mhz: int
    dimm_count: int
    dimm_gib: int
    gpu_model: str | None
    gpu_count: int
    gpu_slot_base: int
    nvswitch_count: int
    storage_controller: str
    storage_model: str
    drive_count: int
    drive_gib: int
    extra_firmware: tuple[tuple[str, str, str], ...] = field(default=())


MODELS: dict[str, ModelHardware] = {
    "R660": ModelHardware(
        "Intel(R) Xeon(R) Gold 6430",
        32,
        2100,
        16,
        32,
        None,
        0,
        0,
        0,
        "RAID.SL.3-1",
        "PERC H755 Front",
        2,
        960,
    ),
    "R760xa": ModelHardware(
        "Intel(R) Xeon(R) Gold 6442Y",
        24,
        2600,
        16,
        64,
        "NVIDIA L40S",
        4,
        31,
        0,
        "RAID.SL.3-1",
        "PERC H755 Front",
        2,
        1920,
    ),
    "XE8640": ModelHardware(
        "Intel(R) Xeon(R) Platinum 8468",
        48,
        2100,
        32,
        64,
        "NVIDIA H100 80GB HBM3",
        4,
        41,
        0,
        "CPU.1",
        "CPU.1 (direct NVMe)",
        4,
        3840,
    ),
    "XE9680": ModelHardware(
        "Intel(R) Xeon(R) Platinum 8480+",
        56,
        2000,
        32,
        64,
        "NVIDIA H100 80GB HBM3",
        8,
        41,
        4,
        "CPU.1",
        "CPU.1 (direct NVMe)",
        8,
        3840,
    ),
}

#: Firmware component ids as Dell's FirmwareInventory uses them (Installed-<id>-<version>).
COMPONENT_IDS = {"BIOS": "159", "iDRAC": "25227", "NIC": "108255", "RAID": "104298", "GPU": "110013"}


def model_hardware(model: str) -> ModelHardware:
    """The model's hardware table entry; ``ValueError`` naming the allowed models otherwise."""
    try:
        return MODELS[model]
    except KeyError:
        raise ValueError(f"unknown model {model!r}; expected one of {', '.join(SUPPORTED_MODELS)}") from None


def _gpu_ids(spec: EmulatedBmcSpec) -> list[str]:
    hw = model_hardware(spec.model)
    return [f"Video.Slot.{hw.gpu_slot_base + i}-1" for i in range(spec.gpu_count if spec.gpu_model else 0)]


def processors(spec: EmulatedBmcSpec) -> dict[str, dict]:
    """Processors collection members (CPUs then GPUs), keyed by id."""
    hw = model_hardware(spec.model)
    out: dict[str, dict] = {}
    for socket in (1, 2):
        pid = f"CPU.Socket.{socket}"
        out[pid] = {
            "@odata.id": f"{SYSTEM}/Processors/{pid}",
            "@odata.type": "#Processor.v1_18_0.Processor",
            "Id": pid,
            "Name": "CPU",
            "ProcessorType": "CPU",
            "Manufacturer": "Intel",
            "Model": hw.cpu_model,
            "Socket": f"CPU.Socket.{socket}",
            "TotalCores": hw.cpu_cores,
            "TotalThreads": hw.cpu_cores * 2,
            "MaxSpeedMHz": 4000,
            "OperatingSpeedMHz": hw.cpu_speed_mhz,
            "ProcessorArchitecture": "x86",
            "InstructionSet": "x86-64",
            "Status": {"State": "Enabled", "Health": "OK"},
        }
    for n, gid in enumerate(_gpu_ids(spec)):
        out[gid] = {
            "@odata.id": f"{SYSTEM}/Processors/{gid}",
            "@odata.type": "#Processor.v1_18_0.Processor",
            "Id": gid,
            "Name": spec.gpu_model,
            "ProcessorType": "GPU",
            "Manufacturer": "NVIDIA Corporation",
            "Model": spec.gpu_model,
            "SerialNumber": f"{spec.service_tag}G{n:02d}",
            "Socket": gid,
            "Status": {"State": "Enabled", "Health": "OK"},
            "Links": {"PCIeDevice": {"@odata.id": f"{CHASSIS}/PCIeDevices/{_pcie_id(gid)}"}},
        }
    return out


def _pcie_id(device: str) -> str:
    """Dell-style PCIe device id (bus-device) derived from a slot FQDD."""
    digits = "".join(ch for ch in device if ch.isdigit()) or "0"
    return f"{int(digits) % 240 + 10}-0"


def pcie_devices(spec: EmulatedBmcSpec) -> dict[str, dict]:
    """Chassis PCIeDevices: GPUs, NVSwitches (XE9680), the storage controller."""
    hw = model_hardware(spec.model)
    out: dict[str, dict] = {}

    def add(device_id: str, name: str, vendor: str, dtype: str, fqdd: str) -> None:
        out[device_id] = {
            "@odata.id": f"{CHASSIS}/PCIeDevices/{device_id}",
            "@odata.type": "#PCIeDevice.v1_11_0.PCIeDevice",
            "Id": device_id,
            "Name": name,
            "Manufacturer": vendor,
            "Model": name,
            "DeviceType": dtype,
            "Oem": {"Dell": {"FQDD": fqdd}},
            "Status": {"State": "Enabled", "Health": "OK"},
        }

    for gid in _gpu_ids(spec):
        add(_pcie_id(gid), str(spec.gpu_model), "NVIDIA Corporation", "SingleFunction", gid)
    for n in range(hw.nvswitch_count):
        add(
            f"{200 + n}-0",
            "NVIDIA NVSwitch",
            "NVIDIA Corporation",
            "SingleFunction",
            f"NVSwitch.Embedded.{n + 1}",
        )
    if hw.storage_controller.startswith("RAID"):
        add("101-0", hw.storage_model, "Broadcom / LSI", "SingleFunction", hw.storage_controller)
    return out


def memory(spec: EmulatedBmcSpec) -> dict[str, dict]:
    """DIMMs, keyed by id (``DIMM.Socket.A1``...)."""
    hw = model_hardware(spec.model)
    out: dict[str, dict] = {}
    per_cpu = hw.dimm_count // 2
    for cpu, bank in ((0, "A"), (1, "B")):
        for slot in range(1, per_cpu + 1):
            did = f"DIMM.Socket.{bank}{slot}"
            out[did] = {
                "@odata.id": f"{SYSTEM}/Memory/{did}",
                "@odata.type": "#Memory.v1_17_0.Memory",
                "Id": did,
                "Name": "DIMM",
                "CapacityMiB": hw.dimm_gib * 1024,
                "MemoryDeviceType": "DDR5",
                "OperatingSpeedMhz": 4800,
                "Manufacturer": "Hynix Semiconductor",
                "PartNumber": "HMCG94AGBRA181N",
                "SerialNumber": f"{spec.service_tag}{cpu}{slot:02d}",
                "DeviceLocator": f"DIMM {bank}{slot}",
                "Status": {"State": "Enabled", "Health": "OK"},
            }
    return out


def total_memory_gib(spec: EmulatedBmcSpec) -> int:
    hw = model_hardware(spec.model)
    return hw.dimm_count * hw.dimm_gib


def storage(spec: EmulatedBmcSpec) -> tuple[dict, dict[str, dict]]:
    """The storage controller resource and its drives (keyed by drive id)."""
    hw = model_hardware(spec.model)
    ctl = hw.storage_controller
    base = f"{SYSTEM}/Storage/{ctl}"
    drives: dict[str, dict] = {}
    for bay in range(hw.drive_count):
        did = f"Disk.Bay.{bay}:Enclosure.Internal.0-1:{ctl}"
        drives[did] = {
            "@odata.id": f"{base}/Drives/{did}",
            "@odata.type": "#Drive.v1_17_0.Drive",
            "Id": did,
            "Name": f"Disk {bay}",
            "CapacityBytes": hw.drive_gib * 1000**3,
            "MediaType": "SSD",
            "Protocol": "NVMe" if ctl == "CPU.1" else "SAS",
            "Manufacturer": "Dell",
            "SerialNumber": f"{spec.service_tag}D{bay:02d}",
            "Status": {"State": "Enabled", "Health": "OK"},
        }
    controller = {
        "@odata.id": base,
        "@odata.type": "#Storage.v1_15_0.Storage",
        "Id": ctl,
        "Name": hw.storage_model,
        "Drives": [{"@odata.id": d["@odata.id"]} for d in drives.values()],
        "Drives@odata.count": len(drives),
        "StorageControllers": [
            {"MemberId": ctl, "Name": hw.storage_model, "Status": {"State": "Enabled", "Health": "OK"}}
        ],
        "Status": {"State": "Enabled", "Health": "OK"},
    }
    return controller, drives


def initial_firmware(spec: EmulatedBmcSpec) -> dict[str, dict]:
    """Firmware components, keyed by component name: ``{"Name", "Version", "ComponentId", "Updateable"}``."""
    hw = model_hardware(spec.model)
    comps: dict[str, dict] = {
        "BIOS": {"Name": "BIOS", "Version": spec.bios_version, "ComponentId": COMPONENT_IDS["BIOS"]},
        "iDRAC": {
            "Name": "Integrated Dell Remote Access Controller",
            "Version": spec.idrac_version,
            "ComponentId": COMPONENT_IDS["iDRAC"],
        },
    }
    for fqdd in spec.nics:
        comps[f"NIC:{fqdd}"] = {
            "Name": f"Network Adapter {fqdd}",
            "Version": "22.31.6",
            "ComponentId": COMPONENT_IDS["NIC"],
            "FQDD": fqdd,
        }
    if hw.storage_controller.startswith("RAID"):
        comps["RAID"] = {
            "Name": hw.storage_model,
            "Version": "52.26.0-5179",
            "ComponentId": COMPONENT_IDS["RAID"],
        }
    if spec.gpu_model and spec.gpu_count:
        comps["GPU"] = {
            "Name": f"{spec.gpu_model} firmware",
            "Version": "96.00.74.00.01",
            "ComponentId": COMPONENT_IDS["GPU"],
        }
    for comp in comps.values():
        comp["Updateable"] = True
    return comps


def nic_speed_mbps(fqdd: str) -> int:
    """Link speed by NIC kind: embedded LOMs 1 GbE, integrated OCP 25 GbE, slot NICs 100 GbE."""
    if fqdd.startswith("NIC.Embedded"):
        return 1000
    if fqdd.startswith("NIC.Integrated"):
        return 25000
    return 100000
