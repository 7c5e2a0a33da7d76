"""Run the project's playbooks with ansible-runner and report per host, machine-readably.

Host keys are always checked (a ``known_hosts`` file that rackctl pinned is passed in); no secret is
ever put in extravars, because ansible-runner writes them to its private data directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from bootstrap.errors import InvalidInput, Problem
from bootstrap.journal.secrets import SECRET_KEYS  # the one secret-word list, shared with the journal
from bootstrap.resources import ansible_cfg, playbooks_dir, roles_dir

PLAYBOOKS = playbooks_dir()
ROLES = roles_dir()


@dataclass
class HostOutcome:
    """What one host did in a playbook run."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: bool = False
    unreachable: bool = False
    message: str = ""

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
        }


@dataclass
class PlaybookResult:
    """Outcome of one playbook run."""

    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the end of ansible's output when it failed (it holds no secrets: none are passed in)
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        """Every host succeeded and ansible exited 0."""
        return self.rc == 0 and all(h.success for h in self.hosts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "hosts": {name: h.as_dict() for name, h in self.hosts.items()},
            "output_tail": self.output_tail,
        }


def _check_extravars(extravars: dict[str, Any]) -> None:
    bad = [k for k in extravars if any(s in k.lower() for s in SECRET_KEYS)]
    if bad:
        raise InvalidInput(
            "secrets must not be passed as extra vars (ansible-runner stores them on disk)",
            problems=[
                Problem(f"extravars.{k}", "looks like a secret", "pass it through a vault or no_log task")
                for k in bad
            ],
        )


def _failure_message(event: dict[str, Any]) -> str:
    data = event.get("event_data", {})
    res = data.get("res") or {}
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or ""
    task = data.get("task", "")
    return f"{task}: {msg}".strip(": ") if isinstance(msg, str) else f"{task}: {msg!r}"


def _output_tail(runner: Any, limit: int = 2000) -> str:
    try:
        text = runner.stdout.read()
    except Exception:
        return ""
    return text[-limit:]


def run_playbook(
    playbook: str,
    inventory: Path,
    *,
    limit: list[str] | None = None,
    extravars: dict[str, Any] | None = None,
    private_key: Path | None = None,
    known_hosts: Path | None = None,
    ssh_extra_args: str = "",
    on_host_done: Callable[[str, bool, str], None] | None = None,
    work_dir: Path | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` against ``inventory`` and collect per-host outcomes."""
    extravars = dict(extravars or {})
    _check_extravars(extravars)
    path = (PLAYBOOKS / playbook).resolve()
    if not path.is_file():
        raise InvalidInput(
            f"no playbook {playbook}", problems=[Problem("playbook", str(path), "check the name")]
        )
    own_dir = work_dir is None
    private_data_dir = Path(work_dir or tempfile.mkdtemp(prefix="rackctl-ansible-"))
    private_data_dir.mkdir(parents=True, exist_ok=True)
    # A master connection per run only: one reused from another run would skip the host-key check.
    control_dir = Path(tempfile.mkdtemp(prefix="rkcp-"))
    ssh_args = [
        "-o ControlMaster=auto",
        "-o ControlPersist=30s",
        f"-o ControlPath={control_dir}/%C",
        "-o StrictHostKeyChecking=yes",
    ]
    if known_hosts is not None:
        ssh_args.append(f"-o UserKnownHostsFile={known_hosts}")
    if ssh_extra_args:
        ssh_args.append(ssh_extra_args)
    cmdline = [f"--ssh-common-args={' '.join(ssh_args)}"]
    if private_key is not None:
        cmdline.append(f"--private-key={private_key}")
    hosts: dict[str, HostOutcome] = {}
    facts: dict[str, dict[str, Any]] = {}

    def handler(event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        if not host:
            return True
        outcome = hosts.setdefault(host, HostOutcome(host))
        if kind == "runner_on_ok":
            outcome.ok += 1
            outcome.changed += bool((data.get("res") or {}).get("changed"))
            set_facts = (data.get("res") or {}).get("ansible_facts") or {}
            if "preflight_report" in set_facts:
                facts.setdefault(host, {})["preflight"] = set_facts["preflight_report"]
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            outcome.failed = True
            outcome.message = outcome.message or _failure_message(event)
        elif kind == "runner_on_unreachable":
            outcome.unreachable = True
            outcome.message = outcome.message or _failure_message(event)
        return True

    bin_dir = Path(sys.executable).parent
    if str(bin_dir) not in os.environ.get("PATH", "").split(os.pathsep):
        # ansible-runner looks ansible-playbook up on this process's PATH: use the one beside rackctl.
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ansible_cfg()),
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_FACT_CACHING": "memory",
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner turns host-key checking off unless told otherwise: rackctl never does.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_LOCAL_TEMP": str(private_data_dir / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
    }
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private_data_dir),
            playbook=str(path),
            inventory=str(inventory.resolve()),
            limit=",".join(limit) if limit else None,
            extravars=extravars,
            cmdline=" ".join(f"'{c}'" for c in cmdline),
            envvars=env,
            event_handler=handler,
            quiet=True,
            suppress_env_files=True,
        )
        tail = "" if runner.rc == 0 else _output_tail(runner)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)
        if own_dir:
            shutil.rmtree(private_data_dir, ignore_errors=True)
    for host, outcome in hosts.items():
        if on_host_done:
            on_host_done(host, outcome.success, outcome.message)
    return PlaybookResult(playbook, runner.status, runner.rc, hosts, facts, tail)
