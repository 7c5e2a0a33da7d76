"""``rackctl render cluster``: everything the kubernetes and nvidia stages would apply, as files.

Nothing here touches a node. :func:`render_cluster` builds the files in memory; :func:`write_bundle`
validates them (:mod:`bootstrap.cluster.validate`) and writes the whole directory at once (temp dir +
rename) with an ``index.json`` saying what each file is, what checked it and which inventory fields it
came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from bootstrap.cluster import charts, kubeadm, vip
from bootstrap.cluster.dashboards import dashboard_objects
from bootstrap.cluster.gpu_operator import driver_version, gpu_nodes, gpu_operator
from bootstrap.cluster.helm_render import chart_source, render_release
from bootstrap.errors import Problem
from bootstrap.fsutil import replace_tree
from bootstrap.inventory.autoscaling import autoscaled
from bootstrap.inventory.models import Inventory
from bootstrap.nvidia.fabric_manager import fabric_manager_packages
from bootstrap.triton.manifests import build_manifests

FileKind = Literal[
    "kubeadm",
    "static-pod",
    "host-config",
    "chart-values",
    "chart-manifests",
    "crds",
    "manifests",
    "node-labels",
    "plan",
]
INDEX = "index.json"
#: The Grafana dashboard ConfigMaps (:mod:`bootstrap.cluster.dashboards`), when Grafana is enabled.
DASHBOARDS_FILE = "monitoring/dashboards.yaml"


class _Dumper(yaml.SafeDumper):
    """safe_dump's, with each secret placeholder a role fills in (``${KUBEADM_CERTIFICATE_KEY}``) double-quoted: the
    value put in its place then stays a string. Unquoted, kubeadm read a certificate key of hex digits only as
    a number and refused the config ("cannot unmarshal number into ... certificateKey of type string")."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    placeholder = value.startswith("${KUBEADM_") and value.endswith("}") and "\n" not in value
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if placeholder else None)


_Dumper.add_representer(str, _represent_str)


@dataclass
class RenderedFile:
    """One output file: its objects (YAML documents) or raw text, and the inventory fields behind it."""

    path: str
    kind: FileKind
    sources: tuple[str, ...]
    objects: list[dict[str, Any]] = field(default_factory=list)
    text: str | None = None
    node: str | None = None
    checks: list[str] = field(default_factory=list)

    def content(self) -> str:
        if self.text is not None:
            return self.text
        return yaml.dump_all(self.objects, Dumper=_Dumper, sort_keys=False)


