"""The environment seam: how the product reaches the world it runs in.

Everything rackctl does that depends on *where* it runs goes through one :class:`Environment`, chosen at
the CLI (``rackctl --env NAME``, ``$RACKCTL_ENV``): how to open a TCP connection to a node, which socket a
node-facing listener binds, how to run a node-facing service (dnsmasq, nginx), how SSH and Ansible reach a
node (a ``ProxyCommand`` or none), where the head node's boot services listen, which admin SSH key logs in,
which nodes the environment provides already installed, and which it keeps out of in-band configuration.

:class:`HostEnvironment` is the product's own implementation (the default): a real head node on the site's
networks. Other implementations come from the ``rackctl.environments`` entry-point group; the lab
(``rackctl_lab``, a package of its own) registers ``lab`` there. Nothing in ``bootstrap`` or
``redfish_tools`` imports an implementation other than this module's. This follows Metal3's provisioner
interface, with a real and a fixture implementation behind one contract.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bootstrap.errors import InvalidInput, Problem

if TYPE_CHECKING:
    from bootstrap.inventory.models import Inventory

ENTRY_POINT_GROUP = "rackctl.environments"
DEFAULT_ENVIRONMENT = "host"
#: ``Role.HEAD`` (a StrEnum): compared by value so that this contract module stays import-light (plugins load it)
HEAD_ROLE = "head"


@dataclass(frozen=True)
class BootSite:
    """Where the head node's boot services listen: the PXE address and interface, and nginx's port."""

    server_ip: str
    interface: str
    http_port: int = 8080


@runtime_checkable
class Environment(Protocol):
    """The contract between the product and the world it runs in."""

    name: str

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection to a node's ``host:port`` (SSH, the node's services)."""
        ...

    def listener_socket(self) -> socket.socket | None:
        """An unbound TCP socket for a node-facing listener (the install callbacks); None: the default."""
        ...

    def wrap_command(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` where the nodes can reach it (dnsmasq, nginx, probes)."""
        ...

    def ssh_proxy_command(self) -> str | None:
        """OpenSSH ``ProxyCommand`` that reaches a node (``%h``/``%p`` filled in by ssh); None: direct."""
        ...

    def boot_site(self, inventory: Inventory) -> BootSite:
        """Where the boot services listen for this inventory's installs."""
        ...

    def admin_key(self, inventory: Inventory) -> Path | None:
        """The admin's SSH private key that installed nodes authorise; None: ssh's own defaults."""
        ...

    def preinstalled(self, inventory: Inventory) -> set[str]:
        """Hostnames this environment provides already installed (never PXE-installed by rackctl)."""
        ...

    def out_of_band_only(self, inventory: Inventory) -> dict[str, str]:
        """Hostnames rackctl must not configure over SSH here, each with the reason (in-band stages skip them)."""
        ...

    def emulated_devices(self, inventory: Inventory) -> dict[str, str]:
        """Hostnames whose GPUs and NVSwitches exist only out of band here (their OS sees none), with why."""
        ...


class HostEnvironment:
    """A real site: rackctl runs on the head node (or a machine on its networks), nothing is wrapped.

    The admin key is ``$RACKCTL_SSH_KEY`` when set (else ssh's defaults); the boot services listen on
    the head node's PXE interface from the inventory.
    """

    name = "host"

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return socket.create_connection((host, port), timeout=timeout)

    def listener_socket(self) -> socket.socket | None:
        return None

    def wrap_command(self, argv: list[str]) -> list[str]:
        return list(argv)

    def ssh_proxy_command(self) -> str | None:
        return None

    def boot_site(self, inventory: Inventory) -> BootSite:
        for node in inventory.nodes:
            if node.role != HEAD_ROLE:
                continue
            nic = node.interface_on("pxe")
            if nic is not None and nic.ip is not None:
                return BootSite(server_ip=str(nic.ip), interface=nic.name)
        raise InvalidInput(
            "no head node with a PXE address to serve the installs",
            problems=[
                Problem(
                    "nodes[role=head].interfaces",
                    "no interface on the pxe network with an ip",
                    "give the head node an interface {name: ..., network: pxe, ip: ...}",
                )
            ],
        )

    def admin_key(self, inventory: Inventory) -> Path | None:
        value = os.environ.get("RACKCTL_SSH_KEY")
        return Path(value) if value else None

    def preinstalled(self, inventory: Inventory) -> set[str]:
        # The head node runs rackctl and serves the installs: it is installed by the operator.
        return {n.hostname for n in inventory.nodes if n.role == HEAD_ROLE}

    def out_of_band_only(self, inventory: Inventory) -> dict[str, str]:
        return {}

    def emulated_devices(self, inventory: Inventory) -> dict[str, str]:
        # A real node's OS sees what its iDRAC reports: a GPU missing on the PCI bus is a fault.
        return {}


def available() -> dict[str, str]:
    """Environment name -> ``module:attr`` of every registered implementation (``host`` always)."""
    found = {DEFAULT_ENVIRONMENT: f"{__name__}:HostEnvironment"}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def load_environment(name: str | None = None, **options: object) -> Environment:
    """The environment called ``name`` (default ``$RACKCTL_ENV`` or ``host``), built with ``options``."""
    name = name or os.environ.get("RACKCTL_ENV") or DEFAULT_ENVIRONMENT
    if name == DEFAULT_ENVIRONMENT:
        return HostEnvironment()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            env = factory(**options)
            if not isinstance(env, Environment):
                raise TypeError(f"{ep.value} does not implement bootstrap.environment.Environment")
            return env
    names = ", ".join(sorted(available()))
    raise InvalidInput(
        f"unknown environment {name!r}",
        problems=[
            Problem(
                "--env",
                f"{name!r} is not registered (known: {names})",
                "use one of those; `lab` comes with the rackctl-lab package (`pip install 'rackctl[lab]'`)",
            )
        ],
    )
