"""Render the head node's boot tree from the inventory: dnsmasq, nginx, iPXE scripts, seeds; pins host keys.

The tree is built in a sibling temp directory and swapped into place, so a half-rendered tree is never
served. Per-node secrets (host private key, autoinstall seed) go under ``http/private/<host>/<token>/``
with directories 0750 and files 0640; everything else is public boot material.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import ipaddress
import json
import os
import secrets
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem
from bootstrap.fsutil import atomic_write_bytes, atomic_write_text
from bootstrap.inventory.models import Inventory, Node
from bootstrap.provision.api import BootConfig, BootTree, NodeBoot
from bootstrap.provision.blockmap import map_path, ranges_path
from bootstrap.provision.hostkeys import HostKey, ensure_host_key, known_hosts_path, write_known_hosts

#: Where Debian's ``ipxe`` package puts its binaries.
IPXE_DIRS = (Path("/usr/lib/ipxe"), Path("/usr/share/ipxe"))
IPXE_BINARIES = ("undionly.kpxe", "snponly.efi", "ipxe.efi")
#: The root filesystem is partition 3 of images built by :mod:`bootstrap.provision.image`.
IMAGE_ROOT_PARTITION = 3
ADMIN_USER = "rackctl"

_env = Environment(
    loader=PackageLoader("bootstrap.provision", "templates"),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,  # noqa: S701 - config files and scripts, not HTML
)

#: A YAML scalar/sequence written as JSON (JSON is YAML); unlike ``tojson`` it does not HTML-escape ``&``.
_env.filters["yaml"] = lambda value: json.dumps(value, ensure_ascii=False)


def render_template(name: str, **values: Any) -> str:
    """Render one template of ``bootstrap/provision/templates`` (undefined names are errors)."""
    return _env.get_template(name).render(**values)


# -- inputs ----------------------------------------------------------------------------------------------
def selected_nodes(cfg: BootConfig) -> list[Node]:
    """Nodes that get a boot entry: ``cfg.nodes``, else every node with a PXE MAC except the server itself."""
    inv = cfg.inventory
    if cfg.nodes is not None:
        unknown = [h for h in cfg.nodes if inv.node(h) is None]
        if unknown:
            raise InvalidInput(
                f"unknown node(s): {', '.join(unknown)}",
                problems=[
                    Problem("nodes", f"{h!r} is not in the inventory", "use a hostname from nodes:") for h in unknown
                ],
            )
        chosen = [inv.node(h) for h in cfg.nodes]
        return [n for n in chosen if n is not None]
    return [
        n
        for n in inv.nodes
        if (nic := n.interface_on("pxe")) is not None and nic.mac and str(nic.ip or "") != cfg.server_ip
    ]


def check_config(cfg: BootConfig, nodes: list[Node]) -> list[Problem]:
    """Everything wrong with the inputs, each naming the field, the value and the fix."""
    inv = cfg.inventory
    problems: list[Problem] = []
    cidr = inv.networks.cidr_of("pxe")
    if cidr is None:
        problems.append(Problem("networks.pxe.cidr", "the PXE network has no CIDR", "set cidr or shared_with: oob"))
    else:
        try:
            if ipaddress.IPv4Address(cfg.server_ip) not in cidr:
                problems.append(
                    Problem(
                        "server_ip",
                        f"{cfg.server_ip} is outside the PXE network {cidr}",
                        "use the head node's PXE address",
                    )
                )
        except ValueError:
            problems.append(Problem("server_ip", f"{cfg.server_ip!r} is not an IPv4 address", "e.g. 10.200.0.1"))
    for index, node in enumerate(inv.nodes):
        nic = node.interface_on("pxe")
        if node in nodes and (nic is None or not nic.mac or nic.ip is None):
            problems.append(
                Problem(
                    f"nodes[{index}].interfaces",
                    f"{node.hostname} has no PXE interface with both mac and ip",
                    "add {name: pxe0, network: pxe, mac: ..., ip: ...} (rackctl discover --write fills MACs)",
                )
            )
        if node in nodes and node.root_disk_hint and any(c.isspace() for c in node.root_disk_hint):
            problems.append(
                Problem(
                    f"nodes[{index}].root_disk_hint", f"{node.root_disk_hint!r} contains spaces", "remove the spaces"
                )
            )
    method = inv.cluster.install_method.value
    needs = {"kernel": cfg.kernel, "initrd": cfg.initrd}
    if method == "image":
        needs["image"] = cfg.image
    for name, path in needs.items():
        if path is None:
            hint = "rackctl image ramdisk" if name != "image" else "rackctl image build"
            if method == "autoinstall":
                hint = "casper/vmlinuz and casper/initrd from the Ubuntu live-server ISO"
            problems.append(
                Problem(name, f"cluster.install_method is {method} but no {name} was given", f"build it: {hint}")
            )
        elif not Path(path).is_file():
            problems.append(Problem(name, f"{path} does not exist", "give an existing file"))
    return problems


def find_ipxe_dir() -> Path:
    """The directory holding Debian's iPXE binaries."""
    for folder in IPXE_DIRS:
        if all((folder / b).is_file() for b in IPXE_BINARIES):
            return folder
    raise EnvironmentMissing(f"iPXE binaries {', '.join(IPXE_BINARIES)} not found; install the Debian package 'ipxe'")


