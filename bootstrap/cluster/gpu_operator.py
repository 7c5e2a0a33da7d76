"""NVIDIA GPU operator values, derived per hardware profile (``nvidia.profiles.<model>``).

One chart release serves every GPU node; what differs per hardware model is carried by node labels the
operator documents: ``nvidia.com/gpu.deploy.driver=false`` where the host has its own driver, and
``nvidia.com/mig.config`` for the MIG layout mig-manager applies. Cluster-wide choices (MIG strategy,
operator driver version) must agree across profiles; a conflict names both inventory fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bootstrap.cluster.charts import PROMETHEUS_RELEASE, Release
from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.cluster import GpuProfile
from bootstrap.inventory.driver_images import published_driver_tag
from bootstrap.inventory.hardware import GPU_TYPES, MIG_PROFILES_80GB
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.profiles import (
    OPERATOR_DOCKER_DEFAULT,
    operator_default_driver,
    operator_line,
    operator_sets_runtime,
)
from bootstrap.inventory.suggest import did_you_mean
from bootstrap.nvidia.fabric_manager import check_versions

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: The chart's driver image (its default ``driver.repository`` + ``driver.image``, which rackctl keeps). The
#: operator tags it ``<driver.version>-<ID><VERSION_ID>`` of the node's ``/etc/os-release``; the suffix for
#: ``cluster.versions.os`` comes from :func:`bootstrap.inventory.driver_images.published_driver_tag`.
DRIVER_IMAGE = "nvcr.io/nvidia/driver"


@dataclass
class GpuPlan:
    """What the GPU operator release needs: values, node labels, corrections made, problems found."""

    release: Release | None
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    corrections: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def gpu_nodes(inv: Inventory) -> list[Node]:
    """Workers that carry GPUs."""
    return [n for n in inv.workers if inv.gpus_of(n).count > 0]


def driver_version(inv: Inventory, profile: GpuProfile) -> str:
    """The driver a profile runs: its pin, else the cluster's, else the chart line's default."""
    versions = inv.cluster.resolved_versions()
    chart_default = operator_default_driver(versions.gpu_operator) or ""
    return profile.driver_version or versions.nvidia_driver or chart_default


def _profile_problems(inv: Inventory) -> list[Problem]:
    problems = []
    for model, profile in inv.nvidia.profiles.items():
        path = f"nvidia.profiles.{model}"
        hw = inv.hardware(model)
        if hw is None:
            known = sorted({n.model for n in inv.nodes})
            problems.append(Problem(path, f"unknown hardware model {model!r}", did_you_mean(model, known)))
            continue
        # The GPUs the model's nodes carry (an R760xa may have L40S, which has no MIG, or H100 PCIe).
        carried = sorted({inv.gpus_of(n).type for n in inv.nodes if n.model == model}) or hw.gpu_types
        without_mig = [g for g in carried if g not in GPU_TYPES or not GPU_TYPES[g].mig]
        if profile.mig_strategy != "none" and without_mig:
            problems.append(
                Problem(
                    f"{path}.mig_strategy",
                    f"{profile.mig_strategy!r} but {model} nodes carry {', '.join(without_mig) or 'no GPUs'} (no MIG)",
                    "set mig_strategy: none for this model",
                )
            )
        if profile.mig_config is not None and profile.mig_config not in MIG_PROFILES_80GB:
            problems.append(
                Problem(
                    f"{path}.mig_config",
                    f"unknown MIG config {profile.mig_config!r}",
                    did_you_mean(profile.mig_config, MIG_PROFILES_80GB),
                )
            )
        problems += _fabric_manager_problems(inv, model, profile)
    return problems


def _fabric_manager_problems(inv: Inventory, model: str, profile: GpuProfile) -> list[Problem]:
    """A host Fabric Manager pinned at another version than the driver is refused before anything installs."""
    if profile.fabric_manager_version is None:
        return []
    path = f"nvidia.profiles.{model}.fabric_manager_version"
    if profile.driver != "host":
        return [
            Problem(
                path, "the operator's driver container runs Fabric Manager itself", "remove it, or set driver: host"
            )
        ]
    try:
        check_versions(driver_version(inv, profile), profile.fabric_manager_version, field=path)
    except InvalidInput as exc:
        return exc.problems
    return []


def _agreeing(inv: Inventory, models: list[str], attr: str, value_of: Any, what: str) -> tuple[Any, list[Problem]]:
    """The one value ``value_of(profile)`` all ``models`` share, or a problem naming two that differ."""
    seen: dict[Any, str] = {}
    for model in models:
        seen.setdefault(value_of(inv.nvidia.profile_for(model)), model)
    if len(seen) <= 1:
        return next(iter(seen), None), []
    (v1, m1), (v2, m2) = list(seen.items())[:2]
    return v1, [
        Problem(
            f"nvidia.profiles.{m2}.{attr}",
            f"{what} is cluster-wide: {m1} has {v1!r}, {m2} has {v2!r}",
            f"use the same {attr} in nvidia.profiles.{m1} and nvidia.profiles.{m2}",
        )
    ]


def gpu_operator(inv: Inventory) -> GpuPlan:
    """The GPU operator release for this inventory (``None`` when no node has GPUs)."""
    versions = inv.cluster.resolved_versions()
    plan = GpuPlan(release=None, problems=_profile_problems(inv))
    nodes = gpu_nodes(inv)
    if not nodes:
        return plan
    models = sorted({n.model for n in nodes})
    operator_models = [m for m in models if inv.nvidia.profile_for(m).driver == "operator"]
    mig_models = [m for m in models if inv.nvidia.profile_for(m).mig_strategy != "none"]
    mig_strategy, problems = _agreeing(inv, mig_models, "mig_strategy", lambda p: p.mig_strategy, "mig.strategy")
    plan.problems += problems
    driver, problems = _agreeing(
        inv, operator_models, "driver_version", lambda p: driver_version(inv, p), "the operator's driver version"
    )
    plan.problems += problems

    line = operator_line(versions.gpu_operator)
    if line in OPERATOR_DOCKER_DEFAULT:
        plan.corrections.append(
            f"GPU operator chart {versions.gpu_operator} defaults operator.defaultRuntime to docker; "
            "rackctl sets containerd (nodes run containerd, no docker)"
        )
    slicing = {m: inv.nvidia.profile_for(m).time_slicing_replicas for m in models}
    values: dict[str, Any] = {
        "driver": {
            "enabled": bool(operator_models),
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"},
        },
        "toolkit": {
            "enabled": True,
            "env": [
                {"name": "CONTAINERD_CONFIG", "value": CONTAINERD_CONFIG},
                {"name": "CONTAINERD_SOCKET", "value": CONTAINERD_SOCKET},
                {"name": "CONTAINERD_RUNTIME_CLASS", "value": "nvidia"},
                {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "true"},
            ],
        },
        "devicePlugin": {"enabled": True},
        "mig": {"strategy": mig_strategy or "single"},
        "migManager": {"enabled": bool(mig_models)},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "honorLabels": False,
                "additionalLabels": {"release": PROMETHEUS_RELEASE},
            },
        },
        "nfd": {"enabled": True},
        "cdi": {"enabled": inv.nvidia.cdi},
    }
    if operator_sets_runtime(versions.gpu_operator):  # from v25.3.0 the chart has no operator.defaultRuntime
        values = {"operator": {"defaultRuntime": "containerd"}, **values}
    if operator_models and driver:
        values["driver"]["version"] = driver
    if any(slicing.values()):
        values["devicePlugin"]["config"] = {"name": "time-slicing-config", "create": True, "default": "any"}
        values["devicePlugin"]["config"]["data"] = {"any": _time_slicing(max(r for r in slicing.values() if r))}

    for node in nodes:
        profile = inv.nvidia.profile_for(node.model)
        labels: dict[str, str] = {}
        if profile.driver == "host":
            labels["nvidia.com/gpu.deploy.driver"] = "false"
        mig = node.mig_profile or profile.mig_config
        if profile.mig_strategy != "none":
            labels["nvidia.com/mig.config"] = mig or "all-disabled"
        elif node.mig_profile is not None:
            index = inv.nodes.index(node)
            plan.problems.append(
                Problem(
                    f"nodes[{index}].mig_profile",
                    f"{node.hostname} asks for MIG {node.mig_profile!r} but nvidia.profiles.{node.model}.mig_strategy "
                    "is none",
                    f"set nvidia.profiles.{node.model}.mig_strategy: single (or mixed), or remove mig_profile",
                )
            )
        plan.node_labels[node.hostname] = labels

    plan.release = Release(
        name="gpu-operator",
        repo="https://helm.ngc.nvidia.com/nvidia",
        chart="gpu-operator",
        version=versions.gpu_operator,
        namespace=inv.nvidia.namespace,
        values=values,
        sources=("nvidia.profiles", "cluster.versions.gpu_operator", "cluster.versions.nvidia_driver"),
    )
    return plan


def _time_slicing(replicas: int) -> str:
    """The device plugin's time-slicing config (a YAML document inside the ConfigMap)."""
    return (
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
        f"      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
    )


def driver_image(inv: Inventory) -> str | None:
    """The driver container image the operator pulls on the nodes (``cluster.versions.os``); None without an
    operator-managed driver, a known version or an image NVIDIA publishes for that OS (the inventory rule
    ``operator-driver-image`` refuses that case)."""
    plan = gpu_operator(inv)
    driver = plan.release.values["driver"] if plan.release else {}
    tag = published_driver_tag(inv.cluster.resolved_versions().os)
    if not driver.get("enabled") or not driver.get("version") or tag is None:
        return None
    return f"{DRIVER_IMAGE}:{driver['version']}-{tag}"
