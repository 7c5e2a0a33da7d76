"""Rendering of every boot artefact from the lab inventory, checked by the real consumers where they exist
(``dnsmasq --test``, ``nginx -t``, a YAML parser, ``tar``)."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from bootstrap.errors import InvalidInput
from bootstrap.inventory.models import InstallMethod, Inventory
from bootstrap.provision.api import BootConfig, BootTree
from bootstrap.provision.blockmap import ensure_block_map, map_path, ranges_path
from bootstrap.provision.hostkeys import fingerprint_of
from bootstrap.provision.render import IPXE_BINARIES, find_ipxe_dir, render_boot_tree

SERVER = "10.200.0.1"


def _render(inv: Inventory, tmp_path: Path, artefacts: dict[str, Path], **extra: object) -> BootTree:
    cfg = BootConfig(
        inventory=inv,
        out_dir=tmp_path / "state" / "boot",
        server_ip=SERVER,
        interface="rkbr0",
        kernel=artefacts["kernel"],
        initrd=artefacts["initrd"],
        image=artefacts["image"],
        callback_upstream="127.0.0.1:18099",
    )
    for key, value in extra.items():
        setattr(cfg, key, value)
    return render_boot_tree(cfg)


def _autoinstall(inv: Inventory, **node_changes: object) -> Inventory:
    nodes = [n.model_copy(update=node_changes) for n in inv.nodes]
    return inv.model_copy(
        update={
            "cluster": inv.cluster.model_copy(update={"install_method": InstallMethod.AUTOINSTALL}),
            "nodes": nodes,
        }
    )


def _conf_lines(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.append((key, value))
    return out


def _kernel_args(script: str) -> dict[str, str]:
    line = next(x for x in script.splitlines() if x.startswith("kernel "))
    return dict(a.split("=", 1) for a in line.split()[2:] if "=" in a)


def test_dnsmasq_answers_inventory_macs_only_on_the_pxe_interface(lab_inventory, tmp_path, artefacts) -> None:
    tree = _render(lab_inventory, tmp_path, artefacts)
    lines = _conf_lines(tree.dnsmasq_conf)
    assert ("interface", "rkbr0") in lines
    assert ("bind-interfaces", "") in lines
    assert ("port", "0") in lines  # no DNS
    assert ("dhcp-ignore", "tag:!known") in lines
    assert ("log-dhcp", "") in lines
    assert ("dhcp-range", "10.200.0.0,static,255.255.255.0,12h") in lines
    hosts = sorted(v for k, v in lines if k == "dhcp-host")
    expected = sorted(
        f"{n.interface_on('pxe').mac},{n.interface_on('pxe').ip},{n.hostname}" for n in lab_inventory.nodes
    )
    assert hosts == expected
    boots = [v for k, v in lines if k == "dhcp-boot"]
    assert boots == [
        f"tag:!ipxe,tag:bios,undionly.kpxe,,{SERVER}",
        f"tag:!ipxe,tag:efi64,snponly.efi,,{SERVER}",
        f"tag:ipxe,http://{SERVER}:8080/boot.ipxe",
    ]
    assert ("dhcp-match", "set:ipxe,175") in lines
    assert ("ra-param", "rkbr0,60,0") in lines
    assert ("dhcp-range", "::,constructor:rkbr0,ra-only") in lines
    tftp = Path(dict(lines)["tftp-root"])
    ipxe = find_ipxe_dir()
    for binary in IPXE_BINARIES:
        assert (tftp / binary).read_bytes() == (ipxe / binary).read_bytes()


def test_dnsmasq_accepts_the_rendered_config(lab_inventory, tmp_path, artefacts) -> None:
    dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    if not Path(dnsmasq).exists():
        pytest.skip("dnsmasq-base is not installed (scripts/apt-packages.txt)")
    tree = _render(lab_inventory, tmp_path, artefacts)
    done = subprocess.run(
        [dnsmasq, "--test", f"--conf-file={tree.dnsmasq_conf}"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    broken = tmp_path / "broken.conf"
    broken.write_text(tree.dnsmasq_conf.read_text() + "dhcp-boot-typo=x\n")
    assert subprocess.run([dnsmasq, "--test", f"--conf-file={broken}"], capture_output=True, check=False).returncode


def test_nginx_accepts_the_config_and_listens_on_the_server_ip_only(lab_inventory, tmp_path, artefacts) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("nginx is not installed (scripts/apt-packages.txt)")
    tree = _render(lab_inventory, tmp_path, artefacts)
    prefix = tmp_path / "nginx"
    (prefix / "nginx-tmp").mkdir(parents=True)
    # nginx -t binds the listen address: test inside a private network namespace that has it.
    check = (
        f"ip link set lo up && ip addr add {SERVER}/32 dev lo && "
        f"{nginx} -t -p {prefix}/ -e {prefix}/error.log -c {tree.nginx_conf}"
    )
    done = subprocess.run(["unshare", "--net", "sh", "-c", check], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    site = (tree.root / "nginx-site.conf").read_text()
    listens = [line.split()[1] for line in site.splitlines() if line.strip().startswith("listen ")]
    assert listens == [f"{SERVER}:8080;"]
    assert "proxy_pass http://127.0.0.1:18099;" in site
    assert f"root {tree.http_root};" in site


def test_image_ipxe_scripts_carry_image_checksum_disk_and_token(lab_inventory, tmp_path, artefacts) -> None:
    tree = _render(lab_inventory, tmp_path, artefacts)
    raw = gzip.decompress(artefacts["image"].read_bytes())
    assert (tree.http_root / "boot.ipxe").read_text().count("${net0/mac:hexhyp}.ipxe") == 1
    assert set(tree.nodes) == {n.hostname for n in lab_inventory.nodes}
    tokens = set()
    for node in lab_inventory.nodes:
        boot = tree.nodes[node.hostname]
        script = (tree.http_root / "ipxe" / f"{node.interface_on('pxe').mac.replace(':', '-')}.ipxe").read_text()
        assert script.startswith("#!ipxe\n")
        assert boot.ipxe_script is not None and boot.ipxe_script.read_text() == script
        args = _kernel_args(script)
        assert args["rackctl.image"] == f"http://{SERVER}:8080/images/disk.raw.gz"
        assert args["rackctl.gzsha256"] == hashlib.sha256(artefacts["image"].read_bytes()).hexdigest()
        assert args["rackctl.size"] == str(len(raw))
        assert args["rackctl.disk"] == node.root_disk_hint
        assert args["rackctl.callback"] == f"http://{SERVER}:8080/callback/{node.hostname}"
        assert args["rackctl.token"] == boot.token
        assert args["console"] == "ttyS0,115200"
        assert f"initrd --name initrd.img http://{SERVER}:8080/deploy/initrd.img" in script
        tokens.add(boot.token)
    assert len(tokens) == len(lab_inventory.nodes)  # one token per node
    served = tree.http_root / "images" / "disk.raw.gz"
    assert served.read_bytes() == artefacts["image"].read_bytes()


def test_an_image_with_a_block_map_is_served_as_its_ranges_with_the_maps_digest(
    lab_inventory, tmp_path, artefacts
) -> None:
    ensure_block_map(artefacts["image"])
    tree = _render(lab_inventory, tmp_path, artefacts)
    node = lab_inventory.nodes[0]
    args = _kernel_args(tree.nodes[node.hostname].ipxe_script.read_text())
    assert args["rackctl.image"] == f"http://{SERVER}:8080/images/disk.raw.gz.ranges"
    assert args["rackctl.bmap"] == f"http://{SERVER}:8080/images/disk.raw.gz.bmap"
    assert args["rackctl.bmapsha256"] == hashlib.sha256(map_path(artefacts["image"]).read_bytes()).hexdigest()
    assert args["rackctl.size"] == str(len(gzip.decompress(artefacts["image"].read_bytes())))
    assert "rackctl.gzsha256" not in args  # the ramdisk checks each range's digest from the map instead
    for src in (map_path(artefacts["image"]), ranges_path(artefacts["image"])):
        assert (tree.http_root / "images" / src.name).read_bytes() == src.read_bytes()
    # an image served from elsewhere (image_url) keeps the whole-stream digest
    other = _render(lab_inventory, tmp_path / "url", artefacts, image_url="http://mirror.example/disk.raw.gz")
    url_args = _kernel_args(other.nodes[node.hostname].ipxe_script.read_text())
    assert url_args["rackctl.image"] == "http://mirror.example/disk.raw.gz" and "rackctl.bmap" not in url_args


def test_given_tokens_and_selected_nodes_are_used(lab_inventory, tmp_path, artefacts) -> None:
    tree = _render(lab_inventory, tmp_path, artefacts, nodes=["gpu-02"], tokens={"gpu-02": "tok-abc"})
    assert list(tree.nodes) == ["gpu-02"]
    assert tree.nodes["gpu-02"].token == "tok-abc"
    assert len(list((tree.http_root / "ipxe").iterdir())) == 1
    # DHCP still knows every inventory MAC: nodes without a script boot from disk after iPXE exits.
    assert tree.dnsmasq_conf.read_text().count("dhcp-host=") == 3


def test_overlay_installs_pinned_key_hostname_and_network(lab_inventory, tmp_path, artefacts) -> None:
    tree = _render(lab_inventory, tmp_path, artefacts)
    boot = tree.nodes["gpu-01"]
    assert boot.seed_dir is not None
    with tarfile.open(fileobj=io.BytesIO((boot.seed_dir / "overlay.tar").read_bytes())) as tar:
        members = {m.name: m for m in tar.getmembers()}
        key = members["etc/ssh/ssh_host_ed25519_key"]
        assert stat.S_IMODE(key.mode) == 0o600 and key.uid == 0
        pub = tar.extractfile("etc/ssh/ssh_host_ed25519_key.pub").read().decode()
        assert fingerprint_of(pub) == boot.host_key_fingerprint
        assert tar.extractfile("etc/hostname").read() == b"gpu-01\n"
        link = tar.extractfile("etc/systemd/network/10-rackctl-mgmt0.link").read().decode()
        # the permanent MAC only: a VLAN or bond on the port shares its MAC and must not match (udev rename)
        assert link.splitlines()[:2] == ["[Match]", "PermanentMACAddress=52:54:00:99:01:12"] and "Name=mgmt0" in link
        network = tar.extractfile("etc/systemd/network/20-rackctl-mgmt0.network").read().decode()
        assert network.splitlines()[:2] == ["[Match]", "PermanentMACAddress=52:54:00:99:01:12"]
        assert "Address=10.200.1.12/24" in network


def test_known_hosts_pins_each_node_by_name_and_addresses_and_survives_rerender(
    lab_inventory, tmp_path, artefacts
) -> None:
    first = _render(lab_inventory, tmp_path, artefacts)
    lines = first.known_hosts.read_text().splitlines()
    assert len(lines) == 3
    by_host = {line.split()[0].split(",")[0]: line for line in lines}
    names, kind, blob = by_host["gpu-01"].split()
    assert names.split(",") == ["gpu-01", "10.200.1.12", "10.200.0.12"]
    assert kind == "ssh-ed25519"
    assert fingerprint_of(f"{kind} {blob}") == first.nodes["gpu-01"].host_key_fingerprint
    second = _render(lab_inventory, tmp_path, artefacts)
    assert second.known_hosts.read_text() == first.known_hosts.read_text()  # keys are stable
    assert second.nodes["gpu-01"].token != first.nodes["gpu-01"].token  # tokens are not
    leftovers = [p.name for p in (tmp_path / "state").iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert not (first.http_root / "private" / "gpu-01" / first.nodes["gpu-01"].token).exists()


def test_secrets_are_not_world_readable(lab_inventory, tmp_path, artefacts) -> None:
    tree = _render(lab_inventory, tmp_path, _autoinstall_artefacts(artefacts), inventory=_autoinstall(lab_inventory))
    private_key = tmp_path / "state" / "hostkeys" / "gpu-01" / "ssh_host_ed25519_key"
    assert stat.S_IMODE(private_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(private_key.parent.stat().st_mode) == 0o700
    seed = tree.nodes["gpu-01"].seed_dir
    assert seed is not None
    for path in [seed, seed.parent, tree.http_root / "private"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o750, path
    for path in seed.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path
    for script in (tree.http_root / "ipxe").iterdir():
        assert "PRIVATE KEY" not in script.read_text()
    assert "PRIVATE KEY" not in tree.known_hosts.read_text()


def _autoinstall_artefacts(artefacts: dict[str, Path]) -> dict[str, Path]:
    return {**artefacts, "image": None}  # type: ignore[dict-item]


def test_autoinstall_seed_is_cloud_config_with_pinned_key_users_network_and_callback(
    lab_inventory, tmp_path, artefacts
) -> None:
    inv = _autoinstall(lab_inventory)
    tree = _render(inv, tmp_path, _autoinstall_artefacts(artefacts), inventory=inv)
    boot = tree.nodes["gpu-01"]
    assert boot.seed_dir is not None
    text = (boot.seed_dir / "user-data").read_text()
    assert text.startswith("#cloud-config\n")
    data = yaml.safe_load(text)["autoinstall"]
    assert data["version"] == 1
    assert data["storage"]["layout"] == {"name": "direct", "match": {"path": "/dev/vda"}}
    assert data["ssh"]["authorized-keys"] == list(inv.cluster.admin_ssh_keys)
    user = data["user-data"]
    assert user["users"][0]["ssh_authorized_keys"] == list(inv.cluster.admin_ssh_keys)
    assert user["ssh_genkeytypes"] == [] and user["ssh_deletekeys"] is True
    assert fingerprint_of(user["ssh_keys"]["ed25519_public"]) == boot.host_key_fingerprint
    private = (tmp_path / "state" / "hostkeys" / "gpu-01" / "ssh_host_ed25519_key").read_text()
    assert user["ssh_keys"]["ed25519_private"] == private
    eth = data["network"]["ethernets"]
    assert eth["pxe0"]["match"]["macaddress"] == "52:54:00:99:00:12"
    assert eth["pxe0"]["addresses"] == ["10.200.0.12/24"]
    assert eth["mgmt0"]["addresses"] == ["10.200.1.12/24"]
    callback = f"http://{SERVER}:8080/callback/gpu-01?token={boot.token}&status=ok"
    assert any(callback in cmd for cmd in data["late-commands"])
    meta = yaml.safe_load((boot.seed_dir / "meta-data").read_text())
    assert meta["local-hostname"] == "gpu-01" and meta["instance-id"].startswith("rackctl-gpu-01-")
    script = boot.ipxe_script.read_text() if boot.ipxe_script else ""
    seed_url = f"http://{SERVER}:8080/private/gpu-01/{boot.token}/"
    assert f"autoinstall ds=nocloud-net;s={seed_url} " in script
    assert f"kernel http://{SERVER}:8080/installer/vmlinuz initrd=initrd " in script
    # The other nodes' seeds carry their own keys, not this one's.
    other = (tree.nodes["gpu-02"].seed_dir / "user-data").read_text()
    assert user["ssh_keys"]["ed25519_public"].split()[1] not in other
    assert "".join(private.strip().splitlines()[1:-1])[-40:] not in other.replace("\\n", "")


@pytest.mark.parametrize(
    ("hint", "match"),
    [
        ("BOSS-N1", {"model": "*BOSS*"}),
        ("/dev/disk/by-path/pci-0000:01:00.0", {"path": "/dev/disk/by-path/pci-0000:01:00.0"}),
        ("S3Z9NX0N123456", {"serial": "S3Z9NX0N123456"}),
        ("size>=400G", {"size": "largest"}),
    ],
)
def test_root_disk_hint_becomes_the_storage_match(lab_inventory, tmp_path, artefacts, hint, match) -> None:
    inv = _autoinstall(lab_inventory, root_disk_hint=hint)
    tree = _render(inv, tmp_path, _autoinstall_artefacts(artefacts), inventory=inv)
    seed = tree.nodes["gpu-01"].seed_dir
    assert seed is not None
    assert yaml.safe_load((seed / "user-data").read_text())["autoinstall"]["storage"]["layout"]["match"] == match


def test_bad_inputs_name_the_field_value_and_fix(lab_inventory, tmp_path, artefacts) -> None:
    with pytest.raises(InvalidInput) as exc:
        _render(lab_inventory, tmp_path, {**artefacts, "image": None}, server_ip="192.168.9.1")
    problems = {p.path: p for p in exc.value.problems}
    assert "192.168.9.1" in problems["server_ip"].message and problems["server_ip"].fix
    assert "image" in problems and "rackctl image build" in problems["image"].fix
    with pytest.raises(InvalidInput) as exc:
        _render(lab_inventory, tmp_path, artefacts, nodes=["gpu-99"])
    assert "gpu-99" in str(exc.value.problems[0])
    assert not (tmp_path / "state" / "boot").exists()  # nothing half-rendered
