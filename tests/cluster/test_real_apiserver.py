"""What ``render cluster`` produces, applied to a real kube-apiserver (the lab's pinned 1.37.2, from Go modules).

CRDs are created for real (the pinned charts' CRDs when charts are rendered; offline here the Prometheus operator's
ServiceMonitor CRD, generated from its Go types: tests/crds.py), then every object is POSTed with ``?dryRun=All`` and
``fieldValidation=Strict``: field, schema, unknown-field and admission errors come from the server. Only a kind
the server does not serve (a CRD no chart installs) is "kubernetes-validate only" — the table in
docs/kubernetes.md says the same. The binaries come from ``rackctl lab components`` (the kube_components fixture).
"""

from __future__ import annotations

import copy
import functools
import operator
from pathlib import Path
from typing import Any

import pytest

from bootstrap.cluster.render import Bundle, render_cluster
from bootstrap.cluster.validate import validate_bundle
from bootstrap.inventory.loader import load_inventory
from tests import crds as generated_crds
from tests.cluster.apiserver import ApiServer
from tests.cluster.apiserver_apply import (
    NOT_API,
    SERVER,
    VALIDATE_ONLY,
    Discovery,
    Verdict,
    apply_crds,
    dry_run,
    ensure_namespaces,
)

ROOT = Path(__file__).parents[2]
INVENTORIES = ["inventory/lab.yml", "inventory/examples/dvd-inference.yml"]
#: File kinds of the bundle that hold Kubernetes objects.
OBJECT_FILES = ("kubeadm", "static-pod", "manifests", "chart-manifests")


def _render(inventory: str) -> Bundle:
    inv = load_inventory(ROOT / inventory)
    bundle = render_cluster(inv)
    assert validate_bundle(inv, bundle) == []
    return bundle


def _crds(bundle: Bundle) -> list[dict[str, Any]]:
    """The charts' CRDs when rendered; else the Prometheus operator's ServiceMonitor CRD, generated from its Go
    types (tests/crds.py: no chart CRDs offline here)."""
    crds = [
        o for f in bundle.files if f.kind == "crds" for o in f.objects if o.get("kind") == "CustomResourceDefinition"
    ]
    return crds or [generated_crds.service_monitor()]


def _objects(bundle: Bundle) -> list[tuple[str, dict[str, Any]]]:
    return [(f.path, o) for f in bundle.files if f.kind in OBJECT_FILES for o in f.objects if isinstance(o, dict)]


@pytest.fixture(scope="module")
def discovery(kube_apiserver: ApiServer) -> Discovery:
    return Discovery(kube_apiserver)


def _apply(server: ApiServer, discovery: Discovery, bundle: Bundle) -> list[Verdict]:
    apply_crds(server, _crds(bundle))
    discovery.refresh()
    objects = _objects(bundle)
    ensure_namespaces(server, [o for _, o in objects if o.get("kind") != "Namespace"])
    return [dry_run(server, discovery, source, obj) for source, obj in objects]