@dataclass
class Bundle:
    """The rendered cluster: files, Helm releases in install order, notes and problems."""

    kubernetes_version: str
    kubeadm_api: str
    files: list[RenderedFile] = field(default_factory=list)
    releases: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)
    not_rendered: list[dict[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def index(self) -> dict[str, Any]:
        return {
            "kubernetes_version": self.kubernetes_version,
            "kubeadm_api": self.kubeadm_api,
            "applied": False,
            "note": "rendered and validated only; nothing was applied to any node",
            "releases": self.releases,
            "files": [
                {
                    "path": f.path,
                    "kind": f.kind,
                    **({"node": f.node} if f.node else {}),
                    "objects": [_name(o) for o in f.objects],
                    "checked_by": f.checks,
                    "from": list(f.sources),
                }
                for f in self.files
            ],
            "corrections": self.corrections,
            "not_rendered": self.not_rendered,
        }


def _name(obj: dict[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name")
    return f"{obj.get('kind')}/{name}" if name else str(obj.get("kind"))


def _node_sources(inv: Inventory, hostname: str) -> tuple[str, ...]:
    index = next(i for i, n in enumerate(inv.nodes) if n.hostname == hostname)
    return (f"nodes[{index}]",)


def _kubernetes_files(inv: Inventory) -> list[RenderedFile]:
    files = []
    for node in inv.nodes:
        base = _node_sources(inv, node.hostname)
        files.append(
            RenderedFile(
                f"kubeadm/{node.hostname}.yaml",
                "kubeadm",
                (*base, "cluster.versions.kubernetes", "networks.kubernetes", "kubernetes"),
                kubeadm.node_documents(inv, node),
                node=node.hostname,
            )
        )
        if not node.is_control_plane:
            continue
        if inv.kubernetes.api_endpoint == "kube-vip":
            for name, objects in vip.kube_vip_files(inv, node).items():
                files.append(
                    RenderedFile(
                        f"static-pods/{node.hostname}/{name}",
                        "static-pod",
                        ("networks.kubernetes.api_vip", "kubernetes.vip_interface", "cluster.versions.kube_vip"),
                        objects,
                        node=node.hostname,
                    )
                )
        else:
            sources = ("networks.kubernetes.api_vip", "kubernetes.vip_interface", "kubernetes.api_endpoint")
            files.append(
                RenderedFile(
                    f"host/{node.hostname}/keepalived.conf",
                    "host-config",
                    sources,
                    text=vip.keepalived_conf(inv, node),
                    node=node.hostname,
                )
            )
            files.append(
                RenderedFile(
                    f"host/{node.hostname}/haproxy.cfg",
                    "host-config",
                    sources,
                    text=vip.haproxy_cfg(inv),
                    node=node.hostname,
                )
            )
    return files


def _node_labels(inv: Inventory, gpu_labels: dict[str, dict[str, str]]) -> RenderedFile:
    """Labels and taints per node the stage applies after join (what the kubelet may not set itself)."""
    doc: dict[str, Any] = {}
    for node in inv.nodes:
        gpus = inv.gpus_of(node)
        labels = {**kubeadm.self_labels(node), **node.labels, **gpu_labels.get(node.hostname, {})}
        if node.role.value == "worker":
            labels["node-role.kubernetes.io/worker"] = ""
        if gpus.count:
            labels["rackctl.io/gpu-type"] = gpus.type
            labels["rackctl.io/gpu-count"] = str(gpus.count)
        doc[node.hostname] = {"labels": labels, "taints": [t.model_dump() for t in node.taints]}
    return RenderedFile(
        "nodes/labels.yaml",
        "node-labels",
        ("nodes[*].labels", "nodes[*].taints", "nvidia.profiles"),
        text=yaml.safe_dump(doc, sort_keys=True),
    )


def _fabric_manager_plan(inv: Inventory) -> RenderedFile:
    """Per GPU node: who runs Fabric Manager if the node turns out to have NVSwitches (decided on the node)."""
    plan: dict[str, Any] = {}
    for node in gpu_nodes(inv):
        profile = inv.nvidia.profile_for(node.model)
        hw = inv.hardware(node.model)
        driver = driver_version(inv, profile)
        entry: dict[str, Any] = {
            "driver": profile.driver,
            "driver_version": driver,
            "nvswitch_expected_from_model": bool(hw and hw.nvswitch),
            "decided_by": "detection on the node (/proc/driver/nvidia-nvswitch/devices, lspci -n)",
        }
        if profile.driver == "operator":
            entry["fabric_manager"] = "run by the GPU operator's driver container"
        else:
            entry["fabric_manager"] = "host packages, held, at exactly the driver's version"
            entry["packages"] = fabric_manager_packages(driver)
        plan[node.hostname] = entry
    return RenderedFile(
        "nvidia/fabric-manager.yaml",
        "plan",
        ("nvidia.profiles", "cluster.versions.nvidia_driver"),
        text=yaml.safe_dump(plan, sort_keys=True),
    )


def _triton_files(inv: Inventory) -> list[RenderedFile]:
    files = []
    scaling = autoscaled(inv)
    for i, spec in enumerate(inv.models):
        resolved = scaling.get(spec.name)
        for name, objects in build_manifests(spec, resolved).items():
            sources: tuple[str, ...] = (f"models[{i}]",)
            if name == "scaledobject.yaml" and resolved is not None:
                # its Prometheus is monitoring's; its maximum the sizing placement's when the field is unset
                sources += ("monitoring.namespace",) + (
                    () if resolved.max_from.startswith("deployment.") else ("sizing",)
                )
            files.append(RenderedFile(f"triton/{spec.name}/{name}", "manifests", sources, objects))
    return files


def _release_file(release: charts.Release) -> RenderedFile:
    return RenderedFile(
        f"charts/{release.name}/values.yaml",
        "chart-values",
        release.sources,
        text=yaml.safe_dump(release.values, sort_keys=False),
    )


def _already_said(correction: str, said: list[str]) -> bool:
    topic = "defaultRuntime" if "defaultRuntime" in correction else correction
    return any(topic in note for note in said)


def _chart_files(bundle: Bundle, releases: list[charts.Release], charts_dir: Path | None) -> None:
    """``helm template`` of each pinned chart found in ``charts_dir``; the others are listed as not rendered."""
    missing = []
    for release in releases:
        source = chart_source(charts_dir, release) if charts_dir is not None else None
        if source is None:
            missing.append(f"{release.chart} {release.version}")
            continue
        rendered = render_release(release, source)
        bundle.problems += rendered.problems
        for template, objects in rendered.manifests.items():
            path = f"manifests/{release.name}/{template.split('/', 1)[-1]}"
            bundle.files.append(RenderedFile(path, "chart-manifests", release.sources, objects))
        for name, objects in rendered.crds.items():
            bundle.files.append(
                RenderedFile(f"crds/{release.name}/{Path(name).name}", "crds", release.sources, objects)
            )
    if missing:
        where = f"no chart archive for them in {charts_dir}" if charts_dir else "no --charts directory was given"
        bundle.not_rendered.append(
            {
                "what": "chart manifests (helm template) of " + ", ".join(missing),
                "why": f"{where}; the stages install the charts with Helm from the chart repositories or the "
                "head node's mirror",
            }
        )


def render_cluster(inv: Inventory, charts_dir: Path | None = None) -> Bundle:
    """Build every file the kubernetes and nvidia stages would apply (in memory, unvalidated).

    With ``charts_dir``, the pinned charts found there are rendered with our values (``manifests/``) and
    their CRDs kept (``crds/``) for the custom-resource checks.
    """
    versions = inv.cluster.resolved_versions()
    bundle = Bundle(kubernetes_version=versions.kubernetes, kubeadm_api=kubeadm.api_version(inv))
    bundle.corrections += list(inv.cluster.profile().notes)
    bundle.files += _kubernetes_files(inv)
    releases = charts.cluster_releases(inv)
    gpu = gpu_operator(inv)
    bundle.problems += gpu.problems
    # The profile's notes may already report the same correction (e.g. defaultRuntime): say it once.
    bundle.corrections += [c for c in gpu.corrections if not _already_said(c, bundle.corrections)]
    if gpu.release is not None:
        releases.append(gpu.release)
        bundle.files.append(_fabric_manager_plan(inv))
    for release in releases:
        bundle.files.append(_release_file(release))
        bundle.releases.append(release.describe() | {"values": f"charts/{release.name}/values.yaml"})
    bundle.files.append(_node_labels(inv, gpu.node_labels))
    bundle.files += _triton_files(inv)
    dashboards = dashboard_objects(inv)
    if dashboards:
        bundle.files.append(
            RenderedFile(
                DASHBOARDS_FILE, "manifests", ("monitoring", "kubernetes.charts.kube_prometheus_stack"), dashboards
            )
        )
    _chart_files(bundle, releases, charts_dir)
    return bundle


def write_bundle(bundle: Bundle, out_dir: Path) -> Path:
    """Write the bundle and its index as one directory swap (temp dir + rename)."""
    files = {f.path: f.content() for f in bundle.files}
    files[INDEX] = json.dumps(bundle.index(), indent=2) + "\n"
    return replace_tree(out_dir, files)
