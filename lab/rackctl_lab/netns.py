"""The lab's networks: a network namespace holding one bridge per inventory network (that network's switch).

The first bridge is the PXE/OOB segment (the boot services' address); every other network the inventory
defines (management, storage, external) gets its own bridge, a :class:`Segment`, with the network's MTU
(9000 for storage). Segments are plain Linux bridges: tagged (VLAN) frames cross them untouched, but the
host kernel here has no ``vlan_filtering`` (so a bridge does not drop a wrong tag: the VMs' own VLAN
devices do), no bond and no VLAN devices, and a bridge speaks no LACP (lab bonds are active-backup).
The head node's side of a segment is an address on the bridge itself, untagged: a tagged network gets none.

Nothing of the lab reaches outside the namespace: no veth to the root namespace, no route out. Processes
that must live on the segment run with ``ip netns exec``; a Python process reaches it without a
subprocess through :func:`socket_in` (a socket created inside the namespace stays there) — that is how
the callback receiver listens next to nginx and how paramiko talks to the lab nodes.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message holds its command line and stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class Segment:
    """One more network of the lab: its bridge, the head side's address on it (CIDR or none) and its MTU."""

    network: str
    bridge: str
    address: str | None = None
    mtu: int = 1500


@dataclass(frozen=True)
class LabNetwork:
    """One namespace ``name`` with bridge ``bridge`` carrying ``address`` (CIDR, e.g. ``10.200.0.1/24``),
    plus one bridge per :class:`Segment`."""

    name: str = "rackctl-lab"
    bridge: str = "rkbr0"
    address: str = "10.200.0.1/24"
    segments: tuple[Segment, ...] = ()

    def bridge_for(self, network: str) -> str:
        """The bridge of inventory network ``network`` (the first bridge for pxe/oob and unknown names)."""
        return next((s.bridge for s in self.segments if s.network == network), self.bridge)

    def segment(self, network: str) -> Segment | None:
        """The segment of ``network``, if the lab has one."""
        return next((s for s in self.segments if s.network == network), None)

    @property
    def ip(self) -> str:
        """The head node's services address on the bridge (no prefix length)."""
        return self.address.split("/", 1)[0]

    def exists(self) -> bool:
        return (NETNS_DIR / self.name).exists()

    def up(self) -> None:
        """Create the namespace, its loopback and the bridge with the address (idempotent)."""
        if not self.exists():
            _ip("netns", "add", self.name)
        self.ip_in("link", "set", "lo", "up")
        self._bridge(self.bridge, self.address, 1500)
        for seg in self.segments:
            self._bridge(seg.bridge, seg.address, seg.mtu)

    def _bridge(self, bridge: str, address: str | None, mtu: int) -> None:
        if self.ip_in("link", "show", bridge, check=False).returncode != 0:
            self.ip_in("link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
        # set by hand, the bridge keeps its MTU when ports join (else it follows the smallest port)
        self.ip_in("link", "set", bridge, "mtu", str(mtu))
        if address and address not in self.ip_in("-o", "addr", "show", "dev", bridge).stdout:
            self.ip_in("addr", "add", address, "dev", bridge)
        self.ip_in("link", "set", bridge, "up")

    def down(self) -> bool:
        """Delete the namespace (and with it the bridge and every tap in it). True if it existed."""
        if not self.exists():
            return False
        _ip("netns", "delete", self.name)
        return True

    def ip_in(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ip`` run inside the namespace."""
        return _ip("-n", self.name, *args, check=check)

    def exec_prefix(self) -> list[str]:
        """Prefix of a command line that runs inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of this namespace (see :func:`socket_in`)."""
        return socket_in(self.name, family, kind)

    def connect(self, host: str, port: int, timeout: float = 10.0) -> socket.socket:
        """A TCP connection to ``host:port`` made from inside the namespace."""
        sock = self.socket()
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            raise
        return sock


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in(netns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """Create a socket inside network namespace ``netns`` without moving this process there.

    A short-lived thread enters the namespace (``setns`` acts on the calling thread only), creates the
    socket and ends; the socket keeps its namespace for its whole life.
    """
    result: dict[str, object] = {}

    def make() -> None:
        try:
            with open(NETNS_DIR / netns) as target:
                _setns(target.fileno())
            result["sock"] = socket.socket(family, kind)
        except OSError as exc:
            result["error"] = exc

    worker = threading.Thread(target=make, name=f"netns-{netns}")
    worker.start()
    worker.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]
