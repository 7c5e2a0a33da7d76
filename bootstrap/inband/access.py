"""One model of how rackctl reaches a node over SSH: address, user, key, pinned known_hosts, proxy.

Every in-band connection (the rendered Ansible inventory, hence every playbook run) is derived here,
from the inventory, the state dir and the :class:`~bootstrap.environment.Environment`:

* **address**: the node's address on :data:`ACCESS_NETWORK` (``pxe``: what an installed node answers on
  before the network stage configures management, and what provisioning itself logs in to), else its
  management address. When the network stage lands, :func:`access_address` is the one place to change.
* **user**: ``root`` for the image install method (the image authorises the admin keys for root), the
  seeded admin user for autoinstall (:data:`bootstrap.provision.render.ADMIN_USER`).
* **private key**: the environment's admin key (``$RACKCTL_SSH_KEY`` on a real site); none: ssh's defaults.
* **known_hosts**: the state dir's pinned file (:func:`bootstrap.provision.hostkeys.known_hosts_path`),
  checked strictly, with the system-wide file ignored. A node rackctl did not install (the head node)
  must have its key pinned there by the operator, or it is refused.
* **proxy**: the environment's ``ProxyCommand`` (the lab's namespace relay), none on a real site.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.provision.hostkeys import known_hosts_path
from bootstrap.provision.render import ADMIN_USER

if TYPE_CHECKING:
    from bootstrap.environment import Environment
    from bootstrap.inventory.models import Inventory, Node

#: the network whose address rackctl reaches nodes on until the network stage configures management
ACCESS_NETWORK = "pxe"
#: the interpreter of the images rackctl installs (Ubuntu/Debian)
PYTHON_INTERPRETER = "/usr/bin/python3"


@dataclass(frozen=True)
class NodeAccess:
    """How to open an SSH session to one node."""

    hostname: str
    address: str | None
    user: str
    known_hosts: Path
    private_key: Path | None = None
    proxy_command: str | None = None
    port: int = 22
    python_interpreter: str = PYTHON_INTERPRETER

    def ssh_options(self) -> list[str]:
        """OpenSSH ``-o`` options: the pinned known_hosts, strict checking, the proxy when there is one."""
        opts = [
            f"UserKnownHostsFile={self.known_hosts}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
        ]
        if self.proxy_command:
            opts.append(f"ProxyCommand={self.proxy_command}")
        return [arg for opt in opts for arg in ("-o", opt)]

    def ansible_vars(self) -> dict[str, Any]:
        """The connection variables of this host in the Ansible inventory."""
        data: dict[str, Any] = {
            "ansible_host": self.address,
            "ansible_port": self.port if self.port != 22 else None,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.private_key) if self.private_key else None,
            "ansible_ssh_common_args": shlex.join(self.ssh_options()),
            "ansible_python_interpreter": self.python_interpreter,
        }
        return {k: v for k, v in data.items() if v is not None}


def access_address(node: Node) -> str | None:
    """The address rackctl reaches ``node`` on: its :data:`ACCESS_NETWORK` address, else management."""
    address = node.address_on(ACCESS_NETWORK) or node.address_on("management")
    return str(address) if address is not None else None


def access_user(inventory: Inventory) -> str:
    """The login the install authorises: ``root`` (image method) or the seeded admin user (autoinstall)."""
    return "root" if inventory.cluster.install_method.value == "image" else ADMIN_USER


def node_access(inventory: Inventory, state_dir: Path, environment: Environment) -> dict[str, NodeAccess]:
    """Hostname -> how to reach it, for every node of ``inventory``."""
    key = environment.admin_key(inventory)
    proxy = environment.ssh_proxy_command()
    pinned = known_hosts_path(Path(state_dir)).resolve()
    user = access_user(inventory)
    return {
        node.hostname: NodeAccess(
            hostname=node.hostname,
            address=access_address(node),
            user=user,
            known_hosts=pinned,
            private_key=key.resolve() if key else None,
            proxy_command=proxy,
        )
        for node in inventory.nodes
    }
