"""What the inventory asks of the extra upstreams (site_services.packages.upstreams): read from the file only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bootstrap.errors import InvalidInput
from bootstrap.inband.render import group_vars
from bootstrap.inventory import load_inventory
from bootstrap.inventory.package_upstreams import (
    CONTAINERD_KEY_FINGERPRINT,
    KUBERNETES_KEY_FINGERPRINT,
    NVIDIA_KEY_FINGERPRINT,
    NVIDIA_REPO,
)
from bootstrap.mirror.apt_fetch import FlatSource
from bootstrap.mirror.manifest import build_manifest, version_matches
from bootstrap.mirror.upstreams import CNI_PACKAGE, KUBERNETES_PACKAGES, containerd_upstream_package, mirror_upstreams
from bootstrap.resources import roles_dir
from bootstrap.stages.kubernetes.host import missing_hint, needs_cni_plugins, report_message, source_described

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "examples" / "dvd-inference.yml"


def _example(tmp_path: Path, extra: str) -> Path:
    """The validated design's inventory with ``extra`` YAML appended (top-level sections)."""
    path = tmp_path / "inventory.yml"
    path.write_text(EXAMPLE.read_text() + "\n" + extra)
    return path


def _upstream_requests(path: Path) -> dict[str, tuple[str | None, str, str | None]]:
    manifest = build_manifest(load_inventory(path), roles_dir())
    return {r.name: (r.version, r.origin, r.field) for r in manifest.requests if r.origin != "debian"}


def test_a_mirror_site_gets_kubernetes_at_exactly_its_version_by_default() -> None:
    inventory = load_inventory(EXAMPLE)
    version = inventory.cluster.resolved_versions().kubernetes
    minor = ".".join(version.split(".")[:2])
    manifest = build_manifest(inventory, roles_dir())
    assert [u.as_dict() for u in manifest.upstreams] == [
        {
            "name": "kubernetes",
            "title": f"Kubernetes' pkgs.k8s.io v{minor}",
            "uri": f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/",
            "key_file": None,
            "key_url": f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key",
            "fingerprint": KUBERNETES_KEY_FINGERPRINT,
            "suite": None,
            "component": None,
        }
    ]
    extra = {r.name: r for r in manifest.requests if r.origin == "kubernetes"}
    assert set(extra) == set(KUBERNETES_PACKAGES)
    assert {r.version for r in extra.values()} == {f"{version}-*"}
    assert {(r.role, r.field) for r in extra.values()} == {("kubernetes_packages", "cluster.versions.kubernetes")}
    assert manifest.pinned()["kubeadm"] == f"{version}-*"
    assert manifest.upstream_notes == [
        "nvidia: not used (no GPU profile installs a pinned driver on the host)",
        "containerd: off (site_services.packages.upstreams.containerd): the nodes install the distribution's "
        f"containerd, not cluster.versions.containerd {inventory.cluster.resolved_versions().containerd}",
    ]
    assert {r.name for r in manifest.requests if r.role == "container_runtime"} == {"containerd", "runc"}


def test_the_lab_mirror_reads_debian_only() -> None:
    manifest = build_manifest(load_inventory(REPO / "inventory" / "lab.yml"), roles_dir())
    assert manifest.upstreams == []
    assert not [r for r in manifest.requests if r.origin != "debian"]
    assert "kubernetes: off (site_services.packages.upstreams.kubernetes is false)" in manifest.upstream_notes[0]


def test_host_drivers_bring_nvidias_repository_and_fabric_manager_on_nvswitch_models(tmp_path: Path) -> None:
    path = _example(
        tmp_path,
        "nvidia:\n  profiles:\n    XE9680: {driver: host}\n    R760xa: {driver: host, driver_version: '570.195.03'}\n",
    )
    driver = load_inventory(path).cluster.resolved_versions().nvidia_driver
    assert driver is not None
    branch = driver.split(".")[0]
    got = {k: v for k, v in _upstream_requests(path).items() if v[1] == "nvidia"}
    assert got == {
        f"cuda-drivers-{branch}": (f"{driver}-*", "nvidia", "cluster.versions.nvidia_driver"),
        f"nvidia-fabricmanager-{branch}": (f"{driver}-*", "nvidia", "cluster.versions.nvidia_driver"),
        f"cuda-drivers-fabricmanager-{branch}": (f"{driver}-*", "nvidia", "cluster.versions.nvidia_driver"),
        "cuda-drivers-570": ("570.195.03-*", "nvidia", "nvidia.profiles.R760xa.driver_version"),  # no NVSwitch
    }
    repos = {u.name: u for u in mirror_upstreams(load_inventory(path)).repos}
    assert repos["nvidia"].uri == NVIDIA_REPO and repos["nvidia"].fingerprint == NVIDIA_KEY_FINGERPRINT
    assert repos["nvidia"].key_url == NVIDIA_REPO + "3bf863cc.pub"


