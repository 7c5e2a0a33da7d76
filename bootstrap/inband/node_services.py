"""Group vars of the services every node uses from the head nodes: time, and the image that proves
containerd runs (``all/site_services.yml``, beside the package source and the registry).

* ``rackctl_time_servers``: the head nodes' addresses as the nodes reach them (where the boot services
  listen, then each other head node's PXE address); role ``baseline`` points chrony there on every node
  that is not a head node (head nodes follow ``ntp_servers``).
* ``rackctl_check_image``: the image role ``container_runtime`` pulls through the registry and runs
  (``<registry>/rackctl/check:<tag>``, the one ``rackctl mirror images`` pushes); null without a registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bootstrap.errors import EnvironmentMissing
from bootstrap.mirror.images import required_images
from bootstrap.mirror.site_vars import head_address

if TYPE_CHECKING:
    from bootstrap.environment import Environment
    from bootstrap.inventory.models import Inventory

CHECK_REPOSITORY = "rackctl/check"


def time_servers(inventory: Inventory, environment: Environment | None) -> list[str]:
    """Where the nodes get time: the head node serving the boot services, then the other head nodes' PXE
    addresses (not those the environment keeps out of in-band work: there the boot site is that head)."""
    first = head_address(inventory, environment)
    out = [first] if first else []
    kept_out = environment.out_of_band_only(inventory) if environment is not None else {}
    for node in inventory.nodes:
        nic = node.interface_on("pxe") if node.role.value == "head" else None
        if nic is not None and nic.ip is not None and node.hostname not in kept_out and str(nic.ip) not in out:
            out.append(str(nic.ip))
    return out


def check_image(inventory: Inventory, registry_address: str | None) -> str | None:
    """The check image's full reference in the registry; None without a registry or busybox to build it."""
    if not registry_address:
        return None
    try:
        images = [i for i in required_images(inventory) if i.repository == CHECK_REPOSITORY]
    except EnvironmentMissing:
        return None
    return f"{registry_address}/{images[0].ref}" if images else None


def node_service_vars(inventory: Inventory, environment: Environment | None, site: dict[str, Any]) -> dict[str, Any]:
    """``rackctl_time_servers`` and ``rackctl_check_image`` (``site``: the package source/registry vars)."""
    registry = site.get("rackctl_registry") or {}
    return {
        "rackctl_time_servers": time_servers(inventory, environment),
        "rackctl_check_image": check_image(inventory, registry.get("address")),
    }
