"""Discover a node's hardware through its BMC: identity, CPUs, memory, NICs, GPUs, storage, firmware."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from redfish_tools.connection import BmcConnection
from redfish_tools.fleet import in_parallel
from redfish_tools.resources import Service, link, odata_id

GPU_VENDORS = ("NVIDIA", "AMD", "Intel")


@dataclass
class Nic:
    fqdd: str
    mac: str | None
    permanent_mac: str | None
    link_status: str | None
    speed_mbps: int | None


@dataclass
class Gpu:
    id: str
    model: str
    source: str  # "Processors" or "PCIeDevices"


@dataclass
class Drive:
    id: str
    model: str | None
    capacity_bytes: int | None
    media_type: str | None
    protocol: str | None


@dataclass
class StorageController:
    id: str
    name: str | None
    drives: list[Drive] = field(default_factory=list)


@dataclass
class DiscoveredNode:
    """What the BMC reports about one node (read-only facts, JSON-friendly via :meth:`as_dict`)."""

    bmc: str
    service_tag: str | None = None
    manufacturer: str | None = None
    model: str | None = None
    uuid: str | None = None
    power_state: str | None = None
    bios_version: str | None = None
    idrac_version: str | None = None
    idrac_model: str | None = None
    cpus: list[dict[str, Any]] = field(default_factory=list)
    memory_gib: float | None = None
    dimms: int = 0
    nics: list[Nic] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    storage: list[StorageController] = field(default_factory=list)
    firmware: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0

    @property
    def short_model(self) -> str | None:
        """``PowerEdge R660`` -> ``R660``."""
        return self.model.removeprefix("PowerEdge ").strip() if self.model else None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def macs(self) -> dict[str, str]:
        """FQDD -> MAC (lower case) of every NIC with a MAC."""
        return {n.fqdd: n.mac.lower() for n in self.nics if n.mac}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["short_model"] = self.short_model
        data["gpu_count"] = self.gpu_count
        return data


@dataclass
class RawInventory:
    """The Redfish resources discovery reads, before interpretation."""

    root: dict[str, Any]
    system: dict[str, Any]
    processors: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    nics: list[dict[str, Any]] = field(default_factory=list)
    storage: list[tuple[dict[str, Any], list[dict[str, Any]]]] = field(default_factory=list)
    pcie_devices: list[dict[str, Any]] = field(default_factory=list)
    manager: dict[str, Any] = field(default_factory=dict)
    firmware: list[dict[str, Any]] = field(default_factory=list)


def discover(conn: BmcConnection) -> DiscoveredNode:
    """Read every fact rackctl uses from one BMC (read-only; one request per collection with $expand)."""
    start = conn.requests_sent
    facts = facts_from(fetch(Service(conn)), conn.target.name)
    facts.requests = conn.requests_sent - start
    return facts


def fetch(svc: Service) -> RawInventory:
    """Read the resources discovery needs, following links from the service root; independent reads run
    ``max_in_flight`` at a time (the connection's own limit)."""
    system = svc.get(svc.system_uri())
    raw = RawInventory(root=svc.root, system=system)

    def storage() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        return [
            (ctrl, [ref if len(ref) > 1 else svc.get(odata_id(ref)) for ref in ctrl.get("Drives", [])])
            for ctrl in svc.members(link(system, "Storage"))
        ]

    def pcie() -> list[dict[str, Any]]:
        chassis = svc.get(chassis_uri_of(svc, system))
        pcie_uri = link(chassis, "PCIeDevices")
        return svc.members(pcie_uri) if pcie_uri else [svc.get(odata_id(d)) for d in chassis.get("PCIeDevices", [])]

    def firmware() -> list[dict[str, Any]]:
        update = svc.service_uri("UpdateService")
        return svc.members(link(svc.get(update), "FirmwareInventory")) if update else []

    (raw.storage, raw.pcie_devices, raw.firmware, raw.processors, raw.memory, raw.nics, raw.manager) = in_parallel(
        svc.conn.policy.max_in_flight,
        storage,
        pcie,
        firmware,
        lambda: svc.members(link(system, "Processors")),
        lambda: svc.members(link(system, "Memory")),
        lambda: svc.members(link(system, "EthernetInterfaces")),
        svc.manager,
    )
    return raw


def chassis_uri_of(svc: Service, system: dict[str, Any]) -> str:
    """The system's chassis: its ``Links.Chassis`` entry, else the preferred member of Chassis."""
    chassis_links = system.get("Links", {}).get("Chassis") or []
    return odata_id(chassis_links[0]) if chassis_links else svc.chassis_uri()


def facts_from(raw: RawInventory, bmc: str) -> DiscoveredNode:
    """Interpret raw resources as :class:`DiscoveredNode` (pure: no I/O)."""
    system = raw.system
    facts = DiscoveredNode(bmc=bmc)
    oem_tag = raw.root.get("Oem", {}).get("Dell", {}).get("ServiceTag")
    facts.service_tag = system.get("SKU") or oem_tag or system.get("SerialNumber")
    facts.manufacturer = system.get("Manufacturer")
    facts.model = system.get("Model")
    facts.uuid = system.get("UUID")
    facts.power_state = system.get("PowerState")
    facts.bios_version = system.get("BiosVersion")
    facts.memory_gib = (system.get("MemorySummary") or {}).get("TotalSystemMemoryGiB")
    for proc in raw.processors:
        if proc.get("ProcessorType") == "GPU":
            facts.gpus.append(Gpu(id=str(proc.get("Id")), model=str(proc.get("Model") or ""), source="Processors"))
        else:
            facts.cpus.append(
                {
                    "id": proc.get("Id"),
                    "model": proc.get("Model"),
                    "cores": proc.get("TotalCores"),
                    "threads": proc.get("TotalThreads"),
                }
            )
    facts.dimms = len(raw.memory)
    if facts.memory_gib is None and raw.memory:
        facts.memory_gib = sum((d.get("CapacityMiB") or 0) for d in raw.memory) / 1024
    for nic in raw.nics:
        facts.nics.append(
            Nic(
                fqdd=str(nic.get("Id")),
                mac=(nic.get("MACAddress") or None),
                permanent_mac=nic.get("PermanentMACAddress"),
                link_status=nic.get("LinkStatus"),
                speed_mbps=nic.get("SpeedMbps"),
            )
        )
    for ctrl, drives in raw.storage:
        controller = StorageController(id=str(ctrl.get("Id")), name=ctrl.get("Name"))
        for drive in drives:
            controller.drives.append(
                Drive(
                    id=str(drive.get("Id") or odata_id(drive).rsplit("/", 1)[-1]),
                    model=drive.get("Model"),
                    capacity_bytes=drive.get("CapacityBytes"),
                    media_type=drive.get("MediaType"),
                    protocol=drive.get("Protocol"),
                )
            )
        facts.storage.append(controller)
    if not facts.gpus:  # older firmware lists GPUs only as PCIe devices
        facts.gpus = [
            Gpu(id=str(d.get("Id")), model=str(d.get("Model") or d.get("Name") or ""), source="PCIeDevices")
            for d in raw.pcie_devices
            if _is_gpu_device(d)
        ]
    facts.idrac_version = raw.manager.get("FirmwareVersion")
    facts.idrac_model = raw.manager.get("Model")
    facts.firmware = [{"id": i.get("Id"), "name": i.get("Name"), "version": i.get("Version")} for i in raw.firmware]
    return facts


def _is_gpu_device(device: dict[str, Any]) -> bool:
    cls = str(device.get("DeviceClass") or device.get("Oem", {}).get("Dell", {}).get("DeviceClass") or "")
    maker = str(device.get("Manufacturer") or "")
    return cls in ("DisplayController", "ProcessingAccelerators") and any(v in maker for v in GPU_VENDORS)