def test_nvidia_off_leaves_the_driver_out_and_says_so(tmp_path: Path) -> None:
    path = _example(
        tmp_path,
        "nvidia:\n  profiles:\n    XE9680: {driver: host}\n"
        "site_services:\n  packages:\n    upstreams: {nvidia: false, kubernetes: false}\n",
    )
    manifest = build_manifest(load_inventory(path), roles_dir())
    assert manifest.upstreams == [] and not [r for r in manifest.requests if r.origin != "debian"]
    assert any(n.startswith("nvidia: off") and "host driver 580" in n for n in manifest.upstream_notes)


def test_containerd_on_mirrors_dockers_containerd_io_at_exactly_the_pin_in_place_of_debians(tmp_path: Path) -> None:
    """``upstreams.containerd``: Docker's repository for the mirror's suite (a suite layout, its key fetched and
    checked against the pinned fingerprint), containerd.io at exactly cluster.versions.containerd, and the
    distribution's containerd and runc (which it conflicts with) no longer asked of the mirror; role
    container_runtime is told to install it, and the network stage says so."""
    path = _example(tmp_path, "site_services:\n  packages:\n    upstreams: {containerd: true}\n")
    inventory = load_inventory(path)
    pin = inventory.cluster.resolved_versions().containerd
    manifest = build_manifest(inventory, roles_dir())
    (repo,) = [u for u in manifest.upstreams if u.name == "containerd"]
    assert repo.as_dict() == {
        "name": "containerd",
        "title": "Docker's apt repository (bookworm stable)",
        "uri": "https://download.docker.com/linux/debian/",
        "key_file": None,
        "key_url": "https://download.docker.com/linux/debian/gpg",
        "fingerprint": CONTAINERD_KEY_FINGERPRINT,
        "suite": "bookworm",
        "component": "stable",
    }
    runtime = {r.name: (r.version, r.origin, r.field) for r in manifest.requests if r.role == "container_runtime"}
    assert runtime == {"containerd.io": (f"{pin}-*", "containerd", "cluster.versions.containerd")}
    assert containerd_upstream_package(inventory) == {"package": "containerd.io", "version": pin}
    versions = group_vars(inventory)["all/versions.yml"]
    assert versions["rackctl_containerd_upstream"] == {"package": "containerd.io", "version": pin}
    assert group_vars(load_inventory(EXAMPLE))["all/versions.yml"]["rackctl_containerd_upstream"] is None
    line = FlatSource(repo.name, repo.uri, Path("/k.gpg"), repo.suite, repo.component).line()
    assert line == "deb [signed-by=/k.gpg] https://download.docker.com/linux/debian/ bookworm stable"


def test_containerd_for_a_suite_docker_has_no_repository_for_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = _example(tmp_path, "site_services:\n  packages:\n    suite: sid\n    upstreams: {containerd: true}\n")
    with pytest.raises(InvalidInput) as exc:
        build_manifest(load_inventory(path), roles_dir())
    (problem,) = exc.value.problems
    assert problem.path == "site_services.packages.upstreams.containerd" and "sid" in problem.message
    (tmp_path / "copy").mkdir()
    copy = _example(
        tmp_path / "copy",
        "site_services:\n  packages:\n    suite: sid\n"
        "    upstreams: {containerd: {uri: 'http://staging.example.com/docker/', key_file: docker.asc}}\n",
    )
    (repo,) = [u for u in mirror_upstreams(load_inventory(copy)).repos if u.name == "containerd"]
    assert (repo.uri, repo.suite, repo.key_file) == (
        "http://staging.example.com/docker/",
        "sid",
        (tmp_path / "copy" / "docker.asc").resolve(),
    )


def test_a_site_copy_is_named_by_uri_and_key_file_relative_to_the_inventory(tmp_path: Path) -> None:
    path = _example(
        tmp_path,
        "site_services:\n  packages:\n    upstreams:\n"
        "      kubernetes: {uri: 'http://staging.example.com/k8s/v1.33/', key_file: keys/k8s.asc}\n",
    )
    (repo,) = mirror_upstreams(load_inventory(path)).repos
    assert repo.uri == "http://staging.example.com/k8s/v1.33/"
    assert repo.key_file == (tmp_path / "keys" / "k8s.asc").resolve()
    assert repo.key_url is None and repo.fingerprint is None  # the operator's key is the trust anchor


