"""Progress of a real playbook run (ansible-runner, ansible-playbook, local connection; two inventory hosts on
this machine) through the stages' task counter (:class:`bootstrap.stages.playbook.TaskProgress`) and the
redacting wrapper into ``rackctl up``'s progress: piped, one stamped line per ended task and host; on a
terminal, one row per host naming its running task."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from bootstrap.ansible_driver import run_playbook
from bootstrap.stages.playbook import TaskProgress
from bootstrap.stages.progress import RichProgress
from bootstrap.stages.runner import RedactingProgress
from redfish_tools.secrets import forget_secret, redact, register_secret

SECRET = "tok-6f1e-not-for-progress"
TASKS = ["Say hello", "Change something", f"Use the token {SECRET}", "Refuse on node-b", "After the refusal"]
PLAYBOOK = [
    {
        "name": "Progress",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": TASKS[0], "ansible.builtin.debug": {"msg": "hello"}},
            {"name": TASKS[1], "ansible.builtin.command": "true", "changed_when": True},
            {"name": TASKS[2], "ansible.builtin.debug": {"msg": "x"}, "no_log": True},
            {"name": TASKS[3], "ansible.builtin.fail": {"msg": "no"}, "when": "inventory_hostname == 'node-b'"},
            {"name": TASKS[4], "ansible.builtin.debug": {"msg": "still here"}},
        ],
    }
]
LINE = re.compile(r"^  \[(?P<m>\d+):(?P<s>\d\d)\] check (?P<host>node-[ab]) #(?P<n>\d+) (?P<status>\w+): (?P<task>.*)$")


@pytest.fixture
def play(tmp_path: Path):
    playbook = tmp_path / "progress.yml"
    playbook.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": local, "node-b": local}}}))
    register_secret(SECRET)
    yield lambda progress: run_playbook(
        str(playbook), hosts, on_task=(tasks := TaskProgress(progress, "check")).ended, on_task_start=tasks.started
    )
    forget_secret(SECRET)


def test_piped_a_stamped_line_per_ended_task_and_host_in_order(play) -> None:
    out = io.StringIO()
    with RichProgress(Console(file=out, width=80, force_terminal=False)) as rich:
        rich.stage_started("check", ["node-a", "node-b"])
        result = play(RedactingProgress(rich))
    assert result.hosts["node-b"].failed and not result.hosts["node-a"].failed
    text = out.getvalue()
    assert SECRET not in text  # a task name carrying a secret is redacted on its way to the screen
    lines = [m.groupdict() for line in text.splitlines() if (m := LINE.match(line))]
    shown = [redact(t) for t in TASKS]
    for host, statuses in {
        "node-a": ["ok", "changed", "ok", "skipped", "ok"],
        "node-b": ["ok", "changed", "ok", "failed"],
    }.items():
        ours = [line for line in lines if line["host"] == host]
        assert [int(line["n"]) for line in ours] == list(range(1, len(statuses) + 1)), text
        assert [line["status"] for line in ours] == statuses, text
        assert [line["task"] for line in ours] == shown[: len(statuses)], text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_on_a_terminal_each_host_has_a_row_with_its_last_task_and_count(play) -> None:
    out = io.StringIO()
    with RichProgress(Console(file=out, width=80, force_terminal=True)) as rich:
        rich.stage_started("check", ["node-a", "node-b"])
        play(rich)
        rows = {t.description.split(":")[0].strip(): t for t in rich._progress.tasks[1:]}
        assert set(rows) == {"node-a", "node-b"}
        assert rows["node-a"].description == f"  node-a: {TASKS[4]}" and rows["node-a"].completed == 5
        assert rows["node-b"].description == f"  node-b: {TASKS[3]}" and rows["node-b"].completed == 4
    assert "#5 ok:" not in out.getvalue()  # no line per task on a terminal
