"""``rackctl logs``: the Ansible output of past runs, per run and per node (what ansible-runner kept)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from bootstrap.ansible_log import kept_run_dirs, kept_run_ids, kept_runs, node_log, read_playbook_log
from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, handle_errors
from bootstrap.errors import InvalidInput, Problem
from bootstrap.run_history import check_run
from bootstrap.stages.playbook import runs_dir

WIDTH = 80
MARKS = {"ok": "ok", "changed": "changed", "skipped": "skipped", "failed": "FAILED", "unreachable": "UNREACHABLE"}


def register(cli: click.Group) -> None:
    cli.add_command(logs)


def _counts(counts: dict[str, int]) -> str:
    order = ("ok", "changed", "failed", "unreachable", "ignored", "skipped")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))


def _show_list(data: dict[str, Any]) -> None:
    if not data["runs"]:
        console.print(f"no playbook output kept under {escape(data['kept_in'])} yet")
        return
    if data["kept"] > len(data["runs"]):
        console.print(f"the last {len(data['runs'])} of {data['kept']} playbook runs kept (--last for more):")
    for run in data["runs"]:
        console.print(f"run {run['run']} {escape(run['label'])}: rc {run['rc']}, {len(run['hosts'])} host(s)")
    console.print("`rackctl logs RUN` for a run's hosts, `rackctl logs RUN NODE` for a node's tasks")


def _show_run(data: dict[str, Any]) -> None:
    for run in data["runs"]:
        console.print(f"run {run['run']} {escape(run['label'])} ({escape(Path(run['playbook']).name)}): rc {run['rc']}")
        for host, counts in run["hosts"].items():
            console.print(f"  {escape(host)}: {_counts(counts)}")


def _show_node(data: dict[str, Any]) -> None:
    for run in data["runs"]:
        console.print(f"run {run['run']} {escape(run['label'])} on {escape(data['node'])}: rc {run['rc']}")
        for task in run["tasks"]:
            name = f"{task['role']} : {task['task']}" if task["role"] else task["task"]
            mark = MARKS.get(task["status"], task["status"])
            head = f"  {mark:<8} {name}"
            seconds = f"{task['duration_s']:.0f}s"
            width = WIDTH - len(seconds) - 1
            head = head if len(head) <= width else head[: width - 1] + "…"
            console.print(f"{escape(head):<{width}} {seconds}")
            if task["message"]:
                for line in textwrap.wrap(task["message"], WIDTH - 11)[:8]:
                    console.print(f"           {escape(line)}")


@click.command("logs")
@click.argument("run", type=int, required=False)
@click.argument("node", required=False)
@click.option(
    "--last",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Without RUN: list only the newest N playbook runs.",
)
@flags.state_dir
@flags.json
@handle_errors()
def logs(run: int | None, node: str | None, last: int, state_dir: Path, as_json: bool) -> None:
    """The Ansible output rackctl kept: every run's playbooks, RUN's hosts, or NODE's tasks in RUN.

    RUN is the journal's run id (`rackctl runs` lists them). Each task shows how it
    ended, its seconds, and what a failed or skipped one said; the whole output is in the run's
    ansible-runner directory under STATE_DIR/ansible/runs.
    """
    root = runs_dir(state_dir)
    if run is None:
        kept = kept_run_dirs(root)
        shown = [read_playbook_log(path).summary() for path in kept[-last:]]
        data = {"ok": True, "kept_in": str(root), "kept": len(kept), "runs": shown}
        emit(data, as_json, _show_list)
        return
    found = kept_runs(root, run)
    if not found:
        journalled = check_run(state_dir, run)  # a run the journal does not know: named, with how to list them
        runs = ", ".join(map(str, kept_run_ids(root))) or "none yet"
        what = f" ({journalled.command}: it ran no playbook)" if journalled else ""
        raise InvalidInput(
            f"run {run}{what} kept no Ansible output in {root}",
            problems=[Problem("RUN", str(run), f"one of: {runs} (`rackctl runs` lists every run)")],
        )
    if node is None:
        emit({"ok": True, "run": run, "runs": [log.summary() for log in found]}, as_json, _show_run)
        return
    narrowed = node_log(found, node, run)
    data = {
        "ok": True,
        "run": run,
        "node": node,
        "runs": [{**log.summary(), "tasks": [t.as_dict() for t in log.tasks]} for log in narrowed],
    }
    emit(data, as_json, _show_node)
