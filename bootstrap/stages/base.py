"""The stage plugin interface: what a bootstrap stage is, what it gets, what it returns.

A stage is a class registered under one of :data:`STAGE_ORDER`'s names::

    from bootstrap.stages.base import (
        NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage,
    )

    @register_stage
    class ProvisionStage(Stage):
        name = "provision"
        description = "PXE-boot and install the OS"
        destructive = True                     # `up` asks first unless --yes

        def plan(self, ctx: StageContext) -> list[PlannedAction]:
            return [PlannedAction(self.name, n, "wipe and install", destructive=True) for n in ctx.nodes]

        def run(self, ctx: StageContext) -> StageResult:
            results = {}
            for node in ctx.nodes:             # or a thread pool: the journal is thread-safe
                try:
                    with ctx.step(node, "write-image", destructive=True) as step:
                        if not step.already_done:          # completed before: never repeated on resume
                            if step.interrupted and not ctx.confirm(f"{node}: redo the image write?"):
                                raise RuntimeError("not confirmed")
                            write_image(ctx.node(node))    # raises on failure: step journalled failed
                            step.detail = {"image": "ubuntu-22.04"}
                    results[node] = NodeResult(node, ok=True)
                except OSError as exc:
                    results[node] = NodeResult(node, ok=False, message=str(exc))
                ctx.progress.node_done(self.name, node, results[node].ok, results[node].message)
            return StageResult.from_nodes(results)

Put it in ``bootstrap/stages/<name>.py`` (a ``-`` in the name becomes ``_``; loaded automatically by
:func:`load_stages`) or anywhere that is imported before the run. Registering a real stage replaces the
"not implemented yet" placeholder.

A stage that can only render and validate what it would apply (no apply path yet, or a predecessor that
was itself only rendered) says so: it returns :meth:`StageResult.not_applied` with a :class:`Rendered`
(where the artefacts are, what checked them, why nothing was applied). The runner journals such nodes
``rendered`` (never ``completed``), moves no node, shows "rendered + validated, not applied: <why>" and
ends the run with ``EXIT_NOT_APPLIED`` (5). ``applies = False`` tells ``plan`` the stage only renders
(:meth:`Stage.applies_in` may say otherwise for a run: the triton stage applies where a cluster exists);
``renders_when_blocked = True`` lets the runner hand it nodes below its ``requires`` state, with the reason
in ``ctx.cannot_apply``, instead of blocking them.

The runner, not the stage, moves nodes along the lifecycle: before the stage a node goes to the stage's
:attr:`Lifecycle.during` state (``provisioning`` for ``provision``), a node the stage reports ``ok`` goes to
its :attr:`Lifecycle.reaches` state, a node reported not ok goes to ``failed`` with the message as cause.
A stage may move nodes itself in between with ``ctx.transition`` when it needs to.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import click

from bootstrap.environment import Environment, HostEnvironment
from bootstrap.errors import EnvironmentMissing, InvalidInput, NotImplementedStage
from bootstrap.journal.states import NodeState
from bootstrap.stages.cluster_inputs import ClusterInputs
from bootstrap.stages.options import (
    BiosOptions,
    FirmwareOptions,
    HelmOptions,
    ProvisionOptions,
    TritonOptions,
    ValidateOptions,
)

if TYPE_CHECKING:
    from bootstrap.inventory.models import Inventory, Node
    from bootstrap.journal.store import Journal, StepHandle

#: The stages of a bootstrap, in the order ``rackctl up`` runs them.
STAGE_ORDER: tuple[str, ...] = (
    "preflight",
    "discover",
    "firmware",
    "bios",
    "provision",
    "os-check",
    "network",
    "kubernetes",
    "nvidia",
    "triton",
)

#: Python entry-point group for stages shipped outside this package.
ENTRY_POINT_GROUP = "rackctl.stages"


@dataclass(frozen=True)
class Lifecycle:
    """How a stage relates to the node lifecycle.

    requires: the least state a node must be in for the stage to run on it.
    done_when: a node at or beyond this state does not need the stage (``None``: only the journal says).
    reaches: the state the runner moves a node to when the stage succeeds on it (``None``: unchanged).
    during: the state the runner moves a node to before the stage starts on it (``provisioning``); when
        the stage is re-run on a node past it (``--force``/``--from``) that is a forced move (a reimage).
    """

    requires: NodeState = NodeState.REGISTERED
    done_when: NodeState | None = None
    reaches: NodeState | None = None
    during: NodeState | None = None


#: Default lifecycle of each stage name; a stage class may set its own ``lifecycle``.
DEFAULT_LIFECYCLE: dict[str, Lifecycle] = {
    "preflight": Lifecycle(NodeState.REGISTERED),
    "discover": Lifecycle(NodeState.REGISTERED, NodeState.DISCOVERED, NodeState.DISCOVERED),
    "firmware": Lifecycle(NodeState.DISCOVERED, NodeState.CONFIGURED),
    "bios": Lifecycle(NodeState.DISCOVERED, NodeState.CONFIGURED, NodeState.CONFIGURED),
    "provision": Lifecycle(NodeState.CONFIGURED, NodeState.PROVISIONED, NodeState.PROVISIONED, NodeState.PROVISIONING),
    # in-band checks of the installed OS over SSH (the Ansible preflight); moves no node
    "os-check": Lifecycle(NodeState.PROVISIONED),
    "network": Lifecycle(NodeState.PROVISIONED, NodeState.JOINED),
    "kubernetes": Lifecycle(NodeState.PROVISIONED, NodeState.JOINED, NodeState.JOINED),
    "nvidia": Lifecycle(NodeState.JOINED, NodeState.READY, NodeState.READY),
    "triton": Lifecycle(NodeState.READY),
}


@dataclass(frozen=True)
class PlannedAction:
    """One thing ``up`` would do: for a node (or the cluster when ``node`` is ``None``)."""

    stage: str
    node: str | None
    action: str
    destructive: bool = False
    #: why it will not happen (e.g. "completed in run 3"); ``None`` when it will
    skip: str | None = None
    #: false when the action only renders and validates: nothing is applied to the node or cluster
    applies: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "node": self.node,
            "action": self.action,
            "destructive": self.destructive,
            "skip": self.skip,
            "applies": self.applies,
        }


#: How the runner, progress and summary name the outcome of a stage that applied nothing.
NOT_APPLIED = "rendered + validated, not applied"


@dataclass(frozen=True)
class Rendered:
    """Artefacts a stage rendered and validated but did not apply: where, what checked them, why not applied."""

    #: the directory holding them (written whole, by rename)
    artefacts: Path
    #: what checked them (``kubernetes-validate --strict 1.33``, typed kubeadm models, ...)
    checked: tuple[str, ...]
    #: why nothing was applied (shown as "rendered + validated, not applied: <why>")
    why: str
    #: what could not be rendered or checked here, and why
    unchecked: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "artefacts": str(self.artefacts),
            "checked": list(self.checked),
            "why": self.why,
            "unchecked": list(self.unchecked),
        }


@dataclass
class NodeResult:
    """Outcome of a stage on one node. ``message`` is the cause recorded when it failed.

    ``applied`` false with ``ok`` true: the stage rendered and validated for this node and applied nothing
    (``message`` says why); the runner journals it ``rendered`` and does not move the node.
    """

    node: str
    ok: bool
    message: str = ""
    changed: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    applied: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "message": self.message,
            "changed": self.changed,
            "data": self.data,
            "applied": self.applied,
        }


@dataclass
class StageResult:
    """Outcome of a stage. Nodes missing from ``nodes`` share the stage's ``ok`` (and, when ``rendered`` is
    set, are not applied)."""

    ok: bool
    nodes: dict[str, NodeResult] = field(default_factory=dict)
    message: str = ""
    #: set when the stage rendered and validated artefacts without applying them (all or some nodes)
    rendered: Rendered | None = None
    #: what a cluster-wide stage measured (JSON data, no secrets), shown as the stage's ``data`` in ``up --json``
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_nodes(cls, results: dict[str, NodeResult] | Iterable[NodeResult], message: str = "") -> StageResult:
        """A result that is ok when every node is ok."""
        by_node = results if isinstance(results, dict) else {r.node: r for r in results}
        return cls(ok=all(r.ok for r in by_node.values()), nodes=dict(by_node), message=message)

    @classmethod
    def applied(cls, nodes: Iterable[str], *, message: str, data: dict[str, Any]) -> StageResult:
        """A cluster-wide stage applied for every node: each node ok and applied, sharing ``message``."""
        results = {n: NodeResult(n, ok=True, message=message, data=data) for n in nodes}
        return cls(ok=True, nodes=results, message=message, data=data)

    @classmethod
    def not_applied(
        cls,
        nodes: Iterable[str],
        rendered: Rendered,
        *,
        message: str = "",
        why_per_node: Mapping[str, str] | None = None,
    ) -> StageResult:
        """Rendered and validated, applied on no node: each node is ok, not applied, with its reason."""
        why = why_per_node or {}
        results = {n: NodeResult(n, ok=True, message=why.get(n, rendered.why), applied=False) for n in nodes}
        return cls(ok=True, nodes=results, message=message, rendered=rendered)


class StageInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a stage that knows each node's result so far (``result``: the nodes cut mid-work and
    those never started named as such); the runner reports them with the interrupted run."""

    def __init__(self, result: StageResult) -> None:
        super().__init__(result.message or "interrupted (Ctrl-C)")
        self.result = result


