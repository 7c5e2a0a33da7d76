"""The images the cluster's Helm releases pull, read from the charts rendered with rackctl's values.

A chart's images are only known once the chart is at hand (``--charts DIR``, as for ``rackctl up``): its
manifests are rendered offline (:func:`bootstrap.cluster.helm_render.render_release`) and every image they
name is collected: ``containers``/``initContainers``, container ``args`` that name an image
(``--prometheus-config-reloader=IMAGE``, ``--helper-image IMAGE``), ``*IMAGE`` environment variables, pod
templates a ConfigMap carries (local-path-provisioner's helper pod: without it, an air-gapped site's volumes
are never provisioned), a custom resource's ``spec.image`` (Prometheus, Alertmanager) and the GPU operator's
enabled ClusterPolicy components (``repository``/``image``/``version``, which the operator joins into the
operand's image). A chart not at hand is reported as such, never guessed; an operator that picks further
images itself (tigera-operator) is named with the command that lists them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.cluster.charts import Release, cluster_releases
from bootstrap.cluster.gpu_operator import gpu_operator
from bootstrap.cluster.helm_render import chart_source, render_release
from bootstrap.errors import Problem
from bootstrap.inventory.models import Inventory

#: An image reference: [host[:port]/]path[:tag][@digest] with at least a tag or a digest.
_IMAGE = re.compile(r"^[a-z0-9][\w.-]*(:\d+)?(/[\w.-]+)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
#: Container arguments that name an image (prometheus-operator's config reloader, ...).
_IMAGE_ARG = re.compile(r"^--?[\w.-]*(image|reloader)[\w.-]*=(?P<ref>\S+)$", re.IGNORECASE)
#: An option whose value, the next argument, is an image (``--helper-image busybox:latest``).
_IMAGE_OPTION = re.compile(r"^--?[\w.-]*image$", re.IGNORECASE)
#: Charts whose operator deploys further images of its own choosing, named nowhere in the chart: how to list
#: them (``{operator}``: the operator's image as the chart renders it). Calico's docs, "Deploy images by digest".
OPERATOR_CHOSEN = {
    "tigera-operator": "tigera-operator deploys Calico's images (calico/node, cni, typha, ...) chosen by its own "
    "version, not named in the chart: list them with `docker run --rm {operator} --print-images=list` on a "
    "connected machine, save and import them",
}


@dataclass
class ChartImages:
    """The images one release pulls: found in its rendered chart, or unknown (chart not at hand / not rendered)."""

    release: Release
    source: Path | None
    images: dict[str, str] = field(default_factory=dict)  # image -> where in the chart
    problems: list[Problem] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.source is None:
            return "chart not at hand"
        return "not rendered" if self.problems else "rendered"

    def describe(self, charts_dir: Path | None) -> dict[str, Any]:
        rel = self.release
        out: dict[str, Any] = {
            "release": rel.name,
            "chart": rel.chart,
            "version": rel.version,
            "state": self.state,
            "images": sorted(self.images),
        }
        if self.source is None:
            where = f"not in --charts {charts_dir}" if charts_dir else "no --charts directory was given"
            out["note"] = f"its images are known once the chart is at hand ({where})"
            out["fix"] = (
                f"helm pull {rel.chart} --repo {rel.repo} --version {rel.version} -d DIR on a connected machine, "
                "then pass --charts DIR"
            )
        elif self.problems:
            out["note"] = "; ".join(p.message for p in self.problems)
            out["fix"] = "; ".join(p.fix for p in self.problems)
        if rel.chart in OPERATOR_CHOSEN:
            operator = next((i for i in sorted(self.images) if "/operator:" in i), "<the chart's operator image>")
            out["operator_images"] = OPERATOR_CHOSEN[rel.chart].format(operator=operator)
        return out


def _is_image(value: Any) -> bool:
    return isinstance(value, str) and (":" in value or "@" in value) and bool(_IMAGE.match(value))


def _image_arguments(argv: list[Any]) -> Iterator[tuple[str, str]]:
    """(option, image) of each argument naming an image: ``--opt-image=IMAGE`` or ``--opt-image IMAGE``
    (local-path-provisioner's ``--helper-image``)."""
    words = [str(word) for word in argv]
    for index, word in enumerate(words):
        match = _IMAGE_ARG.match(word)
        if match and _is_image(match["ref"]):
            yield word.split("=", 1)[0], match["ref"]
        elif _IMAGE_OPTION.match(word) and index + 1 < len(words) and _is_image(words[index + 1]):
            yield word, words[index + 1]


def _embedded_pods(doc: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """(image, where) of the pod templates a ConfigMap carries as YAML (local-path-provisioner's
    ``helperPod.yaml``: the pod it starts for each volume, never in a workload's spec)."""
    for key, text in (doc.get("data") or {}).items():
        if not isinstance(text, str) or "containers" not in text:
            continue
        try:
            embedded = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(embedded, dict) and isinstance(embedded.get("spec"), dict):
            yield from _containers(embedded["spec"], f"{where} data {key}")


def _containers(obj: Any, where: str) -> Iterator[tuple[str, str]]:
    """(image, where) of every container, init container, image argument and ``*IMAGE`` env var in ``obj``."""
    if isinstance(obj, list):
        for item in obj:
            yield from _containers(item, where)
        return
    if not isinstance(obj, dict):
        return
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in obj.get(key) or []:
            if not isinstance(container, dict):
                continue
            name = f"{where} {key[:-1]} {container.get('name', '?')}"
            if _is_image(container.get("image")):
                yield container["image"], name
            for arg, ref in _image_arguments([*(container.get("command") or []), *(container.get("args") or [])]):
                yield ref, f"{name} argument {arg}"
            for env in container.get("env") or []:
                named = isinstance(env, dict) and str(env.get("name", "")).upper().endswith("IMAGE")
                if named and _is_image(env.get("value")):
                    yield env["value"], f"{name} env {env['name']}"
    for key, value in obj.items():
        if key not in ("containers", "initContainers", "ephemeralContainers"):
            yield from _containers(value, where)


def _operands(obj: Any, where: str) -> Iterator[tuple[str, str]]:
    """(image, where) of each enabled ClusterPolicy component with ``repository``, ``image`` and ``version``."""
    if not isinstance(obj, dict) or obj.get("enabled") is False:
        return
    repo, image, version = obj.get("repository"), obj.get("image"), obj.get("version")
    # the driver's tag gets the node's OS appended by the operator: upstream_images lists the real one
    if not where.endswith(".driver") and all(isinstance(v, str) and v for v in (repo, image, version)):
        sep = "@" if str(version).startswith("sha256:") else ":"
        yield f"{repo}/{image}{sep}{version}", where
    for key, value in obj.items():
        if isinstance(value, dict):
            yield from _operands(value, f"{where}.{key}")


def normalised(ref: str) -> str:
    """``ref`` as containerd resolves it: a name without a registry host is Docker Hub's
    (``nginx:1`` -> ``docker.io/library/nginx:1``, ``calico/node:1`` -> ``docker.io/calico/node:1``)."""
    host, _, rest = ref.partition("/")
    if rest and ("." in host or ":" in host or host == "localhost"):
        return ref
    return f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"


def images_in(manifests: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Every image the rendered manifests name -> the first place that names it (template, kind/name, field)."""
    found: dict[str, str] = {}
    for template, docs in manifests.items():
        for doc in docs:
            meta = doc.get("metadata") or {}
            where = f"{template}: {doc.get('kind', '?')}/{meta.get('name', '?')}"
            spec: dict[str, Any] = doc["spec"] if isinstance(doc.get("spec"), dict) else {}
            pairs = list(_containers(spec, where))
            if _is_image(spec.get("image")):  # Prometheus, Alertmanager, ... custom resources
                pairs.append((spec["image"], f"{where} spec.image"))
            if doc.get("kind") == "ClusterPolicy":
                pairs += list(_operands(spec, f"{where} spec"))
            if doc.get("kind") == "ConfigMap":
                pairs += list(_embedded_pods(doc, where))
            for image, place in pairs:
                found.setdefault(normalised(image), place)
    return found


def releases(inv: Inventory) -> list[Release]:
    """Every Helm release rackctl installs, in install order (the GPU operator's last)."""
    gpu = gpu_operator(inv).release
    return [*cluster_releases(inv), *([gpu] if gpu is not None else [])]


def chart_images(inv: Inventory, charts_dir: Path | None) -> list[ChartImages]:
    """Each release's images, from its chart rendered with rackctl's values where ``charts_dir`` has it."""
    out = []
    for release in releases(inv):
        source = chart_source(charts_dir, release) if charts_dir is not None else None
        found = ChartImages(release, source)
        if source is not None:
            rendered = render_release(release, source)
            found.problems = rendered.problems
            found.images = {} if rendered.problems else images_in(rendered.manifests)
        out.append(found)
    return out
