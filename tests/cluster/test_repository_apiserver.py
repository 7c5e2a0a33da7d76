"""The repository ConfigMap and the Deployment's copier, judged by the real kube-apiserver 1.37.2.

Real parts: the API server (tests/cluster/apiserver.py) and, for the rollout test, ``kubectl`` through
:class:`bootstrap.kube.Kubectl`. No controller-manager runs: a "rollout" here is the Deployment's
``metadata.generation`` moving, which is what the Deployment controller acts on.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.kube import Kubectl
from bootstrap.kube.apply import apply_objects
from bootstrap.triton import repository_volume as rv
from bootstrap.triton.manifests import build_manifests
from bootstrap.triton.render import RenderedModel
from tests.cluster.apiserver import ApiServer
from tests.cluster.apiserver_apply import SERVER, Discovery, dry_run, ensure_namespaces
from tests.kube_objects import KubeObjects
from tests.triton.conftest import make_spec

pytestmark = pytest.mark.slow
NFS = {"kind": "nfs", "nfs_server": "powerscale.lab", "nfs_path": "/ifs/ai"}


def _namespace(kube: KubeObjects) -> str:
    name = f"repo-{uuid.uuid4().hex[:6]}"
    kube.namespaces.add(name)
    return name


@pytest.mark.parametrize("storage", [{}, NFS], ids=["local-path", "nfs"])
def test_config_map_and_deployment_accepted_by_the_real_apiserver(
    storage: dict[str, Any], kube_apiserver: ApiServer, kube: KubeObjects
) -> None:
    namespace = _namespace(kube)
    spec = make_spec(name="m", deployment={"namespace": namespace, "storage": storage})
    objects = [o for o in build_manifests(spec)["deployment.yaml"] if o["kind"] != "Namespace"]
    ensure_namespaces(kube_apiserver, objects)
    discovery = Discovery(kube_apiserver)
    verdicts = {(o["kind"], o["metadata"]["name"]): dry_run(kube_apiserver, discovery, "test", o) for o in objects}
    assert [v.row() for v in verdicts.values() if not v.ok] == []  # strict: an unknown field is refused
    for key in [("ConfigMap", "m-repository"), ("ConfigMap", "m-launcher"), ("Deployment", "triton-m")]:
        assert verdicts[key].checked_by == SERVER, key


def test_a_bad_item_path_is_refused_by_the_real_apiserver(kube_apiserver: ApiServer, kube: KubeObjects) -> None:
    """The server does judge the items: a path escaping the volume is refused (so accepted ones were checked)."""
    namespace = _namespace(kube)
    spec = make_spec(name="m", deployment={"namespace": namespace})
    dep = next(o for o in build_manifests(spec)["deployment.yaml"] if o["kind"] == "Deployment")
    ensure_namespaces(kube_apiserver, [dep])
    bad = copy.deepcopy(dep)
    source = next(v for v in bad["spec"]["template"]["spec"]["volumes"] if v["name"] == "repository-source")
    source["configMap"]["items"][1]["path"] = "../escape/config.pbtxt"
    verdict = dry_run(kube_apiserver, Discovery(kube_apiserver), "test", bad)
    assert not verdict.ok
    assert "items[1].path" in verdict.message and "'..'" in verdict.message, verdict.message


def test_the_one_mib_limit_is_the_servers(kube_apiserver: ApiServer, kube: KubeObjects) -> None:
    """rackctl's limit and the server's agree to the byte: 1 MiB accepted by both, one byte more refused by both."""
    namespace = _namespace(kube)
    spec = make_spec(name="huge", deployment={"namespace": namespace})
    meta = {"name": "huge-repository", "namespace": namespace}

    def rendered(n: int) -> RenderedModel:
        return RenderedModel("huge", {"ensemble/config.pbtxt": "x" * n}, ())

    overhead = sum(len(v) for v in rv.repository_config_map(spec, rendered(0), meta)["data"].values())
    at_limit = rv.repository_config_map(spec, rendered(rv.CONFIG_MAP_LIMIT - overhead), meta)
    ensure_namespaces(kube_apiserver, [at_limit])
    discovery = Discovery(kube_apiserver)
    assert dry_run(kube_apiserver, discovery, "test", at_limit).ok
    with pytest.raises(InvalidInput, match="over Kubernetes' 1048576-byte"):
        rv.repository_config_map(spec, rendered(rv.CONFIG_MAP_LIMIT - overhead + 1), meta)
    over = copy.deepcopy(at_limit)  # the same ConfigMap one byte bigger, built past rackctl's check
    over["data"]["ensemble__config.pbtxt"] += "x"
    verdict = dry_run(kube_apiserver, discovery, "test", over)
    assert not verdict.ok
    assert "may not be more than 1048576 bytes" in verdict.message, verdict.message


def test_a_changed_repository_rolls_the_deployment_an_unchanged_one_does_not(
    kube: KubeObjects, kubeconfig: Path
) -> None:
    namespace = _namespace(kube)
    api = Kubectl(kubeconfig, timeout_s=30)
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/triton-m"

    def apply(**overrides: Any) -> dict[str, str]:
        spec = make_spec(name="m", deployment={"namespace": namespace}, **overrides)
        return apply_objects(api, build_manifests(spec)["deployment.yaml"]).applied

    apply()
    first = kube.call("GET", path)
    assert apply()[f"Deployment/{namespace}/triton-m"] == "unchanged"
    assert kube.call("GET", path)["metadata"]["generation"] == first["metadata"]["generation"] == 1
    applied = apply(max_batch_size=16)
    assert applied[f"ConfigMap/{namespace}/m-repository"] == "changed"
    assert applied[f"Deployment/{namespace}/triton-m"] == "changed"
    second = kube.call("GET", path)
    assert second["metadata"]["generation"] == 2
    annotations = [d["spec"]["template"]["metadata"]["annotations"][rv.DIGEST_ANNOTATION] for d in (first, second)]
    assert annotations[0] != annotations[1]
    stored = kube.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/m-repository")
    assert rv.digest_of(stored) == annotations[1]
