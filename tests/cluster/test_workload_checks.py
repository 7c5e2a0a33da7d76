"""``rackctl validate-cluster --kubeconfig``'s workload checks (CUDA smoke per GPU product, NCCL per SXM node)
against a real kube-apiserver 1.37.2 and the ``kubectl`` on PATH.

No kubelet, scheduler or Job controller runs here. What they would write, a test thread writes through the
API (``JobControllerStandIn``, tests/kube_objects.py): the Job's pod, bound to a node its ``nodeSelector``
matches, and the Job's Complete or Failed condition through the status subresource; or the scheduler's
PodScheduled=False on a pod that cannot be placed. The Nodes' Ready condition, allocatable GPUs and the
``nvidia.com/gpu.product`` label (GPU feature discovery's) are written by the test as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.inventory.loader import load_inventory
from bootstrap.kube import Kubectl, KubeError
from bootstrap.validation import workloads as workload_checks
from tests.kube_objects import JobControllerStandIn, KubeObjects

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
NCCL_OUTPUT = Path(__file__).parents[1] / "nvidia" / "fixtures" / "nccl-tests-all-reduce-xe9680.txt"
L40S, H100 = "NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3"
PRODUCTS = {"gpu-l40s-01": L40S, "gpu-xe9680-01": H100}
GPUS = {"gpu-l40s-01": 4, "gpu-xe9680-01": 8}
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"


@pytest.fixture
def cluster(kube: KubeObjects) -> dict[str, dict[str, str]]:
    """The example inventory's five nodes, Ready; GPU nodes with their GPUs and product label (as the kubelet,
    the device plugin and GPU feature discovery would report them). Node name -> labels."""
    labels = {}
    for name in ("head-01", "cp-02", "cp-03", *GPUS):
        extra = {"nvidia.com/gpu.product": PRODUCTS[name]} if name in PRODUCTS else {}
        kube.node(name, gpus=GPUS.get(name, 0), labels=extra)
        labels[name] = {"kubernetes.io/hostname": name, **extra}
    return labels


@pytest.fixture
def namespace(kube: KubeObjects) -> Iterator[str]:
    """A namespace name of this test's own (rackctl creates it); its pods and Jobs removed afterwards."""
    name = kube.namespace_name("rv")
    yield name
    for job in kube.call("GET", JOBS.format(ns=name))["items"]:
        kube.server.request("DELETE", f"{JOBS.format(ns=name)}/{job['metadata']['name']}")


def _validate(kubeconfig: Path, namespace: str, *args: str) -> tuple[int, dict[str, Any]]:
    base = ["validate-cluster", "-i", str(EXAMPLE), "--kubeconfig", str(kubeconfig), "--namespace", namespace]
    base.append("--skip-dcgm")  # no DCGM exporter runs here: tests/cluster/test_dcgm_live.py reads them live
    result = CliRunner().invoke(cli, [*base, *args, "--json"])
    return result.exit_code, json.loads(result.output)


def _failed(doc: dict[str, Any]) -> list[str]:
    """The failed checks, each with its message (for assertion messages: pytest cuts a long dict)."""
    return [f"{c['check']} {c['node']}: {c['message']}" for c in doc["checks"] if not c["ok"]]


def _by(kind: str, doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["node"]: c for c in doc["checks"] if c["check"] == kind}


def _decide(by_product: dict[str, str | None]) -> Callable[[dict[str, Any]], str | None]:
    """What becomes of a Job, by the GPU product (or node) its pods are pinned to."""

    def decide(job: dict[str, Any]) -> str | None:
        selector = job["spec"]["template"]["spec"]["nodeSelector"]
        return by_product.get(next(iter(selector.values())))

    return decide


def _jobs(kube: KubeObjects, namespace: str) -> list[str]:
    return [j["metadata"]["name"] for j in kube.call("GET", JOBS.format(ns=namespace))["items"]]


