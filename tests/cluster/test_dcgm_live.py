"""``rackctl validate-cluster --kubeconfig`` reading each GPU node's DCGM exporter live, through the real
kube-apiserver 1.37.2's pod proxy, from real HTTP servers serving the recorded metrics.

Real parts: the CLI, ``kubectl`` (listing the exporter pods; ``kubectl proxy``), the API server and its pod
proxy, an ``http.server`` per GPU node on a non-loopback address of this host serving that node's slice of
tests/nvidia/fixtures/dcgm-metrics.txt (tests/dcgm_serving.py). No kubelet, scheduler, device plugin or
DaemonSet controller runs: the test writes the Nodes as the kubelet and device plugin would report them, and
the GPU Operator's dcgm-exporter pods as its DaemonSet, the scheduler and the kubelet would make them
(:func:`tests.dcgm_serving.exporter_pod`: label ``app=nvidia-dcgm-exporter``, Running, this host's address as
the pod IP, the server's port as the ``metrics`` port).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED
from bootstrap.validation.dcgm import pod_path
from tests.dcgm_serving import MetricsServer, ensure_namespace, exporter_pod, node_slice
from tests.kube_objects import KubeObjects
from tests.triton_serving import host_address

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
GPUS = {"gpu-l40s-01": 4, "gpu-xe9680-01": 8}
NAMESPACE = "gpu-operator"  # the example inventory's nvidia.namespace: the GPU Operator release's
VIA = "through the API server's pod proxy"


@pytest.fixture
def address() -> str:
    found = host_address()
    if found is None:
        pytest.skip("no global IPv4 address on this host (the pod proxy refuses a loopback pod IP)")
    return found


@pytest.fixture
def cluster(kube: KubeObjects) -> KubeObjects:
    """The example's five nodes Ready with their GPUs advertised (as the kubelet and device plugin would report
    them); the operator's namespace, its pods removed after the test."""
    for name in ("head-01", "cp-02", "cp-03", *GPUS):
        kube.node(name, gpus=GPUS.get(name, 0))
    ensure_namespace(kube, NAMESPACE)
    return kube


@pytest.fixture
def servers(address: str) -> Iterator[dict[str, MetricsServer]]:
    """Each GPU node's exporter: its own slice of the recorded metrics, served on ``address``."""
    with ExitStack() as stack:
        yield {node: stack.enter_context(MetricsServer(address, node_slice(node))) for node in GPUS}


def _validate(kubeconfig: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    # the read-only checks only: the workload Jobs have tests of their own (test_workload_checks.py)
    args = ["validate-cluster", "-i", str(EXAMPLE), "--kubeconfig", str(kubeconfig), "--skip-workloads", *extra]
    result = CliRunner().invoke(cli, [*args, "--json"])
    return result.exit_code, json.loads(result.output)


def _dcgm(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["node"]: c for c in doc["checks"] if c["check"] == "dcgm-metrics"}


def test_every_gpu_nodes_exporter_is_read_through_its_own_pod(
    cluster: KubeObjects, servers: dict[str, MetricsServer], kubeconfig: Path
) -> None:
    pods = {n: exporter_pod(cluster, NAMESPACE, n, s.address, s.port) for n, s in servers.items()}
    code, doc = _validate(kubeconfig)
    assert (code, doc["ok"], doc["failed"]) == (0, True, 0), doc
    checks = _dcgm(doc)
    assert set(checks) == set(GPUS)
    for node, count in GPUS.items():
        server = servers[node]
        size = len(node_slice(node).encode())
        where = f"pod {NAMESPACE}/{pods[node]} port {server.port} {VIA}, {size} bytes"
        assert checks[node]["message"] == f"{count} GPUs report DCGM metrics ({where}), inventory has {count}"
        assert (checks[node]["expected"], checks[node]["actual"]) == (count, count)
        assert server.gets == 1  # one GET per node, each to that node's own pod
        read = doc["dcgm"]["nodes"][node]
        assert read["ok"] is True and read["pod"] == f"{NAMESPACE}/{pods[node]}"
        assert read["path"] == pod_path(NAMESPACE, pods[node], server.port)
    assert doc["dcgm"]["read"].startswith(f"each GPU node's pod app=nvidia-dcgm-exporter in namespace {NAMESPACE}")
    assert not [s for s in doc["skipped"] if s["check"] == "dcgm-metrics"]


def test_a_node_whose_exporter_cannot_be_read_fails_saying_why(
    cluster: KubeObjects, servers: dict[str, MetricsServer], kubeconfig: Path, address: str
) -> None:
    l40s = servers["gpu-l40s-01"]
    exporter_pod(cluster, NAMESPACE, "gpu-l40s-01", l40s.address, l40s.port)

    code, doc = _validate(kubeconfig)  # no exporter pod on gpu-xe9680-01 (its DaemonSet pod not made yet)
    assert (code, doc["failed"]) == (EXIT_FAILED, 1), doc
    failed = _dcgm(doc)["gpu-xe9680-01"]
    why = f"no DCGM exporter pod on gpu-xe9680-01 (pods app=nvidia-dcgm-exporter in namespace {NAMESPACE})"
    assert failed["message"] == f"DCGM exporter metrics not read: {why}"
    assert (failed["ok"], failed["expected"], failed["actual"]) == (False, 8, None)
    assert _dcgm(doc)["gpu-l40s-01"]["ok"] is True  # the other node is read and judged on its own

    xe = servers["gpu-xe9680-01"]
    pod = exporter_pod(cluster, NAMESPACE, "gpu-xe9680-01", xe.address, xe.port, phase="Pending")
    code, doc = _validate(kubeconfig)
    assert code == EXIT_FAILED
    pending = f"DCGM exporter pod {NAMESPACE}/{pod} is Pending (ContainerCreating)"
    assert _dcgm(doc)["gpu-xe9680-01"]["message"] == f"DCGM exporter metrics not read: {pending}"
    assert xe.gets == 0  # a pod that is not Running is not asked

    # Running, but nothing listens on its port: the pod proxy's own answer (1.37: 503 Service Unavailable)
    with MetricsServer(address, "") as gone:
        port = gone.port
    cluster.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}", params={"gracePeriodSeconds": "0"})
    exporter_pod(cluster, NAMESPACE, "gpu-xe9680-01", address, port)
    code, doc = _validate(kubeconfig)
    assert code == EXIT_FAILED
    message = _dcgm(doc)["gpu-xe9680-01"]["message"]
    path = pod_path(NAMESPACE, pod, port)
    assert message.startswith(f"DCGM exporter metrics not read: GET {path} {VIA} failed: HTTP 503: "), message
    assert f"error trying to reach service: dial tcp {address}:{port}: connect: connection refused" in message

    # a pod IP in 127.0.0.0/8: the pod proxy refuses it (a real exporter pod never has one; hence this host's
    # non-loopback address for the stand-in servers)
    cluster.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}", params={"gracePeriodSeconds": "0"})
    exporter_pod(cluster, NAMESPACE, "gpu-xe9680-01", "127.0.0.1", xe.port)
    code, doc = _validate(kubeconfig)
    message = _dcgm(doc)["gpu-xe9680-01"]["message"]
    assert message.endswith(f"{VIA} failed: HTTP 400: address not allowed"), message
    assert xe.gets == 0


