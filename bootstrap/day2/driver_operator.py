"""The operator path of ``rackctl driver upgrade``, executed: the GPU Operator's ClusterPolicy gets the new
driver version, and rackctl watches the operator's upgrade controller roll it out node by node to the end.

What the GPU Operator does (cited from its sources, read through the ``search`` tool):

- The driver is upgraded by changing ``spec.driver.version`` of the ClusterPolicy
  (``clusterpolicies.nvidia.com``, the chart names it ``cluster-policy``): NVIDIA GPU Operator docs,
  "GPU Driver Upgrades", https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-upgrades.html
  ("Upgrades with the Upgrade Controller": ``kubectl patch clusterpolicies.nvidia.com/cluster-policy``).
  The upgrade controller acts only while ``spec.driver.upgradePolicy.autoUpgrade`` is true; with it false it
  removes the state labels (NVIDIA/gpu-operator ``controllers/upgrade_controller.go``, ``Reconcile`` and
  ``removeNodeUpgradeStateLabels``). rackctl sets the policy it renders
  (:data:`bootstrap.day2.driver_matrix.OPERATOR_UPGRADE_POLICY`) in the same merge patch.
- Per node it keeps the state in the label ``nvidia.com/<driver>-driver-upgrade-state`` with driver name
  ``gpu`` (``upgrade.SetDriverName("gpu")`` in the operator's ``cmd/gpu-operator/main.go``), so
  ``nvidia.com/gpu-driver-upgrade-state``; a node labelled ``nvidia.com/gpu-driver-upgrade.skip=true`` is
  skipped. The states and their meaning: NVIDIA/k8s-operator-libs ``pkg/upgrade/consts.go``
  (``UpgradeStateLabelKeyFmt``, ``UpgradeSkipNodeLabelKeyFmt``, ``UpgradeState*``): "" (not processed yet),
  ``upgrade-required``, ``cordon-required``, ``wait-for-jobs-required``, ``pod-deletion-required``,
  ``drain-required``, ``pod-restart-required``, ``validation-required``, ``uncordon-required``,
  ``upgrade-done`` (driver pod up to date and running, node schedulable), ``upgrade-failed``. Newer
  libraries add ``node-maintenance-required`` / ``post-maintenance-required`` (maintenance-operator mode):
  shown like any other in-progress state.

What rackctl does (:func:`upgrade_with_operator`): find the ClusterPolicy (none, or no CRD: the GPU Operator
is not deployed, nothing is changed); merge-patch ``spec.driver.version`` and ``spec.driver.upgradePolicy``;
then read the GPU nodes' state labels every ``poll_s`` until every one is ``upgrade-done``, one is
``upgrade-failed`` (the node is named), or ``timeout_s`` passes (every node's state is named). A node still
labelled ``upgrade-done`` from an earlier upgrade counts only once it has been seen in another state after
the patch (the operator first marks every out-of-date node ``upgrade-required``), unless the ClusterPolicy
already asked for this version (a run again after an interruption: nothing new for the operator to do).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bootstrap.day2.driver_matrix import OPERATOR_UPGRADE_POLICY
from bootstrap.errors import RackctlError
from bootstrap.kube.api import OperatorApi

#: the GPU Operator's custom resource and its definition
CLUSTER_POLICY = "clusterpolicies.nvidia.com"
CLUSTER_POLICY_CRD = "customresourcedefinitions.apiextensions.k8s.io"
#: the name the chart gives the one ClusterPolicy
DEFAULT_POLICY = "cluster-policy"
#: the upgrade controller's per-node state (k8s-operator-libs UpgradeStateLabelKeyFmt with driver "gpu")
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
#: a node the upgrade controller skips (UpgradeSkipNodeLabelKeyFmt)
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
DONE = "upgrade-done"
FAILED = "upgrade-failed"
#: the states in the order the upgrade controller walks them ("" = not processed yet)
STATES = (
    "",
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
    DONE,
    FAILED,
)


class OperatorNotDeployed(RackctlError):
    """No ClusterPolicy to change: the GPU Operator is not deployed on this cluster."""


@dataclass
class NodeUpgrade:
    """One GPU node as the watch saw it: its state now, every state observed in order, and whether it is
    done (``upgrade-done`` seen after the change reached it) or skipped (with the reason)."""

    node: str
    state: str = ""
    observed: list[str] = field(default_factory=list)
    moved: bool = False
    skipped: str = ""

    @property
    def done(self) -> bool:
        return self.state == DONE and self.moved

    def see(self, state: str) -> bool:
        """Record ``state``; whether it changed."""
        changed = not self.observed or state != self.state
        if changed:
            self.observed.append(state)
        self.state = state
        if state != DONE:
            self.moved = True
        return changed

    def shown(self) -> str:
        """The state in words (the empty label is "not processed yet")."""
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.state == DONE and not self.moved:
            return f"{DONE} (from an earlier upgrade: the operator has not started this one here)"
        return self.state or "not processed by the operator yet (no state label)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "state": self.state,
            "shown": self.shown(),
            "observed": [s or "none" for s in self.observed],
            "done": self.done,
            "skipped": self.skipped or None,
        }


@dataclass
class OperatorUpgrade:
    """The outcome of one operator-driven upgrade: ``done``, ``failed`` or ``timeout``."""

    policy: str
    version: str
    previous_version: str | None
    outcome: str = "running"
    message: str = ""
    nodes: dict[str, NodeUpgrade] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome == "done"

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster_policy": self.policy,
            "version": self.version,
            "previous_version": self.previous_version,
            "outcome": self.outcome,
            "message": self.message,
            "elapsed_s": round(self.elapsed_s, 1),
            "nodes": {name: n.as_dict() for name, n in self.nodes.items()},
        }


def find_policy(api: OperatorApi) -> dict[str, Any]:
    """The cluster's ClusterPolicy (``cluster-policy``, else the only one); :class:`OperatorNotDeployed`
    when there is no ClusterPolicy CRD or no ClusterPolicy, naming what is missing and the fix."""
    fix = "the nvidia stage deploys the GPU Operator (`rackctl up --stages nvidia`); then run this again"
    if api.get_object(CLUSTER_POLICY_CRD, CLUSTER_POLICY) is None:
        raise OperatorNotDeployed(
            f"the GPU Operator is not deployed: this cluster has no CustomResourceDefinition {CLUSTER_POLICY}; "
            f"nothing was changed ({fix})"
        )
    policies = api.objects(CLUSTER_POLICY)
    if not policies:
        raise OperatorNotDeployed(
            f"the GPU Operator is not deployed: no ClusterPolicy ({CLUSTER_POLICY}) exists; nothing was changed ({fix})"
        )
    named = [p for p in policies if p.get("metadata", {}).get("name") == DEFAULT_POLICY]
    if named:
        return named[0]
    if len(policies) == 1:
        return policies[0]
    names = ", ".join(sorted(p.get("metadata", {}).get("name", "?") for p in policies))
    raise RackctlError(
        f"{len(policies)} ClusterPolicies ({names}) and none named {DEFAULT_POLICY}: the GPU Operator acts on "
        f"one only; delete the extra ones, then run this again (nothing was changed)"
    )


def driver_patch(version: str) -> dict[str, Any]:
    """The merge patch of the ClusterPolicy: the driver version and rackctl's rolling upgrade policy."""
    return {"spec": {"driver": {"version": version, "upgradePolicy": dict(OPERATOR_UPGRADE_POLICY)}}}


