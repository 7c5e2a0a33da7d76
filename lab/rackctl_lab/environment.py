"""The lab's implementation of the environment seam (:mod:`bootstrap.environment`).

Registered as ``lab`` in the ``rackctl.environments`` entry-point group. The lab's nodes are VMs on a
bridge inside the network namespace ``rackctl lab up`` made; the head node is this machine, so its boot
services run inside that namespace on the bridge address, node-facing sockets are created there, and SSH
reaches the VMs through a relay into it. Nothing of this is known to the product.
"""

from __future__ import annotations

import socket
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from bootstrap.environment import HEAD_ROLE, BootSite
from bootstrap.errors import InvalidInput, Problem
from rackctl_lab import paths
from rackctl_lab.netns import LabNetwork, socket_in
from rackctl_lab.nsrelay import proxy_command
from rackctl_lab.vm_lab import LAB_NETNS
from rackctl_lab.vms import LabVms, LabVmState

if TYPE_CHECKING:
    from bootstrap.inventory.models import Inventory


class LabEnvironment:
    """The emulated rack on this machine, as ``rackctl lab up`` left it in ``lab_dir``."""

    name = "lab"

    def __init__(self, lab_dir: Path | str | None = None) -> None:
        self.lab_dir = paths.lab_dir(lab_dir)

    @cached_property
    def vm_state(self) -> LabVmState:
        """What ``lab up`` recorded about the network and the VMs (a clear error when they are not up)."""
        state = LabVms(self.lab_dir).state()
        if state is None:
            raise InvalidInput(
                "the lab's VMs are not up",
                problems=[
                    Problem(
                        "--env lab",
                        f"no VM record in {self.lab_dir}",
                        "run `rackctl lab up -i <inventory>` first (or set $RACKCTL_LAB_DIR to the lab's directory)",
                    )
                ],
            )
        return state

    @property
    def network(self) -> LabNetwork:
        return self.vm_state.network

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return self.network.connect(host, port, timeout)

    def listener_socket(self) -> socket.socket | None:
        return socket_in(self.vm_state.netns)

    def wrap_command(self, argv: list[str]) -> list[str]:
        return [*self.network.exec_prefix(), *argv]

    def ssh_proxy_command(self) -> str | None:
        # Rendering an inventory before `lab up` is fine: the relay names the lab's default namespace then.
        state = LabVms(self.lab_dir).state()
        return proxy_command(state.netns if state else LAB_NETNS)

    def boot_site(self, inventory: Inventory) -> BootSite:
        return BootSite(server_ip=self.network.ip, interface=self.vm_state.bridge)

    def admin_key(self, inventory: Inventory) -> Path | None:
        key = paths.admin_key(self.lab_dir)
        return key if key.exists() else None

    def preinstalled(self, inventory: Inventory) -> set[str]:
        # The head node is this machine: it serves the installs and is not a VM.
        return {n.hostname for n in inventory.nodes if n.role == HEAD_ROLE}

    def out_of_band_only(self, inventory: Inventory) -> dict[str, str]:
        reason = "the lab's head node is this machine: rackctl does not configure it over SSH"
        return dict.fromkeys(self.preinstalled(inventory), reason)

    def emulated_devices(self, inventory: Inventory) -> dict[str, str]:
        # The emulated iDRACs report the inventory's GPUs; the qemu VMs behind them have none.
        reason = "a lab VM: its GPUs and NVSwitches exist only in its emulated iDRAC"
        return {n.hostname: reason for n in inventory.nodes if inventory.gpus_of(n).count > 0}
