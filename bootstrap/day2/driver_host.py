"""``rackctl driver upgrade`` on the host path (``cluster.gpu_driver: host``): the rolling execution.

The plan (:mod:`bootstrap.day2.driver`) gives the checked version and the GPU nodes; the batches come from
the one rollout scheduler (:class:`bootstrap.rollout.Rollout`: control planes alone, workers within
max-unavailable, stop at the failure threshold), and nodes are taken out of service through the one
:class:`~bootstrap.rollout.gate.NodeGate` (``ClusterGate`` over ``<state-dir>/kubeconfig``), as
``rackctl firmware apply`` does. Every step is journalled under stage ``driver``:

1. before anything, every GPU node's installed driver is read (``playbooks/driver-installed.yml``): a node
   whose driver (and Fabric Manager) packages are at V and held, with every GPU running V, is "nothing to
   do" and is not touched, so a run after a failure or a kill never reinstalls a done node;
2. per node of a batch: lifecycle ``maintenance``, cordon and drain through the gate (a node Kubernetes
   does not know is not drained, and the record says so);
3. role ``nvidia_driver_upgrade`` on that node only (``playbooks/driver-upgrade.yml``, ``--limit``): the
   exact version from the node's sources, or a refusal that changes nothing; install, hold, reboot,
   ``nvidia-smi`` reports V on every GPU, Fabric Manager running on NVSwitch systems;
4. uncordon, back from ``maintenance``. A node that fails stays cordoned and in ``maintenance``, its record
   and the journal say "left cordoned"; once the inventory's ``firmware.rollout.failure_threshold`` nodes
   have failed no new batch starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bootstrap.ansible_driver import run_playbook
from bootstrap.day2.driver import PLAYBOOK, DriverPlan, branch_of
from bootstrap.environment import Environment
from bootstrap.errors import RackctlError
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal, StepHandle
from bootstrap.rollout import Batch, Rollout, RolloutNode, RolloutPolicy
from bootstrap.rollout.gate import NodeGate
from bootstrap.rollout.report import (
    NodeOutcome,
    RolloutReport,
    end_reason,
    mark_unstarted,
    ready_for_rollout,
    run_batches,
)
from bootstrap.stages.playbook import TaskProgress, runs_dir

STAGE = "driver"
READ_PLAYBOOK = "driver-installed.yml"
#: the facts the two playbooks set (role nvidia_driver_upgrade)
INSTALLED_FACT = "nvidia_driver_upgrade_installed"
REPORT_FACT = "nvidia_driver_upgrade_report"
#: the cause of a node's ``maintenance`` while the rollout works on it (how a later run recognises it)
CAUSE = "driver rollout"


class DriverUpgradeFailed(RackctlError):
    """A node's driver did not reach the target (the message says where it stopped)."""


@dataclass(frozen=True)
class InstalledDriver:
    """What a node has: each driver package's version and selection, and what its running driver reports."""

    node: str
    packages: dict[str, dict[str, str]] = field(default_factory=dict)
    running: tuple[str, ...] = ()
    smi_error: str = ""
    error: str = ""
    """Why it could not be read ("" when it was)."""

    @classmethod
    def from_fact(cls, node: str, fact: Mapping[str, Any]) -> InstalledDriver:
        packages = {
            str(name): {"version": str(p.get("version") or ""), "selection": str(p.get("selection") or "")}
            for name, p in (fact.get("packages") or {}).items()
        }
        running = tuple(str(v).strip() for v in fact.get("running") or [] if str(v).strip())
        return cls(node, packages, running, str(fact.get("smi_error") or "").strip())

    def at(self, version: str) -> bool:
        """Every package at ``version`` (any Debian revision) and held, and every GPU running it."""
        return (
            not self.error
            and bool(self.packages)
            and all(p["version"].startswith(f"{version}-") and p["selection"] == "hold" for p in self.packages.values())
            and bool(self.running)
            and set(self.running) == {version}
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "packages": self.packages,
            "running": sorted(set(self.running)),
            "gpus_reporting": len(self.running),
            **({"smi_error": self.smi_error} if self.smi_error and not self.running else {}),
            **({"error": self.error} if self.error else {}),
        }

    def describe(self) -> str:
        """``cuda-drivers-580 580.95.05-1 (hold), running 580.95.05``, in words."""
        if self.error:
            return f"unknown ({self.error})"
        pkgs = ", ".join(
            f"{name} {p['version']} ({p['selection']})" if p["version"] else f"{name} not installed"
            for name, p in self.packages.items()
        )
        running = "/".join(sorted(set(self.running))) or f"no driver answering ({self.smi_error or 'nvidia-smi'})"
        return f"{pkgs or 'no driver package'}; running {running}"


