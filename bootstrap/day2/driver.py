"""``rackctl driver upgrade --version V``: checks, the plan, and what it renders (the operator path is executed
by :mod:`bootstrap.day2.driver_operator` once the cluster has a kubeconfig).

Checks before anything (:func:`check_version`, matrix in :mod:`bootstrap.day2.driver_matrix`): the version
is well formed; allowed by the driver requirements of the inventory's Triton release (its CUDA, or an older
data-center branch its notes list); of a branch the inventory's GPU Operator line's component matrix names.
A Triton release or operator line rackctl does not know is a warning naming the inventory field, not a
refusal. The path comes from ``cluster.gpu_driver``:

- ``operator``: a GPU Operator upgrade with ``driver.version`` set, rolled by the operator's own upgrade
  controller under its policy (one node at a time by default); rendered as a Helm values file;
- ``host``: node by node in batches: drain, driver and Fabric Manager (NVSwitch nodes) at exactly the same
  version, reboot, verify GPUs and Fabric Manager, uncordon; rendered as the Ansible inventory plus the
  vars of ``playbooks/driver-upgrade.yml`` (role ``nvidia_driver_upgrade``), and executed by
  :mod:`bootstrap.day2.driver_host`.

Executing: the operator path runs when ``<state-dir>/kubeconfig`` exists
(:mod:`bootstrap.day2.driver_operator`), the host path by :mod:`bootstrap.day2.driver_host`; this module only
checks, plans and renders.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bootstrap.day2.driver_matrix import (
    OPERATOR_DRIVER_BRANCHES,
    OPERATOR_KNOWN_DRIVERS,
    OPERATOR_UPGRADE_POLICY,
    TRITON_CUDA,
    triton_driver_verdict,
)
from bootstrap.environment import Environment
from bootstrap.errors import InvalidInput, Problem
from bootstrap.firmware.plan import rollout_policy
from bootstrap.fsutil import atomic_write_text
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.profiles import operator_line
from bootstrap.rollout import RolloutNode, RolloutPolicy, plan_batches

DRIVER_VERSION_RE = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")
PLAYBOOK = "driver-upgrade.yml"


@dataclass
class DriverPlan:
    """The checks' verdicts and the per-node steps of one driver upgrade."""

    version: str
    path: str  # operator | host
    checks: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)
    steps: dict[str, list[str]] = field(default_factory=dict)
    rendered: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "path": self.path,
            "checks": self.checks,
            "warnings": self.warnings,
            "batches": self.batches,
            "steps": self.steps,
            "rendered": self.rendered,
        }


def _limited(path: str, gpu_nodes: list[Any], only: Collection[str]) -> list[Any]:
    """The GPU nodes ``--limit`` keeps; refused on the operator path and when it keeps none."""
    if path == "operator":
        raise InvalidInput(
            "--limit does not apply to the GPU Operator's upgrade",
            problems=[
                Problem(
                    "--limit",
                    "the GPU Operator upgrades every GPU node itself (cluster.gpu_driver: operator)",
                    "drop --limit",
                )
            ],
        )
    kept = [n for n in gpu_nodes if n.hostname in only]
    if not kept:
        names = ", ".join(n.hostname for n in gpu_nodes)
        raise InvalidInput(
            "--limit selects no GPU node",
            problems=[Problem("--limit", f"{', '.join(sorted(only))}: no GPU there", f"name GPU nodes: {names}")],
        )
    return kept


def branch_of(version: str) -> str:
    """``580.95.05`` -> ``580``."""
    return version.split(".", 1)[0]


def check_version(inventory: Inventory, version: str) -> tuple[list[dict[str, str]], list[str]]:
    """The checks of ``version`` (each ``{"check", "result"}``) and warnings; raises :class:`InvalidInput`
    naming every check that refuses it."""
    problems: list[Problem] = []
    checks: list[dict[str, str]] = []
    warnings: list[str] = []
    if not DRIVER_VERSION_RE.match(version):
        raise InvalidInput(
            f"--version {version!r} is not an NVIDIA driver version",
            problems=[Problem("--version", repr(version), "give a full data-center driver version, e.g. 580.95.05")],
        )
    versions = inventory.cluster.resolved_versions()
    _check_triton(versions.triton, version, checks, warnings, problems)
    _check_operator(versions.gpu_operator, version, checks, warnings, problems)
    if problems:
        raise InvalidInput(f"driver {version} cannot be used with this inventory's stack", problems=problems)
    return checks, warnings


def _check_triton(
    triton: str, version: str, checks: list[dict[str, str]], warnings: list[str], problems: list[Problem]
) -> None:
    """The driver against the CUDA requirements of the inventory's Triton release."""
    verdict = triton_driver_verdict(triton, version)
    if verdict is None:
        warnings.append(
            f"cluster.versions.triton: Triton {triton} is not in rackctl's driver matrix (known: "
            f"{', '.join(TRITON_CUDA)}), so its CUDA driver requirement was not checked: read the release's "
            f"'Driver Requirements' notes, or set cluster.versions.triton to a known release"
        )
    elif verdict.accepted is None:
        warnings.append(verdict.reason)
    elif verdict.accepted:
        checks.append({"check": "triton", "result": verdict.reason})
    else:
        problems.append(
            Problem("--version", verdict.reason, f"pick a driver of {verdict.fix}, or change cluster.versions.triton")
        )