def image_facts(image: Path) -> tuple[str, int]:
    """sha256 of the served (gzip) image and size of the *uncompressed* disk it holds.

    The deploy ramdisk hashes the stream it receives (no read-back of the disk), so the digest it checks is
    the compressed file's; gzip's own CRC32 and length trailer cover the decompressed bytes. Both come from
    ``<image>.json`` (written by ``rackctl image build``) when it is there, else they are computed.
    """
    meta = Path(f"{image}.json")
    data = json.loads(meta.read_text()) if meta.is_file() else {}
    if data.get("gz_sha256") and data.get("size"):
        return str(data["gz_sha256"]), int(data["size"])
    digest = hashlib.sha256()
    with Path(image).open("rb") as fh:
        while chunk := fh.read(4 << 20):
            digest.update(chunk)
    size = int(data.get("size") or 0)
    if not size:
        with gzip.open(image, "rb") as gz:
            while chunk := gz.read(4 << 20):
                size += len(chunk)
    return digest.hexdigest(), size


def disk_match(hint: str | None) -> dict[str, Any]:
    """The autoinstall ``storage.layout.match`` for a root-disk hint."""
    if not hint:
        return {"size": "largest"}
    if hint.startswith("/dev/"):
        return {"path": hint}
    if hint.upper().startswith("BOSS"):
        # The BOSS-N1 controller exposes its RAID 1 volume as one disk whose model names the controller.
        return {"model": "*BOSS*"}
    if hint.startswith("size"):
        return {"size": "largest"}
    return {"serial": hint}


