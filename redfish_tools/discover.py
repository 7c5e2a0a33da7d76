"""Discover a node's hardware through its BMC: identity, CPUs, memory, NICs, GPUs, storage, firmware."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from redfish_tools.connection import BmcConnection
from redfish_tools.fleet import in_parallel
from redfish_tools.resources import Service, link, odata_id
from redfish_tools.views import (
    Chassis,
    ComputerSystem,
    DriveResource,
    EthernetInterface,
    Manager,
    Memory,
    PCIeDevice,
    Processor,
    ServiceRoot,
    SoftwareInventory,
    Storage,
)

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
            (ctrl, [ref if len(ref) > 1 else svc.get(odata_id(ref)) for ref in Storage.from_json(ctrl).drives])
            for ctrl in svc.members(link(system, "Storage"))
        ]

    def pcie() -> list[dict[str, Any]]:
        chassis = svc.get(chassis_uri_of(svc, system))
        pcie_uri = link(chassis, "PCIeDevices")
        if pcie_uri:
            return svc.members(pcie_uri)
        return [svc.get(odata_id(d)) for d in Chassis.from_json(chassis).pcie_devices]

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
    chassis_links = ComputerSystem.from_json(system).chassis_links or []
    return odata_id(chassis_links[0]) if chassis_links else svc.chassis_uri()


def facts_from(raw: RawInventory, bmc: str) -> DiscoveredNode:
    """Interpret raw resources as :class:`DiscoveredNode` (pure: no I/O)."""
    system = ComputerSystem.from_json(raw.system)
    manager = Manager.from_json(raw.manager)
    cpus, gpus = _processors([Processor.from_json(p) for p in raw.processors])
    dimms = [Memory.from_json(d) for d in raw.memory]
    memory_gib = system.total_memory_gib
    if memory_gib is None and dimms:
        memory_gib = sum((d.capacity_mib or 0) for d in dimms) / 1024
    return DiscoveredNode(
        bmc=bmc,
        service_tag=system.sku or ServiceRoot.from_json(raw.root).dell_service_tag or system.serial_number,
        manufacturer=system.manufacturer,
        model=system.model,
        uuid=system.uuid,
        power_state=system.power_state,
        bios_version=system.bios_version,
        idrac_version=manager.firmware_version,
        idrac_model=manager.model,
        cpus=cpus,
        memory_gib=memory_gib,
        dimms=len(dimms),
        nics=[_nic(EthernetInterface.from_json(n)) for n in raw.nics],
        gpus=gpus or _pcie_gpus([PCIeDevice.from_json(d) for d in raw.pcie_devices]),
        storage=[_controller(Storage.from_json(ctrl), drives) for ctrl, drives in raw.storage],
        firmware=[_firmware(SoftwareInventory.from_json(i)) for i in raw.firmware],
    )


def _processors(processors: list[Processor]) -> tuple[list[dict[str, Any]], list[Gpu]]:
    """The CPUs (as JSON-friendly dicts) and the GPUs listed as processors."""
    cpus: list[dict[str, Any]] = []
    gpus: list[Gpu] = []
    for proc in processors:
        if proc.processor_type == "GPU":
            gpus.append(Gpu(id=str(proc.id), model=str(proc.model or ""), source="Processors"))
        else:
            cpus.append({"id": proc.id, "model": proc.model, "cores": proc.total_cores, "threads": proc.total_threads})
    return cpus, gpus


def _nic(nic: EthernetInterface) -> Nic:
    return Nic(
        fqdd=str(nic.id),
        mac=(nic.mac_address or None),
        permanent_mac=nic.permanent_mac_address,
        link_status=nic.link_status,
        speed_mbps=nic.speed_mbps,
    )


def _controller(ctrl: Storage, drives: list[dict[str, Any]]) -> StorageController:
    return StorageController(
        id=str(ctrl.id), name=ctrl.name, drives=[_drive(DriveResource.from_json(d)) for d in drives]
    )


def _drive(drive: DriveResource) -> Drive:
    return Drive(
        id=str(drive.id or odata_id(drive.raw).rsplit("/", 1)[-1]),
        model=drive.model,
        capacity_bytes=drive.capacity_bytes,
        media_type=drive.media_type,
        protocol=drive.protocol,
    )


def _pcie_gpus(devices: list[PCIeDevice]) -> list[Gpu]:
    """GPUs among the PCIe devices (older firmware lists GPUs only there)."""
    return [
        Gpu(id=str(d.id), model=str(d.model or d.name or ""), source="PCIeDevices")
        for d in devices
        if _is_gpu_device(d)
    ]


def _firmware(item: SoftwareInventory) -> dict[str, Any]:
    return {"id": item.id, "name": item.name, "version": item.version}


def _is_gpu_device(device: PCIeDevice) -> bool:
    cls = str(device.device_class or device.dell_device_class or "")
    maker = str(device.manufacturer or "")
    return cls in ("DisplayController", "ProcessingAccelerators") and any(v in maker for v in GPU_VENDORS)