@pytest.mark.parametrize(
    ("packages", "needle"),
    [
        ("{source: public, upstreams: {kubernetes: true}}", "upstreams are what `rackctl mirror build` adds"),
        ("{upstreams: {kubernetes: {uri: 'http://x.example/k8s'}}}", "site_services.packages.upstreams.kubernetes.uri"),
        ("{upstreams: {kubernetes: {url: 'http://x.example/k8s/'}}}", "url"),
    ],
)
def test_bad_upstream_settings_are_refused_naming_the_field(tmp_path: Path, packages: str, needle: str) -> None:
    path = _example(tmp_path, f"site_services:\n  packages: {packages}\n")
    with pytest.raises(InvalidInput) as exc:
        load_inventory(path)
    assert exc.value.exit_code == 2
    assert needle in " ".join(str(p) for p in exc.value.problems), exc.value.problems


def test_with_flannel_the_mirror_carries_the_cni_plugins_and_the_host_side_installs_them(tmp_path: Path) -> None:
    """Flannel's pod network calls the node's CNI plugins: kubernetes-cni (the newest pkgs.k8s.io has) joins
    the mirror's requests, decided by kubernetes.cni, and the host side is told to install it; with the
    default CNI (Calico installs its own plugins) neither."""
    flannel = _example(tmp_path, "kubernetes:\n  cni: flannel\n")
    requests = _upstream_requests(flannel)
    assert requests[CNI_PACKAGE] == ("*", "kubernetes", "kubernetes.cni")
    assert needs_cni_plugins(load_inventory(flannel))
    assert CNI_PACKAGE not in _upstream_requests(EXAMPLE)
    assert not needs_cni_plugins(load_inventory(EXAMPLE))


def test_the_package_names_are_the_roles_own() -> None:
    k8s = yaml.safe_load((roles_dir() / "kubernetes_packages" / "defaults" / "main.yml").read_text())
    assert tuple(k8s["kubernetes_packages_names"]) == KUBERNETES_PACKAGES
    assert k8s["kubernetes_packages_cni_package"] == CNI_PACKAGE and k8s["kubernetes_packages_cni"] is False
    driver = yaml.safe_load((roles_dir() / "nvidia_driver_upgrade" / "defaults" / "main.yml").read_text())
    branch = "{{ nvidia_driver_upgrade_branch }}"
    assert driver["nvidia_driver_upgrade_package"] == f"cuda-drivers-{branch}"
    assert driver["nvidia_driver_upgrade_fm_package"] == f"nvidia-fabricmanager-{branch}"
    # the mirror takes every "V-*" of the driver; the role installs the "V-<revision>" the node's sources offer
    assert "nvidia_driver_upgrade_revision" not in driver  # no fixed revision the mirror could disagree with
    tasks = (roles_dir() / "nvidia_driver_upgrade" / "tasks" / "main.yml").read_text()
    assert "nvidia_driver_upgrade_version | regex_escape }}-\\\\S+" in tasks
    assert version_matches("580.95.05-*", "580.95.05-1")


def test_version_globs_match_the_revision_only() -> None:
    assert version_matches("1.31.2-*", "1.31.2-1.1")
    assert not version_matches("1.31.2-*", "1.31.20-1.1")
    assert not version_matches("1.31.2-*", "1.31.2")
    assert version_matches("2.10-3", "2.10-3") and not version_matches("2.10-3", "2.10-30")


def test_a_node_lacking_kubeadm_is_told_why_the_mirror_lacks_it() -> None:
    """The kubernetes stage's host side: 'not installed' carries the cause on a mirror site (the lab's mirror
    is built without Kubernetes' repository; elsewhere the mirror was not rebuilt since)."""
    report = {"version": "1.33.5", "missing": ["kubeadm", "kubelet", "kubectl"], "available": {}}
    lab = load_inventory(REPO / "inventory" / "lab.yml")
    text = report_message(report, source_described(lab), missing_hint(lab))
    assert text.startswith("kubeadm/kubelet/kubectl not installed: the node's package sources (the head node's mirror)")
    assert "built without Kubernetes' repository (site_services.packages.upstreams.kubernetes is false)" in text
    assert text.endswith("; nothing changed")
    example = load_inventory(EXAMPLE)
    assert "`rackctl mirror build` puts them into the mirror" in report_message(report, "x", missing_hint(example))
    installed = {"version": "1.33.5", "missing": [], "installed": {"kubeadm": "1.33.5-1.1"}}
    assert "not installed" not in report_message(installed, "x", missing_hint(lab))
