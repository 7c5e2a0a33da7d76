"""NVSwitch detection, driver/Fabric Manager version checks and the cluster validators, against recorded
outputs in their documented formats (see fixtures/README.md). No GPU here: these are the real parsers on
recorded text, not doubles of a GPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.inventory.loader import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.nvidia.detect import NvSwitchReport, detect, nvswitch_pci_slots
from bootstrap.nvidia.fabric_manager import check_versions, fabric_manager_packages, upstream_version
from bootstrap.nvidia.smi import parse
from bootstrap.validation.checks import CHECKS, GpuNodeFacts, expected_gpu_resources, validate_cluster

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return load_inventory(EXAMPLE)


def _nodes() -> dict:
    return json.loads((FIXTURES / "kubectl-get-nodes-dvd.json").read_text())


def _smi() -> str:
    return (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()


def _facts(smi: str | None = None) -> dict[str, GpuNodeFacts]:
    return {
        "gpu-xe9680-01": GpuNodeFacts(
            smi=parse(smi or _smi()),
            nvswitch=NvSwitchReport(pci_slots=nvswitch_pci_slots((FIXTURES / "lspci-n-xe9680.txt").read_text())),
        ),
        "gpu-l40s-01": GpuNodeFacts(
            nvswitch=NvSwitchReport(pci_slots=nvswitch_pci_slots((FIXTURES / "lspci-n-r760xa-l40s.txt").read_text()))
        ),
    }


def test_nvswitches_found_by_pci_id_on_the_xe9680_only() -> None:
    assert nvswitch_pci_slots((FIXTURES / "lspci-n-xe9680.txt").read_text()) == [
        "0000:07:00.0",
        "0000:08:00.0",
        "0000:09:00.0",
        "0000:0a:00.0",
    ]
    assert nvswitch_pci_slots((FIXTURES / "lspci-n-r760xa-l40s.txt").read_text()) == []


def test_proc_directory_decides_when_present(tmp_path: Path) -> None:
    proc = tmp_path / "devices"
    proc.mkdir()
    assert not detect("", proc).needs_fabric_manager  # driver loaded, no NVSwitch: empty directory
    for n in range(4):
        (proc / str(n)).mkdir()
    report = detect("", proc)
    assert report.needs_fabric_manager
    assert report.proc_devices == ["0", "1", "2", "3"]
    assert not detect("", tmp_path / "absent").needs_fabric_manager


def test_this_machine_has_no_nvswitch() -> None:
    """Detection on a machine without NVIDIA hardware (this one, the lab VMs) says: no Fabric Manager."""
    assert not detect("0000:00:00.0 0600: 8086:1237 (rev 02)\n").needs_fabric_manager


def test_smi_report_parsed() -> None:
    report = parse(_smi())
    assert report.driver_version == "580.95.05"
    assert len(report.gpus) == 8
    assert {g.product for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g.fabric_ready for g in report.gpus)


def test_smi_garbage_names_the_source() -> None:
    with pytest.raises(InvalidInput) as err:
        parse("<html></html>", "gpu-02.xml")
    assert err.value.problems[0].path == "gpu-02.xml"


def test_fabric_manager_must_match_the_driver_exactly() -> None:
    check_versions("580.95.05", "580.95.05-1")
    check_versions("535.161.08", "1:535.161.08-0ubuntu1")
    with pytest.raises(InvalidInput) as err:
        check_versions("580.95.05", "580.82.07-1", field="nvidia.profiles.XE9680.fabric_manager_version")
    problem = err.value.problems[0]
    assert problem.path == "nvidia.profiles.XE9680.fabric_manager_version"
    assert "580.95.05" in problem.message and "580.82.07" in problem.message
    assert "nothing was installed" in err.value.message
    assert upstream_version("garbage") is None
    assert fabric_manager_packages("580.95.05") == {
        "nvidia-fabricmanager-580": "580.95.05-*",
        "cuda-drivers-fabricmanager-580": "580.95.05-*",
    }


def test_healthy_cluster_passes(inventory: Inventory) -> None:
    report = validate_cluster(inventory, _nodes(), _facts(), (FIXTURES / "dcgm-metrics.txt").read_text())
    data = report.as_dict()
    assert data["ok"], data
    kinds = {(c["check"], c["node"]) for c in data["checks"]}
    assert ("fabric-manager", "gpu-xe9680-01") in kinds
    assert ("gpu-allocatable", "gpu-l40s-01") in kinds
    assert ("dcgm-metrics", "gpu-xe9680-01") in kinds
    assert sum(c["check"] == "node-ready" for c in data["checks"]) == 5


def test_the_registered_checks_run_in_order_with_one_nodes_gpu_results_together(inventory: Inventory) -> None:
    assert list(CHECKS) == ["node-ready", "gpu-allocatable", "fabric-manager", "dcgm-metrics"]
    assert CHECKS["dcgm-metrics"].reads == ("dcgm-metrics", "dcgm-sources")
    data = validate_cluster(inventory, _nodes(), _facts(), (FIXTURES / "dcgm-metrics.txt").read_text()).as_dict()
    gpu = ["gpu-l40s-01", "gpu-xe9680-01"]
    assert [(c["check"], c["node"]) for c in data["checks"]] == [
        *(("node-ready", n) for n in ["head-01", "cp-02", "cp-03", *gpu]),
        *((check, n) for n in gpu for check in ("gpu-allocatable", "fabric-manager")),
        *(("dcgm-metrics", n) for n in gpu),
    ]
    assert validate_cluster(inventory, _nodes()).skipped == [
        {"check": "fabric-manager", "node": "gpu-l40s-01", "why": "no NVSwitch detection from this node"},
        {"check": "fabric-manager", "node": "gpu-xe9680-01", "why": "no NVSwitch detection from this node"},
        {"check": "dcgm-metrics", "why": "no DCGM exporter metrics given"},
    ]


def test_not_ready_node_and_missing_gpus_fail(inventory: Inventory) -> None:
    nodes = _nodes()
    broken = copy.deepcopy(nodes)
    for item in broken["items"]:
        if item["metadata"]["name"] == "cp-02":
            item["status"]["conditions"][-1]["status"] = "False"
        if item["metadata"]["name"] == "gpu-xe9680-01":
            item["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    broken["items"] = [i for i in broken["items"] if i["metadata"]["name"] != "cp-03"]
    data = validate_cluster(inventory, broken, _facts()).as_dict()
    failed = {(c["check"], c["node"]) for c in data["checks"] if not c["ok"]}
    assert failed == {("node-ready", "cp-02"), ("node-ready", "cp-03"), ("gpu-allocatable", "gpu-xe9680-01")}
    gpu = next(c for c in data["checks"] if c["check"] == "gpu-allocatable" and not c["ok"])
    assert (gpu["expected"], gpu["actual"]) == (8, 7)
    assert {s["check"] for s in data["skipped"]} == {"dcgm-metrics"}


def test_fabric_manager_down_on_an_nvswitch_node_fails(inventory: Inventory) -> None:
    smi = _smi().replace("<state>Completed</state>", "<state>In Progress</state>", 3)
    data = validate_cluster(inventory, _nodes(), _facts(smi)).as_dict()
    fm = next(c for c in data["checks"] if c["check"] == "fabric-manager" and c["node"] == "gpu-xe9680-01")
    assert not fm["ok"]
    assert "In Progress" in fm["message"] and "00000000:18:00.0" in fm["message"]
    l40s = next(c for c in data["checks"] if c["check"] == "fabric-manager" and c["node"] == "gpu-l40s-01")
    assert l40s["ok"] and "no NVSwitch" in l40s["message"]


def test_dcgm_missing_gpus_fail(inventory: Inventory) -> None:
    metrics = "\n".join(
        line for line in (FIXTURES / "dcgm-metrics.txt").read_text().splitlines() if 'gpu="7"' not in line
    )
    data = validate_cluster(inventory, _nodes(), _facts(), metrics).as_dict()
    dcgm = next(c for c in data["checks"] if c["check"] == "dcgm-metrics" and c["node"] == "gpu-xe9680-01")
    assert (dcgm["ok"], dcgm["expected"], dcgm["actual"]) == (False, 8, 7)


def test_mig_profiles_give_the_expected_resources(inventory: Inventory) -> None:
    from bootstrap.inventory.cluster import GpuProfile

    node = inventory.node("gpu-xe9680-01")
    assert node is not None
    mixed = inventory.model_copy(deep=True)
    mixed.nvidia.profiles["XE9680"] = GpuProfile(mig_strategy="mixed", mig_config="all-balanced")
    assert expected_gpu_resources(mixed, node) == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    single = inventory.model_copy(deep=True)
    single.nvidia.profiles["XE9680"] = GpuProfile(mig_strategy="single", mig_config="all-1g.10gb")
    assert expected_gpu_resources(single, node) == {"nvidia.com/gpu": 56}
    nodes = _nodes()
    data = validate_cluster(mixed, nodes, _facts()).as_dict()
    failed = [c for c in data["checks"] if not c["ok"]]
    assert {c["message"].split(":")[0] for c in failed} == {
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    }


def _validate_cli(*args: str) -> tuple[int, dict]:
    from click.testing import CliRunner

    from bootstrap.cli import cli

    result = CliRunner().invoke(cli, ["validate-cluster", "-i", str(EXAMPLE), *args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_validate_cluster_command(tmp_path: Path) -> None:
    recorded = [
        "--nvidia-smi",
        f"gpu-xe9680-01={FIXTURES / 'nvidia-smi-h100-sxm.xml'}",
        "--lspci",
        f"gpu-xe9680-01={FIXTURES / 'lspci-n-xe9680.txt'}",
        "--lspci",
        f"gpu-l40s-01={FIXTURES / 'lspci-n-r760xa-l40s.txt'}",
        "--dcgm-metrics",
        str(FIXTURES / "dcgm-metrics.txt"),
    ]
    code, doc = _validate_cli("--nodes-json", str(FIXTURES / "kubectl-get-nodes-dvd.json"), *recorded)
    no_live = [{"check": "cuda-smoke, nccl-allreduce", "why": "no --kubeconfig: they need a live cluster"}]
    assert (code, doc["ok"], doc["failed"], doc["skipped"]) == (0, True, 0, no_live)
    nodes = _nodes()
    nodes["items"][4]["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    broken = tmp_path / "nodes.json"
    broken.write_text(json.dumps(nodes))
    code, doc = _validate_cli("--nodes-json", str(broken), *recorded)
    assert (code, doc["ok"], doc["failed"]) == (1, False, 1)


def test_validate_cluster_bad_arguments() -> None:
    code, doc = _validate_cli()
    assert code == 2 and doc["errors"][0]["path"] == "--kubeconfig/--nodes-json"
    code, doc = _validate_cli("--nodes-json", str(FIXTURES / "kubectl-get-nodes-dvd.json"), "--lspci", "gpu-01")
    assert code == 2 and doc["errors"][0]["path"] == "--lspci"
