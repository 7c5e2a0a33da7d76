"""What roles baseline and container_runtime would write on each node, rendered by real Ansible.

The roles' templates are rendered with ansible-playbook on this machine (connection local) from the
inventory ``rackctl inventory render`` writes, for the lab and for the validated design; the files are
then checked by the programs that read them on a node: ``chronyd -p`` (chrony's own parser),
``containerd config dump`` (containerd's, imports included), ``apt-config dump`` (apt's). Nothing is
applied to this machine: the VM tests apply the roles for real.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bootstrap.environment import HostEnvironment
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory import load_inventory
from bootstrap.resources import roles_dir

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).with_name("render_roles.yml")
REGISTRY = {
    "source": "head",
    "host": "10.200.0.1",
    "port": 5000,
    "address": "10.200.0.1:5000",
    "ca_pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
}


def render(tmp_path: Path, inventory: Path, **extravars: object) -> Path:
    """Render every host's files under ``tmp_path/out/<host>/``; returns that directory."""
    inv = load_inventory(inventory)
    hosts = write_ansible_inventory(inv, tmp_path / "state", HostEnvironment())
    out = tmp_path / "out"
    variables = {
        "out": str(out),
        "roles_dir": str(roles_dir()),
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        **extravars,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(hosts),
            "-e",
            f"@{tmp_path / 'vars.json'}",
            str(PLAYBOOK),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render(
        tmp_path_factory.mktemp("lab"),
        ROOT / "inventory/lab.yml",
        rackctl_registry=REGISTRY,
        rackctl_check_image="10.200.0.1:5000/rackctl/check:1.35.0-4-b3",
    )


@pytest.fixture(scope="module")
def design(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render(tmp_path_factory.mktemp("design"), ROOT / "inventory/examples/dvd-inference.yml")


def hosts_entries(path: Path) -> dict[str, str]:
    """Name -> address of an /etc/hosts file."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out.setdefault(name, fields[0])
    return out


def test_etc_hosts_lists_the_whole_cluster_on_its_management_addresses(lab: Path) -> None:
    for host in ("head-01", "gpu-01", "gpu-02"):
        entries = hosts_entries(lab / host / "hosts")
        assert entries["head-01"] == entries["head-01.lab.rackctl.test"] == "10.200.1.11"
        assert entries["gpu-01"] == "10.200.1.12" and entries["gpu-02.lab.rackctl.test"] == "10.200.1.13"
        assert entries["localhost"] == "127.0.0.1"


def test_every_design_node_is_in_every_hosts_file(design: Path) -> None:
    inv = load_inventory(ROOT / "inventory/examples/dvd-inference.yml")
    names = {n.hostname for n in inv.nodes}
    for host in names:
        entries = hosts_entries(design / host / "hosts")
        assert names <= set(entries), names - set(entries)
        for node in inv.nodes:
            want = node.address_on("management")
            if want is not None:
                assert entries[node.hostname] == str(want)


def chrony_servers(conf: Path) -> list[str]:
    return [line.split()[1] for line in conf.read_text().splitlines() if line.startswith("server ")]


def test_nodes_follow_the_head_nodes_and_head_nodes_the_site(design: Path, lab: Path) -> None:
    inv = load_inventory(ROOT / "inventory/examples/dvd-inference.yml")
    heads = [n for n in inv.nodes if n.role.value == "head"]
    assert heads
    head_addresses = sorted(str(n.address_on("pxe") or n.address_on("management")) for n in heads)
    for node in inv.nodes:
        conf = design / node.hostname / "chrony.conf"
        if node in heads:
            assert chrony_servers(conf) == list(inv.cluster.ntp_servers)
            assert "allow " in conf.read_text() and "local stratum 10" in conf.read_text()
        else:
            assert sorted(chrony_servers(conf)) == head_addresses
            assert "allow " not in conf.read_text()
    # the lab has no site NTP: its head node serves its own clock; the workers follow it
    assert chrony_servers(lab / "head-01" / "chrony.conf") == []
    assert "allow 10.200.0.0/24" in (lab / "head-01" / "chrony.conf").read_text()
    assert chrony_servers(lab / "gpu-01" / "chrony.conf") == ["10.200.0.11"]


@pytest.mark.skipif(shutil.which("chronyd") is None, reason="chrony not installed (scripts/apt-packages.txt)")
def test_chrony_accepts_every_rendered_config(design: Path, lab: Path) -> None:
    for conf in [*design.glob("*/chrony.conf"), *lab.glob("*/chrony.conf")]:
        proc = subprocess.run(["chronyd", "-p", "-f", str(conf)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{conf}: {proc.stderr}"


def containerd_dump(config: Path) -> str:
    proc = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


needs_containerd = pytest.mark.skipif(
    shutil.which("containerd") is None, reason="containerd not installed (scripts/apt-packages.txt)"
)


@needs_containerd
def test_containerd_reads_systemd_cgroups_the_hosts_dir_and_the_drop_in_dir(lab: Path, tmp_path: Path) -> None:
    text = (lab / "gpu-01" / "config.toml").read_text()
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in text
    # containerd's own reading of it, with the drop-in directory pointed at a test directory
    dropins = tmp_path / "conf.d"
    dropins.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(text.replace("/etc/containerd/conf.d", str(dropins)))
    dumped = tomllib.loads(containerd_dump(config))
    cri = dumped["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d"
    # a drop-in is imported (here one for another plugin, as a toolkit would add)
    (dropins / "50-opt.toml").write_text('version = 2\n[plugins."io.containerd.internal.v1.opt"]\n  path = "/opt/x"\n')
    dumped = tomllib.loads(containerd_dump(config))
    assert str(dropins / "50-opt.toml") in dumped["imports"]
    assert dumped["plugins"]["io.containerd.internal.v1.opt"]["path"] == "/opt/x"
    assert dumped["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["config_path"] == "/etc/containerd/certs.d"


@needs_containerd
def test_containerd_runs_runc_on_the_cgroupfs_driver_where_rackctl_renders_it(tmp_path: Path) -> None:
    """Role container_runtime's config with the group var rackctl renders from ``kubernetes.kubelet.
    cgroupDriver`` (tests/cluster/test_validate.py: the kubelet gets the same): containerd's own reading of
    it runs runc without systemd's cgroups. (Given as an extra var: this harness loads the roles' defaults
    above the group vars; the native cluster, tests/ansible, runs the whole role with it.)"""
    out = render(tmp_path, ROOT / "inventory/examples/dvd-inference.yml", container_runtime_cgroup_driver="cgroupfs")
    config = tmp_path / "config.toml"
    rendered = (out / "gpu-l40s-01" / "config.toml").read_text()
    config.write_text(rendered.replace("/etc/containerd/conf.d", str(tmp_path / "conf.d")))
    cri = tomllib.loads(containerd_dump(config))["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False


@needs_containerd
def test_containerd_1_6_replaces_a_whole_plugin_section_from_a_drop_in(lab: Path, tmp_path: Path) -> None:
    """What the NVIDIA work must know: containerd 1.6 (Debian bookworm) merges imports per plugin, so a
    drop-in that touches the CRI plugin must restate its whole section (SystemdCgroup, config_path)."""
    dropins = tmp_path / "conf.d"
    dropins.mkdir()
    config = tmp_path / "config.toml"
    config.write_text((lab / "gpu-01" / "config.toml").read_text().replace("/etc/containerd/conf.d", str(dropins)))
    (dropins / "nvidia.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
    )
    cri = tomllib.loads(containerd_dump(config))["plugins"]["io.containerd.grpc.v1.cri"]
    assert "nvidia" in cri["containerd"]["runtimes"]
    assert cri["registry"]["config_path"] == ""  # the main file's CRI section is gone


def test_containerd_pulls_through_the_head_registry_with_its_ca(lab: Path) -> None:
    registry = tomllib.loads((lab / "gpu-01" / "registry-hosts.toml").read_text())
    assert registry["server"] == "https://10.200.0.1:5000"
    assert registry["host"]["https://10.200.0.1:5000"] == {
        "capabilities": ["pull", "resolve"],
        "ca": "/etc/containerd/certs.d/10.200.0.1:5000/ca.crt",
    }
    mirror = tomllib.loads((lab / "gpu-01" / "mirror-hosts.toml").read_text())  # rendered for docker.io
    assert mirror["server"] == "https://registry-1.docker.io"
    assert list(mirror["host"]) == ["https://10.200.0.1:5000"]
    computed = json.loads((lab / "gpu-01" / "vars.json").read_text())
    assert computed["registry"] == "10.200.0.1:5000"
    assert computed["check_image"] == "10.200.0.1:5000/rackctl/check:1.35.0-4-b3"


def test_the_design_pulls_through_its_head_nodes_registry(design: Path) -> None:
    inv = load_inventory(ROOT / "inventory/examples/dvd-inference.yml")
    head = next(n for n in inv.nodes if n.role.value == "head")
    computed = json.loads(next(design.glob("*/vars.json")).read_text())
    assert computed["registry"] == f"{head.address_on('pxe')}:5000"
    assert computed["check_image"].startswith(f"{head.address_on('pxe')}:5000/rackctl/check:")


def test_without_a_registry_there_is_no_mirror_and_no_check_image(tmp_path: Path) -> None:
    out = render(tmp_path, ROOT / "inventory/lab.yml", rackctl_registry=None, rackctl_check_image=None)
    computed = json.loads((out / "gpu-01" / "vars.json").read_text())
    assert computed["registry"] == "" and computed["check_image"] == ""


def test_the_roles_declare_their_packages(design: Path) -> None:
    packages = json.loads(next(design.glob("*/vars.json")).read_text())["packages"]
    assert {"chrony", "unattended-upgrades", "containerd", "runc", "tzdata"} <= set(packages)


@pytest.mark.skipif(shutil.which("apt-config") is None, reason="apt-config not found")
def test_unattended_upgrades_never_touch_pinned_packages(lab: Path) -> None:
    conf = lab / "gpu-01" / "50unattended-upgrades"
    proc = subprocess.run(["apt-config", "-c", str(conf), "dump"], capture_output=True, text=True, check=True)
    patterns = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', proc.stdout, re.M)
    assert patterns

    # unattended-upgrades matches these as regular expressions from the start of the package name
    def held(pkg: str) -> bool:
        return any(re.match(p, pkg) for p in patterns)

    for pinned in (
        "linux-image-6.1.0-13-amd64",
        "nvidia-driver-535",
        "nvidia-fabricmanager-535",
        "containerd",
        "libnvidia-compute-535",
        "kubelet",
    ):
        assert held(pinned), pinned
    for free in ("openssl", "libc6", "openssh-server", "chrony"):
        assert not held(free), free
    auto = subprocess.run(
        ["apt-config", "-c", str(lab / "gpu-01" / "20auto-upgrades"), "dump"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert 'APT::Periodic::Unattended-Upgrade "1";' in auto.stdout


def _runtime_version(tmp_path: Path, minimum: str, pinned: str = "") -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"report-{minimum or 'none'}-{pinned or 'none'}.json"
    variables = {
        "out": str(out),
        "roles_dir": str(roles_dir()),
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "rackctl_containerd_minimum": minimum,
        "rackctl_containerd_upstream": {"package": "containerd.io", "version": pinned} if pinned else None,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-e",
            f"@{tmp_path / 'vars.json'}",
            str(Path(__file__).with_name("runtime_version.yml")),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    return proc, out


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed (scripts/apt-packages.txt)")
def test_the_role_reports_the_containerd_it_finds_and_refuses_one_older_than_the_kubelet_needs(
    tmp_path: Path,
) -> None:
    """Role container_runtime's read-back (tasks/version.yml) against this machine's real containerd
    (Debian's 1.6): reported as containerd says it; refused, saying why, under a 2.0 minimum (a 1.38
    kubelet needs CRI RuntimeConfig, which 1.6 and 1.7 do not answer); with a pinned containerd.io
    (``rackctl_containerd_upstream``), accepted at exactly that version and refused at any other."""
    said = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    version = re.search(r"[0-9]+\.[0-9]+\.[0-9]+", said)
    assert version is not None, said

    proc, out = _runtime_version(tmp_path, "")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report == {"containerd": version.group(0), "said": said, "minimum": ""}

    proc, out = _runtime_version(tmp_path, version.group(0).split(".")[0] + ".0")  # its own major: accepted
    assert proc.returncode == 0, proc.stdout[-3000:]

    newer = f"{int(version.group(0).split('.')[0]) + 1}.0"
    proc, out = _runtime_version(tmp_path, newer)
    assert proc.returncode != 0 and not out.exists()
    assert f"containerd {version.group(0)} on this node" in proc.stdout, proc.stdout[-3000:]
    assert f"needs containerd {newer} or later" in proc.stdout and "CRI RuntimeConfig" in proc.stdout

    # installed by its pin (site_services.packages.upstreams.containerd): exactly that version, else refused
    proc, out = _runtime_version(tmp_path, "", version.group(0))
    assert proc.returncode == 0 and json.loads(out.read_text())["containerd"] == version.group(0), proc.stdout[-3000:]
    proc, out = _runtime_version(tmp_path, "", "2.4.2" if version.group(0) != "2.4.2" else "2.4.3")
    assert proc.returncode != 0 and not out.exists()
    assert f"containerd {version.group(0)} on this node" in proc.stdout, proc.stdout[-3000:]
    assert "but cluster.versions.containerd is 2.4." in proc.stdout and "containerd.io at that version" in proc.stdout
