"""Run the project's playbooks with ansible-runner and report per host, machine-readably.

How each host is reached (address, user, key, pinned known_hosts, proxy) comes from the inventory that
``rackctl inventory render`` writes (:mod:`bootstrap.inband.access`); host keys are always checked. No
secret is ever put in extravars, because ansible-runner writes them to its private data directory. The
driver knows no role: a caller that wants a fact back names it (``facts_var``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from bootstrap.ansible_log import first_failed_item, task_status
from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem
from bootstrap.journal.secrets import SECRET_KEYS  # the one secret-word list, shared with the journal
from bootstrap.resources import ansible_config, playbooks_dir, roles_dir


@dataclass
class HostOutcome:
    """What one host did in a playbook run."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: bool = False
    unreachable: bool = False
    message: str = ""
    #: names of the tasks that reported a change on this host, in order
    changed_tasks: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        """The host finished without failure and was reachable."""
        return not (self.failed or self.unreachable)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.success,
            "tasks_ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "message": self.message,
            "changed_tasks": list(self.changed_tasks),
        }


@dataclass
class PlaybookResult:
    """Outcome of one playbook run."""

    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    #: host -> the value of the fact the caller asked for (``facts_var``), for hosts that set it
    facts: dict[str, Any] = field(default_factory=dict)
    #: ansible-runner's artifacts of this run (stdout, events) when kept, else None
    artifacts: Path | None = None
    #: the end of ansible's output when it failed (it holds no secrets: none are passed in)
    output_tail: str = ""
    #: ansible-runner's play recap: counter ("ok", "changed", "failures", "dark", ...) -> host -> count
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the strategy the tasks ran with (:data:`STRATEGIES`)
    strategy: str = "linear"

    @property
    def ok(self) -> bool:
        """Every host succeeded and ansible exited 0."""
        return self.rc == 0 and all(h.success for h in self.hosts.values())

    def changed_by_host(self) -> dict[str, int]:
        """Host -> changed tasks, from ansible-runner's recap (every host of the play, zeros included)."""
        recap_hosts = {h for counter in self.stats.values() for h in counter}
        return {h: int(self.stats.get("changed", {}).get(h, 0)) for h in sorted(recap_hosts | set(self.hosts))}

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "hosts": {name: h.as_dict() for name, h in self.hosts.items()},
            "output_tail": self.output_tail,
            "artifacts": str(self.artifacts) if self.artifacts else None,
            "changed_by_host": self.changed_by_host(),
            "strategy": self.strategy,
        }


def _check_extravars(extravars: dict[str, Any]) -> None:
    bad = [k for k in extravars if any(s in k.lower() for s in SECRET_KEYS)]
    if bad:
        raise InvalidInput(
            "secrets must not be passed as extra vars (ansible-runner stores them on disk)",
            problems=[
                Problem(f"extravars.{k}", "looks like a secret", "pass it through a vault or no_log task") for k in bad
            ],
        )


def _failure_message(event: dict[str, Any]) -> str:
    """The task and what it said; of a loop, what its first failed or unreachable item said (the loop itself says
    only "All items completed")."""
    data = event.get("event_data", {})
    res = data.get("res") or {}
    res = first_failed_item(res)
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or ""
    task = data.get("task", "")
    return f"{task}: {msg}".strip(": ") if isinstance(msg, str) else f"{task}: {msg!r}"


def _output_tail(runner: Any, limit: int = 2000) -> str:
    try:
        text = runner.stdout.read()
    except Exception:
        return ""
    return text[-limit:]


def _recap(runner: Any) -> dict[str, dict[str, int]]:
    """ansible-runner's stats (the play recap) as counter -> host -> count; empty when it has none."""
    stats = getattr(runner, "stats", None) or {}
    return {str(k): {str(h): int(n) for h, n in v.items()} for k, v in stats.items() if isinstance(v, dict)}


def _settle_rescued(hosts: dict[str, HostOutcome], stats: dict[str, dict[str, int]]) -> None:
    """Correct outcomes from the recap: a failure a ``rescue`` handled is not the host's failure.

    The event stream reports rescued failures as failures; only the recap (which counts them under
    "rescued", not "failures") tells them apart.
    """
    if not stats:
        return
    for host, outcome in hosts.items():
        outcome.failed = outcome.failed and stats.get("failures", {}).get(host, 0) > 0
        outcome.unreachable = outcome.unreachable and stats.get("dark", {}).get(host, 0) > 0
        if outcome.success:
            outcome.message = ""


#: How the tasks reach the hosts: ``mitogen`` (the default: Mitogen's strategy keeps one Python per host
#: for the run, so a task costs no interpreter start and no re-import of Ansible's module_utils; measured 9x
#: on a lab VM, see docs/operators.md) or ``linear`` (Ansible's own: a fresh Python per task). The order of
#: tasks and what each does are the same; ``linear`` is the fallback should Mitogen misbehave on a site.
STRATEGY_ENV = "RACKCTL_ANSIBLE_STRATEGY"
STRATEGIES = ("mitogen", "linear")


def strategy() -> str:
    """The strategy this process runs playbooks with (``RACKCTL_ANSIBLE_STRATEGY``, default ``mitogen``)."""
    chosen = os.environ.get(STRATEGY_ENV, "mitogen").strip() or "mitogen"
    if chosen not in STRATEGIES:
        raise InvalidInput(
            f"{STRATEGY_ENV}={chosen!r} is not a strategy rackctl runs",
            problems=[
                Problem(STRATEGY_ENV, f"{chosen!r} is not one of them", f"set it to one of {', '.join(STRATEGIES)}")
            ],
        )
    return chosen