class ProgressReporter(Protocol):
    """What a stage tells the person watching. Implementations are thread-safe."""

    def stage_started(self, stage: str, nodes: Sequence[str]) -> None: ...

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None: ...

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None: ...

    def log(self, message: str) -> None: ...


@runtime_checkable
class NotAppliedReporter(Protocol):
    """A reporter that also shows a stage which rendered and validated but applied nothing (optional:
    the runner falls back to ``stage_finished`` with the message for reporters without it)."""

    def stage_not_applied(self, stage: str, message: str) -> None: ...


@runtime_checkable
class TaskReporter(Protocol):
    """A reporter that also shows each Ansible task as it ends on a node (optional, like
    :class:`NotAppliedReporter`): ``done`` counts the node's ended tasks in this playbook run."""

    def task_done(self, stage: str, node: str, task: str, status: str, done: int) -> None: ...


@runtime_checkable
class RunningTaskReporter(Protocol):
    """A reporter that also shows which Ansible task is running on a node (optional, like
    :class:`TaskReporter`): ``done`` counts the node's tasks ended before it in this playbook run."""

    def task_started(self, stage: str, node: str, task: str, done: int) -> None: ...


class NullProgress:
    """A reporter that shows nothing (tests, ``--json`` without a terminal)."""

    def stage_started(self, stage: str, nodes: Sequence[str]) -> None:
        """Ignore."""

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        """Ignore."""

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
        """Ignore."""

    def log(self, message: str) -> None:
        """Ignore."""

    def stage_not_applied(self, stage: str, message: str) -> None:
        """Ignore."""


