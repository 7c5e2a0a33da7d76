"""Past playbook runs, read back from what ansible-runner kept: ``rackctl logs``.

Every playbook a stage or a day-2 command runs keeps its ansible-runner directory under
``<state-dir>/ansible/runs/<run>-<label>`` (:func:`bootstrap.stages.playbook.runs_dir`; ``<run>`` is the
journal's run id, ``<label>`` the stage or step, e.g. ``2-network``, ``8-driver-gpu-01``). Its
``job_events`` are the run's events, one JSON file each: this module turns them into one line per task and
host, in the order they ran, with what a failed task said. A task under ``no_log`` says only that its
output was hidden (ansible-runner keeps its result censored); nothing else of a result is shown but its
message, so no variable's value is printed that the playbook did not print itself; task names and messages
are redacted (secret values this process knows, and credential shapes: URL passwords, auth headers, keys).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from redfish_tools.secrets import redact

#: ansible-runner event -> the status a task line shows
STATUSES = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_on_async_failed": "failed",
}
RUN_DIR = re.compile(r"^(?P<run>\d+)-(?P<label>.+)$")
#: the longest message kept per task line (the rest is in the run's artifacts)
MESSAGE_LIMIT = 600


@dataclass
class TaskLine:
    """One task on one host, as it ended."""

    host: str
    task: str
    role: str
    status: str  #: ok, changed, failed, skipped, unreachable; ``ignored`` for a failure the task ignored
    duration_s: float
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PlaybookLog:
    """One kept playbook run: its journal run id, label, playbook, return code and task lines."""

    run: int
    label: str
    path: Path
    playbook: str = ""
    rc: int | None = None
    status: str = ""
    tasks: list[TaskLine] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return sorted({t.host for t in self.tasks})

    def counts(self, host: str) -> dict[str, int]:
        """Tasks per status on ``host``."""
        out: dict[str, int] = {}
        for line in self.tasks:
            if line.host == host:
                out[line.status] = out.get(line.status, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "label": self.label,
            "playbook": self.playbook,
            "rc": self.rc,
            "status": self.status,
            "path": str(self.path),
            "hosts": {h: self.counts(h) for h in self.hosts},
        }


def _message(status: str, data: dict[str, Any]) -> str:
    res = data.get("res") or {}
    if not isinstance(res, dict):
        return ""
    if "censored" in res:
        return "output hidden (no_log)"
    if status == "skipped":
        return str(res.get("skip_reason") or "")
    if status not in ("failed", "unreachable", "ignored"):
        return ""
    res = first_failed_item(res)
    if "censored" in res:
        return "output hidden (no_log)"
    text = res.get("msg") or ""
    stderr = res.get("stderr") or ""
    message = f"{text}: {stderr}" if text and stderr and stderr not in str(text) else str(text or stderr)
    return message.strip()[:MESSAGE_LIMIT]


def first_failed_item(res: dict[str, Any]) -> dict[str, Any]:
    """Of a loop's result, its first failed or unreachable item (the loop itself says only "All items
    completed"); ``res`` itself otherwise."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and (r.get("failed") or r.get("unreachable"))]
    return items[0] if items else res


def task_status(event: dict[str, Any]) -> str | None:
    """How a task ended on a host, from its ansible-runner event: ok, changed, failed, ignored (a failure the
    task ignores), skipped, unreachable; None for an event that ends no task on a host."""
    status = STATUSES.get(event.get("event", ""))
    data = event.get("event_data") or {}
    if status is None or not data.get("host"):
        return None
    res = data.get("res") or {}
    if status == "ok" and isinstance(res, dict) and res.get("changed"):
        return "changed"
    if status == "failed" and data.get("ignore_errors"):
        return "ignored"
    return status


def _line(event: dict[str, Any]) -> TaskLine | None:
    status = task_status(event)
    if status is None:
        return None
    data = event.get("event_data") or {}
    return TaskLine(
        host=str(data["host"]),
        task=redact(str(data.get("task", ""))),
        role=str(data.get("role", "")),
        status=status,
        duration_s=round(float(data.get("duration") or 0.0), 1),
        message=redact(_message(status, data)),
    )


def read_playbook_log(path: Path) -> PlaybookLog:
    """The kept run at ``path`` (``<runs>/<run>-<label>``): its task lines in the order they ended."""
    match = RUN_DIR.match(path.name)
    if not match:
        raise InvalidInput(f"{path} is not a kept playbook run (<run>-<label>)")
    log = PlaybookLog(int(match["run"]), match["label"], path)
    events: list[tuple[int, dict[str, Any]]] = []
    for artifacts in sorted((path / "artifacts").glob("*")):
        rc = artifacts / "rc"
        if rc.exists() and rc.read_text().strip().lstrip("-").isdigit():
            log.rc = int(rc.read_text().strip())
        status = artifacts / "status"
        if status.exists():
            log.status = status.read_text().strip()
        for file in (artifacts / "job_events").glob("*.json"):
            try:
                event = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # one the run was writing when it was killed: the others still tell
            events.append((int(event.get("counter") or 0), event))
    for _, event in sorted(events, key=lambda pair: pair[0]):
        if event.get("event") == "playbook_on_start":
            log.playbook = str((event.get("event_data") or {}).get("playbook", ""))
        line = _line(event)
        if line is not None:
            log.tasks.append(line)
    return log


def kept_run_dirs(runs_root: Path, run: int | None = None) -> list[Path]:
    """The kept run directories (of journal run ``run`` when given), oldest first; nothing is read."""
    if not runs_root.is_dir():
        return []
    paths = [p for p in runs_root.iterdir() if p.is_dir() and RUN_DIR.match(p.name)]
    if run is not None:
        paths = [p for p in paths if int(RUN_DIR.match(p.name)["run"]) == run]  # type: ignore[index]
    paths.sort(key=lambda p: (int(RUN_DIR.match(p.name)["run"]), p.name))  # type: ignore[index]
    return paths


def kept_run_ids(runs_root: Path) -> list[int]:
    """The journal runs that kept playbook output, from the directory names alone."""
    return sorted({int(RUN_DIR.match(p.name)["run"]) for p in kept_run_dirs(runs_root)})  # type: ignore[index]


def kept_runs(runs_root: Path, run: int | None = None) -> list[PlaybookLog]:
    """Every kept playbook run under ``runs_root`` (of journal run ``run`` when given), oldest first."""
    return [read_playbook_log(p) for p in kept_run_dirs(runs_root, run)]


def node_log(logs: list[PlaybookLog], node: str, run: int) -> list[PlaybookLog]:
    """``logs`` narrowed to ``node``'s task lines; an error naming the nodes there are when it has none."""
    hosts = sorted({h for log in logs for h in log.hosts})
    if node not in hosts:
        raise InvalidInput(
            f"run {run} kept no Ansible output for {node}",
            problems=[Problem("node", node, f"one of: {', '.join(hosts) or 'none (no playbook ran in it)'}")],
        )
    out = []
    for log in logs:
        lines = [t for t in log.tasks if t.host == node]
        if lines:
            out.append(PlaybookLog(log.run, log.label, log.path, log.playbook, log.rc, log.status, lines))
    return out
