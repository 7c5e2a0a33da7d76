"""The group vars every role reads to find software: ``rackctl_package_source`` and ``rackctl_registry``.

The contract (also in ``roles/package_source/README.md``)::

    rackctl_package_source:
      source: mirror | public | site
      uri: http://10.200.0.1:8081/          # the apt repository's URL
      suites: [bookworm]                     # deb822 Suites
      components: [main]
      key: "-----BEGIN PGP PUBLIC KEY..."    # armored key apt trusts for it (null: use `signed_by` as is)
      signed_by: /etc/apt/keyrings/rackctl-site.asc   # where the node keeps that key
    rackctl_registry:
      source: head | external
      host: 10.200.0.1
      port: 5000
      address: 10.200.0.1:5000               # what containerd's hosts.toml names
      ca_pem: "-----BEGIN CERTIFICATE-----..."   # CA of the registry's certificate (null: system trust)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.site_services import DEBIAN_ARCHIVE_KEYRING, PUBLIC_DEBIAN_URI
from bootstrap.mirror.layout import MirrorLayout

if TYPE_CHECKING:
    from bootstrap.environment import Environment
    from bootstrap.inventory.models import Inventory

SITE_KEY_ON_NODE = "/etc/apt/keyrings/rackctl-site.asc"


def head_address(inventory: Inventory, environment: Environment | None) -> str | None:
    """The head node's address nodes reach before the network stage: where the boot services listen."""
    if environment is not None:
        try:
            return environment.boot_site(inventory).server_ip
        except InvalidInput:
            pass  # e.g. the lab is not up yet: fall back to the inventory's own address
    for node in inventory.nodes:
        if node.role.value == "head" and (nic := node.interface_on("pxe")) is not None and nic.ip is not None:
            return str(nic.ip)
    return None


def _read(inventory: Inventory, path: Path | None, what: str, *, made_later: bool = False) -> str | None:
    """The file's text; ``made_later``: a file rackctl or the lab writes later (absent -> None)."""
    if path is None:
        return None
    file = inventory.resolve_path(path)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        if made_later:
            return None
        raise InvalidInput(
            f"cannot read the {what}",
            problems=[Problem(f"site_services.{what}", f"{file} does not exist", "point it at the file")],
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the {what}",
            problems=[Problem(f"site_services.{what}", f"{file}: {exc.strerror}", "point it at a readable file")],
        ) from None


def package_source_vars(inventory: Inventory, state_dir: Path, address: str | None) -> dict[str, Any]:
    """``rackctl_package_source`` for this inventory (the mirror's key read from the state dir)."""
    src = inventory.site_services.packages
    if src.source == "public":
        return {
            "source": "public",
            "uri": src.uri or PUBLIC_DEBIAN_URI,
            "suites": [src.suite, f"{src.suite}-updates"],
            "components": src.components,
            "key": None,
            "signed_by": DEBIAN_ARCHIVE_KEYRING,
        }
    if src.source == "site":
        key = _read(inventory, src.key_file, "packages.key_file")
        return {
            "source": "site",
            "uri": src.uri,
            "suites": [src.suite],
            "components": src.components,
            "key": key,
            "signed_by": SITE_KEY_ON_NODE,
        }
    public_key = MirrorLayout(state_dir).public_key
    key = public_key.read_text(encoding="utf-8") if public_key.exists() else None
    uri = f"http://{address}:{src.port}/" if address else None
    return {
        "source": "mirror",
        "uri": uri,
        "suites": [src.suite],
        "components": src.components,
        "key": key,
        "signed_by": SITE_KEY_ON_NODE,
    }


def registry_vars(inventory: Inventory, address: str | None) -> dict[str, Any]:
    """``rackctl_registry`` for this inventory."""
    reg = inventory.site_services.registry
    if reg.source == "external":
        host = reg.host
        ca = _read(inventory, reg.ca_file, "registry.ca_file")
    else:
        host = address
        ca = _read(inventory, reg.tls.ca_file, "registry.tls.ca_file", made_later=True) if reg.tls else None
    return {
        "source": reg.source,
        "host": host,
        "port": reg.port,
        "address": f"{host}:{reg.port}" if host else None,
        "ca_pem": ca,
    }


def mirror_server_vars(inventory: Inventory, state_dir: Path, address: str | None) -> dict[str, Any] | None:
    """``rackctl_mirror_server``: what role ``head_mirror`` serves on a head node (None: nothing to serve).

    Paths are on the controller (rackctl runs on the head node); the TLS key is named, never read.
    """
    src, reg = inventory.site_services.packages, inventory.site_services.registry
    if src.source != "mirror" and reg.source != "head":
        return None
    layout = MirrorLayout(state_dir)
    tls = reg.tls if reg.source == "head" else None
    resolved = {
        k: str(inventory.resolve_path(getattr(tls, k))) if tls else None for k in ("cert_file", "key_file", "ca_file")
    }
    return {
        "address": address,
        "suite": src.suite,
        "mirror_port": src.port,
        "archive": str(layout.archive.resolve()) if src.source == "mirror" and layout.archive.exists() else None,
        "revision": layout.revision() if src.source == "mirror" else None,
        "registry_port": reg.port if tls else None,
        "registry_cert_file": resolved["cert_file"],
        "registry_key_file": resolved["key_file"],
        "registry_ca_file": resolved["ca_file"],
    }


def site_vars(inventory: Inventory, state_dir: Path, environment: Environment | None) -> dict[str, Any]:
    """The ``group_vars/all/site_services.yml`` document."""
    address = head_address(inventory, environment)
    return {
        "rackctl_package_source": package_source_vars(inventory, state_dir, address),
        "rackctl_registry": registry_vars(inventory, address),
        "rackctl_mirror_server": mirror_server_vars(inventory, state_dir, address),
    }
