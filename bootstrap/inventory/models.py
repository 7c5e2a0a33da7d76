"""The cluster inventory: one YAML file, the single source of truth. Pydantic models, strict.

Shape checks (types, unknown keys, formats) live here; rules that relate several parts of the
inventory (duplicates, addresses inside networks, versions) live in :mod:`bootstrap.inventory.rules`.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from bootstrap.inventory.hardware import BUILTIN_BIOS_PROFILES, BUILTIN_MODELS, HardwareModel
from bootstrap.inventory.profiles import PROFILES, Profile, Versions
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.inventory.site_services import SiteServices
from bootstrap.inventory.sizing_spec import SizingSection

HOSTNAME_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
MAC_RE = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$", re.IGNORECASE)
FINGERPRINT_RE = re.compile(r"^([0-9A-F]{2}:){31}[0-9A-F]{2}$")
SERVICE_TAG_RE = re.compile(r"^[A-Z0-9]{7}$")


def _address_as_text(value: object) -> object:
    """Refuse numbers and booleans: pydantic's lax mode would read ``ip: true`` as 0.0.0.1, ``ip: 167772161``
    as 10.0.0.1 (YAML turns unquoted ``yes``/``no``/digits into those)."""
    if isinstance(value, bool | int | float):
        raise ValueError(f'{value!r} is not an IPv4 address; write it as text in dotted form, e.g. "10.0.0.5"')
    return value


IPv4 = Annotated[ipaddress.IPv4Address, BeforeValidator(_address_as_text)]
NetworkName = Literal["oob", "pxe", "management", "storage", "external"]


class Strict(BaseModel):
    """Base: unknown keys are errors, strings are stripped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, validate_default=True)


class Role(StrEnum):
    """What a node is for. ``head`` runs the boot services and is also a control plane."""

    HEAD = "head"
    CONTROL_PLANE = "control-plane"
    WORKER = "worker"


class InstallMethod(StrEnum):
    """How nodes get their OS."""

    AUTOINSTALL = "autoinstall"
    IMAGE = "image"


class Cluster(Strict):
    """Cluster-wide settings."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$", description="Cluster name (DNS label).")
    domain: str = Field(pattern=r"^([a-z0-9-]+\.)+[a-z]{2,}$|^[a-z0-9-]+$", description="DNS domain.")
    timezone: str = "UTC"
    ntp_servers: list[str] = Field(default_factory=list)
    dns_servers: list[IPv4] = Field(default_factory=list)
    admin_ssh_keys: list[str] = Field(min_length=1, description="SSH public keys of the admins.")
    software_profile: str = Field(default="current", description="Named version profile, see `rackctl validate`.")
    versions: dict[str, str] = Field(default_factory=dict, description="Overrides of single versions of the profile.")
    install_method: InstallMethod = InstallMethod.AUTOINSTALL
    lab: bool = Field(
        default=False, description="Lab/dev cluster: allows one control plane and loopback BMC addresses."
    )

    @field_validator("admin_ssh_keys")
    @classmethod
    def _keys_look_like_public_keys(cls, keys: list[str]) -> list[str]:
        for key in keys:
            kind = key.split(" ", 1)[0]
            if kind not in {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384"}:
                raise ValueError(
                    f"not an SSH public key (starts with {kind[:20]!r}); paste the .pub line, "
                    "e.g. 'ssh-ed25519 AAAA... user@host'"
                )
            if "PRIVATE KEY" in key:
                raise ValueError("this is a private key; give the public key (.pub) only")
        return keys

    def profile(self) -> Profile:
        """The selected profile (its name is checked by the rules)."""
        return PROFILES.get(self.software_profile, PROFILES["current"])

    def resolved_versions(self) -> Versions:
        """Profile versions with the inventory's overrides applied (validated by the rules)."""
        base = self.profile().versions.model_dump()
        base.update(self.versions)
        return Versions.model_validate(base)


class DhcpRange(Strict):
    """Addresses dnsmasq may lease on the PXE network."""

    start: IPv4
    end: IPv4

    @model_validator(mode="after")
    def _ordered(self) -> DhcpRange:
        if int(self.start) > int(self.end):
            raise ValueError(f"start {self.start} is after end {self.end}; swap them")
        return self


