"""Past runs, as ``rackctl runs`` lists them: the journal's runs with their stages, failed nodes and the
playbook output each kept.

Each run comes from the journal (``runs``: command, start, end, outcome, message; all redacted when
recorded), its stages and failed nodes from the steps it recorded, and its playbook runs from the directory
names under ``<state-dir>/ansible/runs`` (``<run>-<label>``, read by ``rackctl logs RUN [NODE]``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bootstrap.ansible_log import RUN_DIR, kept_run_dirs
from bootstrap.errors import InvalidInput, Problem
from bootstrap.journal import JOURNAL_FILE, Journal
from bootstrap.stages.playbook import runs_dir

#: the outcomes of a run that went as asked (it may still have left a node failed)
QUIET = frozenset({"completed", "not_applied", "running"})


@dataclass
class RunSummary:
    """One journalled run, summed up."""

    id: int
    command: str
    started: str
    finished: str | None
    duration_s: float | None  #: None while it runs (or was never finished)
    status: str  #: running, completed, not_applied, failed, interrupted, ...
    message: str
    stages: list[str] = field(default_factory=list)  #: in the order the run recorded them
    failed_nodes: list[str] = field(default_factory=list)
    playbooks: list[str] = field(default_factory=list)  #: labels of the playbook runs it kept (``logs RUN``)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seconds(started: str, finished: str | None) -> float | None:
    if not finished:
        return None
    try:
        return round((datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds(), 1)
    except ValueError:
        return None


def _kept_labels(state_dir: Path) -> dict[int, list[str]]:
    labels: dict[int, list[str]] = {}
    for path in kept_run_dirs(runs_dir(state_dir)):
        match = RUN_DIR.match(path.name)
        if match:
            labels.setdefault(int(match["run"]), []).append(match["label"])
    return labels


def require_journal(state_dir: Path) -> None:
    """Refuse (exit 2) a state directory without a journal, saying what makes one."""
    if not (Path(state_dir) / JOURNAL_FILE).exists():
        raise InvalidInput(
            f"no journal in {state_dir} yet",
            problems=[
                Problem(
                    "--state-dir",
                    str(state_dir),
                    "`rackctl up` creates it; or pass the --state-dir (or RACKCTL_STATE_DIR) of earlier runs",
                )
            ],
        )


def _summary(journal: Journal, record: Any, kept: dict[int, list[str]]) -> RunSummary:
    stages: list[str] = []
    failed: set[str] = set()
    for step in journal.steps(run_id=record.id):
        if step.stage not in stages:
            stages.append(step.stage)
        if step.status == "failed":
            failed.add(step.node)
    return RunSummary(
        id=record.id,
        command=record.command,
        started=record.started,
        finished=record.finished,
        duration_s=_seconds(record.started, record.finished),
        status=record.status,
        message=record.message,
        stages=stages,
        failed_nodes=sorted(failed),
        playbooks=kept.get(record.id, []),
    )


def past_runs(state_dir: Path, *, last: int = 20, failed_only: bool = False) -> tuple[list[RunSummary], int]:
    """The newest ``last`` runs of ``state_dir``'s journal, oldest first (``failed_only``: only those that did
    not complete or left a node failed), and how many runs the journal holds."""
    require_journal(state_dir)
    kept = _kept_labels(state_dir)
    out: list[RunSummary] = []
    with Journal(state_dir, readonly=True) as journal:
        records = journal.runs(limit=1_000_000 if failed_only else last)
        total = journal.run_count()
        if failed_only:  # without reading every run's steps: its status, or a failed step recorded in it
            failed_steps = journal.runs_with_failed_steps()
            records = [r for r in records if r.id in failed_steps or r.status not in QUIET]
        for record in records[:last]:
            out.append(_summary(journal, record, kept))
    return list(reversed(out)), total


def check_run(state_dir: Path, run: int) -> RunSummary | None:
    """Journal run ``run`` summed up; None where ``state_dir`` has no journal; an error naming how to list the
    runs where the journal has no such run."""
    if not (Path(state_dir) / JOURNAL_FILE).exists():
        return None
    with Journal(state_dir, readonly=True) as journal:
        try:
            return _summary(journal, journal.run(run), _kept_labels(state_dir))
        except InvalidInput:
            pass  # no such run: named below with the ones there are
        newest = ", ".join(str(r.id) for r in reversed(journal.runs(limit=10))) or "none yet"
    raise InvalidInput(
        f"no run {run} in the journal of {state_dir}",
        problems=[Problem("RUN", str(run), f"`rackctl runs` lists them (the newest: {newest})")],
    )