@pytest.mark.slow
@pytest.mark.parametrize("inventory", INVENTORIES)
def test_rendered_bundle_accepted_by_real_apiserver(
    inventory: str, kube_apiserver: ApiServer, discovery: Discovery, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _render(inventory)
    verdicts = _apply(kube_apiserver, discovery, bundle)
    with capsys.disabled():
        print(f"\n{inventory} → kube-apiserver {kube_apiserver.version} (target {bundle.kubernetes_version}):")
        for v in verdicts:
            print("  " + v.row())
    assert len(verdicts) == len(_objects(bundle))
    rejected = [v.row() for v in verdicts if not v.ok]
    assert rejected == []
    by_kind = {(v.api_version, v.kind): v.checked_by for v in verdicts}
    # The kinds render cluster writes are all checked by the real server ...
    for kind in [
        ("v1", "Pod"),
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ]:
        assert by_kind.get(kind) == SERVER, kind
    # ... kubeadm's files never reach an API server, and nothing else is left unchecked by the server.
    assert {k for k, c in by_kind.items() if c == NOT_API} == {
        (api, kind)
        for api, kind in by_kind
        if api.split("/")[0] in ("kubeadm.k8s.io", "kubelet.config.k8s.io", "kubeproxy.config.k8s.io")
    }
    assert [v.row() for v in verdicts if v.checked_by == VALIDATE_ONLY] == []


def _dry_run_with(
    server: ApiServer, discovery: Discovery, kind: str, path: tuple[str | int, ...], value: Any
) -> Verdict:
    """The first inventory's bundle applied, then its first ``kind`` object dry-run with ``path`` set to ``value``."""
    bundle = _render(INVENTORIES[0])
    _apply(server, discovery, bundle)
    obj = copy.deepcopy(next(o for _, o in _objects(bundle) if o["kind"] == kind))
    *parents, last = path
    functools.reduce(operator.getitem, parents, obj)[last] = value
    return dry_run(server, discovery, "test", obj)


@pytest.mark.slow
def test_wrong_type_rejected_by_real_apiserver(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    verdict = _dry_run_with(kube_apiserver, discovery, "Deployment", ("spec", "replicas"), "three")
    assert verdict.checked_by == SERVER
    assert not verdict.ok
    assert "replicas" in verdict.message and "int32" in verdict.message, verdict.message


@pytest.mark.slow
def test_invalid_value_rejected_by_real_apiserver(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    port = ("spec", "template", "spec", "containers", 0, "ports", 0, "containerPort")
    verdict = _dry_run_with(kube_apiserver, discovery, "Deployment", port, 70000)
    assert not verdict.ok
    assert "containerPort" in verdict.message and "between 1 and 65535" in verdict.message, verdict.message


@pytest.mark.slow
def test_custom_resource_schema_enforced_by_real_apiserver(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    verdict = _dry_run_with(kube_apiserver, discovery, "ServiceMonitor", ("spec", "endpoints"), "every 30s")
    assert verdict.checked_by == SERVER
    assert not verdict.ok
    assert "spec.endpoints" in verdict.message and "array" in verdict.message, verdict.message


@pytest.mark.slow
def test_unknown_field_rejected_by_real_apiserver(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """Strict field validation: the server refuses an unknown field instead of dropping it."""
    verdict = _dry_run_with(kube_apiserver, discovery, "Deployment", ("spec", "replicaz"), 2)
    assert verdict.checked_by == SERVER
    assert not verdict.ok
    assert 'unknown field "spec.replicaz"' in verdict.message, verdict.message


@pytest.mark.slow
def test_unknown_field_in_custom_resource_rejected(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """The same for a CRD's objects: a field its (structural) schema does not have is refused, not pruned."""
    verdict = _dry_run_with(kube_apiserver, discovery, "ServiceMonitor", ("spec", "endpointz"), [])
    assert verdict.checked_by == SERVER
    assert not verdict.ok
    assert 'unknown field "spec.endpointz"' in verdict.message, verdict.message


def test_newer_api_groups_are_checked_by_the_server(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """resource.k8s.io/v1 (GA in 1.34) is served: a ResourceClaim is dry-run, and a bad one refused."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    verdict = dry_run(kube_apiserver, discovery, "test", claim)
    assert (verdict.checked_by, verdict.ok) == (SERVER, True), verdict.row()
    claim["spec"]["devices"]["requests"][0]["name"] = "Not A DNS Label"
    verdict = dry_run(kube_apiserver, discovery, "test", claim)
    assert (verdict.checked_by, verdict.ok) == (SERVER, False)
    assert "spec.devices.requests[0].name" in verdict.message, verdict.message


def test_unserved_api_is_reported_as_validate_only(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """A group/version the server does not serve (no chart installed its CRD) is never sent, and said so."""
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "triton", "namespace": "default"},
    }
    verdict = dry_run(kube_apiserver, discovery, "test", route)
    assert (verdict.checked_by, verdict.ok) == (VALIDATE_ONLY, True)
    assert "kubernetes-validate only (not sent to the server)" in verdict.row()


@pytest.mark.slow
def test_rendered_chart_crds_then_manifests(
    kube_apiserver: ApiServer, discovery: Discovery, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --charts: the chart's own CRDs are created first, then its rendered manifests dry-run.

    The pinned archives cannot be had offline, so this uses test_helm_render's real ``helm create``
    scaffold named as the pinned local-path-provisioner (with a ServiceMonitor CRD in its crds/).
    """
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")
    from tests.cluster.test_helm_render import _chart

    inv = load_inventory(ROOT / INVENTORIES[0])
    bundle = render_cluster(inv, _chart(tmp_path))
    assert validate_bundle(inv, bundle) == []
    assert any(f.kind == "crds" for f in bundle.files)
    verdicts = _apply(kube_apiserver, discovery, bundle)
    chart = [v for v in verdicts if v.source.startswith("manifests/local-path-provisioner/")]
    with capsys.disabled():
        print(f"\nlocal-path-provisioner (scaffold) chart → kube-apiserver {kube_apiserver.version}:")
        for v in chart:
            print("  " + v.row())
    assert [v.row() for v in verdicts if not v.ok] == []
    kinds = {(v.kind, v.checked_by) for v in chart}
    assert {
        ("StorageClass", SERVER),
        ("ConfigMap", SERVER),
        ("Deployment", SERVER),
        ("ServiceMonitor", SERVER),
    } <= kinds


@pytest.mark.slow
def test_existing_namespace_still_validated(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """The harness creates the namespaces first; a bad Namespace of the same name is still rejected (422)."""
    bundle = _render(INVENTORIES[0])
    _apply(kube_apiserver, discovery, bundle)
    namespace = copy.deepcopy(next(o for _, o in _objects(bundle) if o["kind"] == "Namespace"))
    assert dry_run(kube_apiserver, discovery, "test", namespace).ok
    namespace["metadata"]["labels"] = {"bad label!": "x"}
    verdict = dry_run(kube_apiserver, discovery, "test", namespace)
    assert not verdict.ok
    assert "metadata.labels" in verdict.message, verdict.message


def test_crd_validation_rules_enforced_by_real_apiserver(kube_apiserver: ApiServer, discovery: Discovery) -> None:
    """A CRD's CEL rules (x-kubernetes-validations, which the 1.20 server refused) are enforced on dry-run."""
    rule = {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"}
    spec = {"type": "object", "x-kubernetes-validations": [rule]}
    spec["properties"] = {"minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "pools.test.rackctl.dev"},
        "spec": {
            "group": "test.rackctl.dev",
            "names": {"kind": "Pool", "plural": "pools", "singular": "pool"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
                }
            ],
        },
    }
    apply_crds(kube_apiserver, [crd])
    discovery.refresh()
    pool = {"apiVersion": "test.rackctl.dev/v1", "kind": "Pool", "metadata": {"name": "p", "namespace": "default"}}
    assert dry_run(kube_apiserver, discovery, "test", pool | {"spec": {"minReplicas": 1, "maxReplicas": 2}}).ok
    verdict = dry_run(kube_apiserver, discovery, "test", pool | {"spec": {"minReplicas": 3, "maxReplicas": 2}})
    assert (verdict.checked_by, verdict.ok) == (SERVER, False)
    assert "minReplicas must not exceed maxReplicas" in verdict.message, verdict.message