class InventoryLike(Protocol):
    """The part of ``bootstrap.inventory.Inventory`` the runner needs: nodes with a hostname."""

    @property
    def nodes(self) -> Sequence[Any]: ...


@dataclass(frozen=True)
class RunOptions:
    """Options of one ``up`` or ``plan``."""

    dry_run: bool = False
    #: re-run completed stages and steps, allow reimage transitions
    force: bool = False
    #: answer yes to confirmations (destructive steps, interrupted destructive steps)
    yes: bool = False
    #: TLS verification off for BMCs (only with an explicit ``--insecure``)
    insecure: bool = False
    #: the stages' own options (``bootstrap.stages.options``), each at "not asked" unless the CLI gave it
    cluster: ClusterInputs = field(default_factory=ClusterInputs)
    helm: HelmOptions = field(default_factory=HelmOptions)
    validate: ValidateOptions = field(default_factory=ValidateOptions)
    triton: TritonOptions = field(default_factory=TritonOptions)
    firmware: FirmwareOptions = field(default_factory=FirmwareOptions)
    bios: BiosOptions = field(default_factory=BiosOptions)
    provision: ProvisionOptions = field(default_factory=ProvisionOptions)
    #: a stage's extra Ansible variables, by stage name (tests and labs; never secrets)
    extravars: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: how the product reaches the world (``bootstrap.environment``): the host by default, the lab's in the lab
    environment: Environment = field(default_factory=HostEnvironment)


