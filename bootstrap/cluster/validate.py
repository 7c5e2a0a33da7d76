"""Checks of a rendered cluster bundle, each failure naming the inventory field that caused it.

* kubeadm files: against the typed kubeadm models of the API the Kubernetes version needs
  (:mod:`bootstrap.cluster.kubeadm_api`), and that API against the version (v1beta3 up to 1.30, v1beta4 from 1.31).
* built-in kinds (Pods, Deployments, Services, ...): ``kubernetes-validate --strict`` for the target version.
* custom resources (ServiceMonitor, ClusterPolicy, ...): against the ``openAPIV3Schema`` of the CRDs in a
  directory (the pinned charts' ``crds/``), strict about unknown fields as ``kubectl --validate=strict`` is.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bootstrap.cluster.kubeadm_api import KUBELET_API, MODELS, V1BETA3, V1BETA4
from bootstrap.cluster.render import Bundle, RenderedFile
from bootstrap.errors import EnvironmentMissing, Problem
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.profiles import version_tuple

#: API groups served by Kubernetes itself (everything else is a custom resource).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "networking.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "node.k8s.io",
        "autoscaling",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "certificates.k8s.io",
    }
)
BUG_FIX = "this is rackctl's output, not your input: report a rackctl bug with this message"

#: kubeadm field (dotted, upstream names) -> the inventory field it comes from; ``{node}`` is nodes[i].
KUBEADM_SOURCES: dict[str, str] = {
    "apiVersion": "cluster.versions.kubeadm_api",
    "kubernetesVersion": "cluster.versions.kubernetes",
    "networking.podSubnet": "networks.kubernetes.pod_cidr",
    "networking.serviceSubnet": "networks.kubernetes.service_cidr",
    "controlPlaneEndpoint": "networks.kubernetes.api_vip",
    "imageRepository": "kubernetes.image_repository",
    "apiServer.extraArgs": "kubernetes.api_server_extra_args",
    "nodeRegistration.name": "{node}.hostname",
    "nodeRegistration.taints": "{node}.taints",
    "localAPIEndpoint": "{node}.interfaces",
    "controlPlane.localAPIEndpoint": "{node}.interfaces",
    "mode": "kubernetes.kube_proxy_mode",
    "clusterCIDR": "networks.kubernetes.pod_cidr",
}


def builtin(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is of a kind Kubernetes itself serves."""
    api = str(obj.get("apiVersion", ""))
    group = api.rsplit("/", 1)[0] if "/" in api else ""
    return group in BUILTIN_GROUPS


def _dotted(loc: Iterable[Any]) -> str:
    return ".".join(str(p) for p in loc)


def _inventory_field(inv: Inventory, doc: dict[str, Any], loc: str, node: str | None) -> str:
    node_path = next((f"nodes[{i}]" for i, n in enumerate(inv.nodes) if n.hostname == node), "nodes[?]")
    if doc.get("kind") == "KubeletConfiguration":
        top = loc.split(".", 1)[0]
        return f"kubernetes.kubelet.{top}" if top in inv.kubernetes.kubelet else "(rackctl's kubelet defaults)"
    if doc.get("kind") == "KubeProxyConfiguration" and loc.split(".", 1)[0] in inv.kubernetes.kube_proxy:
        return f"kubernetes.kube_proxy.{loc.split('.', 1)[0]}"
    for prefix in sorted(KUBEADM_SOURCES, key=len, reverse=True):
        if loc == prefix or loc.startswith(prefix + "."):
            return KUBEADM_SOURCES[prefix].format(node=node_path)
    return "(rackctl's kubeadm defaults)"


def api_range_problem(inv: Inventory, api: str) -> Problem | None:
    """A kubeadm config API that the target Kubernetes version does not read (or should not be given)."""
    versions = inv.cluster.resolved_versions()
    minor = version_tuple(versions.kubernetes)[:2]
    field = "cluster.versions.kubeadm_api" if versions.kubeadm_api else "cluster.versions.kubernetes"
    if api == V1BETA3 and not (1, 22) <= minor <= (1, 30):
        return Problem(
            field,
            f"kubeadm config {api} is for Kubernetes 1.22-1.30, the cluster runs {versions.kubernetes}",
            f"use {V1BETA4} (remove cluster.versions.kubeadm_api to derive it)" if minor > (1, 30) else "use 1.22+",
        )
    if api == V1BETA4 and minor < (1, 31):
        return Problem(
            field,
            f"kubeadm config {api} needs Kubernetes 1.31 or later, the cluster runs {versions.kubernetes}",
            f"use {V1BETA3} (remove cluster.versions.kubeadm_api to derive it)",
        )
    return None