def strategy_env(chosen: str) -> dict[str, str]:
    """The Ansible settings that select ``chosen`` (Mitogen's plugin found beside its installed package)."""
    if chosen == "linear":
        return {"ANSIBLE_STRATEGY": "linear"}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentMissing(
            "Mitogen (the default Ansible strategy) is not installed",
            problems=[Problem(STRATEGY_ENV, "mitogen", "pip install 'mitogen>=0.3.54', or set it to linear")],
        )
    plugins = Path(spec.submodule_search_locations[0]) / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def ansible_playbook_binary() -> Path:
    """The ``ansible-playbook`` installed beside this Python (rackctl's own ansible-core)."""
    return Path(sys.executable).with_name("ansible-playbook")


def playbook_path(playbook: str) -> Path:
    """``playbooks/<playbook>``; a clear error when there is none."""
    path = (playbooks_dir() / playbook).resolve()
    if not path.is_file():
        raise InvalidInput(
            f"no playbook {playbook}",
            problems=[
                Problem("playbook", str(path), f"use one of {sorted(p.name for p in playbooks_dir().glob('*.yml'))}")
            ],
        )
    return path


def run_playbook(
    playbook: str,
    inventory: Path,
    *,
    limit: list[str] | None = None,
    extravars: dict[str, Any] | None = None,
    facts_var: str | None = None,
    on_host_done: Callable[[str, bool, str], None] | None = None,
    work_dir: Path | None = None,
    on_task: Callable[[str, str, str], None] | None = None,
    on_task_start: Callable[[str, str], None] | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` against ``inventory`` and collect per-host outcomes.

    ``facts_var``: a fact the play sets (``set_fact``) to return per host in ``result.facts``.
    ``work_dir``: ansible-runner's private data dir, kept (its ``artifacts/`` hold the run's output and
    events); without one a temporary dir is used and removed.
    ``on_task``: called with (host, task, status) as each task ends on a host (the status of
    :func:`bootstrap.ansible_log.task_status`), for progress while the run goes on; ``on_task_start`` with
    (host, task) as a task starts on a host.
    """
    extravars = dict(extravars or {})
    _check_extravars(extravars)
    path = playbook_path(playbook)
    chosen = strategy()
    own_dir = work_dir is None
    private_data_dir = Path(work_dir or tempfile.mkdtemp(prefix="rackctl-ansible-"))
    private_data_dir.mkdir(parents=True, exist_ok=True)
    # A master connection per run only: one reused from another run would skip the host-key check.
    control_dir = Path(tempfile.mkdtemp(prefix="rkcp-"))
    hosts: dict[str, HostOutcome] = {}
    facts: dict[str, Any] = {}

    def handler(event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        if not host:
            return True
        outcome = hosts.setdefault(host, HostOutcome(host))
        if kind == "runner_on_start" and on_task_start is not None:
            on_task_start(str(host), str(data.get("task", "")))
        status = task_status(event) if on_task is not None else None
        if on_task is not None and status is not None:
            on_task(str(host), str(data.get("task", "")), status)
        if kind == "runner_on_ok":
            outcome.ok += 1
            if (data.get("res") or {}).get("changed"):
                outcome.changed += 1
                outcome.changed_tasks.append(str(data.get("task", "")))
            set_facts = (data.get("res") or {}).get("ansible_facts") or {}
            if facts_var and facts_var in set_facts:
                facts[host] = set_facts[facts_var]
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            # the last failure is the one that ended the host; an earlier one may have been rescued
            outcome.failed = True
            outcome.message = _failure_message(event)
        elif kind == "runner_on_unreachable":
            outcome.unreachable = True
            outcome.message = _failure_message(event)
        return True

    binary = ansible_playbook_binary()
    env = {
        # ansible-runner finds ansible-playbook on the child's PATH: rackctl's own, beside this Python
        "PATH": f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ansible_config()),
        "ANSIBLE_ROLES_PATH": str(roles_dir()),
        "ANSIBLE_FACT_CACHING": "memory",
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner turns host-key checking off unless told otherwise: rackctl never does.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=30s -o StrictHostKeyChecking=yes",
        "ANSIBLE_LOCAL_TEMP": str(private_data_dir / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
        **strategy_env(chosen),
    }
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private_data_dir),
            playbook=str(path),
            inventory=str(inventory.resolve()),
            limit=",".join(limit) if limit else None,
            extravars=extravars,
            envvars=env,
            event_handler=handler,
            # without a callback of its own, ansible-runner installs SIGINT/SIGTERM handlers in this process
            # and never restores them: Ctrl-C would no longer interrupt rackctl after the first playbook
            cancel_callback=lambda: False,
            quiet=True,
            suppress_env_files=True,
        )
        tail = "" if runner.rc == 0 else _output_tail(runner)
        stats = _recap(runner)
        artifacts = None if own_dir else Path(runner.config.artifact_dir)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)
        if own_dir:
            shutil.rmtree(private_data_dir, ignore_errors=True)
    _settle_rescued(hosts, stats)
    for host, outcome in hosts.items():
        if on_host_done:
            on_host_done(host, outcome.success, outcome.message)
    return PlaybookResult(
        playbook,
        runner.status,
        runner.rc,
        hosts,
        facts,
        artifacts=artifacts,
        output_tail=tail,
        stats=stats,
        strategy=chosen,
    )