@dataclass
class NodeUpgrade:
    """What the role did on one node."""

    ok: bool
    message: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    """``nvidia_driver_upgrade_report``: before, after, installed, rebooted, boot ids, what was not checked."""
    output: str = ""
    """Where Ansible's output of the run is kept."""


class DriverNodes(Protocol):
    """The node side of a host-driver upgrade: read what a node has, upgrade one node."""

    def read(self, nodes: list[str]) -> dict[str, InstalledDriver]: ...

    def upgrade(self, node: str) -> NodeUpgrade: ...


class AnsibleDriverNodes:
    """:class:`DriverNodes` over SSH: the two playbooks of role ``nvidia_driver_upgrade`` through
    :func:`bootstrap.ansible_driver.run_playbook`, against the rendered Ansible inventory; output kept under
    ``<state-dir>/ansible/runs/<run-id>-driver-*``."""

    def __init__(
        self,
        inventory: Inventory,
        state_dir: Path,
        environment: Environment,
        version: str,
        run_id: int,
        *,
        tasks: TaskProgress | None = None,
    ) -> None:
        self.inventory = inventory
        self.state_dir = Path(state_dir)
        self.environment = environment
        self.version = version
        self.run_id = run_id
        self._hosts: Path | None = None
        self._lock = threading.Lock()
        self.tasks = tasks  #: each playbook's tasks shown as they start and end

    def _inventory(self) -> Path:
        with self._lock:
            if self._hosts is None:
                self._hosts = write_ansible_inventory(self.inventory, self.state_dir, self.environment)
            return self._hosts

    def _extravars(self, node: str | None = None) -> dict[str, Any]:
        emulated = self.environment.emulated_devices(self.inventory).get(node, "") if node else ""
        return {
            "nvidia_driver_upgrade_version": self.version,
            "nvidia_driver_upgrade_branch": branch_of(self.version),
            "nvidia_driver_upgrade_emulated": emulated,
        }

    def read(self, nodes: list[str]) -> dict[str, InstalledDriver]:
        if not nodes:
            return {}
        result = run_playbook(
            READ_PLAYBOOK,
            self._inventory(),
            limit=nodes,
            extravars=self._extravars(),
            facts_var=INSTALLED_FACT,
            work_dir=runs_dir(self.state_dir) / f"{self.run_id}-driver-read",
            on_task=self.tasks.ended if self.tasks else None,
            on_task_start=self.tasks.started if self.tasks else None,
        )
        out = {}
        for node in nodes:
            host = result.hosts.get(node)
            if host is not None and host.success and node in result.facts:
                out[node] = InstalledDriver.from_fact(node, result.facts[node])
            else:
                why = (host.message if host else "") or " ".join(result.output_tail.split())[-300:] or "not reached"
                out[node] = InstalledDriver(node, error=why)
        return out

    def upgrade(self, node: str) -> NodeUpgrade:
        work_dir = runs_dir(self.state_dir) / f"{self.run_id}-driver-{node}"
        result = run_playbook(
            PLAYBOOK,
            self._inventory(),
            limit=[node],
            extravars=self._extravars(node),
            facts_var=REPORT_FACT,
            work_dir=work_dir,
            on_task=self.tasks.ended if self.tasks else None,
            on_task_start=self.tasks.started if self.tasks else None,
        )
        host = result.hosts.get(node)
        output = str(result.artifacts or work_dir)
        if host is None:
            tail = " ".join(result.output_tail.split())[-300:]
            return NodeUpgrade(False, f"the play did not run on {node}: {tail or 'no output'}", output=output)
        report = dict(result.facts.get(node) or {})
        if host.success and result.rc == 0 and report:
            return NodeUpgrade(True, report=report, output=output)
        message = host.message or ("unreachable" if host.unreachable else f"ansible rc {result.rc}")
        return NodeUpgrade(False, message, report=report, output=output)


@dataclass
class DriverNodeOutcome(NodeOutcome):
    """What the rollout did on one node: the shared outcome (``records``: cordon, reboot, uncordon) plus the
    driver before and after, the steps taken and where the node is left."""

    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, str]] = field(default_factory=list)
    """Each step taken on the node, in order: ``{"step", "result"}``."""
    cordon: str = "not touched"
    """Where the node is left: ``not touched`` | ``uncordoned`` | ``left cordoned`` | ``not cordoned (why)``."""

    def details(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "steps": self.steps, "cordon": self.cordon}


@dataclass(kw_only=True)
class DriverRolloutReport(RolloutReport[DriverNodeOutcome]):
    """The end of one host-driver rollout: the shared report, with the target version."""

    version: str

    def header(self) -> dict[str, Any]:
        return {"version": self.version}


