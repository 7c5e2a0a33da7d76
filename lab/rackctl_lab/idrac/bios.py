"""The emulated BIOS: attribute registry, validation of a PATCH, and applying pending values at reset.

Rules the registry encodes (as an iDRAC 9 registry does):
- ``SystemServiceTag``, ``SystemModelName`` and ``SystemBiosVersion`` are read-only.
- ``WorkloadProfile`` is read-only unless ``SysProfile`` is ``Custom`` (a ``Dependencies`` entry).
Redfish does not reject a PATCH of a read-only or locked attribute: it just does not take when the job
runs. :func:`apply_pending` reports which ones did not take and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REGISTRY_ID = "BiosAttributeRegistry.v1_0_0"

ENABLED_DISABLED = ["Enabled", "Disabled"]


@dataclass(frozen=True)
class Attr:
    """One registry attribute."""

    name: str
    type: str  # Enumeration | String | Integer
    default: Any
    values: tuple[str, ...] = ()
    read_only: bool = False
    lower: int | None = None
    upper: int | None = None


def _enum(name: str, default: str, values: list[str]) -> Attr:
    return Attr(name, "Enumeration", default, tuple(values))


ATTRIBUTES: tuple[Attr, ...] = (
    _enum("BootMode", "Uefi", ["Uefi", "Bios"]),
    _enum("ProcVirtualization", "Disabled", ENABLED_DISABLED),
    _enum("LogicalProc", "Enabled", ENABLED_DISABLED),
    _enum("SriovGlobalEnable", "Disabled", ENABLED_DISABLED),
    _enum(
        "SysProfile",
        "PerfPerWattOptimizedDapc",
        ["PerfPerWattOptimizedDapc", "PerfPerWattOptimizedOs", "PerfOptimized", "Custom"],
    ),
    _enum(
        "WorkloadProfile",
        "NotConfigured",
        ["NotConfigured", "HpcProfile", "LowLatencyOptimizedProfile", "VtOptimizedProfile"],
    ),
    _enum("SubNumaCluster", "Disabled", ["Disabled", "2Way", "4Way"]),
    _enum("ProcTurboMode", "Enabled", ENABLED_DISABLED),
    _enum("ProcCStates", "Enabled", ENABLED_DISABLED),
    _enum("ProcC1E", "Enabled", ENABLED_DISABLED),
    _enum("ProcX2Apic", "Enabled", ENABLED_DISABLED),
    _enum("MemOpMode", "OptimizerMode", ["OptimizerMode", "FaultResilientMode"]),
    _enum("NodeInterleave", "Disabled", ENABLED_DISABLED),
    _enum("SecureBoot", "Disabled", ENABLED_DISABLED),
    _enum("TpmSecurity", "On", ["On", "Off"]),
    _enum("EmbSata", "AhciMode", ["AhciMode", "RaidMode", "Off"]),
    _enum("AcPwrRcvry", "Last", ["On", "Off", "Last"]),
    Attr("AcPwrRcvryUserDelay", "Integer", 60, lower=60, upper=600),
    _enum("ErrPrompt", "Enabled", ENABLED_DISABLED),
    _enum("SerialComm", "Off", ["OnNoConRedir", "OnConRedir", "Off"]),
    _enum("OsWatchdogTimer", "Disabled", ENABLED_DISABLED),
    _enum("PxeDev1EnDis", "Disabled", ENABLED_DISABLED),
    Attr("PxeDev1Interface", "String", "NIC.Embedded.1-1-1"),
    _enum("PxeDev1Protocol", "IPv4", ["IPv4", "IPv6"]),
    _enum("PxeDev1VlanEnDis", "Disabled", ENABLED_DISABLED),
    _enum("HttpDev1EnDis", "Disabled", ENABLED_DISABLED),
    Attr("HttpDev1Uri", "String", ""),
    Attr("SetBootOrderEn", "String", "NIC.PxeDevice.1-1,Disk.Bay.0:Enclosure.Internal.0-1"),
    Attr("SystemServiceTag", "String", "", read_only=True),
    Attr("SystemModelName", "String", "", read_only=True),
    Attr("SystemBiosVersion", "String", "", read_only=True),
)

BY_NAME: dict[str, Attr] = {a.name: a for a in ATTRIBUTES}

#: Attribute -> (controlling attribute, value that unlocks it).
DEPENDENCIES: dict[str, tuple[str, str]] = {"WorkloadProfile": ("SysProfile", "Custom")}


def defaults(service_tag: str, model: str, bios_version: str, first_nic: str | None) -> dict[str, Any]:
    """Current attribute values of a factory-fresh system."""
    values = {a.name: a.default for a in ATTRIBUTES}
    values["SystemServiceTag"] = service_tag
    values["SystemModelName"] = f"PowerEdge {model}"
    values["SystemBiosVersion"] = bios_version
    if first_nic:
        values["PxeDev1Interface"] = first_nic
    return values


@dataclass(frozen=True)
class PatchError:
    """Why a PATCH of Bios/Settings is refused (Redfish Base MessageIds)."""

    attribute: str
    message_id: str
    message: str


def validate_patch(attrs: Any) -> list[PatchError]:
    """Check names, types and allowed values (read-only is not an error, see the module doc)."""
    if not isinstance(attrs, dict):
        return [PatchError("Attributes", "Base.1.12.PropertyValueTypeError", "Attributes must be an object.")]
    errors: list[PatchError] = []
    for name, value in attrs.items():
        attr = BY_NAME.get(name)
        if attr is None:
            errors.append(
                PatchError(
                    name,
                    "Base.1.12.PropertyUnknown",
                    f"The property {name} is not in the list of valid properties for the resource.",
                )
            )
        elif attr.type == "Enumeration" and value not in attr.values:
            errors.append(
                PatchError(
                    name,
                    "Base.1.12.PropertyValueNotInList",
                    f"The value {value!r} for the property "
                    f"{name} is not in the list of acceptable values: {', '.join(attr.values)}.",
                )
            )
        elif attr.type == "Integer" and (not isinstance(value, int) or isinstance(value, bool)):
            errors.append(
                PatchError(
                    name,
                    "Base.1.12.PropertyValueTypeError",
                    f"The value {value!r} for the property "
                    f"{name} is of a different type than the property can accept (Integer).",
                )
            )
        elif attr.type == "Integer" and not (attr.lower or 0) <= value <= (attr.upper or 2**31):
            errors.append(
                PatchError(
                    name,
                    "Base.1.12.PropertyValueOutOfRange",
                    f"The value {value} for the property "
                    f"{name} is not in the supported range {attr.lower}-{attr.upper}.",
                )
            )
        elif attr.type == "String" and not isinstance(value, str):
            errors.append(
                PatchError(
                    name,
                    "Base.1.12.PropertyValueTypeError",
                    f"The value {value!r} for the property "
                    f"{name} is of a different type than the property can accept (String).",
                )
            )
    return errors


def apply_pending(current: dict[str, Any], pending: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Apply pending values as a BIOS job does. Returns (new current values, {attribute: why not taken})."""
    result = dict(current)
    rejected: dict[str, str] = {}
    for name, value in pending.items():
        attr = BY_NAME.get(name)
        if attr is None:
            rejected[name] = "unknown attribute"
        elif attr.read_only:
            rejected[name] = "read-only"
        elif name not in DEPENDENCIES:
            result[name] = value
    for name, (controller, unlock) in DEPENDENCIES.items():
        if name in pending:
            if result.get(controller) == unlock:
                result[name] = pending[name]
            else:
                rejected[name] = f"read-only unless {controller}={unlock}"
    return result, rejected