#: KubeletConfiguration (v1beta1) fields and the first Kubernetes release whose kubelet reads them
KUBELET_FIELD_SINCE: dict[str, tuple[int, int]] = {"failCgroupV1": (1, 31)}


def _kubelet_field_releases(inv: Inventory, doc: dict[str, Any], where: str) -> list[Problem]:
    """The ``kubernetes.kubelet`` fields the cluster's kubelet is too old to read (:data:`KUBELET_FIELD_SINCE`)."""
    version = inv.cluster.resolved_versions().kubernetes
    minor = version_tuple(version)[:2]
    return [
        Problem(
            f"kubernetes.kubelet.{name}",
            f"{where}: {name} is read by the kubelet from Kubernetes {since[0]}.{since[1]}; the cluster runs {version}",
            f"remove {name} from kubernetes.kubelet, or run Kubernetes {since[0]}.{since[1]} or later",
        )
        for name, since in KUBELET_FIELD_SINCE.items()
        if name in doc and minor < since
    ]


def check_kubeadm(inv: Inventory, rendered: RenderedFile) -> list[Problem]:
    """Each document against its typed model; the config API against the Kubernetes version."""
    problems: list[Problem] = []
    for doc in rendered.objects:
        key = (str(doc.get("apiVersion")), str(doc.get("kind")))
        where = f"{rendered.path} {key[1]}"
        if key[0] in (V1BETA3, V1BETA4):
            found = api_range_problem(inv, key[0])
            if found is not None:
                problems.append(Problem(found.path, f"{where}: {found.message}", found.fix))
                continue
        model = MODELS.get(key)
        if model is None:
            known = sorted({f"{a} {k}" for a, k in MODELS})
            problems.append(Problem(where, f"unknown kubeadm document {key[0]} {key[1]}", f"one of {known}"))
            continue
        if key[1] == "KubeletConfiguration":
            problems += _kubelet_field_releases(inv, doc, where)
        try:
            model.model_validate(doc)
        except ValidationError as exc:
            for error in exc.errors():
                loc = _dotted(error["loc"])
                source = _inventory_field(inv, doc, loc, rendered.node)
                what = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
                problems.append(
                    Problem(
                        source,
                        f"{where} ({key[0]}): {loc}: {what} (value {error.get('input')!r})",
                        _fix_for(source, key[0]),
                    )
                )
    return problems


def _fix_for(source: str, api: str) -> str:
    if source.startswith("("):
        return BUG_FIX
    if source.startswith("kubernetes.kubelet"):
        return f"use a {KUBELET_API} KubeletConfiguration field name and value (camelCase, see its reference)"
    if source.startswith("kubernetes.kube_proxy."):
        return f"use a {api} KubeProxyConfiguration field name and value (camelCase, see its reference)"
    return f"correct {source} (checked against {api})"


def validation_version(inv: Inventory) -> tuple[str | None, Problem | None]:
    """The kubernetes-validate schema version for the cluster's Kubernetes (x.y), or why there is none."""
    try:
        from kubernetes_validate.utils import all_versions  # noqa: PLC0415 - loads slowly; only when validating
    except ImportError:
        raise EnvironmentMissing(
            "checking the rendered cluster needs kubernetes-validate",
            problems=[Problem("kubernetes-validate", "not importable", "pip install 'rackctl[cluster]'")],
        ) from None

    target = inv.cluster.resolved_versions().kubernetes
    minor = ".".join(str(p) for p in version_tuple(target)[:2])
    have = [".".join(v.split(".")[:2]) for v in all_versions()]
    if minor in have:
        return minor, None
    return None, Problem(
        "cluster.versions.kubernetes",
        f"no Kubernetes {minor} schemas to check against (kubernetes-validate has {have[0]}-{have[-1]})",
        f"choose a Kubernetes version from {have[0]} to {have[-1]}, or upgrade kubernetes-validate",
    )