class HostDriverRollout:
    """Runs the host path of a :class:`DriverPlan` batch by batch (see the module docstring).

    ``excluded``: nodes not reachable in-band here, with why (``Environment.out_of_band_only``): failed,
    never touched. ``on_event(kind, node, text)``: progress (``batch``, ``cordon``, ``upgrade``, ``done``,
    ``failed``, ``skip``).
    """

    def __init__(
        self,
        inventory: Inventory,
        plan: DriverPlan,
        journal: Journal,
        run_id: int,
        *,
        nodes: DriverNodes,
        gate: NodeGate,
        policy: RolloutPolicy,
        excluded: Mapping[str, str] | None = None,
        on_event: Callable[[str, str, str], None] | None = None,
    ) -> None:
        if plan.path != "host":
            raise ValueError(f"HostDriverRollout runs the host path, not the {plan.path} path")
        self.inventory = inventory
        self.plan = plan
        self.version = plan.version
        self.journal = journal
        self.run_id = run_id
        self.nodes = nodes
        self.gate = gate
        self.policy = policy
        self.excluded = dict(excluded or {})
        self.on_event = on_event or (lambda _kind, _node, _text: None)
        self.gpu_nodes = list(plan.steps)
        self.outcomes = {n: DriverNodeOutcome(n) for n in self.gpu_nodes}

    # -- the rollout -------------------------------------------------------------------------------
    def run(self) -> DriverRolloutReport:
        """Read every GPU node, then roll out; returns the report (never raises for a node's failure)."""
        self.journal.register_nodes(self.gpu_nodes, run_id=self.run_id)
        for node, why in self.excluded.items():
            if node in self.outcomes:
                self._settle_failed(node, f"not reachable in-band in this environment: {why}; not touched")
        readable = [n for n in self.gpu_nodes if n not in self.excluded]
        self.on_event("read", "", f"reading the installed driver of {', '.join(readable) or 'no node'}")
        installed = self.nodes.read(readable)
        to_do: list[str] = []
        for node in readable:
            found = installed.get(node) or InstalledDriver(node, error="not read")
            outcome = self.outcomes[node]
            outcome.before = found.as_dict()
            detail = {"installed": found.describe(), "target": self.version}
            status = "failed" if found.error else "completed"
            self.journal.record_step(self.run_id, node, STAGE, "read", status=status, destructive=False, detail=detail)
            outcome.steps.append({"step": "read", "result": found.describe()})
            if found.error:
                self._settle_failed(node, f"could not read its driver: {found.error}; not touched")
            elif found.at(self.version):
                self._nothing_to_do(node, found)
            else:
                to_do.append(node)
        fleet = [
            RolloutNode(n.hostname, control_plane=n.is_control_plane, ready=self.ready(n.hostname), needs_work=False)
            if n.hostname not in to_do
            else RolloutNode(n.hostname, control_plane=n.is_control_plane, ready=self.ready(n.hostname))
            for n in self.inventory.nodes
        ]
        rollout = Rollout(fleet, self.policy)
        run_batches(rollout, self.outcomes, self._run_batch, self.on_event)
        return self._report(rollout)

    def _run_batch(self, batch: Batch) -> Iterable[tuple[str, bool]]:
        """The batch's nodes, each on its own (in parallel when there are several)."""
        if len(batch.nodes) == 1:  # in this thread: Ctrl-C reaches it
            return [(batch.nodes[0], self._node(batch.nodes[0], batch))]
        with ThreadPoolExecutor(max_workers=len(batch.nodes), thread_name_prefix="driver") as pool:
            futures = {name: pool.submit(self._node, name, batch) for name in batch.nodes}
            return [(name, future.result()) for name, future in futures.items()]

    def ready(self, node: str) -> bool:
        """Ready for the scheduler (:func:`ready_for_rollout`)."""
        return ready_for_rollout(self.gate, self.journal, node)

    def _left_by_rollout(self, node: str) -> bool:
        status = self.journal.nodes().get(node)
        history = self.journal.history(node)
        return (
            status is not None
            and status.state is NodeState.MAINTENANCE
            and bool(history)
            and history[-1].cause.startswith(CAUSE)
        )

    def _nothing_to_do(self, node: str, found: InstalledDriver) -> None:
        """At the target: not touched; one an earlier (failed or killed) run left cordoned is given back."""
        outcome = self.outcomes[node]
        outcome.status = "nothing-to-do"
        outcome.message = f"already at {self.version}, held: not touched"
        outcome.after = found.as_dict()
        if self._left_by_rollout(node):
            with self._step(node, "uncordon") as handle:
                handle.detail["gate"] = self.gate.uncordon(node)
            self._uncordoned(node, handle.detail["gate"])
            back = self.journal.status(node).left_from() or NodeState.REGISTERED
            self.journal.transition(
                node, back, f"{CAUSE} done: at {self.version} (an earlier run's upgrade)", run_id=self.run_id
            )
            outcome.message = f"already at {self.version}, held (an earlier run upgraded it): uncordoned now"
        self.on_event("skip", node, outcome.message)

    def _settle_failed(self, node: str, message: str) -> None:
        outcome = self.outcomes[node]
        outcome.status, outcome.message = "failed", message
        self.on_event("failed", node, message)

    def _report(self, rollout: Rollout) -> DriverRolloutReport:
        mark_unstarted(rollout, self.outcomes)
        reason = end_reason(
            rollout,
            [n for n, o in self.outcomes.items() if o.status == "failed"],
            rerun=f"`rackctl driver upgrade --version {self.version}`",
            done=f"every GPU node runs driver {self.version}",
            rerun_if_failed=True,
        )
        nodes = [self.outcomes[n] for n in self.gpu_nodes]
        return DriverRolloutReport(nodes, rollout.batches, rollout.stopped, reason, version=self.version)

    # -- one node ----------------------------------------------------------------------------------
    def _step(self, node: str, key: str) -> StepHandle:
        return self.journal.step(self.run_id, node, STAGE, key, destructive=True, force=True)

    def _uncordoned(self, node: str, text: str) -> None:
        outcome = self.outcomes[node]
        outcome.records["uncordon"] = text
        outcome.steps.append({"step": "uncordon", "result": text})
        outcome.cordon = "uncordoned" if text == "uncordoned" else f"not cordoned ({text})"

    def _node(self, name: str, batch: Batch) -> bool:
        """Upgrade one node; True when it runs the target. A failure is recorded, never raised."""
        outcome = self.outcomes[name]
        outcome.status = "running"
        try:
            self._upgrade(name, batch)
        except Exception as exc:  # recorded, then the node's failure (never a crash of the rollout)
            text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            cordon = outcome.records.get("cordon", "")
            held = "cordoned" in cordon or not cordon  # a drain that failed leaves the node cordoned too
            left = f"left cordoned: {text}" if held else f"left in maintenance ({cordon}): {text}"
            with self._step(name, "uncordon") as step:
                step.detail["gate"] = left
            outcome.records["uncordon"] = left
            outcome.steps.append({"step": "uncordon", "result": left})
            outcome.cordon = "left cordoned" if held else f"not cordoned ({cordon})"
            outcome.status, outcome.message = "failed", text
            self.on_event("failed", name, left)
            return False
        outcome.status = "done"
        self.on_event("done", name, outcome.message)
        return True

    def _upgrade(self, name: str, batch: Batch) -> None:
        outcome = self.outcomes[name]
        if self.journal.status(name).state is not NodeState.MAINTENANCE:
            self.journal.transition(
                name, NodeState.MAINTENANCE, f"{CAUSE} to {self.version}, batch {batch.index}", run_id=self.run_id
            )
        with self._step(name, "cordon") as step:
            outcome.records["cordon"] = step.detail["gate"] = self.gate.cordon(name)
        outcome.steps.append({"step": "cordon", "result": outcome.records["cordon"]})
        self.on_event("cordon", name, outcome.records["cordon"])
        self.on_event("upgrade", name, f"installing {self.version}, then reboot and verify")
        with self._step(name, f"upgrade:{self.version}") as step:
            result = self.nodes.upgrade(name)
            report = result.report
            after = InstalledDriver.from_fact(name, report["after"]) if report.get("after") else None
            outcome.after = after.as_dict() if after else {}
            step.detail.update(
                ok=result.ok,
                output=result.output,
                installed=dict(report.get("installed") or {}),
                after=after.describe() if after else "",
            )
            outcome.records["reboot"] = step.detail["reboot"] = reboot_record(report)
            if not result.ok:
                outcome.steps.append({"step": f"upgrade:{self.version}", "result": f"failed: {result.message}"})
                raise DriverUpgradeFailed(result.message)
            done = f"{after.describe() if after else self.version}; {outcome.records['reboot']}"
            if report.get("not_checked"):
                done += f"; {report['not_checked']}"
            outcome.steps.append({"step": f"upgrade:{self.version}", "result": done})
        with self._step(name, "uncordon") as step:
            step.detail["gate"] = self.gate.uncordon(name)
        self._uncordoned(name, step.detail["gate"])
        back = self.journal.status(name).left_from() or NodeState.REGISTERED
        self.journal.transition(name, back, f"{CAUSE} done: at {self.version}", run_id=self.run_id)
        outcome.message = f"runs {self.version} ({outcome.records['reboot']})"


def reboot_record(report: Mapping[str, Any]) -> str:
    """The reboot, in words, from the role's report."""
    before, after = report.get("boot_id_before", ""), report.get("boot_id_after", "")
    if not report:
        return "unknown (the role reported nothing)"
    if str(report.get("rebooted")).lower() == "true":
        took = f" in {report['reboot_s']} s" if report.get("reboot_s") else ""
        return f"rebooted{took} (boot id {before[:8]} -> {after[:8]})"
    return "not rebooted: the running driver already was the target"
