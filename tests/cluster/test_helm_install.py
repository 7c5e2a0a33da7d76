"""Helm installs and upgrades the pinned charts on a real kube-apiserver 1.37.2 (``bootstrap.stages.helm_install``).

Real parts: Helm 4.2.3's Go SDK (helm-python-sdk) talking to the session's real API server, which stores the
releases (Secrets) and admits every object; ``kubectl`` reads them back. The charts are ``helm create``
scaffolds named and versioned as the pinned charts (tests/cluster/scaffold_charts.py: the real ones cannot be
had offline). No controller-manager or kubelet runs: where the Deployment, DaemonSet and StatefulSet
controllers would report a workload ready, the test writes its status through the status subresource
(:class:`tests.kube_objects.WorkloadReadier`, a stand-in thread); a workload left alone is what an absent
controller looks like.
Each test works in namespaces of its own.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.cluster.charts import Release, cluster_releases
from bootstrap.inventory import load_inventory
from bootstrap.kube import Kubectl
from bootstrap.kube.apply import workload_state
from bootstrap.stages.helm_install import (
    APPLIED,
    FAILED,
    INSTALLED,
    NOT_ATTEMPTED,
    NOT_INSTALLED,
    REFUSED,
    ROLLED_BACK,
    UNCHANGED,
    UNINSTALLED,
    UPGRADED,
    install_releases,
    values_digest,
    workloads_of,
)
from tests.cluster.apiserver import ApiServer
from tests.cluster.scaffold_charts import LOCAL_PATH_TEMPLATES, scaffold_chart
from tests.kube_objects import MERGE, KubeObjects, WorkloadReadier

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")
VALUES: dict[str, Any] = {
    "storageClass": {
        "create": True,
        "name": "local-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    },
    "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/mnt/nvme/lp"]}],
}
SOURCES = ("kubernetes.local_path", "kubernetes.charts.local_path_provisioner")
DAEMONSET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-agent
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: pause}]}
"""
STATEFULSET = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-db
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: pause}]}
"""
BAD_DEPLOYMENT_PORT = "containerPort: 70000"


def _release(namespace: str, *, name: str = "local-path-provisioner", values: dict[str, Any] | None = None) -> Release:
    return Release(
        name=name,
        repo="https://charts.containeroo.ch",
        chart=name,
        version="0.0.32",
        namespace=namespace,
        values=values if values is not None else VALUES,
        sources=SOURCES,
    )


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The charts directory: local-path-provisioner 0.0.32 (scaffold + StorageClass, ConfigMap, a DaemonSet and
    a StatefulSet); a chart the server rejects (``broken`` 0.0.32: containerPort 70000)."""
    root = tmp_path_factory.mktemp("helm-charts")
    templates = {**LOCAL_PATH_TEMPLATES, "daemonset.yaml": DAEMONSET, "statefulset.yaml": STATEFULSET}
    out = scaffold_chart(helm, root, "local-path-provisioner", "0.0.32", templates=templates)
    scaffold_chart(helm, root, "broken", "0.0.32")
    # the scaffold's Deployment with a port the API server's validation refuses
    archive = out / "broken-0.0.32.tgz"
    unpacked = root / "broken-src"
    helm.expand(unpacked, archive)
    deployment = unpacked / "broken" / "templates" / "deployment.yaml"
    text = deployment.read_text()
    assert "containerPort: {{ .Values.service.port }}" in text
    deployment.write_text(text.replace("containerPort: {{ .Values.service.port }}", BAD_DEPLOYMENT_PORT))
    archive.unlink()
    helm.package(unpacked / "broken", destination=out, version="0.0.32")
    return out


@pytest.fixture
def namespace(kube: KubeObjects) -> Iterator[str]:
    """A namespace name of this test's own (Helm creates it)."""
    yield kube.namespace_name("helm")