def registry_document() -> dict[str, Any]:
    """The ``Bios/BiosRegistry`` resource (Dell serves the registry itself under the system)."""
    entries = []
    for a in ATTRIBUTES:
        entry: dict[str, Any] = {
            "AttributeName": a.name,
            "Type": a.type,
            "ReadOnly": a.read_only,
            "DefaultValue": a.default,
            "DisplayName": a.name,
            "Hidden": False,
        }
        if a.values:
            entry["Value"] = [{"ValueName": v, "ValueDisplayName": v} for v in a.values]
        if a.lower is not None:
            entry["LowerBound"] = a.lower
            entry["UpperBound"] = a.upper
        entries.append(entry)
    deps = [
        {
            "DependencyFor": name,
            "Type": "Map",
            "Dependency": {
                "MapFrom": [
                    {
                        "MapFromAttribute": ctl,
                        "MapFromCondition": "NEQ",
                        "MapFromProperty": "CurrentValue",
                        "MapFromValue": unlock,
                    }
                ],
                "MapToAttribute": name,
                "MapToProperty": "ReadOnly",
                "MapToValue": True,
            },
        }
        for name, (ctl, unlock) in DEPENDENCIES.items()
    ]
    return {
        "@odata.id": "/redfish/v1/Systems/System.Embedded.1/Bios/BiosRegistry",
        "@odata.type": "#AttributeRegistry.v1_3_6.AttributeRegistry",
        "Id": "BiosAttributeRegistry",
        "Name": "BIOS Attribute Registry",
        "Language": "en",
        "OwningEntity": "Dell",
        "RegistryVersion": "1.0.0",
        "RegistryEntries": {"Attributes": entries, "Dependencies": deps},
    }
