"""The nvidia stage validates the cluster once Helm holds the GPU Operator deployed: ``rackctl up --stages nvidia
--charts DIR --json`` against a real kube-apiserver 1.37.2 behind ``<state-dir>/kubeconfig``.

Real parts: the CLI, the runner and SQLite journal, the real nvidia stage (render, kubernetes-validate), Helm
4.2.3's Go SDK installing a ``helm create`` scaffold named and versioned as the pinned gpu-operator v26.7.0
(tests/cluster/scaffold_charts.py), ``kubectl`` reading the Nodes and applying/watching/deleting the CUDA smoke
Jobs. No kubelet, device plugin, controller-manager or scheduler runs; stand-in threads (tests/kube_objects.py)
write through the API what those would: the Nodes as kubelet registration makes them (Ready, no GPUs yet);
:class:`DevicePluginStandIn` the nodes' ``nvidia.com/gpu`` capacity/allocatable and GPU feature discovery's
product label, a while after the operator's Deployment appears (the stage must poll until then);
:class:`DeploymentReadier` the operator Deployment's rollout; :class:`JobControllerStandIn` each smoke Job's pod
and Complete condition; :class:`DcgmExporterStandIn` (tests/dcgm_serving.py) the GPU Operator's dcgm-exporter
pods, a while after the GPUs are advertised, each leading (through the API server's real pod proxy) to a real
HTTP server on this host serving that node's slice of the recorded DCGM metrics. The nodes exist only in the
journal, so the stage's host side (SSH) does not run; what it would have recorded (``nvidia`` facts,
``nvidia_host``) is written to the journal by the test: for gpu-l40s-01 a node without NVSwitches, for
gpu-xe9680-01 the verdict the host side's own code (``assess_report``) gives the recorded ``lspci -n`` and
``nvidia-smi -q -x`` of an XE9680 (tests/nvidia/fixtures), as read from the GPU Operator's driver container (the
example's driver is the operator's; the node is not reachable over SSH here, so the validation keeps that record
rather than reading it again: tests/ansible/test_nvidia_fabric.py reads it over real SSH).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED, EXIT_NOT_APPLIED
from bootstrap.inventory.loader import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.nvidia.host import assess_report, from_lspci
from bootstrap.nvidia.smi import OPERATOR as OPERATOR_DRIVER
from tests.cluster.apiserver import ApiServer
from tests.cluster.scaffold_charts import scaffold_chart
from tests.dcgm_serving import DcgmExporterStandIn, MetricsServer, ensure_namespace, node_slice
from tests.kube_objects import DeploymentReadier, DevicePluginStandIn, JobControllerStandIn, KubeObjects
from tests.triton_serving import host_address

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")
EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
OPERATOR = ("gpu-operator", "gpu-operator")
#: The example inventory's GPU nodes: GPUs and the product label GPU feature discovery gives them.
GPUS = {"gpu-l40s-01": 4, "gpu-xe9680-01": 8}
PRODUCTS = {"gpu-l40s-01": "NVIDIA-L40S", "gpu-xe9680-01": "NVIDIA-H100-80GB-HBM3"}
NODES = ("head-01", "cp-02", "cp-03", *GPUS)
JOBS = "/apis/batch/v1/namespaces/rackctl-validate/jobs"
FIXTURES = Path(__file__).resolve().parents[1] / "nvidia" / "fixtures"
#: What the host side records for a node without NVSwitches (bootstrap.nvidia.host.HostAssessment.as_dict).
NO_NVSWITCH = {
    "ok": True,
    "gpus_found": 4,
    "gpus_expected": 4,
    "needs_fabric_manager": False,
    "nvswitch_proc_devices": [],
    "nvswitch_pci_slots": [],
    "notes": ["no NVSwitch detected: Fabric Manager not needed"],
    "problems": [],
}


def xe9680_verdict() -> dict[str, Any]:
    """The host side's verdict on an XE9680 whose bus and nvidia-smi read as the recorded fixtures."""
    functions = from_lspci((FIXTURES / "lspci-n-xe9680.txt").read_text())
    report = {
        "pci_sysfs": [
            f"/sys/bus/pci/devices/{f.slot}/{attr}:0x{value}"
            for f in functions
            for attr, value in (("vendor", f.vendor), ("device", f.device), ("class", f.cls + "00"))
        ],
        "nvidia_smi_xml": (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text(),
        # read from the GPU Operator's driver container (an earlier run's host side, the operator running): the
        # node is not reachable over SSH here, so the validation keeps that record (bootstrap/stages/nvidia/fabric.py)
        "nvidia_smi": {"source": OPERATOR_DRIVER},
    }
    inv = load_inventory(EXAMPLE)
    verdict = assess_report(inv, inv.node("gpu-xe9680-01"), report).as_dict()
    assert verdict["ok"] and verdict["needs_fabric_manager"], verdict
    return verdict


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scaffold_chart(helm, tmp_path_factory.mktemp("validate-charts"), "gpu-operator", "v26.7.0")


@pytest.fixture
def state_dir(kube_apiserver: ApiServer, kube: KubeObjects, tmp_path: Path) -> Iterator[Path]:
    """A state directory whose kubeconfig reaches the real API server; the inventory's five nodes registered and
    Ready with no GPUs advertised yet; the host side's NVSwitch detection of gpu-l40s-01 in the journal. The
    release, and the smoke Jobs' pods (no garbage collector runs), are removed afterwards."""
    state = tmp_path / "state"
    kube_apiserver.write_kubeconfig(state / "kubeconfig")
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "admin" / "kubeconfig")  # the test may remove the first
    for name in NODES:
        kube.node(name)
    kube.namespaces.add("rackctl-validate")
    ensure_namespace(kube, OPERATOR[1])  # the exporter pods the test writes there are removed afterwards
    with Journal(state) as journal:
        journal.record_facts("gpu-l40s-01", "nvidia", {"nvidia_host": NO_NVSWITCH})
        journal.record_facts("gpu-xe9680-01", "nvidia", {"nvidia_host": xe9680_verdict()})
    yield state
    with helm.Config(kubeconfig_path=str(kubeconfig), namespace=OPERATOR[1]) as cfg:
        cfg.uninstall(OPERATOR[0], ignore_not_found=True)