def test_smoke_job_per_product_complete_then_deleted(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    with JobControllerStandIn(kube, namespace, _decide({L40S: "complete", H100: "complete"}), cluster) as ctl:
        code, doc = _validate(kubeconfig, namespace, "--timeout", "30")
    assert not ctl.errors, ctl.errors
    assert (code, doc["ok"], doc["failed"]) == (0, True, 0), _failed(doc)
    smoke = _by("cuda-smoke", doc)
    assert set(smoke) == {L40S, H100}
    assert all(c["ok"] and "Complete on gpu-" in c["message"] for c in smoke.values()), smoke
    # one Job per product: pinned by the product label, one GPU, the pinned CUDA image, applied by rackctl
    assert len(ctl.seen) == 2
    for job in ctl.seen.values():
        pod = job["spec"]["template"]["spec"]
        product = pod["nodeSelector"]["nvidia.com/gpu.product"]
        assert job["metadata"]["name"].startswith(f"rackctl-cuda-smoke-{product.lower()}-")
        (container,) = pod["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert (container["image"], container["command"]) == (workload_checks.CUDA_IMAGE, ["nvidia-smi", "-L"])
        assert (job["spec"]["backoffLimit"], pod["restartPolicy"]) == (0, "Never")
        assert {(m["manager"], m["operation"]) for m in job["metadata"]["managedFields"]} >= {("rackctl", "Apply")}
        assert job["metadata"]["name"] in smoke[product]["message"]
    # the Jobs are gone afterwards, and the report says so
    assert _jobs(kube, namespace) == []
    assert doc["workloads"]["namespace"] == namespace
    assert {j["name"] for j in doc["workloads"]["jobs"]} == set(ctl.seen)
    assert all(j["after"].startswith("deleted (propagation Background") for j in doc["workloads"]["jobs"])


def test_failed_pending_and_unstarted_jobs_say_why(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    # the pending Job takes the whole timeout; the failed one must be seen Failed within it, under load too
    with JobControllerStandIn(kube, namespace, _decide({L40S: "fail", H100: "pending"}), cluster) as ctl:
        code, doc = _validate(kubeconfig, namespace, "--timeout", "15")
    assert not ctl.errors, ctl.errors
    assert (code, doc["ok"]) == (1, False)
    smoke = _by("cuda-smoke", doc)
    assert not smoke[L40S]["ok"], _failed(doc)
    assert "Failed (BackoffLimitExceeded: Job has reached the specified backoff limit)" in smoke[L40S]["message"]
    assert "Error, exit code 1: set by the test: exit 1" in smoke[L40S]["message"]
    assert not smoke[H100]["ok"]
    assert "not Complete within 15 s" in smoke[H100]["message"]
    assert (
        "not scheduled: Unschedulable: 0/5 nodes are available: 1 Insufficient nvidia.com/gpu" in smoke[H100]["message"]
    )
    assert _jobs(kube, namespace) == []  # deleted on failure too

    # no Job controller at all: the timeout path names what is missing
    code, doc = _validate(kubeconfig, namespace, "--timeout", "2")
    assert code == 1
    for check in _by("cuda-smoke", doc).values():
        assert not check["ok"]
        assert (
            "no pod created, no Job controller has started the Job (is kube-controller-manager running?)"
            in (check["message"])
        )
    assert _jobs(kube, namespace) == []


def test_a_product_no_node_carries_is_not_run(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    kube.call(
        "PATCH",
        "/api/v1/nodes/gpu-l40s-01",
        {"metadata": {"labels": {"nvidia.com/gpu.product": None}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    with JobControllerStandIn(kube, namespace, _decide({H100: "complete"}), cluster) as ctl:
        code, doc = _validate(kubeconfig, namespace, "--timeout", "30")
    assert code == 1 and not ctl.errors
    smoke = _by("cuda-smoke", doc)
    assert smoke[H100]["ok"]
    assert smoke[L40S]["message"] == (
        "not run: no node in the cluster has nvidia.com/gpu.product=NVIDIA-L40S "
        "(GPU feature discovery sets it: is the GPU Operator running there?)"
    )
    assert len(ctl.seen) == 1  # no Job for the product no node carries


def test_keep_leaves_the_jobs(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    with JobControllerStandIn(kube, namespace, _decide({L40S: "complete", H100: "complete"}), cluster) as ctl:
        code, doc = _validate(kubeconfig, namespace, "--keep", "--timeout", "30")
    assert not ctl.errors, ctl.errors
    assert code == 0, _failed(doc)
    assert sorted(_jobs(kube, namespace)) == sorted(ctl.seen)
    assert all(j["after"] == "kept (--keep)" for j in doc["workloads"]["jobs"])


def test_plan_creates_nothing(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    code, doc = _validate(kubeconfig, namespace, "--plan", "--nccl")
    assert (code, doc["ok"], doc["plan"], doc["applied"]) == (0, True, True, False)
    planned = {(j["check"], j["subject"]) for j in doc["jobs"]}
    assert planned == {("cuda-smoke", L40S), ("cuda-smoke", H100), ("nccl-allreduce", "gpu-xe9680-01")}
    assert all(j["job"]["metadata"]["namespace"] == namespace for j in doc["jobs"])
    assert _jobs(kube, namespace) == []
    assert kube.server.request("GET", f"/api/v1/namespaces/{namespace}").status_code == 404


def test_skip_workloads_runs_only_the_read_only_checks(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    code, doc = _validate(kubeconfig, namespace, "--skip-workloads")
    assert (code, doc["ok"]) == (0, True)
    assert {c["check"] for c in doc["checks"]} == {"node-ready", "gpu-allocatable"}
    assert {"check": "cuda-smoke, nccl-allreduce", "why": "--skip-workloads"} in doc["skipped"]
    assert "workloads" not in doc
    assert kube.server.request("GET", f"/api/v1/namespaces/{namespace}").status_code == 404


def test_nccl_job_on_the_sxm_node_fails_when_its_output_cannot_be_read(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    decide = _decide({L40S: "complete", H100: "complete", "gpu-xe9680-01": "complete"})
    with JobControllerStandIn(kube, namespace, decide, cluster) as ctl:
        code, doc = _validate(kubeconfig, namespace, "--nccl", "--timeout", "30")
    assert not ctl.errors
    nccl = [j for j in ctl.seen.values() if j["metadata"]["labels"]["rackctl.io/check"] == "nccl-allreduce"]
    (job,) = nccl  # the XE9680 only: the L40S node has no SXM GPUs
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-xe9680-01"}
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["image"] == workload_checks.NCCL_IMAGE
    assert container["command"][0] == "all_reduce_perf_mpi" and container["command"][-2:] == ["-g", "8"]
    # no kubelet serves the pod's log here: the check fails and says the bandwidth is unchecked
    check = _by("nccl-allreduce", doc)["gpu-xe9680-01"]
    assert (code, check["ok"]) == (1, False)
    assert (
        "Complete on gpu-xe9680-01; its output could not be read, so the bus bandwidth is unchecked"
        in (check["message"])
    )
    assert "kubectl logs job/" in check["message"]
    assert _jobs(kube, namespace) == []


class LogsFromFile(Kubectl):
    """Stands in for the kubelet's log endpoint only (no kubelet runs here): ``logs`` answers with a recorded
    nccl-tests output; everything else goes to the real API server through kubectl."""

    def __init__(self, kubeconfig: Path, text: str) -> None:
        super().__init__(kubeconfig)
        self.text = text
        self.asked: list[str] = []

    def logs(self, ref: str, namespace: str, *, tail: int = 400, wait_s: float = 10.0) -> str:
        self.asked.append(ref)
        return self.text


@pytest.mark.parametrize("case", [(300.0, True), (450.0, False)], ids=["above", "below"])
def test_nccl_output_judged_against_the_threshold(
    kube: KubeObjects,
    kubeconfig: Path,
    cluster: dict[str, dict[str, str]],
    namespace: str,
    case: tuple[float, bool],
) -> None:
    threshold, ok = case
    inv = load_inventory(EXAMPLE)
    api = LogsFromFile(kubeconfig, NCCL_OUTPUT.read_text())
    settings = workload_checks.Settings(namespace=namespace, timeout_s=30, nccl=True, nccl_min_busbw=threshold)
    decide = _decide({L40S: "complete", H100: "complete", "gpu-xe9680-01": "complete"})
    with JobControllerStandIn(kube, namespace, decide, cluster):
        result = workload_checks.run(inv, api, {"items": api.objects("nodes")}, settings)
    check = next(c for c in result.checks if c.name == "nccl-allreduce")
    assert (check.node, check.ok, check.expected, check.actual) == ("gpu-xe9680-01", ok, threshold, 409.062)
    assert len(api.asked) == 1 and api.asked[0].startswith("job/rackctl-nccl-gpu-xe9680-01-")
    assert "average bus bandwidth 409.062 GB/s" in check.message
    if not ok:
        assert "below the threshold 450 GB/s" in check.message
    assert _jobs(kube, namespace) == []


def test_validate_live_for_a_stage_reads_nodes_and_runs_the_jobs(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    inv = load_inventory(EXAMPLE)
    # the ok path returns as soon as the Jobs complete: the long timeout only matters on a starved machine
    settings = workload_checks.Settings(namespace=namespace, timeout_s=120)
    decide = _decide({L40S: "complete", H100: "complete"})
    with JobControllerStandIn(kube, namespace, decide, cluster) as controller:
        report = workload_checks.validate_live(inv, Kubectl(kubeconfig), settings)
    assert report.ok, ([c.as_dict() for c in report.checks if not c.ok], controller.errors)
    names = [c.name for c in report.checks]
    assert names.count("node-ready") == 5 and names.count("gpu-allocatable") == 2 and names.count("cuda-smoke") == 2
    assert report.as_dict()["workloads"]["namespace"] == namespace
    skip = workload_checks.validate_live(inv, Kubectl(kubeconfig), settings, workloads=False)
    assert "cuda-smoke" not in [c.name for c in skip.checks]
    assert _jobs(kube, namespace) == []


class FlakyJobReads(Kubectl):
    """The real API server through kubectl, except that reading a Job fails ``failures`` times first, as kubectl
    does against a loaded or restarting API server (a test double for that failure only: the real server
    cannot be made to time out on demand)."""

    def __init__(self, kubeconfig: Path, failures: int) -> None:
        super().__init__(kubeconfig)
        self.failures = failures

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if kind == "job" and self.failures > 0:
            self.failures -= 1
            raise KubeError(f"kubectl get job {name} did not finish within 60 s (test double)")
        return super().get_object(kind, name, namespace)


def test_a_failed_read_of_a_job_is_tried_again_and_one_never_answered_says_so(
    kube: KubeObjects, kubeconfig: Path, cluster: dict[str, dict[str, str]], namespace: str
) -> None:
    inv = load_inventory(EXAMPLE)
    settings = workload_checks.Settings(namespace=namespace, timeout_s=60)
    flaky = FlakyJobReads(kubeconfig, failures=3)
    with JobControllerStandIn(kube, namespace, _decide({L40S: "complete", H100: "complete"}), cluster) as ctl:
        result = workload_checks.run(inv, flaky, {"items": flaky.objects("nodes")}, settings)
    assert not ctl.errors, ctl.errors
    assert flaky.failures == 0  # the three failed reads happened, and the watch went on
    smoke = [c for c in result.checks if c.name == "cuda-smoke"]
    assert len(smoke) == 2 and all(c.ok for c in smoke), [c.message for c in smoke]

    never = FlakyJobReads(kubeconfig, failures=10**6)
    quick = workload_checks.Settings(namespace=namespace, timeout_s=2)
    result = workload_checks.run(inv, never, {"items": never.objects("nodes")}, quick)
    for check in (c for c in result.checks if c.name == "cuda-smoke"):
        assert not check.ok
        assert "its state could not be read within 2 s: kubectl get job " in check.message, check.message
    assert _jobs(kube, namespace) == [], result.jobs  # deleted all the same