class Network(Strict):
    """One L3 network."""

    cidr: ipaddress.IPv4Network | None = Field(default=None, description="e.g. 10.10.0.0/24")
    gateway: IPv4 | None = None
    vlan: int | None = Field(default=None, ge=1, le=4094)
    mtu: int = Field(default=1500, ge=576, le=9216)
    shared_with: NetworkName | None = Field(
        default=None, description="Same L2/L3 segment as another network (PXE on the 1 GbE OOB segment)."
    )
    dhcp_range: DhcpRange | None = None

    @field_validator("cidr", mode="before")
    @classmethod
    def _strict_cidr(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                ipaddress.IPv4Network(value, strict=True)
            except ValueError as exc:
                raise ValueError(f"{exc}; write the network address, e.g. 10.10.0.0/24") from None
        return value


class KubernetesNetwork(Strict):
    """Kubernetes addressing."""

    api_vip: IPv4 = Field(description="Virtual IP of the API server (kube-vip), on the management network.")
    api_port: int = Field(default=6443, ge=1, le=65535)
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.244.0.0/16")
    service_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.96.0.0/12")


class Networks(Strict):
    """The networks of the validated design."""

    oob: Network = Field(description="OOB/BMC 1 GbE network (iDRACs).")
    pxe: Network = Field(description="PXE network; may share the OOB segment (shared_with: oob).")
    management: Network = Field(description="Management + Kubernetes network (10/25 GbE).")
    storage: Network | None = None
    external: Network | None = None
    kubernetes: KubernetesNetwork

    def named(self) -> dict[str, Network]:
        """The L3 networks that are set, by name."""
        nets = {"oob": self.oob, "pxe": self.pxe, "management": self.management}
        if self.storage:
            nets["storage"] = self.storage
        if self.external:
            nets["external"] = self.external
        return nets

    def cidr_of(self, name: str) -> ipaddress.IPv4Network | None:
        """The CIDR of a network, following ``shared_with``."""
        net = self.named().get(name)
        if net is None:
            return None
        if net.cidr is None and net.shared_with:
            other = self.named().get(net.shared_with)
            return other.cidr if other else None
        return net.cidr


class Credential(Strict):
    """Where a BMC password comes from. Never the password itself."""

    username: str = Field(min_length=1)
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    password_file: Path | None = Field(
        default=None, description="File (mode 0600) with the password, or a YAML mapping credential name -> password."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Credential:
        if (self.password_env is None) == (self.password_file is None):
            raise ValueError("set exactly one of password_env or password_file")
        return self


class BmcSettings(Strict):
    """How to reach a BMC securely; every field may come from defaults or groups."""

    credentials: str | None = Field(default=None, description="Name of an entry of `credentials:`.")
    ca_file: Path | None = Field(default=None, description="CA bundle that signed the iDRAC certificate.")
    fingerprint: str | None = Field(
        default=None, description="Pinned SHA-256 fingerprint of the iDRAC certificate, AA:BB:... (32 bytes)."
    )
    insecure: bool | None = Field(
        default=None, description="Skip TLS verification (explicit opt-in, not for production)."
    )

    @field_validator("fingerprint")
    @classmethod
    def _fingerprint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        norm = value.upper().replace("-", ":")
        if ":" not in norm and len(norm) == 64:
            norm = ":".join(norm[i : i + 2] for i in range(0, 64, 2))
        if not FINGERPRINT_RE.match(norm):
            raise ValueError(
                "not a SHA-256 fingerprint; expected 32 hex bytes like 'AB:CD:...' "
                "(openssl x509 -noout -fingerprint -sha256)"
            )
        return norm


BMC_ADDRESS_FORMS = "an IP or hostname, host:port (port 1-65535), [IPv6]:port or https://host[:port]"
_HOST_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def check_bmc_address(value: str) -> None:
    """Raise ValueError ("what is wrong; the fix") unless ``value`` is a usable BMC address."""
    fix = f"write {BMC_ADDRESS_FORMS}, e.g. 10.10.0.11 or https://idrac-gpu01:8443"
    if value.lower().startswith("http://"):
        raise ValueError("plain http is not allowed for BMCs; use https://")
    rest = value.removeprefix("https://").removesuffix("/")
    if "://" in rest or "/" in rest:
        raise ValueError(f"only https:// and no path is allowed in a BMC address; {fix}")
    host, port = rest, None
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"'[' without a closing ']'; {fix}")
        host, after = rest[1:close], rest[close + 1 :]
        if after:
            if not after.startswith(":"):
                raise ValueError(f"unexpected {after!r} after ']'; {fix}")
            port = after[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address; {fix}") from None
    elif "[" in rest or "]" in rest:
        raise ValueError(f"stray bracket; brackets enclose a whole IPv6 address: [fd00::11]:443; {fix}")
    elif rest.count(":") > 1:
        try:
            ipaddress.IPv6Address(rest)
        except ValueError:
            raise ValueError(f"not an IPv6 address; {fix}") from None
        return
    elif ":" in rest:
        host, port = rest.split(":", 1)
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"port {port!r} is not a number from 1 to 65535; {fix}")
    if not rest.startswith("["):
        if not host:
            raise ValueError(f"no host; {fix}")
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ValueError(f"{host!r} is not a valid IPv4 address; {fix}") from None
        elif not all(_HOST_LABEL_RE.match(label) for label in host.split(".")):
            raise ValueError(f"{host!r} is not a valid hostname; {fix}")


class NodeBmc(BmcSettings):
    """A node's BMC."""

    address: str = Field(description="IP or name of the iDRAC, optionally host:port or an https:// URL.")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        check_bmc_address(value)
        return value

    @property
    def host(self) -> str:
        """Host part of the address."""
        rest = self.address.removeprefix("https://").rstrip("/")
        if rest.startswith("["):
            return rest[1 : rest.index("]")]
        return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest

    @property
    def url(self) -> str:
        """Base URL of the BMC."""
        rest = self.address.removeprefix("https://").rstrip("/")
        return f"https://{rest}"


def sexagesimal_hint(number: int) -> str:
    """Why YAML turned an unquoted MAC into ``number``, and how to quote it."""
    digits: list[int] = []
    rest = abs(number)
    while rest:
        rest, digit = divmod(rest, 60)
        digits.insert(0, digit)
    guess = ":".join(f"{d:02d}" for d in digits) if 0 < len(digits) <= 6 else "aa:bb:cc:dd:ee:ff"
    return (
        f"a MAC address was read as the number {number}: unquoted, YAML 1.1 reads digits and colons as a "
        f'base-60 number; quote it: mac: "{guess}"'
    )


class Interface(Strict):
    """A NIC port (or partition) of a node and its address on one network."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,14}$", description="OS-side name, e.g. pxe0, mgmt0.")
    network: NetworkName | None = None
    fqdd: str | None = Field(default=None, description="iDRAC NIC FQDD, e.g. NIC.Embedded.1-1-1.")
    mac: str | None = Field(default=None, description="MAC address; optional until `rackctl discover --write`.")
    ip: IPv4 | None = None
    vlan: int | None = Field(default=None, ge=1, le=4094)
    mtu: int | None = Field(default=None, ge=576, le=9216)

    @field_validator("mac", mode="before")
    @classmethod
    def _mac_not_a_number(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError(sexagesimal_hint(value))
        return value

    @field_validator("mac")
    @classmethod
    def _mac(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not MAC_RE.match(value):
            raise ValueError("not a MAC address; expected six hex bytes like 'b0:7b:25:00:00:01'")
        return value.lower().replace("-", ":")


class Bond(Strict):
    """A bond of interfaces (LACP by default), carrying one network."""

    name: str = Field(pattern=r"^bond[0-9]{1,3}$")
    members: list[str] = Field(min_length=1)
    mode: Literal["802.3ad", "active-backup", "balance-xor"] = "802.3ad"
    network: NetworkName
    ip: IPv4 | None = None
    vlan: int | None = Field(default=None, ge=1, le=4094)


class Taint(Strict):
    """A Kubernetes taint."""

    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class GpuSelection(Strict):
    """Which GPUs a node carries, where its model allows a choice (R760xa)."""

    type: str
    count: int = Field(ge=0)


class Node(Strict):
    """One server."""

    hostname: str
    role: Role
    model: str = Field(description="Hardware model key: R660, R760xa, XE8640, XE9680 or a custom one.")
    service_tag: str | None = Field(default=None, description="Dell service tag (7 characters).")
    gpus: GpuSelection | None = None
    bmc: NodeBmc
    interfaces: list[Interface] = Field(default_factory=list)
    bonds: list[Bond] = Field(default_factory=list)
    root_disk_hint: str | None = Field(
        default=None, description="Where to install the OS: 'BOSS-N1', a /dev/disk/by-path, a serial or 'size>=400G'."
    )
    bios_profile: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    mig_profile: str | None = None

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not HOSTNAME_RE.match(value):
            raise ValueError("not a valid hostname label; use lower-case letters, digits and '-' (max 63)")
        return value

    @field_validator("service_tag")
    @classmethod
    def _service_tag(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not SERVICE_TAG_RE.match(value.upper()):
            raise ValueError("not a Dell service tag; use its 7 letters or digits, e.g. 'ABC1234'")
        return value.upper()

    @property
    def is_control_plane(self) -> bool:
        """Heads and control-plane nodes run the Kubernetes control plane."""
        return self.role in (Role.HEAD, Role.CONTROL_PLANE)

    def interface_on(self, network: str) -> Interface | None:
        """The first interface attached to ``network``."""
        return next((i for i in self.interfaces if i.network == network), None)

    def address_on(self, network: str) -> ipaddress.IPv4Address | None:
        """The node's IP on ``network`` (interface or bond)."""
        attached: list[Interface | Bond] = [*self.interfaces, *self.bonds]
        for item in attached:
            if item.network == network and item.ip is not None:
                return item.ip
        return None


class FirmwareMinimum(Strict):
    """Least firmware versions of one hardware model (checked by the firmware stage)."""

    bios: str | None = Field(default=None, description="Least BIOS version, e.g. 1.6.2.")
    idrac: str | None = Field(default=None, description="Least iDRAC firmware version, e.g. 7.00.00.00.")


class Firmware(Strict):
    """The firmware baseline: per hardware model, the least versions a node must run."""

    baseline: dict[str, FirmwareMinimum] = Field(default_factory=dict, description="Hardware model -> least versions.")


class BmcGroups(Strict):
    """BMC settings for every node, then per role or per model; a node's own settings win."""

    defaults: BmcSettings = Field(default_factory=BmcSettings)
    groups: dict[str, BmcSettings] = Field(
        default_factory=dict, description="Keyed by role (head, control-plane, worker) or model (R660, ...)."
    )


class Inventory(Strict):
    """The whole inventory file."""

    cluster: Cluster
    networks: Networks
    credentials: dict[str, Credential] = Field(default_factory=dict)
    bmc: BmcGroups = Field(default_factory=BmcGroups)
    hardware_models: dict[str, HardwareModel] = Field(
        default_factory=dict, description="Extra or overriding hardware models."
    )
    bios_profiles: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Extra or overriding BIOS attribute sets."
    )
    firmware: Firmware = Field(default_factory=Firmware, description="Firmware baseline per hardware model.")
    nodes: Annotated[list[Node], Field(min_length=1)]
    models: list[ModelSpec] = Field(default_factory=list, description="Models served by Triton.")
    sizing: SizingSection | None = None
    site_services: SiteServices = Field(
        default_factory=SiteServices, description="Package source and container registry of every node."
    )

    #: Where the file was read from (set by the loader; relative paths resolve against it).
    source: Path | None = Field(default=None, exclude=True)

    def hardware(self, name: str) -> HardwareModel | None:
        """A hardware model by key, the inventory's own first."""
        return self.hardware_models.get(name) or BUILTIN_MODELS.get(name)

    def bios_profile(self, name: str) -> dict[str, str] | None:
        """A BIOS profile by name, the inventory's own first."""
        if name in self.bios_profiles:
            return self.bios_profiles[name]
        return BUILTIN_BIOS_PROFILES.get(name)

    def node_bios_profile(self, node: Node) -> str | None:
        """The BIOS profile name that applies to ``node``."""
        if node.bios_profile:
            return node.bios_profile
        hw = self.hardware(node.model)
        return hw.bios_profile.get(node.role.value) if hw else None

    def gpus_of(self, node: Node) -> GpuSelection:
        """The node's GPUs: its own selection, else the model's only option."""
        if node.gpus is not None:
            return node.gpus
        hw = self.hardware(node.model)
        if hw is None or not hw.gpu_types:
            return GpuSelection(type="none", count=0)
        return GpuSelection(type=hw.gpu_types[0], count=hw.gpu_counts[-1])

    def bmc_settings(self, node: Node) -> BmcSettings:
        """Effective BMC settings: defaults < role group < model group < node."""
        merged: dict[str, object] = {}
        layers = [
            self.bmc.defaults,
            self.bmc.groups.get(node.role.value),
            self.bmc.groups.get(node.model),
            node.bmc,
        ]
        for layer in layers:
            if layer is None:
                continue
            for key in BmcSettings.model_fields:
                value = getattr(layer, key)
                if value is not None:
                    merged[key] = value
        return BmcSettings.model_validate(merged)

    def resolve_path(self, path: Path) -> Path:
        """A path from the inventory, relative to the inventory file's directory."""
        if path.is_absolute() or self.source is None:
            return path
        return (self.source.parent / path).resolve()

    @property
    def control_planes(self) -> list[Node]:
        """Nodes running the Kubernetes control plane."""
        return [n for n in self.nodes if n.is_control_plane]

    @property
    def workers(self) -> list[Node]:
        """Worker nodes."""
        return [n for n in self.nodes if n.role == Role.WORKER]

    def node(self, hostname: str) -> Node | None:
        """A node by hostname."""
        return next((n for n in self.nodes if n.hostname == hostname), None)
