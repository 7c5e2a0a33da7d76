"""A wrong field, a bad enum or a version mismatch fails before anything is written, naming the inventory field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from bootstrap.cli import cli
from bootstrap.cluster.kubeadm_api import ClusterConfigurationV4, InitConfigurationV3
from bootstrap.cluster.render import render_cluster
from bootstrap.cluster.validate import check_builtin, validate_bundle
from bootstrap.inband.render import group_vars
from bootstrap.inventory.loader import load_inventory
from bootstrap.inventory.models import Inventory


def _render_json(path: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["render", "cluster", "-i", str(path), "-o", str(out), "--json", *extra])
    return result.exit_code, json.loads(result.output)


def _paths(doc: dict[str, Any]) -> list[str]:
    return [e["path"] for e in doc["errors"]]


def _kubelet(fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"kubelet": fields}

    return edit


def test_render_writes_the_directory_and_index(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.yaml").write_text("old")
    code, doc = _render_json(write_inventory(), out)
    assert code == 0, doc
    assert doc["ok"] and doc["applied"] is False
    assert not (out / "stale.yaml").exists()  # the whole directory was swapped in
    index = json.loads((out / "index.json").read_text())
    assert index["applied"] is False
    for item in index["files"]:
        assert (out / item["path"]).is_file(), item["path"]
    kubeadm = next(i for i in index["files"] if i["path"] == "kubeadm/head-01.yaml")
    assert kubeadm["checked_by"] and "nodes[0]" in kubeadm["from"]
    deploy = next(i for i in index["files"] if i["path"] == "triton/llama-2-13b-awq/deployment.yaml")
    assert deploy["checked_by"] == ["kubernetes-validate --strict 1.37"]
    assert any("ServiceMonitor" in n["what"] for n in index["not_rendered"])  # said, not hidden
    assert next(yaml.safe_load_all((out / "kubeadm/cp-02.yaml").read_text()))["kind"] == "JoinConfiguration"


def test_dry_run_writes_nothing(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    code, doc = _render_json(write_inventory(), tmp_path / "out", "--dry-run")
    assert code == 0 and doc["dry_run"]
    assert not (tmp_path / "out").exists()


def test_unknown_kubelet_field_names_it(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, doc = _render_json(write_inventory(_kubelet({"maxPod": 110})), out)
    assert code == 2
    assert _paths(doc) == ["kubernetes.kubelet.maxPod"]
    assert "unknown field" in doc["errors"][0]["message"]
    assert "KubeletConfiguration" in doc["errors"][0]["fix"]
    assert not out.exists()


def test_bad_kubelet_enum_names_it(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    code, doc = _render_json(write_inventory(_kubelet({"topologyManagerPolicy": "single-numa"})), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["kubernetes.kubelet.topologyManagerPolicy"]
    assert "single-numa-node" in doc["errors"][0]["message"]  # the allowed values are listed


def test_bad_choice_in_the_inventory_names_it(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"cni": "weave"}

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["kubernetes.cni"]


def test_unknown_kube_proxy_field_names_it(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"kube_proxy": {"conntrack": {"maxPerCpu": 0}}}

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["kubernetes.kube_proxy.conntrack"]
    assert "KubeProxyConfiguration" in doc["errors"][0]["fix"]


@pytest.mark.parametrize(
    ("field", "owner"),
    [("mode", "kubernetes.kube_proxy_mode"), ("clusterCIDR", "networks.kubernetes.pod_cidr"), ("kind", "always")],
)
def test_a_kube_proxy_field_another_field_owns_is_refused_naming_the_owner(
    write_inventory: Callable[..., Path], tmp_path: Path, field: str, owner: str
) -> None:
    """Never overridden silently: kubernetes.kube_proxy.mode would undo kube_proxy_mode (and its strict ARP)."""

    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"kube_proxy_mode": "ipvs", "kube_proxy": {field: "x", "conntrack": {"maxPerCore": 0}}}

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["kubernetes.kube_proxy"]
    said = f"{doc['errors'][0]['message']} {doc['errors'][0].get('fix', '')}"
    assert repr(field) in said and owner in said, doc["errors"][0]


def _unchecked(path: Path) -> Inventory:
    """The inventory without the cross-field rules: shows the render validators catch what slips past."""
    return Inventory.model_validate(yaml.safe_load(path.read_text()))


def test_kubeadm_api_version_mismatch(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["cluster"]["versions"] = {"kubeadm_api": "kubeadm.k8s.io/v1beta3"}

    path = write_inventory(edit)
    inv = _unchecked(path)
    problems = validate_bundle(inv, render_cluster(inv))
    assert {p.path for p in problems} == {"cluster.versions.kubeadm_api"}
    assert "1.22-1.30" in problems[0].message and "1.37.2" in problems[0].message
    code, doc = _render_json(path, tmp_path / "o")  # the CLI refuses it too (the inventory rules first)
    assert code == 2 and "cluster.versions.kubeadm_api" in _paths(doc)


def test_kubernetes_version_without_schemas(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["cluster"]["versions"] = {"kubernetes": "1.24.17"}

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["cluster.versions.kubernetes"]
    assert "1.24" in doc["errors"][0]["message"]


def test_mig_on_a_gpu_without_mig(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nvidia"] = {"profiles": {"R760xa": {"mig_strategy": "single"}, "XE9680": {"mig_strategy": "mixed"}}}

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert set(_paths(doc)) == {"nvidia.profiles.R760xa.mig_strategy", "nvidia.profiles.XE9680.mig_strategy"}
    assert any("cluster-wide" in e["message"] for e in doc["errors"])


def test_fabric_manager_mismatch_refused_at_render(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nvidia"] = {
            "profiles": {
                "XE9680": {"driver": "host", "driver_version": "580.95.05", "fabric_manager_version": "580.82.07"}
            }
        }

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["nvidia.profiles.XE9680.fabric_manager_version"]


def test_builtin_kinds_checked_strictly(write_inventory: Callable[..., Path]) -> None:
    inv = load_inventory(write_inventory())
    bundle = render_cluster(inv)
    pod_file = next(f for f in bundle.files if f.path == "static-pods/cp-02/kube-vip.yaml")
    pod = pod_file.objects[0]
    assert check_builtin([pod], "1.33", pod_file.path, pod_file.sources) == []
    pod["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    pod["spec"]["hostNetwork"] = "yes"
    problems = check_builtin([pod], "1.33", pod_file.path, pod_file.sources)
    assert len(problems) == 1  # kubernetes-validate reports the first error of an object
    assert problems[0].path == ", ".join(pod_file.sources)
    assert "strict" in problems[0].message


def test_typed_models_tell_the_api_versions_apart() -> None:
    v4 = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "clusterName": "c",
        "kubernetesVersion": "v1.33.5",
        "controlPlaneEndpoint": "10.0.0.10:6443",
        "networking": {"serviceSubnet": "10.96.0.0/12", "podSubnet": "10.244.0.0/16"},
        "etcd": {"local": {}},
        "apiServer": {"extraArgs": [{"name": "audit-log-maxage", "value": "30"}]},
        "controllerManager": {},
        "scheduler": {},
    }
    ClusterConfigurationV4.model_validate(v4)
    v4["apiServer"] = {"extraArgs": {"audit-log-maxage": "30"}}  # the v1beta3 shape
    with pytest.raises(ValidationError):
        ClusterConfigurationV4.model_validate(v4)
    v4["apiServer"] = {"timeoutForControlPlane": "4m0s"}  # removed in v1beta4
    with pytest.raises(ValidationError, match="timeoutForControlPlane"):
        ClusterConfigurationV4.model_validate(v4)
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta3",
        "kind": "InitConfiguration",
        "nodeRegistration": {"name": "n", "criSocket": "unix:///run/containerd/containerd.sock"},
        "localAPIEndpoint": {"advertiseAddress": "10.0.0.1"},
        "timeouts": {"discovery": "5m0s"},  # v1beta4 only
    }
    with pytest.raises(ValidationError, match="timeouts"):
        InitConfigurationV3.model_validate(init)
    init.pop("timeouts")
    init["bootstrapTokens"] = [{"token": "not-a-token"}]
    with pytest.raises(ValidationError, match="bootstrap token"):
        InitConfigurationV3.model_validate(init)


def test_a_cgroupfs_kubelet_is_rendered_and_containerd_told_the_same(
    write_inventory: Callable[..., Path], tmp_path: Path
) -> None:
    """The kubelet and containerd's runc follow one field (a cgroup v1 host's pair); nothing to mismatch."""
    inventory = write_inventory(_kubelet({"cgroupDriver": "cgroupfs", "failCgroupV1": False}))
    code, doc = _render_json(inventory, tmp_path / "o")
    assert code == 0, doc
    kubelet = yaml.safe_load_all((tmp_path / "o" / "kubeadm" / "head-01.yaml").read_text())
    config = next(d for d in kubelet if d["kind"] == "KubeletConfiguration")
    assert (config["cgroupDriver"], config["failCgroupV1"]) == ("cgroupfs", False)
    assert group_vars(load_inventory(inventory))["k8s_cluster.yml"]["container_runtime_cgroup_driver"] == "cgroupfs"


def test_a_kubelet_field_older_kubelets_do_not_read_is_refused_naming_it(
    write_inventory: Callable[..., Path], tmp_path: Path
) -> None:
    def edit(data: dict[str, Any]) -> None:
        _kubelet({"failCgroupV1": False})(data)
        data["cluster"]["software_profile"] = "dell-dvd-2024"  # Kubernetes 1.27

    code, doc = _render_json(write_inventory(edit), tmp_path / "o")
    assert code == 2
    assert _paths(doc) == ["kubernetes.kubelet.failCgroupV1"]
    assert "read by the kubelet from Kubernetes 1.31; the cluster runs 1.27" in doc["errors"][0]["message"]
    assert "remove failCgroupV1 from kubernetes.kubelet" in doc["errors"][0]["fix"]


def test_kubelet_sets_only_labels_it_may(write_inventory: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nodes"][4]["labels"] = {
            "rackctl.io/pool": "h100",
            "node-role.kubernetes.io/gpu": "",
            "topology.kubernetes.io/zone": "rack-1",
            "node.kubernetes.io/instance-type": "xe9680",
        }

    inv = load_inventory(write_inventory(edit))
    bundle = render_cluster(inv)
    (join,) = next(f for f in bundle.files if f.path == "kubeadm/gpu-xe9680-01.yaml").objects
    args = {a["name"]: a["value"] for a in join["nodeRegistration"]["kubeletExtraArgs"]}
    assert args["node-labels"] == (
        "node.kubernetes.io/instance-type=xe9680,rackctl.io/model=XE9680,rackctl.io/pool=h100,rackctl.io/role=worker"
    )
    labels = yaml.safe_load(next(f for f in bundle.files if f.path == "nodes/labels.yaml").content())
    assert labels["gpu-xe9680-01"]["labels"]["topology.kubernetes.io/zone"] == "rack-1"  # applied by the stage