def _kubectl(kubeconfig: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _history(kubeconfig: Path, release: Release) -> list[tuple[int, str]]:
    """Helm's revisions of ``release`` (none: Helm has no record of it)."""
    with helm.Config(kubeconfig_path=str(kubeconfig), namespace=release.namespace) as cfg:
        try:
            history = cfg.history(release.name)
        except helm.HelmNotFoundError:
            return []
        return sorted((h["revision"], h["status"]) for h in history)


def _install(kubeconfig: Path, releases: list[Release], charts: Path | None, timeout_s: float = 30) -> Any:
    return install_releases(
        releases, kubeconfig=kubeconfig, api=Kubectl(kubeconfig), charts_dir=charts, timeout_s=timeout_s
    )


def test_install_then_unchanged_then_upgrade(kubeconfig: Path, kube: KubeObjects, charts: Path, namespace: str) -> None:
    release = _release(namespace)
    with WorkloadReadier(kube, namespace) as readier:
        report = _install(kubeconfig, [release], charts)
        (outcome,) = report.outcomes
        assert report.ok, report.summary()
        assert (outcome.status, outcome.revision) == (INSTALLED, 1)
        assert outcome.workloads == {
            f"Deployment/{namespace}/local-path-provisioner": "1/1",
            f"DaemonSet/{namespace}/local-path-provisioner-agent": "2/2",
            f"StatefulSet/{namespace}/local-path-provisioner-db": "2/2",
        }
        assert sorted(readier.readied) == [
            "DaemonSet/local-path-provisioner-agent",
            "Deployment/local-path-provisioner",
            "StatefulSet/local-path-provisioner-db",
        ]
        # the release and its objects are on the server (Helm created the namespace)
        assert _history(kubeconfig, release) == [(1, "deployed")]
        assert _kubectl(kubeconfig, "get", "namespace", namespace)["status"]["phase"] == "Active"
        config = _kubectl(kubeconfig, "get", "configmap", "local-path-config", "-n", namespace)
        assert json.loads(config["data"]["config.json"])["nodePathMap"][0]["paths"] == ["/mnt/nvme/lp"]
        storage = _kubectl(kubeconfig, "get", "storageclass", f"local-path-{namespace}")
        assert storage["volumeBindingMode"] == "WaitForFirstConsumer"
        deployment = _kubectl(kubeconfig, "get", "deployment", "local-path-provisioner", "-n", namespace)
        assert deployment["metadata"]["annotations"]["meta.helm.sh/release-name"] == "local-path-provisioner"
        # Helm 4 applied it server-side (SSA, GA since 1.22), its field manager the process's name
        live = kube.call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/local-path-provisioner")
        applied = [m["manager"] for m in live["metadata"]["managedFields"] if m["operation"] == "Apply"]
        assert len(applied) == 1, live["metadata"]["managedFields"]  # `python` when run as python -m pytest
        fact = outcome.as_fact()
        assert fact["revision"] == 1 and fact["values_digest"] == values_digest(VALUES)
        assert fact["chart"] == "local-path-provisioner" and fact["version"] == "0.0.32"

        # the same chart version and values: unchanged, no new revision
        again = _install(kubeconfig, [release], charts).outcomes[0]
        assert (again.status, again.revision, again.ok) == (UNCHANGED, 1, True)
        assert _history(kubeconfig, release) == [(1, "deployed")]

        # the inventory's values change: an upgrade to revision 2, the object changed on the server
        values = {**VALUES, "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/data/lp"]}]}
        changed = _install(kubeconfig, [replace(release, values=values)], charts).outcomes[0]
        assert (changed.status, changed.revision, changed.ok) == (UPGRADED, 2, True), changed.summary()
        assert changed.as_fact()["values_digest"] != fact["values_digest"]
        assert _history(kubeconfig, release) == [(1, "superseded"), (2, "deployed")]
        config = _kubectl(kubeconfig, "get", "configmap", "local-path-config", "-n", namespace)
        assert json.loads(config["data"]["config.json"])["nodePathMap"][0]["paths"] == ["/data/lp"]