def test_a_node_reporting_fewer_gpus_fails_with_the_counts(
    cluster: KubeObjects, kubeconfig: Path, address: str
) -> None:
    slices = {"gpu-l40s-01": node_slice("gpu-l40s-01"), "gpu-xe9680-01": node_slice("gpu-xe9680-01", drop_gpus="67")}
    with ExitStack() as stack:
        for node, text in slices.items():
            server = stack.enter_context(MetricsServer(address, text))
            exporter_pod(cluster, NAMESPACE, node, server.address, server.port)
        code, doc = _validate(kubeconfig)
    assert (code, doc["failed"]) == (EXIT_FAILED, 1), doc
    failed = _dcgm(doc)["gpu-xe9680-01"]
    assert (failed["ok"], failed["expected"], failed["actual"]) == (False, 8, 6)
    assert failed["message"].startswith("6 GPUs report DCGM metrics (pod gpu-operator/nvidia-dcgm-exporter-gpu-xe9680")
    assert failed["message"].endswith("inventory has 8")


def test_a_nodes_gpus_count_from_its_own_pod_whatever_hostname_its_samples_carry(
    cluster: KubeObjects, kubeconfig: Path, address: str
) -> None:
    # an exporter whose samples say Hostname="<node>.lab.example" (the OS's FQDN where NODE_NAME is not set):
    # what its own pod answered is that node's, so its 8 GPUs count
    fqdn = node_slice("gpu-xe9680-01").replace('Hostname="gpu-xe9680-01"', 'Hostname="gpu-xe9680-01.lab.example"')
    slices = {"gpu-l40s-01": node_slice("gpu-l40s-01"), "gpu-xe9680-01": fqdn}
    with ExitStack() as stack:
        for node, text in slices.items():
            server = stack.enter_context(MetricsServer(address, text))
            exporter_pod(cluster, NAMESPACE, node, server.address, server.port)
        code, doc = _validate(kubeconfig)
    assert (code, doc["ok"]) == (0, True), doc
    checks = _dcgm(doc)
    assert (checks["gpu-xe9680-01"]["expected"], checks["gpu-xe9680-01"]["actual"]) == (8, 8)
    assert (checks["gpu-l40s-01"]["expected"], checks["gpu-l40s-01"]["actual"]) == (4, 4)


def test_plan_and_skip_dcgm_read_nothing(
    cluster: KubeObjects, servers: dict[str, MetricsServer], kubeconfig: Path
) -> None:
    for node, server in servers.items():
        exporter_pod(cluster, NAMESPACE, node, server.address, server.port)
    args = ["validate-cluster", "-i", str(EXAMPLE), "--kubeconfig", str(kubeconfig), "--plan", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["applied"] is False and plan["dcgm"]["read"] is False
    assert plan["dcgm"]["would_read"].startswith("with --kubeconfig, each GPU node's pod app=nvidia-dcgm-exporter")
    assert plan["dcgm"]["would_read"].endswith("; nothing read (--plan)")

    code, doc = _validate(kubeconfig, "--skip-dcgm")
    assert (code, doc["ok"]) == (0, True), doc
    assert {"check": "dcgm-metrics", "why": "--skip-dcgm"} in doc["skipped"] and not _dcgm(doc)
    assert "dcgm" not in doc
    assert all(server.gets == 0 for server in servers.values())  # neither touched an exporter


def test_dcgm_metrics_file_and_skip_dcgm_together_are_refused(kubeconfig: Path) -> None:
    fixture = Path(__file__).parents[1] / "nvidia" / "fixtures" / "dcgm-metrics.txt"
    code, doc = _validate(kubeconfig, "--skip-dcgm", "--dcgm-metrics", str(fixture))
    assert code == 2 and doc["errors"][0]["path"] == "--dcgm-metrics/--skip-dcgm", doc
