"""Contract of the head node's boot services: what is rendered, what each node gets, what runs it.

The same code serves real Dell hardware and the lab:

* :func:`bootstrap.provision.render.render_boot_tree` turns a :class:`BootConfig` (inventory + head-node
  address + artefacts) into a :class:`BootTree` on disk: ``dnsmasq.conf``, ``nginx.conf``, a TFTP root
  with the iPXE binaries, an HTTP root with per-node iPXE scripts (``ipxe/<mac-with-hyphens>.ipxe``),
  autoinstall seeds
  (``seed/<hostname>/user-data`` + ``meta-data``), the deploy kernel/initrd and image, and ``known_hosts``.
* :class:`bootstrap.provision.services.BootServices` runs dnsmasq (the ``dnsmasq-base`` binary) and nginx
  on that tree, through the environment's command wrapper.

Callbacks: the deploy ramdisk (and the autoinstall late-command) calls
``GET http://{server_ip}:{http_port}/callback/{hostname}?token=...&status=ok|error&detail=...``;
nginx proxies ``/callback/`` to :attr:`BootConfig.callback_upstream` (the flow's receiver) unchanged.
Per-node secrets (the node's pinned SSH host key pair, its autoinstall seed) are served under
``/private/{hostname}/{token}/`` (no listing): the deploy ramdisk writes the key into the installed root,
the autoinstall seed carries it (see :mod:`bootstrap.provision.hostkeys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bootstrap.inventory.models import Inventory

#: Install methods a node can get (``cluster.install_method``).
METHODS = ("image", "autoinstall")


@dataclass
class NodeBoot:
    """What one node gets from the boot services."""

    hostname: str
    mac: str  #: PXE MAC, lower case with colons
    ip: str  #: address handed out by DHCP on the PXE network
    token: str  #: one-time callback token (``secrets.token_urlsafe``)
    method: str  #: "image" | "autoinstall"
    ipxe_script: Path | None = None  #: the node's rendered iPXE script inside the HTTP root
    seed_dir: Path | None = None  #: autoinstall user-data/meta-data (autoinstall method), 0750
    host_key_fingerprint: str = ""  #: SHA256:... of the pinned ed25519 host key

    @property
    def mac_hyphen(self) -> str:
        """The MAC as iPXE's ``${net0/mac:hexhyp}`` writes it (``52-54-00-...``)."""
        return self.mac.replace(":", "-")


@dataclass
class BootConfig:
    """Inputs of rendering."""

    inventory: Inventory
    out_dir: Path  #: ``<state-dir>/boot``; replaced as a whole on each render
    server_ip: str  #: the head node's address on the PXE network (lab: 10.200.0.1 on the bridge)
    http_port: int = 8080
    interface: str = ""  #: the PXE interface dnsmasq binds to (lab: the bridge name)
    image: Path | None = None  #: gzipped raw disk image to deploy (image method)
    kernel: Path | None = None  #: deploy kernel (image) or installer kernel (autoinstall)
    initrd: Path | None = None  #: deploy ramdisk (image) or installer initrd (autoinstall)
    tokens: dict[str, str] = field(default_factory=dict)  #: hostname -> one-time token (generated if absent)
    callback_upstream: str = "127.0.0.1:8099"  #: host:port of the flow's callback receiver
    nodes: list[str] | None = None  #: hostnames with a boot entry (default: every PXE node but the server)
    state_dir: Path | None = None  #: where host keys live (0600); default ``out_dir.parent``
    tftp_port: int = 69  #: dnsmasq's TFTP port (tests may use another)
    console: str = "ttyS0,115200"  #: kernel console for the deploy ramdisk/installer
    image_url: str = ""  #: override the image URL the ramdisk streams from (default: served by nginx)
    link_artefacts: bool = True  #: hard-link/copy large artefacts into the tree (False: symlink)
    iso: Path | None = None  #: Ubuntu live-server ISO (autoinstall): served as installer/ubuntu.iso for ``url=``
    serve_root: Path | None = None  #: where the tree lives when served, if not out_dir (real head node: a copy)


@dataclass
class BootTree:
    """Result of rendering: paths inside ``out_dir``."""

    dnsmasq_conf: Path
    nginx_conf: Path
    tftp_root: Path
    http_root: Path
    nodes: dict[str, NodeBoot]
    known_hosts: Path  #: the state dir's pinned host keys (``hostkeys.known_hosts_path``): every node so far
    root: Path | None = None  #: out_dir itself
    server_ip: str = ""
    http_port: int = 8080
    interface: str = ""

    def url(self, path: str) -> str:
        """An absolute URL on the head node's HTTP server."""
        return f"http://{self.server_ip}:{self.http_port}/{path.lstrip('/')}"