def test_a_chart_the_server_rejects_fails_naming_the_release_and_the_failed_install_is_uninstalled(
    kubeconfig: Path, charts: Path, namespace: str
) -> None:
    """Helm's --atomic: the install Helm recorded as failed is uninstalled, so the next run installs it again
    (and fails the same way, saying so) instead of refusing a failed release."""
    broken = _release(namespace, name="broken")
    after = _release(namespace)
    report = _install(kubeconfig, [broken, after], charts)
    first, second = report.outcomes
    assert not report.ok and report.failed[0] is first
    assert (first.status, first.revision) == (UNINSTALLED, None)
    assert "Helm refused it:" in first.message
    assert 'Deployment.apps "broken" is invalid' in first.message
    assert "containerPort: Invalid value: 70000: must be between 1 and 65535" in first.message
    assert "(values from kubernetes.local_path, kubernetes.charts.local_path_provisioner)" in first.message
    assert first.message.endswith(
        "; uninstalled (Helm's --atomic: nothing of it is left, the next run installs it again)"
    )
    assert (second.status, second.ok) == (NOT_ATTEMPTED, False)
    assert second.message == "broken failed before it"
    assert _history(kubeconfig, broken) == []

    (again, _) = _install(kubeconfig, [broken, after], charts).outcomes
    assert (again.status, again.revision, again.ok) == (UNINSTALLED, None, False)
    assert "Helm refused it:" in again.message
    assert _history(kubeconfig, broken) == []


def test_workloads_not_ready_in_time_fail_naming_release_workload_and_reason(
    kubeconfig: Path, charts: Path, namespace: str
) -> None:
    start = time.monotonic()
    (outcome,) = _install(kubeconfig, [_release(namespace)], charts, timeout_s=2).outcomes
    assert time.monotonic() - start < 30
    assert (outcome.status, outcome.revision, outcome.ok) == (UNINSTALLED, None, False)
    assert outcome.message.startswith("not ready within 2 s: ")
    assert (
        f"Deployment {namespace}/local-path-provisioner: no Deployment controller has observed generation 1 yet"
        in outcome.message
    )
    assert f"DaemonSet {namespace}/local-path-provisioner-agent: no DaemonSet controller" in outcome.message
    assert f"StatefulSet {namespace}/local-path-provisioner-db: no StatefulSet controller" in outcome.message
    assert outcome.summary().startswith("local-path-provisioner uninstalled: not ready within 2 s")
    # the install is undone on the server: the release and its objects are gone
    assert _history(kubeconfig, _release(namespace)) == []
    gone = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "deployment", "local-path-provisioner", "-n", namespace,
         "--ignore-not-found", "-o", "name"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert gone.stdout.strip() == ""


def test_an_upgrade_whose_workloads_are_not_ready_in_time_is_rolled_back(
    kubeconfig: Path, kube: KubeObjects, charts: Path, namespace: str
) -> None:
    """Helm's --atomic for an upgrade: revision 2 not ready in time, rolled back to revision 1's chart and values
    as revision 3, history kept; the next run upgrades again."""
    release = _release(namespace)
    with WorkloadReadier(kube, namespace):
        assert _install(kubeconfig, [release], charts).ok
    # a new path and a second replica: the Deployment's spec changes, and no controller observes it
    values = {
        **VALUES, "replicaCount": 2,
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/data/lp"]}],
    }  # fmt: skip
    changed = replace(release, values=values)
    (outcome,) = _install(kubeconfig, [changed], charts, timeout_s=2).outcomes
    assert (outcome.status, outcome.revision, outcome.ok) == (ROLLED_BACK, 3, False)
    assert outcome.message.startswith(
        f"not ready within 2 s: Deployment {namespace}/local-path-provisioner: no Deployment controller"
    ), outcome.message
    assert outcome.message.endswith("; rolled back to revision 1 (Helm's revision 3 now)")
    # Helm applied revision 2 (only rackctl's watch found it not ready): the rollback supersedes it
    assert _history(kubeconfig, release) == [(1, "superseded"), (2, "superseded"), (3, "deployed")]
    config = _kubectl(kubeconfig, "get", "configmap", "local-path-config", "-n", namespace)
    assert json.loads(config["data"]["config.json"])["nodePathMap"][0]["paths"] == ["/mnt/nvme/lp"]
    deployment = _kubectl(kubeconfig, "get", "deployment", "local-path-provisioner", "-n", namespace)
    assert deployment["spec"]["replicas"] == 1
    assert outcome.as_fact()["status"] == ROLLED_BACK and outcome.as_fact()["revision"] == 3

    with WorkloadReadier(kube, namespace):  # the next run: deployed at revision 3 with the old values
        (again,) = _install(kubeconfig, [changed], charts).outcomes
    assert (again.status, again.revision, again.ok) == (UPGRADED, 4, True), again.summary()


