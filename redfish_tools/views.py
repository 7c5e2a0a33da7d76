"""Typed read views of the Redfish resources rackctl reads: the one place their PascalCase keys are read.

Each view is a frozen dataclass whose fields declare where they come from (:func:`json_field`: a JSON path
such as ``"Status/HealthRollup"``, alternatives tried in order, a default), in the spirit of sushy's
declarative fields; :meth:`View.from_json` builds it from a resource's JSON body. A missing key gives the
field's default (None unless declared), never an error; the body itself stays available as ``raw`` for code
that follows its links or actions, or passes it on whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Self, TypeVar

_PATHS = "json_paths"
_CONVERT = "json_convert"
_MISSING = object()

V = TypeVar("V", bound="View")


def json_field(
    *paths: str,
    default: Any = None,
    factory: Callable[[], Any] | None = None,
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A view field read from the first of ``paths`` present in the body (``/`` between keys, a number
    indexes a list), passed through ``convert``; else ``default`` (or a fresh ``factory()``)."""
    metadata = {_PATHS: tuple(tuple(p.split("/")) for p in paths), _CONVERT: convert}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _lookup(body: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path``, or ``_MISSING`` when a step is absent or not an object (or list, for an index)."""
    cur = body
    for key in path:
        if isinstance(cur, Mapping) and key in cur:
            cur = cur[key]
        elif isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        else:
            return _MISSING
    return cur


@dataclass(frozen=True, kw_only=True)
class View:
    """Base of the read views: ``raw`` is the resource's JSON body as the BMC sent it."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        """Read every declared field from ``body`` (a missing one keeps its default)."""
        values: dict[str, Any] = {}
        for spec in fields(cls):
            for path in spec.metadata.get(_PATHS, ()):
                value = _lookup(body, path)
                if value is not _MISSING:
                    convert = spec.metadata[_CONVERT]
                    values[spec.name] = convert(value) if convert else value
                    break
        return cls(raw=body, **values)


def _many(view: type[V]) -> Callable[[Any], tuple[V, ...]]:
    """Converter of a JSON list into a tuple of ``view``."""
    return lambda items: tuple(view.from_json(item) for item in items)


# -- the service and the node -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ServiceRoot(View):
    """The service root (``/redfish/v1``)."""

    redfish_version: str | None = json_field("RedfishVersion")
    dell_service_tag: str | None = json_field("Oem/Dell/ServiceTag")
    expand_all: Any = json_field("ProtocolFeaturesSupported/ExpandQuery/ExpandAll")
    expand_no_links: Any = json_field("ProtocolFeaturesSupported/ExpandQuery/NoLinks")
    expand_levels: Any = json_field("ProtocolFeaturesSupported/ExpandQuery/Levels")

    @property
    def supports_expand(self) -> bool:
        """Whether the service advertises ``$expand``."""
        return bool(self.expand_all or self.expand_no_links or self.expand_levels)


@dataclass(frozen=True, kw_only=True)
class ComputerSystem(View):
    """A ComputerSystem (``System.Embedded.1``): identity, power, health, BIOS version and boot override."""

    sku: str | None = json_field("SKU")  #: Dell's service tag
    serial_number: str | None = json_field("SerialNumber")
    manufacturer: str | None = json_field("Manufacturer")
    model: str | None = json_field("Model")
    uuid: str | None = json_field("UUID")
    power_state: str | None = json_field("PowerState")
    bios_version: str | None = json_field("BiosVersion")
    total_memory_gib: float | None = json_field("MemorySummary/TotalSystemMemoryGiB")
    health: str | None = json_field("Status/Health")
    health_rollup: str | None = json_field("Status/HealthRollup")
    chassis_links: list[dict[str, Any]] | None = json_field("Links/Chassis")
    boot_target: str | None = json_field("Boot/BootSourceOverrideTarget")
    boot_enabled: str | None = json_field("Boot/BootSourceOverrideEnabled")
    boot_mode: str | None = json_field("Boot/BootSourceOverrideMode")
    boot_targets_allowed: list[str] | None = json_field("Boot/BootSourceOverrideTarget@Redfish.AllowableValues")


@dataclass(frozen=True, kw_only=True)
class Manager(View):
    """A Manager: the iDRAC itself."""

    firmware_version: str | None = json_field("FirmwareVersion")
    model: str | None = json_field("Model")


@dataclass(frozen=True, kw_only=True)
class Chassis(View):
    """A Chassis: what discovery reads of it is its PCIe devices when they are listed inline."""

    pcie_devices: list[dict[str, Any]] = json_field("PCIeDevices", factory=list)


@dataclass(frozen=True, kw_only=True)
class Processor(View):
    """A Processor: a CPU, or a GPU on firmware that lists GPUs as processors."""

    id: str | None = json_field("Id")
    processor_type: str | None = json_field("ProcessorType")
    model: str | None = json_field("Model")
    total_cores: int | None = json_field("TotalCores")
    total_threads: int | None = json_field("TotalThreads")


@dataclass(frozen=True, kw_only=True)
class Memory(View):
    """A Memory resource: one DIMM."""

    capacity_mib: int | None = json_field("CapacityMiB")


@dataclass(frozen=True, kw_only=True)
class EthernetInterface(View):
    """An EthernetInterface: one NIC port (its Id is the FQDD)."""

    id: str | None = json_field("Id")
    mac_address: str | None = json_field("MACAddress")
    permanent_mac_address: str | None = json_field("PermanentMACAddress")
    link_status: str | None = json_field("LinkStatus")
    speed_mbps: int | None = json_field("SpeedMbps")


@dataclass(frozen=True, kw_only=True)
class Storage(View):
    """A Storage resource: one controller and its drives (links, or the drives inline)."""

    id: str | None = json_field("Id")
    name: str | None = json_field("Name")
    drives: list[dict[str, Any]] = json_field("Drives", factory=list)


@dataclass(frozen=True, kw_only=True)
class DriveResource(View):
    """A Drive resource (read by discovery into :class:`redfish_tools.discover.Drive`)."""

    id: str | None = json_field("Id")
    model: str | None = json_field("Model")
    capacity_bytes: int | None = json_field("CapacityBytes")
    media_type: str | None = json_field("MediaType")
    protocol: str | None = json_field("Protocol")


@dataclass(frozen=True, kw_only=True)
class PCIeDevice(View):
    """A PCIeDevice: where older firmware lists the GPUs."""

    id: str | None = json_field("Id")
    name: str | None = json_field("Name")
    model: str | None = json_field("Model")
    manufacturer: str | None = json_field("Manufacturer")
    device_class: str | None = json_field("DeviceClass")
    dell_device_class: str | None = json_field("Oem/Dell/DeviceClass")


@dataclass(frozen=True, kw_only=True)
class RemoteServicesStatus(View):
    """The answer of ``DellLCService.GetRemoteServicesAPIStatus``: the Lifecycle Controller's readiness."""

    lc_status: str | None = json_field("LCStatus")
    server_status: str | None = json_field("ServerStatus")
    rt_status: str | None = json_field("RTStatus")


# -- firmware, tasks and jobs, virtual media ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SoftwareInventory(View):
    """A SoftwareInventory member of the FirmwareInventory: one installed firmware."""

    id: str | None = json_field("Id")
    name: str | None = json_field("Name")
    version: str | None = json_field("Version")
    updateable: bool | None = json_field("Updateable")
    software_id: str | None = json_field("SoftwareId")
    dell_component_id: str | None = json_field("Oem/Dell/DellSoftwareInventory/ComponentID")
    dell_fqdd: str | None = json_field("Oem/Dell/DellSoftwareInventory/FQDD")

    @property
    def component_id(self) -> str | None:
        """Dell's component id, else the standard SoftwareId."""
        return self.dell_component_id or self.software_id


@dataclass(frozen=True, kw_only=True)
class Task(View):
    """A Redfish Task, a task monitor's answer or a Dell Job (its fields at the top or under ``Oem.Dell``)."""

    id: str | None = json_field("Id")
    name: str | None = json_field("Name")
    job_type: str | None = json_field("JobType")
    target_settings_uri: str | None = json_field("TargetSettingsURI")
    task_state: str | None = json_field("TaskState")
    job_state: str | None = json_field("JobState")
    dell_job_state: str | None = json_field("Oem/Dell/JobState")
    message: str | None = json_field("Message")
    dell_message: str | None = json_field("Oem/Dell/Message")
    first_message: Any = json_field("Messages/0/Message", default="")  #: of ``Messages``, when an object
    message_id: str | None = json_field("MessageId")
    dell_message_id: str | None = json_field("Oem/Dell/MessageId")
    percent_complete: Any = json_field("PercentComplete", "Oem/Dell/PercentComplete")


@dataclass(frozen=True, kw_only=True)
class VirtualMedia(View):
    """A VirtualMedia slot."""

    id: str | None = json_field("Id")
    media_types: list[str] = json_field("MediaTypes", factory=list)
    inserted: bool | None = json_field("Inserted")
    image: str | None = json_field("Image")


# -- BIOS ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Bios(View):
    """A Bios resource, or its settings object (``Bios/Settings``): the attributes and the apply times."""

    attributes: Mapping[str, Any] = json_field("Attributes", factory=dict)
    attribute_registry: str | None = json_field("AttributeRegistry")
    supported_apply_times: list[str] | None = json_field("@Redfish.Settings/SupportedApplyTimes")
    apply_times_allowed: list[str] = json_field(
        "@Redfish.SettingsApplyTime/ApplyTime@Redfish.AllowableValues", factory=list
    )


@dataclass(frozen=True, kw_only=True)
class RegistryFile(View):
    """A member of ``Registries`` (MessageRegistryFile): where the registry itself is."""

    location_uris: tuple[str | None, ...] = json_field(
        "Location", default=(), convert=lambda locs: tuple(loc.get("Uri") for loc in locs)
    )


@dataclass(frozen=True, kw_only=True)
class BiosAttribute(View):
    """One entry of the BIOS attribute registry."""

    name: str | None = json_field("AttributeName")
    type: str | None = json_field("Type")
    read_only: Any = json_field("ReadOnly")
    gray_out: Any = json_field("GrayOut")
    values: tuple[Any, ...] = json_field(
        "Value", default=(), convert=lambda values: tuple(v.get("ValueName") for v in values)
    )
    lower_bound: int | None = json_field("LowerBound")
    upper_bound: int | None = json_field("UpperBound")


@dataclass(frozen=True, kw_only=True)
class DependencyCondition(View):
    """One ``MapFrom`` condition of a registry dependency."""

    attribute: str | None = json_field("MapFromAttribute")
    condition: str | None = json_field("MapFromCondition", default="EQU")
    value: Any = json_field("MapFromValue")


@dataclass(frozen=True, kw_only=True)
class AttributeDependency(View):
    """One registry dependency: which property of which attribute its conditions set."""

    map_to_attribute: str | None = json_field("Dependency/MapToAttribute")
    map_to_property: str | None = json_field("Dependency/MapToProperty")
    map_from: tuple[DependencyCondition, ...] = json_field(
        "Dependency/MapFrom", default=(), convert=_many(DependencyCondition)
    )


def _attributes_by_name(entries: list[dict[str, Any]]) -> dict[str, BiosAttribute]:
    return {e["AttributeName"]: BiosAttribute.from_json(e) for e in entries if "AttributeName" in e}


@dataclass(frozen=True, kw_only=True)
class AttributeRegistry(View):
    """The BIOS attribute registry: its attributes by name and its dependencies."""

    attributes: dict[str, BiosAttribute] = json_field(
        "RegistryEntries/Attributes", factory=dict, convert=_attributes_by_name
    )
    dependencies: tuple[AttributeDependency, ...] = json_field(
        "RegistryEntries/Dependencies", default=(), convert=_many(AttributeDependency)
    )