def _check_operator(
    chart: str, version: str, checks: list[dict[str, str]], warnings: list[str], problems: list[Problem]
) -> None:
    """The driver against the component matrix of the inventory's GPU Operator line."""
    line = operator_line(chart)
    branches = OPERATOR_DRIVER_BRANCHES.get(line)
    if branches is None:
        warnings.append(
            f"cluster.versions.gpu_operator: GPU Operator {chart} (line {line}) is not in rackctl's driver matrix "
            f"(known lines: {', '.join(OPERATOR_DRIVER_BRANCHES)}), so its driver support was not checked: read "
            f"the component matrix of NVIDIA's GPU Operator 'Platform Support' page for {line}, or set "
            f"cluster.versions.gpu_operator to a release of a known line"
        )
        return
    branch = branch_of(version)
    if branch not in branches:
        lines = [ln for ln, bs in OPERATOR_DRIVER_BRANCHES.items() if branch in bs]
        problems.append(
            Problem(
                "--version",
                f"branch {branch} is not supported by GPU Operator {line}: its component matrix names "
                f"{', '.join(branches)}",
                f"pick a {'/'.join(branches)} driver"
                + (f", or move cluster.versions.gpu_operator to {' or '.join(lines)}" if lines else ""),
            )
        )
        return
    checks.append({"check": "gpu-operator", "result": f"branch {branch} supported by {line}"})
    known = OPERATOR_KNOWN_DRIVERS[line]
    if version not in known:
        named = [v for v in known if branch_of(v) == branch]
        warnings.append(
            f"{version} is of a branch GPU Operator {line} supports but is not among the versions its "
            f"component matrix names (R{branch}: {', '.join(named)}): check NVIDIA's component matrix"
        )


def schedule(inventory: Inventory, gpu_nodes: list[str], policy: RolloutPolicy) -> list[list[str]]:
    """The GPU nodes' batches from the one rollout scheduler (control planes alone, workers within
    max-unavailable; every other node counted as Ready: no Kubernetes to ask yet)."""
    nodes = [
        RolloutNode(n.hostname, control_plane=n.is_control_plane, needs_work=n.hostname in gpu_nodes)
        for n in inventory.nodes
    ]
    return [list(batch.nodes) for batch in plan_batches(nodes, policy).batches]


def plan_upgrade(
    inventory: Inventory,
    version: str,
    *,
    max_unavailable: int | str | None = None,
    only: Collection[str] | None = None,
) -> DriverPlan:
    """Checks, path and per-node steps (reads only the inventory).

    ``max_unavailable``: GPU nodes down at once on the host path (default: the inventory's
    ``firmware.rollout.max_unavailable``); the operator path shows the operator's own one-at-a-time order.
    ``only`` (``--limit``): the host path's GPU nodes to upgrade (the operator upgrades every one itself).
    """
    checks, warnings = check_version(inventory, version)
    plan = DriverPlan(version, inventory.cluster.gpu_driver, checks, warnings)
    gpu_nodes = [n for n in inventory.nodes if inventory.gpus_of(n).count > 0]
    if not gpu_nodes:
        raise InvalidInput("no node of the inventory has GPUs: there is no driver to upgrade")
    if only is not None:
        gpu_nodes = _limited(plan.path, gpu_nodes, only)
    names = [n.hostname for n in gpu_nodes]
    if plan.path == "operator":
        parallel = int(str(OPERATOR_UPGRADE_POLICY["maxParallelUpgrades"]))
        plan.batches = schedule(inventory, names, RolloutPolicy(max_unavailable=parallel))
        shown = ", ".join(f"{k}={v}" for k, v in OPERATOR_UPGRADE_POLICY.items())
        for node in gpu_nodes:
            plan.steps[node.hostname] = [
                f"the GPU Operator's upgrade controller ({shown}) cordons and drains it",
                f"the driver container {version} replaces the old one (Fabric Manager inside it on NVSwitch systems)",
                "the operator validator checks the GPUs; the node is uncordoned",
            ]
        return plan
    settings = rollout_policy(inventory)
    policy = replace(settings, max_unavailable=max_unavailable) if max_unavailable is not None else settings
    plan.batches = schedule(inventory, names, policy)
    for node in gpu_nodes:
        hw = inventory.hardware(node.model)
        fm = bool(hw and hw.fabric_manager)
        steps = ["cordon and drain (rackctl, where Kubernetes knows the node)"]
        steps.append(
            f"install and hold the driver {version}"
            + (f" and nvidia-fabricmanager-{branch_of(version)} at exactly {version}" if fm else "")
        )
        steps += ["reboot", f"verify: nvidia-smi reports {version} on every GPU"]
        if fm:
            steps.append("verify: NVSwitches present and nvidia-fabricmanager active at the same version")
        steps.append("uncordon")
        plan.steps[node.hostname] = steps
    return plan


def render(inventory: Inventory, plan: DriverPlan, state_dir: Path, environment: Environment) -> dict[str, str]:
    """Write what an execution would use under ``<state-dir>/day2/driver-<version>/``; returns the paths."""
    out = Path(state_dir) / "day2" / f"driver-{plan.version}"
    rendered: dict[str, str] = {}
    if plan.path == "operator":
        values = {"driver": {"enabled": True, "version": plan.version, "upgradePolicy": OPERATOR_UPGRADE_POLICY}}
        rendered["values"] = str(atomic_write_text(out / "gpu-operator-values.yml", yaml.safe_dump(values)))
    else:
        hosts = write_ansible_inventory(inventory, state_dir, environment)
        extravars = {
            "nvidia_driver_upgrade_version": plan.version,
            "nvidia_driver_upgrade_branch": branch_of(plan.version),
            "driver_upgrade_batch": max(len(b) for b in plan.batches),
        }
        rendered["inventory"] = str(hosts)
        rendered["extravars"] = str(atomic_write_text(out / "extravars.yml", yaml.safe_dump(extravars)))
        rendered["playbook"] = f"playbooks/{PLAYBOOK}"
    rendered["plan"] = str(atomic_write_text(out / "plan.yml", yaml.safe_dump(plan.as_dict(), sort_keys=False)))
    plan.rendered = rendered
    return rendered