def test_a_chart_not_at_hand_is_not_installed(kubeconfig: Path, tmp_path: Path, namespace: str) -> None:
    release = _release(namespace)
    empty = tmp_path / "charts"
    empty.mkdir()
    (given,) = _install(kubeconfig, [release], empty).outcomes
    assert (given.status, given.ok, given.revision) == (NOT_INSTALLED, True, None)
    expected = f"chart local-path-provisioner 0.0.32 not in --charts {empty}"
    assert given.summary() == f"local-path-provisioner: rendered + validated, not installed: {expected}"
    (none,) = _install(kubeconfig, [release], None).outcomes
    assert none.message == "chart local-path-provisioner 0.0.32 not at hand (no --charts DIR)"
    with (
        helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace) as cfg,
        pytest.raises(helm.HelmNotFoundError),
    ):
        cfg.history(release.name)


def test_kubeconfig_credentials_never_reach_the_outcome(
    kube_apiserver: ApiServer, charts: Path, namespace: str, tmp_path: Path
) -> None:
    """A kubeconfig carrying its client key inline, whose server does not answer: Helm's error names the
    server, never the key."""
    key = kube_apiserver.pki.client_key.read_bytes()
    cert = kube_apiserver.pki.client_cert.read_bytes()
    inline = base64.b64encode(key).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [
            {
                "name": "u",
                "user": {"client-certificate-data": base64.b64encode(cert).decode(), "client-key-data": inline},
            }
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    (outcome,) = _install(kubeconfig, [_release(namespace)], charts).outcomes
    assert (outcome.status, outcome.ok) == (FAILED, False)
    assert "kubernetes cluster unreachable" in outcome.message and "127.0.0.1:1" in outcome.message
    text = json.dumps(outcome.as_fact()) + outcome.summary()
    assert inline not in text and inline[:40] not in text and "PRIVATE KEY" not in text


def _set_status(kube: KubeObjects, namespace: str, name: str, revision: int, status: str) -> None:
    """Rewrite Helm's stored record of a revision (a Secret ``sh.helm.release.v1.NAME.vREV``: base64 of gzipped
    JSON, base64 again in the Secret) to ``status``, as a Helm process killed mid-upgrade leaves it."""
    path = f"/api/v1/namespaces/{namespace}/secrets/sh.helm.release.v1.{name}.v{revision}"
    secret = kube.call("GET", path)
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"]))))
    record["info"]["status"] = status
    encoded = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(record).encode()))).decode()
    patch = {"metadata": {"labels": {"status": status}}, "data": {"release": encoded}}
    kube.call("PATCH", path, patch, headers=MERGE)


def test_a_release_left_pending_is_refused_with_what_to_do(
    kubeconfig: Path, kube: KubeObjects, charts: Path, namespace: str
) -> None:
    release = _release(namespace)
    with WorkloadReadier(kube, namespace):
        assert _install(kubeconfig, [release], charts).ok
    _set_status(kube, namespace, release.name, 1, "pending-upgrade")
    assert _history(kubeconfig, release) == [(1, "pending-upgrade")]  # Helm reads it back so
    (outcome,) = _install(kubeconfig, [release], charts).outcomes
    assert (outcome.status, outcome.revision, outcome.ok) == (REFUSED, 1, False)
    assert outcome.message.startswith(
        f"Helm reports release local-path-provisioner in {namespace} pending-upgrade at revision 1: another Helm "
        "operation on it is running or was interrupted"
    )
    assert f"helm rollback local-path-provisioner -n {namespace}" in outcome.message
    assert _history(kubeconfig, release) == [(1, "pending-upgrade")]  # untouched


