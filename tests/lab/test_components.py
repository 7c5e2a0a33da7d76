"""``rackctl lab components``: the inventory's Kubernetes release built from its Go modules by a real ``go build``.

The build itself is the session fixture ``kube_components`` (tests/conftest.py), shared with every test that
runs a real Kubernetes binary; these tests check what it built against the pins and kubeadm's own words.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from rackctl_lab.charts import CHARTS_DIR
from rackctl_lab.components import build, images
from rackctl_lab.components.pins import CRD_SOURCES, KEDA_CRDS, RELEASES, programs

LAB = Path(__file__).parents[2] / "inventory" / "lab.yml"


def _inventory(tmp_path: Path, kubernetes: str) -> Path:
    text = LAB.read_text().replace(
        "  software_profile: current\n", f"  software_profile: current\n  versions: {{kubernetes: '{kubernetes}'}}\n"
    )
    path = tmp_path / "lab.yml"
    path.write_text(text)
    return path


def _run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["lab", "components", *args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_a_release_the_lab_cannot_build_is_refused_naming_the_field(tmp_path: Path) -> None:
    code, data = _run("-i", str(_inventory(tmp_path, "1.30.0")), "--plan")
    assert code == 2 and not data["ok"]
    (problem,) = data["errors"]
    assert problem["path"] == "cluster.versions.kubernetes"
    assert "'1.30.0'" in problem["message"]
    assert all(version in problem["fix"] for version in RELEASES)


def test_kubernetes_names_the_release_in_place_of_the_inventory(tmp_path: Path) -> None:
    """--kubernetes (scripts/test.sh) wins over the inventory's field, even one the lab cannot build."""
    newest = next(iter(RELEASES))
    code, data = _run("-i", str(_inventory(tmp_path, "1.30.0")), "--kubernetes", newest, "--plan", "--only", "etcd")
    assert code == 0 and data["kubernetes"] == newest
    assert [(p["name"], p["version"]) for p in data["programs"]] == [("etcd", RELEASES[newest].etcd)]


def test_an_unbuildable_kubernetes_option_is_refused_naming_the_option(tmp_path: Path) -> None:
    code, data = _run("-i", str(_inventory(tmp_path, next(iter(RELEASES)))), "--kubernetes", "1.20.2", "--plan")
    assert code == 2 and not data["ok"]
    (problem,) = data["errors"]
    assert problem["path"] == "--kubernetes" and "'1.20.2'" in problem["message"]
    assert problem["fix"].startswith("set --kubernetes to one of ")


def test_an_unknown_component_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    newest = next(iter(RELEASES))
    code, data = _run("-i", str(_inventory(tmp_path, newest)), "--plan", "--only", "kube-vip")
    assert code == 2
    assert data["errors"][0]["path"] == "--only" and "kubeadm" in data["errors"][0]["fix"]


def test_the_plan_lists_every_pin_and_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKCTL_CACHE", str(tmp_path / "empty-cache"))
    newest = next(iter(RELEASES))
    code, data = _run("-i", str(_inventory(tmp_path, newest)), "--plan")
    assert code == 0 and data["plan"] and data["kubernetes"] == newest
    pinned = {(p.name, p.version) for p in programs(RELEASES[newest])}
    assert {(p["name"], p["version"]) for p in data["programs"]} == pinned
    assert not any(p["cached"] for p in data["programs"])
    assert not (tmp_path / "empty-cache").exists()