# -- rendering -------------------------------------------------------------------------------------------
def render(cfg: BootConfig) -> BootTree:
    """Render the whole tree for ``cfg`` and swap it into ``cfg.out_dir``; see :func:`render_boot_tree`."""
    nodes = selected_nodes(cfg)
    problems = check_config(cfg, nodes)
    if problems:
        raise InvalidInput("cannot render the boot tree", problems=problems)
    inv = cfg.inventory
    out_dir = Path(cfg.out_dir).resolve()
    serve_root = Path(cfg.serve_root).resolve() if cfg.serve_root else out_dir
    state_dir = Path(cfg.state_dir) if cfg.state_dir else out_dir.parent
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    os.chmod(work, 0o755)  # noqa: S103 - the public boot tree (secrets live under private/, 0750)
    base_url = f"http://{cfg.server_ip}:{cfg.http_port}"
    try:
        tftp, http = work / "tftp", work / "http"
        for folder in (tftp, http / "ipxe", http / "private"):
            folder.mkdir(parents=True)
        os.chmod(http / "private", 0o750)  # noqa: S103 - group of the HTTP server only
        ipxe_dir = find_ipxe_dir()
        for binary in IPXE_BINARIES:
            shutil.copyfile(ipxe_dir / binary, tftp / binary)
        _place_artefacts(cfg, http)
        image_sha, image_size, bmap_sha = ("", 0, "")
        if inv.cluster.install_method.value == "image" and cfg.image:
            image_sha, image_size = image_facts(Path(cfg.image))
            bmap_sha = "" if cfg.image_url else block_map_digest(Path(cfg.image))
        boots: dict[str, NodeBoot] = {}
        keys: dict[str, tuple[HostKey, list[str]]] = {}
        for node in nodes:
            key = ensure_host_key(state_dir, node.hostname)
            nic = node.interface_on("pxe")
            assert nic is not None and nic.mac and nic.ip  # checked above
            boot = NodeBoot(
                hostname=node.hostname,
                mac=nic.mac,
                ip=str(nic.ip),
                token=cfg.tokens.get(node.hostname) or secrets.token_urlsafe(24),
                method=inv.cluster.install_method.value,
                host_key_fingerprint=key.fingerprint,
            )
            private = http / "private" / node.hostname / boot.token
            _write_private(private, key, node, inv)
            if boot.method == "image":
                cmdline = image_cmdline(cfg, boot, node, base_url, sha=image_sha, size=image_size, bmap_sha=bmap_sha)
                script = render_template("node-image.ipxe.j2", node=boot, base_url=base_url, cmdline=cmdline)
            else:
                _write_seed(private, inv, node, boot, key=key, base_url=base_url)
                cmdline = autoinstall_cmdline(cfg, boot, base_url)
                script = render_template("node-autoinstall.ipxe.j2", node=boot, base_url=base_url, cmdline=cmdline)
            atomic_write_text(http / "ipxe" / f"{boot.mac_hyphen}.ipxe", script)
            boot.ipxe_script = serve_root / "http" / "ipxe" / f"{boot.mac_hyphen}.ipxe"
            boot.seed_dir = serve_root / "http" / "private" / node.hostname / boot.token
            boots[node.hostname] = boot
            addresses = [str(a) for a in (node.address_on("management"), node.address_on("pxe")) if a]
            keys[node.hostname] = (key, addresses)
        atomic_write_text(http / "boot.ipxe", render_template("boot.ipxe.j2", base_url=base_url))
        write_known_hosts(known_hosts_path(state_dir), keys)
        _write_service_configs(cfg, work, serve_root)
        _swap_into_place(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    for boot in boots.values():
        if cfg.serve_root is None:
            boot.ipxe_script = out_dir / "http" / "ipxe" / f"{boot.mac_hyphen}.ipxe"
            boot.seed_dir = out_dir / "http" / "private" / boot.hostname / boot.token
    return BootTree(
        dnsmasq_conf=out_dir / "dnsmasq.conf",
        nginx_conf=out_dir / "nginx.conf",
        tftp_root=out_dir / "tftp",
        http_root=out_dir / "http",
        nodes=boots,
        known_hosts=known_hosts_path(state_dir),
        root=out_dir,
        server_ip=cfg.server_ip,
        http_port=cfg.http_port,
        interface=cfg.interface,
    )


def block_map_digest(image: Path) -> str:
    """sha256 of the image's block map when it has one (with its ranges stream) beside it, else ``""``."""
    if not (map_path(image).is_file() and ranges_path(image).is_file()):
        return ""
    return hashlib.sha256(map_path(image).read_bytes()).hexdigest()


def image_cmdline(
    cfg: BootConfig, boot: NodeBoot, node: Node, base_url: str, *, sha: str, size: int, bmap_sha: str = ""
) -> str:
    """Kernel arguments of the deploy ramdisk (parsed by its ``/init``).

    With a block map (``bmap_sha``) the ramdisk downloads the map, checks it against ``rackctl.bmapsha256``
    and writes only the mapped ranges from ``<image>.ranges``; without one it streams the whole gzipped
    image and checks ``rackctl.gzsha256``.
    """
    name = Path(cfg.image or "image.raw.gz").name
    image_url = cfg.image_url or f"{base_url}/images/{name}"
    source = (
        {"rackctl.image": f"{base_url}/images/{ranges_path(Path(name))}",
         "rackctl.bmap": f"{base_url}/images/{map_path(Path(name))}", "rackctl.bmapsha256": bmap_sha}
        if bmap_sha
        else {"rackctl.image": image_url, "rackctl.gzsha256": sha}
    )  # fmt: skip
    args = {
        "rackctl.mode": "deploy",
        "rackctl.hostname": boot.hostname,
        "rackctl.mac": boot.mac,
        **source,
        "rackctl.size": str(size),
        "rackctl.disk": node.root_disk_hint or "auto",
        "rackctl.rootpart": str(IMAGE_ROOT_PARTITION),
        "rackctl.callback": f"{base_url}/callback/{boot.hostname}",
        "rackctl.token": boot.token,
        "rackctl.keys": f"{base_url}/private/{boot.hostname}/{boot.token}/",
    }
    return " ".join(f"{k}={v}" for k, v in args.items()) + f" console={cfg.console} panic=30"


def autoinstall_cmdline(cfg: BootConfig, boot: NodeBoot, base_url: str) -> str:
    """Kernel arguments of the Ubuntu live-server installer for a nocloud-net autoinstall."""
    seed = f"{base_url}/private/{boot.hostname}/{boot.token}/"
    iso = f" url={base_url}/installer/ubuntu.iso" if cfg.iso else ""
    return f"ip=dhcp{iso} autoinstall ds=nocloud-net;s={seed} console={cfg.console} ---"


def _write_private(folder: Path, key: HostKey, node: Node, inv: Inventory) -> None:
    folder.mkdir(parents=True, mode=0o750)
    os.chmod(folder.parent, 0o750)  # noqa: S103 - group of the HTTP server only
    atomic_write_text(folder / "ssh_host_ed25519_key", key.private_pem(), mode=0o640)
    atomic_write_text(folder / "ssh_host_ed25519_key.pub", f"{key.public_line} root@{node.hostname}\n", mode=0o640)
    atomic_write_text(folder / "hostname", f"{node.hostname}\n", mode=0o640)
    atomic_write_bytes(folder / "overlay.tar", node_overlay(inv, node, key), mode=0o640)


def node_files(inv: Inventory, node: Node, key: HostKey) -> dict[str, tuple[str, int]]:
    """Files the deploy ramdisk installs into the node's root: path -> (content, mode).

    The pinned host key pair, hostname, hosts, and systemd-networkd ``.link`` (names the NIC by MAC as in
    the inventory; every interface with a MAC, bond members included, since a NIC is renamed only when it
    appears) and ``.network`` (static address) files for every interface with a MAC and an IP; an
    address on a VLAN-tagged network is left to the networks role (it lives on a VLAN device, not the port).
    """
    fqdn = f"{node.hostname}.{inv.cluster.domain}"
    files: dict[str, tuple[str, int]] = {
        "etc/ssh/ssh_host_ed25519_key": (key.private_pem(), 0o600),
        "etc/ssh/ssh_host_ed25519_key.pub": (f"{key.public_line} root@{node.hostname}\n", 0o644),
        "etc/hostname": (f"{node.hostname}\n", 0o644),
        "etc/hosts": (f"127.0.0.1 localhost\n127.0.1.1 {fqdn} {node.hostname}\n::1 localhost ip6-localhost\n", 0o644),
    }
    for nic in node.interfaces:
        if not nic.mac:
            continue
        net = inv.networks.named().get(nic.network) if nic.network else None
        # PermanentMACAddress, not MACAddress: a VLAN or bond built on the port later carries the port's MAC,
        # and a MACAddress match makes udev try to rename it to the port's name; the rename fails, udev
        # gives up on the device and networkd leaves it "pending" without its address.
        link = f"[Match]\nPermanentMACAddress={nic.mac}\n\n[Link]\nName={nic.name}\n"
        if not (nic.ip and nic.network):  # a bond member or spare port: named now, configured by the networks role
            files[f"etc/systemd/network/10-rackctl-{nic.name}.link"] = (link, 0o644)
            continue
        cidr = inv.networks.cidr_of(nic.network)
        if nic.mtu or (net and net.mtu != 1500):
            link += f"MTUBytes={nic.mtu or (net.mtu if net else 1500)}\n"
        network = (
            f"[Match]\nPermanentMACAddress={nic.mac}\n\n[Network]\nAddress={nic.ip}/{cidr.prefixlen if cidr else 24}\n"
            "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
        )
        if net and net.gateway:
            network += f"Gateway={net.gateway}\n"
        files[f"etc/systemd/network/10-rackctl-{nic.name}.link"] = (link, 0o644)
        if net is None or (net.vlan is None and nic.vlan is None):  # a tagged address waits for the networks role
            files[f"etc/systemd/network/20-rackctl-{nic.name}.network"] = (network, 0o644)
    return files


def node_overlay(inv: Inventory, node: Node, key: HostKey) -> bytes:
    """:func:`node_files` as a tar archive (root-owned, fixed mtime)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, (content, mode) in sorted(node_files(inv, node, key).items()):
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _write_seed(folder: Path, inv: Inventory, node: Node, boot: NodeBoot, *, key: HostKey, base_url: str) -> None:
    nics = []
    for nic in node.interfaces:
        if not (nic.mac and nic.ip and nic.network):
            continue
        cidr = inv.networks.cidr_of(nic.network)
        net = inv.networks.named().get(nic.network)
        nics.append(
            {
                "name": nic.name,
                "mac": nic.mac,
                "address": f"{nic.ip}/{cidr.prefixlen if cidr else 24}",
                "gateway": str(net.gateway) if net and net.gateway else "",
                "mtu": nic.mtu or (net.mtu if net and net.mtu != 1500 else None),
            }
        )
    callback = f"{base_url}/callback/{node.hostname}?token={boot.token}"
    user_data = render_template(
        "user-data.j2",
        hostname=node.hostname,
        fqdn=f"{node.hostname}.{inv.cluster.domain}",
        timezone=inv.cluster.timezone,
        disk_match=disk_match(node.root_disk_hint),
        nics=nics,
        admin_keys=list(inv.cluster.admin_ssh_keys),
        admin_user=ADMIN_USER,
        host_key_private=key.private_pem(),
        host_key_public=f"{key.public_line} root@{node.hostname}",
        callback_ok=f"{callback}&status=ok&detail=autoinstall-done",
        callback_error=f"{callback}&status=error&detail=autoinstall-failed",
    )
    atomic_write_text(folder / "user-data", user_data, mode=0o640)
    meta = render_template(
        "meta-data.j2", instance_id=f"rackctl-{node.hostname}-{boot.token[:8]}", hostname=node.hostname
    )
    atomic_write_text(folder / "meta-data", meta, mode=0o640)
    atomic_write_text(folder / "vendor-data", "", mode=0o640)


def _place_artefacts(cfg: BootConfig, http: Path) -> None:
    method = cfg.inventory.cluster.install_method.value
    folder = http / ("deploy" if method == "image" else "installer")
    folder.mkdir()
    names = {"image": ("vmlinuz", "initrd.img"), "autoinstall": ("vmlinuz", "initrd")}[method]
    for src, name in zip((cfg.kernel, cfg.initrd), names, strict=True):
        if src is not None:
            _link_or_copy(Path(src), folder / name, cfg.link_artefacts)
    if method == "image" and cfg.image and not cfg.image_url:
        (http / "images").mkdir()
        _link_or_copy(Path(cfg.image), http / "images" / Path(cfg.image).name, cfg.link_artefacts)
        if block_map_digest(Path(cfg.image)):
            for src in (map_path(Path(cfg.image)), ranges_path(Path(cfg.image))):
                _link_or_copy(src, http / "images" / src.name, cfg.link_artefacts)
    if method == "autoinstall" and cfg.iso:
        _link_or_copy(Path(cfg.iso), folder / "ubuntu.iso", cfg.link_artefacts)


def _link_or_copy(src: Path, dst: Path, link: bool) -> None:
    src = src.resolve()
    if not link:
        dst.symlink_to(src)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    os.chmod(dst, 0o644) if dst.stat().st_uid == os.geteuid() else None


def _write_service_configs(cfg: BootConfig, work: Path, serve_root: Path) -> None:
    inv = cfg.inventory
    cidr = inv.networks.cidr_of("pxe")
    assert cidr is not None
    pxe = inv.networks.pxe
    gateway = pxe.gateway or (inv.networks.named()[pxe.shared_with].gateway if pxe.shared_with else None)
    hosts = [
        {"mac": nic.mac, "ip": str(nic.ip), "hostname": n.hostname}
        for n in inv.nodes
        if (nic := n.interface_on("pxe")) is not None and nic.mac and nic.ip and str(nic.ip) != cfg.server_ip
    ]
    if cfg.interface:
        dnsmasq = render_template(
            "dnsmasq.conf.j2",
            inventory_name=str(inv.source or inv.cluster.name),
            interface=cfg.interface,
            network=str(cidr.network_address),
            netmask=str(cidr.netmask),
            lease="12h",
            hosts=hosts,
            gateway=str(gateway) if gateway else "",
            domain=inv.cluster.domain,
            server_ip=cfg.server_ip,
            efi_binary="snponly.efi",
            script_url=f"http://{cfg.server_ip}:{cfg.http_port}/boot.ipxe",
            tftp_root=str(serve_root / "tftp"),
            tftp_port=cfg.tftp_port,
        )
        atomic_write_text(work / "dnsmasq.conf", dnsmasq)
    site = render_template(
        "nginx-site.conf.j2",
        server_ip=cfg.server_ip,
        http_port=cfg.http_port,
        http_root=str(serve_root / "http"),
        callback_upstream=cfg.callback_upstream,
    )
    atomic_write_text(work / "nginx-site.conf", site)
    atomic_write_text(
        work / "nginx.conf", render_template("nginx.conf.j2", site_conf=str(serve_root / "nginx-site.conf"))
    )


def _swap_into_place(work: Path, out_dir: Path) -> None:
    """Replace ``out_dir`` by ``work`` (rename; the old tree is removed after the swap)."""
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
    os.replace(work, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def render_boot_tree(cfg: BootConfig) -> BootTree:
    """Render everything the head node serves for ``cfg`` (the name the provisioning flow uses)."""
    return render(cfg)