def check_builtin(objects: list[dict[str, Any]], version: str, where: str, sources: tuple[str, ...]) -> list[Problem]:
    """``kubernetes-validate --strict`` for built-in kinds."""
    import kubernetes_validate  # noqa: PLC0415 - loads schemas slowly

    problems = []
    for obj in objects:
        if not builtin(obj):
            continue
        name = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(
                Problem(
                    ", ".join(sources),
                    f"{where} {name}: {_dotted(exc.path)}: {exc.message} (Kubernetes {version}, strict)",
                    f"correct {', '.join(sources)}",
                )
            )
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(
                Problem(where, f"{name}: {obj.get('apiVersion')} is not served by Kubernetes {version}", BUG_FIX)
            )
    return problems


def crd_schemas(docs: Iterable[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CustomResourceDefinition among ``docs``."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for version in spec.get("versions", []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is not None:
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


def load_crds(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The CRD schemas of every YAML file (any number of documents each) under ``crd_dir``."""
    return crd_schemas(doc for path in sorted(crd_dir.rglob("*.y*ml")) for doc in yaml.safe_load_all(path.read_text()))


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields forbidden where the CRD does not preserve them (strict validation)."""
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: strict_schema(v) for k, v in out["properties"].items()}
        if not out.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
            out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = strict_schema(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_schema(out["additionalProperties"])
    return out


def check_custom(
    objects: list[dict[str, Any]], crds: dict[tuple[str, str], dict[str, Any]], where: str, sources: tuple[str, ...]
) -> tuple[list[Problem], list[str]]:
    """Custom resources against their CRD schemas; returns (problems, kinds without a CRD at hand)."""
    import jsonschema  # noqa: PLC0415

    problems: list[Problem] = []
    missing: list[str] = []
    for obj in objects:
        if builtin(obj):
            continue
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        schema = crds.get(key)
        if schema is None:
            missing.append(f"{key[0]} {key[1]}")
            continue
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        strict = strict_schema(schema)
        strict.setdefault("properties", {}).update({"apiVersion": {}, "kind": {}, "metadata": {}})
        validator = jsonschema.Draft7Validator(strict)
        for error in sorted(
            validator.iter_errors({**body, "apiVersion": key[0], "kind": key[1], "metadata": {}}), key=str
        ):
            name = f"{key[1]}/{(obj.get('metadata') or {}).get('name')}"
            problems.append(
                Problem(
                    ", ".join(sources),
                    f"{where} {name}: {_dotted(error.absolute_path)}: {error.message} (CRD {key[0]})",
                    f"correct {', '.join(sources)}",
                )
            )
    return problems, missing


def validate_bundle(inv: Inventory, bundle: Bundle, crd_dir: Path | None = None) -> list[Problem]:
    """Run every check on the bundle (recording what checked each file); return all problems at once."""
    problems = list(bundle.problems)
    version, missing_version = validation_version(inv)
    if missing_version is not None:
        problems.append(missing_version)
    crds = load_crds(crd_dir) if crd_dir is not None else {}
    crds |= crd_schemas(o for f in bundle.files if f.kind == "crds" for o in f.objects)
    unchecked: set[str] = set()
    for rendered in bundle.files:
        if rendered.kind == "kubeadm":
            problems += check_kubeadm(inv, rendered)
            rendered.checks.append(
                "typed kubeadm models (" + ", ".join(sorted({str(d["apiVersion"]) for d in rendered.objects})) + ")"
            )
            continue
        if not rendered.objects:
            continue
        if version is not None and any(builtin(o) for o in rendered.objects):
            problems += check_builtin(rendered.objects, version, rendered.path, rendered.sources)
            rendered.checks.append(f"kubernetes-validate --strict {version}")
        if any(not builtin(o) for o in rendered.objects):
            found, missing = check_custom(rendered.objects, crds, rendered.path, rendered.sources)
            problems += found
            unchecked.update(missing)
            if not missing:
                rendered.checks.append("CRD openAPIV3Schema (strict)")
    if unchecked:
        bundle.not_rendered.append(
            {
                "what": "schema check of custom resources: " + ", ".join(sorted(unchecked)),
                "why": "their CRDs are not at hand (give --crds DIR with the pinned charts' crds/)",
            }
        )
    return problems