def test_kubeadm_built_at_the_pin_reports_it_and_asks_for_the_pinned_images(kube_components: dict[str, Path]) -> None:
    release = RELEASES[next(iter(RELEASES))]
    kubeadm = str(kube_components["kubeadm"])
    version = subprocess.run([kubeadm, "version", "-o", "short"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"v{release.version}"
    listed = subprocess.run(
        [kubeadm, "config", "images", "list", "--kubernetes-version", f"v{release.version}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tags = {image.rsplit("/", 1)[-1].split(":")[0]: image.rsplit(":", 1)[-1] for image in listed}
    # kubeadm's own pins are the lab's: the etcd and CoreDNS it builds, the pause tag it assembles.
    assert tags["etcd"].removesuffix("-0") == release.etcd.removeprefix("v")
    assert tags["coredns"] == release.coredns
    assert tags["pause"] == release.pause
    assert tags["kube-apiserver"] == f"v{release.version}"


def test_the_control_plane_binaries_answer_with_their_pinned_versions(kube_components: dict[str, Path]) -> None:
    release = RELEASES[next(iter(RELEASES))]
    apiserver = subprocess.run(
        [str(kube_components["kube-apiserver"]), "--version"], capture_output=True, text=True, check=True
    )
    assert apiserver.stdout.strip() == f"Kubernetes v{release.version}"
    etcd = subprocess.run([str(kube_components["etcd"]), "--version"], capture_output=True, text=True, check=True)
    assert f"etcd Version: {release.etcd.removeprefix('v')}" in etcd.stdout


def test_a_second_build_of_the_same_pins_is_a_cache_hit(kube_components: dict[str, Path]) -> None:
    release = RELEASES[next(iter(RELEASES))]
    again = build.build(build.select(release, list(kube_components)))
    assert all(b.cached for b in again)
    assert {b.name: Path(b.path) for b in again} == kube_components


def test_kedas_crds_are_generated_from_its_api_types_at_the_pin_and_cached(keda_crds: list[dict]) -> None:
    """controller-gen (built from its module at the pin) over KEDA's keda.sh/v1alpha1 and eventing.keda.sh/v1alpha1
    packages: KEDA's CRDs (and the internal WithTriggers, which the lab does not install), stamped with the
    generator's version; a second generation is a cache hit; ``--crds`` reports them."""
    assert sorted(c["spec"]["names"]["kind"] for c in keda_crds) == [
        "CloudEventSource",
        "ClusterCloudEventSource",
        "ClusterTriggerAuthentication",
        "ScaledJob",
        "ScaledObject",
        "TriggerAuthentication",
        "WithTriggers",
    ]
    stamp = "controller-gen.kubebuilder.io/version"
    assert {c["metadata"]["annotations"][stamp] for c in keda_crds} == {KEDA_CRDS.generator.version}
    scaled = next(c for c in keda_crds if c["spec"]["names"]["kind"] == "ScaledObject")
    (version,) = scaled["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["minReplicaCount"] == {"format": "int32", "minimum": 0, "type": "integer"}
    again = build.generate_crds(KEDA_CRDS)
    assert again.cached and again.version == KEDA_CRDS.api.version
    record = json.loads((Path(again.files[0]).parent / "build.json").read_text())
    assert record["package"] == KEDA_CRDS.api.package and set(record["sha256"]) == {Path(f).name for f in again.files}
    code, data = _run("-i", str(LAB), "--only", "etcd", "--crds")
    cached = {c["name"]: c["cached"] for c in data["crds"]}
    assert code == 0 and list(cached) == list(CRD_SOURCES) and cached["keda"] is True, data["crds"]


def test_the_air_gap_list_pins_what_the_real_kubeadm_asks_for(kube_components: dict[str, Path]) -> None:
    """``rackctl mirror images`` (bootstrap/mirror/kubeadm_images.py) names the tags the real kubeadm pulls."""
    from bootstrap.mirror.kubeadm_images import pins_for

    release = RELEASES[next(iter(RELEASES))]
    listed = subprocess.run(
        [str(kube_components["kubeadm"]), "config", "images", "list", "--kubernetes-version", f"v{release.version}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tags = {image.rsplit("/", 1)[-1].split(":")[0]: image.rsplit(":", 1)[-1] for image in listed}
    pins = pins_for(release.version)
    assert pins is not None, f"no air-gap pins for {release.version}"
    assert (pins.pause, pins.etcd, pins.coredns) == (tags["pause"], tags["etcd"], tags["coredns"])


def test_the_lab_assembles_every_image_kubeadm_and_its_charts_ask_for(
    kube_components: dict[str, Path],
) -> None:
    """The images the native cluster pulls from the head node's registry (rackctl_lab/components/images.py)
    are the ones the real kubeadm lists and the ones the lab's flannel and local-path-provisioner charts run by
    default (containerd's ``docker.io`` names for the latter's bare ``name:tag``): nothing is pulled from
    outside."""
    release = RELEASES[next(iter(RELEASES))]
    listed = subprocess.run(
        [str(kube_components["kubeadm"]), "config", "images", "list", "--kubernetes-version", f"v{release.version}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assembled = {recipe.ref for recipe in images.recipes(release)}
    assert set(listed) <= assembled, set(listed) - assembled
    chart = yaml.safe_load((CHARTS_DIR / "flannel" / "values.yaml").read_text())["flannel"]
    wanted = {f"{chart[key]['repository']}:{chart[key]['tag']}" for key in ("image", "image_cni")}
    assert wanted <= assembled, wanted - assembled
    assert yaml.safe_load((CHARTS_DIR / "flannel" / "Chart.yaml").read_text())["version"] == release.flannel
    local = yaml.safe_load((CHARTS_DIR / "local-path-provisioner" / "values.yaml").read_text())
    storage = {
        f"docker.io/{'' if '/' in v['repository'] else 'library/'}{v['repository']}:{v['tag']}"
        for v in (local["image"], local["helperImage"])
    }
    assert storage <= assembled, storage - assembled
    version = yaml.safe_load((CHARTS_DIR / "local-path-provisioner" / "Chart.yaml").read_text())["appVersion"]
    assert version == release.local_path_provisioner == local["image"]["tag"]
    assert assembled - set(listed) - wanted - storage == set()  # and nothing else


def test_packages_makes_the_signed_repository_of_the_release(tmp_path: Path) -> None:
    """--packages: kubeadm, kubelet, kubectl, crictl and the CNI plugins packaged at the release (what the
    mirror build reads: tests/mirror/test_lab_kubernetes_packages.py)."""
    newest = next(iter(RELEASES))
    only = ("--only", "kubectl")
    code, data = _run("-i", str(_inventory(tmp_path, newest)), *only, "--packages")
    assert code == 0, data
    assert next(p["name"] for p in data["programs"]) == "kubectl"  # what --only asked, then what packages need
    assert {p["name"] for p in data["programs"]} == {
        "kubectl", "kubeadm", "kubelet", "crictl", "bridge", "host-local", "loopback", "portmap",
    }  # fmt: skip
    assert set(data["repository"]["packages"]) == {"kubeadm", "kubelet", "kubectl", "cri-tools", "kubernetes-cni"}
    repository = data["repository"]
    assert repository["packages"]["kubeadm"] == f"{newest}-1.1"
    root = Path(repository["root"])
    assert (root / "InRelease").is_file() and Path(repository["public_key"]).is_file()
    listed = sorted(p.name for p in root.glob("*.deb"))
    assert listed == sorted(f"{n}_{v}_amd64.deb" for n, v in repository["packages"].items())
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    try:
        verify = subprocess.run(
            ["gpg", "--homedir", str(home), "--batch", "--import", repository["public_key"]],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert verify.returncode == 0, verify.stderr
        checked = subprocess.run(
            ["gpg", "--homedir", str(home), "--batch", "--verify", str(root / "InRelease")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert checked.returncode == 0 and repository["fingerprint"][-16:] in checked.stderr.replace(" ", ""), (
            checked.stderr
        )
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