@dataclass
class StageContext:
    """Everything a stage gets: the inventory, the nodes to act on, the journal and the options."""

    stage: str
    inventory: Inventory
    #: hostnames this stage acts on (already filtered by ``--limit``, state and resume)
    nodes: list[str]
    journal: Journal
    state_dir: Path
    run_id: int
    options: RunOptions = field(default_factory=RunOptions)
    progress: ProgressReporter = field(default_factory=NullProgress)
    #: this stage re-runs even where completed (``--force``, or ``--from`` this stage or an earlier one)
    forced: bool = False
    #: nodes the stage may render and validate for but must not apply to, with the reason (a node below
    #: the stage's ``requires`` state, e.g. not joined because the kubernetes stage was only rendered)
    cannot_apply: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: what this run of the stage has recorded per node so far (each record carries all of it)
    _facts: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _facts_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def node(self, hostname: str) -> Node:
        """The inventory entry of ``hostname``."""
        for entry in self.inventory.nodes:
            if entry.hostname == hostname:
                return entry
        raise InvalidInput(f"node {hostname!r} is not in the inventory")

    def step(self, node: str, key: str, *, destructive: bool = False) -> StepHandle:
        """Journal one step of this stage on ``node`` (a context manager).

        ``.already_done`` is true when the step completed before (in this node's current lifecycle and
        without ``--force``): skip it. ``.interrupted`` is true when an earlier run died inside it: retry
        when that is safe, otherwise ask (:meth:`confirm`).
        """
        return self.journal.step(self.run_id, node, self.stage, key, destructive=destructive, force=self.rerun)

    @property
    def rerun(self) -> bool:
        """True when completed steps must run again (``--force`` or ``--from``)."""
        return self.forced or self.options.force

    def transition(self, node: str, to: NodeState, cause: str) -> None:
        """Move ``node`` to ``to``, journalled with ``cause``; raises ``InvalidTransition`` if refused."""
        self.journal.transition(node, to, cause, run_id=self.run_id, force=self.rerun)

    def state(self, node: str) -> NodeState:
        """The node's current lifecycle state."""
        return self.journal.state(node)

    def record_facts(self, node: str, facts: dict[str, Any]) -> None:
        """Store what this stage learnt about ``node`` (secrets are refused). Facts recorded earlier in the same
        run are kept beside these (a key recorded again takes the new value): the journal shows a stage's latest
        record per node, so a second record of other keys must not hide the first."""
        with self._facts_lock:
            merged = {**self._facts.get(node, {}), **facts}
            self.journal.record_facts(node, self.stage, merged)
            self._facts[node] = merged

    def confirm(self, question: str) -> bool:
        """Ask before something destructive: yes with ``--yes``, a prompt on a terminal, else refuse."""
        if self.options.yes:
            return True
        if not sys.stdin.isatty():
            raise InvalidInput(f"{question} Refusing without a terminal: pass --yes to confirm.")
        with self._lock:
            return click.confirm(question, default=False)


class Stage(ABC):
    """A bootstrap stage. Subclasses set ``name`` (one of :data:`STAGE_ORDER`) and ``description``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: true when the stage can destroy data (wipe disks, flash firmware): ``up`` asks first
    destructive: ClassVar[bool] = False
    #: false only for the placeholders
    implemented: ClassVar[bool] = True
    #: false while the stage can only render and validate (no apply path): ``plan`` says "not applied" and
    #: projects no state change for it
    applies: ClassVar[bool] = True
    #: true when the stage still renders and validates for nodes below its ``requires`` state (they are
    #: handed to it in ``ctx.nodes`` and listed in ``ctx.cannot_apply``) instead of the runner blocking them
    renders_when_blocked: ClassVar[bool] = False
    #: true when the stage converges a declared state and is safe to repeat (server-side apply): a later ``up``
    #: runs it again although the journal says it completed, so an inventory change reaches the cluster
    reconciles: ClassVar[bool] = False
    #: true when a stage whose plan only renders (``applies_in`` false) may still apply on some nodes, behind a
    #: gate only the run can check: the runner then takes each node's ``applied`` (and moves those nodes)
    applies_behind_gate: ClassVar[bool] = False
    lifecycle: ClassVar[Lifecycle | None] = None

    def get_lifecycle(self) -> Lifecycle:
        """The stage's lifecycle: its own, or the default for its name."""
        return self.lifecycle or DEFAULT_LIFECYCLE.get(self.name, Lifecycle())

    def applies_in(self, ctx: StageContext) -> bool:
        """Whether the stage can apply in this context (``applies`` unless the stage knows better)."""
        return self.applies

    def settles_maintenance(self, options: RunOptions, journal: Journal, node: str) -> bool:
        """Whether the stage, run with ``options``, takes ``node``, which an earlier run left in
        ``maintenance``, and settles it itself (reads, finishes or releases it) instead of being skipped."""
        return False

    def cluster_drift(self, inventory: Any, state_dir: Path, journal: Journal, options: RunOptions) -> str | None:
        """What the inventory wants of the cluster as a whole that the journal's record says this stage has not
        made so yet (a Helm release added or changed), or ``None``: where it says something, the stage runs
        again on the selected nodes past it, which it would otherwise skip (read only; a plan asks it too)."""
        return None

    @abstractmethod
    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        """What :meth:`run` would do on ``ctx.nodes``; must not change anything."""

    @abstractmethod
    def run(self, ctx: StageContext) -> StageResult:
        """Do the work on ``ctx.nodes``; journal steps with ``ctx.step`` and report per node."""


