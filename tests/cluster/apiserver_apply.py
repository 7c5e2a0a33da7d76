"""Apply a rendered cluster bundle to a real kube-apiserver: CRDs for real, every object as a dry-run.

Each object gets one :class:`Verdict`:

- ``server``: the server serves its group/version and kind; it was POSTed with ``?dryRun=All`` and
  ``fieldValidation=Strict`` and accepted (``ok``) or rejected with the server's message: schema, value and
  admission errors, and unknown or duplicate fields (strict decoding), all from the server.
- ``kubernetes-validate only``: the server does not serve that group/version/kind (a CRD no chart of the
  bundle installs), so only the offline ``kubernetes-validate`` check of ``render cluster`` covers it.
- ``not an API object``: kubeadm/kubelet/kube-proxy configuration files, read by kubeadm and the kubelet,
  never sent to an API server; checked by rackctl's pydantic models (``bootstrap/cluster/kubeadm_api.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.cluster.apiserver import ApiServer

SERVER = "server dry-run"
VALIDATE_ONLY = "kubernetes-validate only"
NOT_API = "not an API object"
#: Groups of configuration files that no API server serves.
CONFIG_GROUPS = ("kubeadm.k8s.io", "kubelet.config.k8s.io", "kubeproxy.config.k8s.io")


@dataclass
class Verdict:
    """What the real server said about one object."""

    source: str
    api_version: str
    kind: str
    name: str
    checked_by: str
    ok: bool = True
    message: str = ""

    def row(self) -> str:
        what = f"{self.source}: {self.api_version} {self.kind}" + (f" {self.name}" if self.name else "")
        if self.checked_by != SERVER:
            return f"{what}: {self.checked_by} (not sent to the server)"
        status = f"accepted{f' ({self.message})' if self.message else ''}" if self.ok else f"REJECTED: {self.message}"
        return f"{what}: {self.checked_by}: {status}"


@dataclass
class Resource:
    """A kind's collection path (``{ns}`` where the namespace goes) and whether it is namespaced."""

    path: str
    namespaced: bool


class Discovery:
    """The server's API groups/versions → kind → collection path (refreshed after CRDs are added)."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.kinds: dict[tuple[str, str], Resource] = {}
        self.refresh()

    def refresh(self) -> None:
        versions = ["/api/v1"]
        for group in self.server.get("/apis").json()["groups"]:
            versions += [f"/apis/{v['groupVersion']}" for v in group["versions"]]
        self.kinds = {}
        for base in versions:
            body = self.server.get(base).json()
            for res in body.get("resources", []):
                if "/" in res["name"] or "create" not in res.get("verbs", []):
                    continue
                self.kinds[(body["groupVersion"], res["kind"])] = Resource(
                    f"{base}/{{ns}}{res['name']}", res["namespaced"]
                )

    def collection(self, obj: dict[str, Any]) -> str | None:
        res = self.kinds.get((obj["apiVersion"], obj["kind"]))
        if res is None:
            return None
        ns = obj.get("metadata", {}).get("namespace", "default")
        return res.path.format(ns=f"namespaces/{ns}/" if res.namespaced else "")


def apply_crds(server: ApiServer, crds: Iterable[dict[str, Any]], timeout_s: float = 60) -> None:
    """Create the CRDs for real and wait until each is Established."""
    names = []
    for crd in crds:
        resp = server.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, dry_run=False)
        if resp.status_code not in (201, 409):
            raise AssertionError(f"CRD {crd['metadata']['name']} rejected: {resp.status_code} {resp.text}")
        names.append(crd["metadata"]["name"])
    end = time.monotonic() + timeout_s
    for name in names:
        while True:
            status = server.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            conds = {c["type"]: c["status"] for c in (status.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > end:
                raise AssertionError(f"CRD {name} not Established: {conds}")
            time.sleep(0.2)


def ensure_namespaces(server: ApiServer, objects: Iterable[dict[str, Any]]) -> None:
    """Create (for real) the namespaces that namespaced objects live in, so their dry-runs have a home."""
    for ns in sorted({o["metadata"]["namespace"] for o in objects if o.get("metadata", {}).get("namespace")}):
        resp = server.post(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, dry_run=False
        )
        if resp.status_code not in (201, 409):
            raise AssertionError(f"namespace {ns}: {resp.status_code} {resp.text}")


def dry_run(server: ApiServer, discovery: Discovery, source: str, obj: dict[str, Any]) -> Verdict:
    """One object: server-side dry-run (strict) when the server serves its kind, else say who checks it."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    name = obj.get("metadata", {}).get("name", "")
    verdict = Verdict(source, api_version, kind, name, SERVER)
    if api_version.split("/")[0] in CONFIG_GROUPS:
        verdict.checked_by = NOT_API
        return verdict
    path = discovery.collection(obj)
    if path is None:
        verdict.checked_by = VALIDATE_ONLY
        return verdict
    resp = server.post(path, obj, dry_run=True)
    body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    if resp.status_code == 409 and body.get("reason") == "AlreadyExists":
        # The namespaces ensure_namespaces created: decoding, admission and validation run before the
        # store's existence check, so AlreadyExists means the object passed them (test_real_apiserver shows it).
        verdict.message = "validated; exists already, created for the namespaced objects"
        return verdict
    if resp.status_code != 201:
        verdict.ok = False
        verdict.message = body.get("message", resp.text)
    return verdict