def upgrade_with_operator(
    api: OperatorApi,
    gpu_nodes: list[str],
    version: str,
    *,
    timeout_s: float,
    poll_s: float = 5.0,
    on_change: Callable[[NodeUpgrade, OperatorUpgrade], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> OperatorUpgrade:
    """Set ``version`` in the ClusterPolicy and watch the GPU nodes until the operator is done, a node
    failed, or ``timeout_s`` passed. ``on_change`` is called for every node whose state changed."""
    policy = find_policy(api)
    name = policy["metadata"]["name"]
    previous = (policy.get("spec", {}).get("driver") or {}).get("version")
    known = api.nodes()
    result = OperatorUpgrade(name, version, str(previous) if previous is not None else None)
    for node in gpu_nodes:
        result.nodes[node] = NodeUpgrade(node)
        if node not in known:
            result.nodes[node].skipped = "not a Kubernetes node: the GPU Operator does not manage it"
        elif known[node].labels.get(SKIP_LABEL) == "true":
            result.nodes[node].skipped = f"labelled {SKIP_LABEL}=true: the GPU Operator skips it"
    watched = {n: u for n, u in result.nodes.items() if not u.skipped}
    if not watched:
        raise RackctlError(
            f"none of the inventory's GPU nodes ({', '.join(gpu_nodes)}) is a Kubernetes node the GPU Operator "
            f"would upgrade: nothing was changed (join them with the kubernetes stage first)"
        )
    again = result.previous_version == version
    for upgrade in watched.values():
        upgrade.moved = again  # same version asked before: its upgrade-done is this version's
    started = clock()
    api.merge_patch(CLUSTER_POLICY, name, driver_patch(version))
    while True:
        labels = {n: k.labels for n, k in api.nodes().items()}
        for node, upgrade in watched.items():
            state = labels[node].get(STATE_LABEL, "") if node in labels else ""
            if upgrade.see(state) and on_change is not None:
                on_change(upgrade, result)
        result.elapsed_s = clock() - started
        failed = [u for u in watched.values() if u.state == FAILED]
        if failed:
            result.outcome = "failed"
            result.message = _failed_message(failed, version)
            return result
        if all(u.done for u in watched.values()):
            result.outcome = "done"
            result.message = f"driver {version} rolled out by the GPU Operator on {', '.join(watched)}"
            return result
        if result.elapsed_s >= timeout_s:
            result.outcome = "timeout"
            states = "; ".join(f"{n}: {u.shown()}" for n, u in watched.items())
            result.message = (
                f"the GPU Operator did not finish driver {version} within {timeout_s:.0f} s ({states}); it goes on "
                f"by itself: run this again to keep watching"
            )
            return result
        sleep(min(poll_s, max(0.0, timeout_s - result.elapsed_s)))


def _failed_message(failed: list[NodeUpgrade], version: str) -> str:
    names = ", ".join(u.node for u in failed)
    before = [u.node for u in failed if u.observed == [FAILED]]
    note = f" ({', '.join(before)} already {FAILED} at the first read after the change)" if before else ""
    return (
        f"driver {version} upgrade failed on {names} ({STATE_LABEL}={FAILED}){note}: read the driver pod's logs "
        f"on it (kubectl -n <gpu-operator namespace> logs -l app=nvidia-driver-daemonset) and its events "
        f"(kubectl describe node {failed[0].node}); the operator moves it on once its driver pod is ready"
    )