@pytest.mark.parametrize(
    ("kind", "status", "done", "why"),
    [
        (
            "DaemonSet",
            {
                "observedGeneration": 1,
                "desiredNumberScheduled": 3,
                "updatedNumberScheduled": 3,
                "numberAvailable": 3,
                "numberReady": 3,
            },
            True,
            "updated 3, ready 3, available 3 of 3",
        ),
        (
            "DaemonSet",
            {
                "observedGeneration": 1,
                "desiredNumberScheduled": 3,
                "updatedNumberScheduled": 2,
                "numberAvailable": 3,
                "numberReady": 3,
            },
            False,
            "updated 2, ready 3, available 3 of 3",
        ),
        (
            "StatefulSet",
            {
                "observedGeneration": 1,
                "readyReplicas": 2,
                "updatedReplicas": 1,
                "currentRevision": "a",
                "updateRevision": "b",
            },
            False,
            "ready 2, updated 1 of 2",
        ),
        (
            "StatefulSet",
            {
                "observedGeneration": 1,
                "readyReplicas": 2,
                "updatedReplicas": 2,
                "currentRevision": "a",
                "updateRevision": "b",
            },
            True,
            "ready 2, updated 2 of 2",
        ),
        ("StatefulSet", {"observedGeneration": 0}, False, "no StatefulSet controller has observed generation 1"),
    ],
)
def test_daemonset_and_statefulset_judged_as_kubectl_rollout_status(
    kind: str, status: dict[str, Any], done: bool, why: str
) -> None:
    obj = {"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": status}
    state = workload_state(kind, obj, "ns", "w")
    assert (state.kind, state.done) == (kind, done)
    assert state.why.startswith(why)
    assert workload_state(kind, None, "ns", "w").why == f"{kind} ns/w is not in the cluster"


@pytest.mark.parametrize(
    ("status", "done", "why"),
    [
        ({}, False, "the Prometheus operator has not reported on generation 2 of this Prometheus yet"),
        (  # a report on the generation before: the operator has not seen the change
            {"conditions": [{"type": "Available", "status": "True", "observedGeneration": 1}]},
            False,
            "the Prometheus operator has not reported on generation 2",
        ),
        (
            {
                "availableReplicas": 1,
                "conditions": [
                    {"type": "Available", "status": "Degraded", "observedGeneration": 2, "reason": "SomePodsNotReady"},
                    {"type": "Reconciled", "status": "True", "observedGeneration": 2},
                ],
            },
            False,
            "available 1 of 2 replica(s); conditions: Available=Degraded (SomePodsNotReady: )",
        ),
        (
            {"availableReplicas": 2, "conditions": [{"type": "Available", "status": "True", "observedGeneration": 2}]},
            True,
            "available 2 of 2 replica(s)",
        ),
    ],
)
def test_a_prometheus_is_judged_by_the_available_condition_its_operator_reports(
    status: dict[str, Any], done: bool, why: str
) -> None:
    obj = {"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": status}
    state = workload_state("Prometheus", obj, "monitoring", "p")
    assert (state.kind, state.done, state.ready, state.wanted) == (
        "Prometheus",
        done,
        status.get("availableReplicas", 0),
        2,
    )
    assert state.why.startswith(why), state.why
    assert (
        workload_state("Alertmanager", None, "monitoring", "a").why == "Alertmanager monitoring/a is not in the cluster"
    )


def test_a_releases_workloads_include_what_the_prometheus_operator_runs_and_nothing_of_another_group() -> None:
    manifest = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: operator}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: prom, namespace: monitoring}