def _up(state_dir: Path, charts: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    args = ["up", "-i", str(EXAMPLE), "--state-dir", str(state_dir), "--stages", "nvidia", "--charts", str(charts)]
    result = CliRunner().invoke(cli, [*args, "--json", *extra], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def _nvidia(doc: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in doc["stages"] if s["name"] == "nvidia")


@pytest.fixture
def exporters() -> Iterator[dict[str, MetricsServer]]:
    """Each GPU node's DCGM exporter: a real HTTP server on a non-loopback address of this host (the pod proxy
    refuses a loopback pod IP) serving that node's slice of the recorded metrics."""
    address = host_address()
    if address is None:
        pytest.skip("no global IPv4 address on this host (the pod proxy refuses a loopback pod IP)")
    with ExitStack() as stack:
        yield {node: stack.enter_context(MetricsServer(address, node_slice(node))) for node in GPUS}


def _stand_ins(
    kube: KubeObjects, gpus: dict[str, int], delay_s: float
) -> tuple[DeploymentReadier, DevicePluginStandIn, JobControllerStandIn]:
    labels = {
        n: {"kubernetes.io/hostname": n, **({"nvidia.com/gpu.product": PRODUCTS[n]} if n in GPUS else {})}
        for n in NODES
    }
    return (
        DeploymentReadier(kube, OPERATOR[1], [OPERATOR[0]]),
        DevicePluginStandIn(kube, gpus, PRODUCTS, delay_s=delay_s),
        JobControllerStandIn(kube, "rackctl-validate", lambda job: "complete", labels),
    )


def test_up_polls_until_the_gpus_are_advertised_then_smoke_tests_each_product(
    state_dir: Path, charts: Path, kube: KubeObjects, exporters: dict[str, MetricsServer]
) -> None:
    readier, plugin, jobs = _stand_ins(kube, GPUS, delay_s=3.0)
    dcgm = DcgmExporterStandIn(kube, OPERATOR[1], exporters, delay_s=2.0)
    started = time.monotonic()
    with readier, plugin, jobs, dcgm:
        code, doc = _up(state_dir, charts, "--validate-timeout", "120", "--helm-timeout", "60")
    assert not jobs.errors
    assert plugin.written is not None and plugin.written - started >= 3.0
    assert set(dcgm.written) == set(GPUS) and min(dcgm.written.values()) - plugin.written >= 2.0
    assert code == EXIT_NOT_APPLIED, doc  # the driver / Fabric Manager steps are still not applied
    nvidia = _nvidia(doc)
    assert nvidia["status"] == "rendered" and nvidia["applied"] is False
    assert "gpu-operator installed (revision 1)" in nvidia["message"]
    assert "validated: 13 checks ok" in nvidia["message"], nvidia["message"]
    assert "rendered + validated, not applied: rackctl cannot apply it yet" in nvidia["message"]

    report = nvidia["data"]["validation"]
    assert (report["status"], report["ok"], report["passed"], report["failed"]) == ("ok", True, 13, 0)
    assert report["polls"] > 1 and report["waited_s"] >= 4.0  # it waited for the device plugin, then dcgm-exporter
    checks = {(c["check"], c["node"]): c for c in report["checks"]}
    assert {n for kind, n in checks if kind == "node-ready"} == set(NODES)
    assert checks["gpu-allocatable", "gpu-xe9680-01"]["message"] == "nvidia.com/gpu: 8 allocatable, inventory expects 8"
    # the host side's recorded detection and nvidia-smi fabric states decide the fabric-manager check
    assert checks["fabric-manager", "gpu-l40s-01"]["message"] == "no NVSwitch: Fabric Manager not needed"
    assert checks["fabric-manager", "gpu-xe9680-01"]["message"] == (
        "every GPU registered with Fabric Manager (nvidia-smi in the GPU Operator's driver container, as the host "
        "side read it)"
    )
    assert not [s for s in report["skipped"] if s["check"] in ("fabric-manager", "dcgm-metrics")]
    # each GPU node's own exporter pod, read through the API server's pod proxy
    for node, count in GPUS.items():
        pod = f"{OPERATOR[1]}/nvidia-dcgm-exporter-{node}"
        message = checks["dcgm-metrics", node]["message"]
        assert message.startswith(f"{count} GPUs report DCGM metrics (pod {pod} port {exporters[node].port} "), message
        assert message.endswith(
            f"through the API server's pod proxy, {len(node_slice(node))} bytes), inventory has {count}"
        )
        assert report["dcgm"]["nodes"][node]["pod"] == pod and exporters[node].gets >= 1
    smoke = {node: c for (kind, node), c in checks.items() if kind == "cuda-smoke"}
    assert set(smoke) == set(PRODUCTS.values())
    assert all(c["ok"] and "Complete on gpu-" in c["message"] for c in smoke.values())
    assert {"check": "nccl-allreduce", "why": "not asked for (--nccl)"} in report["skipped"]
    assert len(jobs.seen) == 2 and kube.call("GET", JOBS)["items"] == []  # the smoke Jobs deleted afterwards

    with Journal(state_dir, readonly=True) as journal:
        fact = journal.latest_facts("gpu-l40s-01")["validate"]
        head = journal.latest_facts("head-01")["validate"]
    assert (fact["status"], fact["passed"], fact["run"], fact["stage"]) == ("ok", 13, 1, "nvidia")
    assert {(c["check"], c["node"]) for c in fact["checks"]} == {
        ("node-ready", "gpu-l40s-01"),
        ("gpu-allocatable", "gpu-l40s-01"),
        ("fabric-manager", "gpu-l40s-01"),
        ("dcgm-metrics", "gpu-l40s-01"),
        ("cuda-smoke", "NVIDIA-L40S"),
    }
    assert [c["check"] for c in head["checks"]] == ["node-ready"]


def test_a_node_with_fewer_gpus_fails_the_stage_naming_it_after_the_timeout(
    state_dir: Path, charts: Path, kube: KubeObjects
) -> None:
    readier, plugin, jobs = _stand_ins(kube, {**GPUS, "gpu-l40s-01": 2}, delay_s=0.5)
    started = time.monotonic()
    with readier, plugin, jobs:
        code, doc = _up(state_dir, charts, "--validate-timeout", "4", "--helm-timeout", "60")
    assert time.monotonic() - started < 60
    assert code == EXIT_FAILED, doc
    nvidia = _nvidia(doc)
    assert nvidia["status"] == "failed"
    why = "gpu-allocatable gpu-l40s-01: nvidia.com/gpu: 2 allocatable, inventory expects 4"
    assert nvidia["nodes"]["gpu-l40s-01"]["message"] == f"validation failed: {why}"
    assert f"validation failed (1 of 9 checks): {why}" in nvidia["message"]
    assert nvidia["nodes"]["gpu-xe9680-01"]["status"] == "rendered"  # the checks about it passed
    report = nvidia["data"]["validation"]
    assert report["status"] == "failed" and report["waited_s"] >= 4.0
    assert {
        "check": "cuda-smoke, nccl-allreduce",
        "why": "not run: the read-only checks did not pass within 4 s",
    } in report["skipped"]
    assert jobs.seen == {}  # no workload Job while the GPUs are not all there
    with Journal(state_dir, readonly=True) as journal:
        steps = [s for s in journal.steps(node="gpu-l40s-01") if s.stage == "nvidia"]
        fact = journal.latest_facts("gpu-l40s-01")["validate"]
    assert steps[-1].status == "failed" and why in steps[-1].detail["error"]
    assert fact["status"] == "failed"


def test_a_gpu_node_without_a_running_exporter_fails_the_stage_naming_its_pod(
    state_dir: Path, charts: Path, kube: KubeObjects, exporters: dict[str, MetricsServer]
) -> None:
    """gpu-xe9680-01's exporter pod never comes (its DaemonSet pod not scheduled): once the GPUs are advertised
    the stage polls the exporters until its timeout, then fails that node with why; gpu-l40s-01 is read."""
    readier, plugin, jobs = _stand_ins(kube, GPUS, delay_s=0.5)
    dcgm = DcgmExporterStandIn(kube, OPERATOR[1], {"gpu-l40s-01": exporters["gpu-l40s-01"]}, delay_s=0.5)
    with readier, plugin, jobs, dcgm:
        code, doc = _up(state_dir, charts, "--validate-timeout", "15", "--helm-timeout", "60")
    assert code == EXIT_FAILED, doc
    nvidia = _nvidia(doc)
    why = (
        "dcgm-metrics gpu-xe9680-01: DCGM exporter metrics not read: no DCGM exporter pod on gpu-xe9680-01 "
        f"(pods app=nvidia-dcgm-exporter in namespace {OPERATOR[1]})"
    )
    assert nvidia["nodes"]["gpu-xe9680-01"]["message"] == f"validation failed: {why}", nvidia["nodes"]
    assert f"validation failed (1 of 11 checks): {why}" in nvidia["message"]
    assert nvidia["nodes"]["gpu-l40s-01"]["status"] == "rendered"  # its exporter was read: 4 GPUs report
    report = nvidia["data"]["validation"]
    assert report["dcgm"]["nodes"]["gpu-l40s-01"]["ok"] is True and exporters["gpu-l40s-01"].gets >= 1
    assert report["waited_s"] >= 15.0 and jobs.seen == {}  # no workload Job while a check fails


def test_skip_validate_and_no_chart_say_validators_not_run(
    state_dir: Path, charts: Path, kube: KubeObjects, tmp_path: Path
) -> None:
    readier, plugin, jobs = _stand_ins(kube, GPUS, delay_s=0.0)
    with readier, plugin, jobs:
        code, doc = _up(state_dir, charts, "--skip-validate", "--helm-timeout", "60")
    assert code == EXIT_NOT_APPLIED, doc
    nvidia = _nvidia(doc)
    assert "gpu-operator installed (revision 1)" in nvidia["message"]
    assert "validators not run: --skip-validate" in nvidia["message"] and "validated:" not in nvidia["message"]
    assert nvidia["data"]["validation"] == {"status": "not run", "why": "--skip-validate"}
    assert jobs.seen == {}
    with Journal(state_dir, readonly=True) as journal:
        assert "validate" not in journal.latest_facts("gpu-l40s-01")

    empty = tmp_path / "no-charts"
    empty.mkdir()
    code, doc = _up(state_dir, empty)
    assert code == EXIT_NOT_APPLIED, doc
    why = f"the GPU Operator release is not installed: chart gpu-operator v26.7.0 not in --charts {empty}"
    assert f"validators not run: {why}" in _nvidia(doc)["message"]
    assert _nvidia(doc)["data"]["validation"] == {"status": "not run", "why": why}

    (state_dir / "kubeconfig").unlink()
    code, doc = _up(state_dir, charts)
    assert code == EXIT_NOT_APPLIED, doc
    assert "validators not run: no cluster (not deployed: the kubernetes stage has not run" in _nvidia(doc)["message"]


def test_plan_names_the_validation_and_its_timeout(state_dir: Path, charts: Path, tmp_path: Path) -> None:
    def cluster_wide(*args: str) -> list[dict[str, Any]]:
        base = ["-i", str(EXAMPLE), "--state-dir", str(state_dir), "--stages", "nvidia", "--json"]
        result = CliRunner().invoke(cli, [*args, *base], catch_exceptions=False)
        return [a for s in json.loads(result.stdout)["stages"] for a in s["actions"] if a["node"] is None]

    (action,) = [a for a in cluster_wide("plan", "--charts", str(charts)) if a["action"].startswith("validat")]
    assert action["action"].startswith(f"validate the cluster of {state_dir / 'kubeconfig'} once the GPU Operator")
    assert (
        "until they pass, within 900 s; then a CUDA smoke Job per GPU product (NVIDIA-H100-80GB-HBM3, "
        in (action["action"])
    )
    assert "no NCCL all-reduce (--validate-nccl)" in action["action"]
    assert (action["applies"], action["skip"]) == (True, None)

    args = ("up", "--dry-run", "--charts", str(charts), "--validate-timeout", "42", "--validate-nccl")
    (action,) = [a for a in cluster_wide(*args, "--skip-validate") if a["action"].startswith("validat")]
    assert "within 42 s" in action["action"] and "an NCCL all-reduce per SXM node" in action["action"]
    assert action["skip"] == "--skip-validate"

    empty = tmp_path / "no-charts"
    empty.mkdir()
    (action,) = [a for a in cluster_wide("plan", "--charts", str(empty)) if a["action"].startswith("validat")]
    assert action["action"] == (
        f"validators not run: the GPU Operator is not installed: chart gpu-operator v26.7.0 not in --charts {empty}"
    )
    assert action["applies"] is False
