"""After a node's reboot: is its OS back? Checked only where rackctl has SSH access to it.

A node has SSH access once it is provisioned (its host key pinned) and the environment does not keep it
out of in-band work. The check opens a TCP connection to its sshd (through the environment, so the lab's
namespace works too) and reads the SSH banner; it never logs in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bootstrap.environment import Environment
from bootstrap.inband.access import access_address
from bootstrap.inventory.models import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal


@dataclass
class OsHealth:
    """Waits for a node's sshd after a reboot, where the node has SSH access."""

    inventory: Inventory
    journal: Journal
    environment: Environment
    timeout_s: float = 900.0
    poll_s: float = 5.0

    def has_access(self, node: str) -> str | None:
        """The address to check, or None (with no OS installed by rackctl there is nothing to check)."""
        entry = self.inventory.node(node)
        if entry is None or node in self.environment.out_of_band_only(self.inventory):
            return None
        status = self.journal.nodes().get(node)
        origin = status.left_from() if status and status.left_from() else (status.state if status else None)
        if origin not in (NodeState.PROVISIONED, NodeState.JOINED, NodeState.READY):
            return None
        return access_address(entry)

    def wait(self, node: str) -> str:
        """Wait for the OS; return what was checked (for the record). Raises TimeoutError."""
        address = self.has_access(node)
        if address is None:
            return "no SSH access: OS not checked"
        deadline = time.monotonic() + self.timeout_s
        last = ""
        while True:
            try:
                with self.environment.connect(address, 22, timeout=5.0) as sock:
                    sock.settimeout(5.0)
                    banner = sock.recv(64).decode("ascii", "replace").strip()
                if banner.startswith("SSH-"):
                    return f"OS up: sshd on {address} answered {banner.split()[0]}"
                last = f"unexpected banner {banner[:20]!r}"
            except OSError as exc:
                last = str(exc) or type(exc).__name__
            if time.monotonic() + self.poll_s > deadline:
                raise TimeoutError(f"the OS of {node} did not come back within {self.timeout_s:.0f}s ({last})")
            time.sleep(self.poll_s)