---
apiVersion: monitoring.coreos.com/v1
kind: Alertmanager
metadata: {name: alerts}
---
apiVersion: example.com/v1
kind: Prometheus
metadata: {name: not-the-operators}
"""
    assert workloads_of(manifest, "release-ns") == [
        ("Deployment", "release-ns", "operator"),
        ("Prometheus", "monitoring", "prom"),
        ("Alertmanager", "release-ns", "alerts"),
    ]


CRD_NAME = "installations.operator.tigera.io"
INSTALLATION_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: installations.operator.tigera.io
spec:
  group: operator.tigera.io
  names: {kind: Installation, listKind: InstallationList, plural: installations, singular: installation}
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                calicoNetwork:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  properties:
                    bgp: {type: string, enum: [Enabled, Disabled]}
                    mtu: {type: integer}
"""
INSTALLATION = """\
apiVersion: operator.tigera.io/v1
kind: Installation
metadata:
  name: default
spec:
  calicoNetwork: {{ .Values.installation.calicoNetwork | toJson }}
"""


def _crd_chart(root: Path, chart: str, version: str, crd: str) -> None:
    """A chart whose only template is ``crd`` (as Calico's crd.projectcalico.org.v1 is: CRDs as templates),
    packaged into ``root/charts``."""
    src = root / "src" / f"{chart}-{version}" / chart
    (src / "templates").mkdir(parents=True)
    (src / "Chart.yaml").write_text(f"apiVersion: v2\nname: {chart}\nversion: {version}\n")
    (src / "templates" / "crds.yaml").write_text(crd)
    (root / "charts").mkdir(exist_ok=True)
    helm.package(src, destination=root / "charts", version=version)


def test_calicos_crd_chart_is_applied_server_side_and_established_before_the_operator_chart_uses_it(
    kubeconfig: Path, kube: KubeObjects, tmp_path: Path, namespace: str
) -> None:
    """From v3.32 Calico's CRDs are their own chart, applied as ``helm template | kubectl apply --server-side``
    (its README): rackctl renders it with Helm, applies it as rackctl, waits until the API server serves the
    CRD, then installs tigera-operator, whose Installation the real API server then admits against it."""
    example = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
    data = yaml.safe_load(example.read_text())
    data.setdefault("kubernetes", {})["charts"] = {"tigera_operator": "v3.32.1"}
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    crds, operator = cluster_releases(load_inventory(path))[:2]
    assert (crds.chart, crds.version, crds.install) == ("crd.projectcalico.org.v1", "v3.32.1", "server-side")
    assert (operator.chart, operator.install) == ("tigera-operator", "helm")

    _crd_chart(tmp_path, crds.chart, "v3.32.1", INSTALLATION_CRD)
    templates = {"installation.yaml": INSTALLATION}
    charts = scaffold_chart(helm, tmp_path, "tigera-operator", "v3.32.1", templates=templates)
    # the test's own namespace for the operator (the CRDs are cluster-scoped)
    operator = replace(operator, namespace=namespace)
    with WorkloadReadier(kube, namespace):
        report = _install(kubeconfig, [crds, operator], charts)
        first, second = report.outcomes
        assert report.ok, report.summary()
        assert first.status == APPLIED and first.revision is None
        assert "1 object(s) applied (1 created), 1 CRD(s) established" in first.summary(), first.summary()
        assert (second.status, second.revision) == (INSTALLED, 1), second.summary()
        # no Helm release holds the CRDs; rackctl's field manager applied them
        assert _history(kubeconfig, crds) == []
        crd = kube.call(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/installations.operator.tigera.io"
        )
        assert [m["manager"] for m in crd["metadata"]["managedFields"] if m["operation"] == "Apply"] == ["rackctl"]
        live = _kubectl(kubeconfig, "get", "installation", "default")
        assert live["spec"]["calicoNetwork"]["bgp"] == "Disabled"

        again = _install(kubeconfig, [crds, operator], charts)
        assert [o.status for o in again.outcomes] == [APPLIED, UNCHANGED], again.summary()
        assert "1 object(s) applied (1 unchanged)" in again.outcomes[0].summary()
