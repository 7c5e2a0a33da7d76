"""``rackctl validate-cluster --kubeconfig`` reading the nodes live from a real kube-apiserver 1.37.2.

No kubelet runs: the test writes each Node's Ready condition and allocatable ``nvidia.com/gpu`` as the
kubelet and the NVIDIA device plugin would (tests/kube_objects.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from bootstrap.cli import cli
from tests.kube_objects import KubeObjects

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
GPUS = {"gpu-l40s-01": 4, "gpu-xe9680-01": 8}


def _validate(kubeconfig: Path) -> tuple[int, dict[str, Any]]:
    # the read-only checks only: the workload Jobs have tests of their own (test_workload_checks.py)
    # and no DCGM exporter runs here: test_dcgm_live.py reads them live
    args = ["validate-cluster", "-i", str(EXAMPLE), "--kubeconfig", str(kubeconfig), "--skip-workloads", "--skip-dcgm"]
    args.append("--json")
    result = CliRunner().invoke(cli, args)
    return result.exit_code, json.loads(result.output)


def _checks(doc: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {c["node"]: c for c in doc["checks"] if c["check"] == name}


def test_validate_cluster_reads_readiness_and_gpus_live(kube: KubeObjects, kubeconfig: Path) -> None:
    for name in ("head-01", "cp-02", "cp-03", *GPUS):
        kube.node(name, gpus=GPUS.get(name, 0))  # Ready, GPUs advertised: as the kubelet would report them
    code, doc = _validate(kubeconfig)
    assert (code, doc["ok"], doc["failed"]) == (0, True, 0), doc
    ready = _checks(doc, "node-ready")
    assert set(ready) == {"head-01", "cp-02", "cp-03", *GPUS}
    assert all(c["ok"] and c["message"] == "Ready=True (KubeletReady)" for c in ready.values())
    gpus = _checks(doc, "gpu-allocatable")
    assert {n: (c["expected"], c["actual"]) for n, c in gpus.items()} == {n: (g, g) for n, g in GPUS.items()}

    kube.node_status("gpu-xe9680-01", ready=False, gpus=4)  # four GPUs lost, the kubelet reports NotReady
    code, doc = _validate(kubeconfig)
    assert (code, doc["ok"], doc["failed"]) == (1, False, 2)
    failed = {(c["check"], c["node"]): c for c in doc["checks"] if not c["ok"]}
    assert set(failed) == {("node-ready", "gpu-xe9680-01"), ("gpu-allocatable", "gpu-xe9680-01")}
    assert failed["node-ready", "gpu-xe9680-01"]["message"] == "Ready=False (KubeletNotReady)"
    assert (
        failed["gpu-allocatable", "gpu-xe9680-01"]["expected"],
        failed["gpu-allocatable", "gpu-xe9680-01"]["actual"],
    ) == (8, 4)

    kube.call("DELETE", "/api/v1/nodes/cp-03")
    code, doc = _validate(kubeconfig)
    assert _checks(doc, "node-ready")["cp-03"]["message"] == "not in the cluster (kubectl get nodes)"


def test_validate_cluster_with_an_unreachable_api_names_the_kubeconfig(kubeconfig: Path, kube: KubeObjects) -> None:
    dead = kubeconfig.parent / "dead"
    dead.write_text(kubeconfig.read_text().replace(kube.server.url, "https://127.0.0.1:1"))
    code, doc = _validate(dead)
    assert code == 2 and doc["errors"][0]["path"] == "--kubeconfig"
    assert "127.0.0.1:1" in doc["errors"][0]["message"]