class NotImplementedYet(Stage):
    """Placeholder for a stage that later work fills in: planning says so and running stops there."""

    implemented = False

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        return [PlannedAction(self.name, None, self.description, skip="not implemented yet: `up` stops here")]

    def run(self, ctx: StageContext) -> StageResult:
        raise NotImplementedStage(f"stage {self.name!r} is not implemented yet")


S = TypeVar("S", bound=type[Stage])

_REGISTRY: dict[str, Stage] = {}
_REGISTRY_LOCK = threading.Lock()


def register_stage(cls: S) -> S:
    """Class decorator: make ``cls`` the stage for ``cls.name`` (replacing a placeholder).

    Registering a second real stage under a name already taken by another real stage is refused.
    """
    name = getattr(cls, "name", None)
    if name not in STAGE_ORDER:
        raise ValueError(f"stage name {name!r} is not one of {', '.join(STAGE_ORDER)}")
    with _REGISTRY_LOCK:
        current = _REGISTRY.get(name)
        same = current is not None and _qualname(type(current)) == _qualname(cls)
        if current is not None and current.implemented and cls.implemented and not same:
            raise ValueError(
                f"stage {name!r} is already implemented by {_qualname(type(current))}; "
                f"refusing {_qualname(cls)} (unregister_stage first)"
            )
        if current is not None and current.implemented and not cls.implemented:
            return cls  # a placeholder never replaces a real stage
        _REGISTRY[name] = cls()
    return cls


def unregister_stage(name: str) -> None:
    """Put the placeholder back for ``name`` (tests, plugins that step aside)."""

    with _REGISTRY_LOCK:
        _REGISTRY[name] = placeholder_for(name)()


def get_stage(name: str) -> Stage:
    """The registered stage for ``name`` (after :func:`load_stages`)."""
    load_stages()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"unknown stage {name!r}; stages are: {', '.join(STAGE_ORDER)}") from None


def registered_stages() -> list[Stage]:
    """Every stage in :data:`STAGE_ORDER`, placeholders included."""
    load_stages()
    return [_REGISTRY[name] for name in STAGE_ORDER]


_LOADED = False


def load_stages() -> None:
    """Register placeholders, then real stages from ``bootstrap.stages.<name>`` and entry points."""
    global _LOADED  # noqa: PLW0603 - one-time plugin discovery
    if _LOADED:
        return

    register_placeholders()
    for name in STAGE_ORDER:
        module = f"bootstrap.stages.{stage_module_name(name)}"
        if importlib.util.find_spec(module) is not None:
            _import_stage_module(module, name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        _import_stage_module(ep.module, ep.name)
    _LOADED = True


def stage_module_name(name: str) -> str:
    """The module of stage ``name`` under ``bootstrap.stages`` (``os-check`` -> ``os_check``)."""
    return name.replace("-", "_")


def _import_stage_module(module: str, name: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise EnvironmentMissing(
            f"stage {name!r} cannot load: {exc} (install the missing package; see `rackctl doctor`)"
        ) from exc


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# -- placeholders: a "not implemented yet" stage for every name that has no real stage ----------------
#: What each stage will do, shown by ``plan`` while it is still a placeholder.
DESCRIPTIONS: dict[str, str] = {
    "preflight": "Check the inventory, this machine's tools and each BMC's reachability",
    "discover": "Read each node's hardware (CPUs, memory, GPUs, NICs, disks) over Redfish",
    "firmware": "Bring BIOS, iDRAC, NIC and GPU firmware to the validated versions",
    "bios": "Apply the BIOS profile for the node's role (Server Configuration Profile)",
    "provision": "PXE-boot and install the operating system image (wipes the boot disk)",
    "os-check": "Check each installed node over SSH (OS, memory, disk, commands) with Ansible",
    "network": "Configure bonds, VLANs and MTU of the management and storage networks",
    "kubernetes": "Install containerd and kubeadm, form the HA control plane, join workers",
    "nvidia": "Install the NVIDIA GPU Operator (driver, toolkit, device plugin, DCGM)",
    "triton": "Deploy Triton Inference Server with the model repository",
}


def placeholder_for(name: str) -> type[Stage]:
    """A placeholder class for stage ``name``."""
    return type(
        f"{name.capitalize()}NotImplemented",
        (NotImplementedYet,),
        {"name": name, "description": DESCRIPTIONS[name], "__module__": __name__},
    )


def register_placeholders() -> None:
    """Fill every name that has no stage yet with its placeholder."""
    with _REGISTRY_LOCK:
        for name in STAGE_ORDER:
            _REGISTRY.setdefault(name, placeholder_for(name)())
