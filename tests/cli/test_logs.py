"""``rackctl logs``: a real ansible-runner run (local connection, two inventory hosts on this machine), kept
where the stages keep theirs, read back per run and per node; no_log output stays hidden."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.ansible_driver import run_playbook
from bootstrap.cli import cli
from bootstrap.stages.playbook import runs_dir

SECRET = "s3cr3t-not-for-logs"
PLAYBOOK = [
    {
        "name": "A play of every ending",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Say hello", "ansible.builtin.debug": {"msg": "hello"}},
            {"name": "Change something", "ansible.builtin.command": "true", "changed_when": True},
            {
                "name": "Fail quietly with a secret",
                "ansible.builtin.shell": f"echo {SECRET}; exit 3",
                "no_log": True,
                "ignore_errors": True,
                "changed_when": False,
            },
            {"name": "Never run", "ansible.builtin.debug": {"msg": "no"}, "when": False},
            {
                "name": "Refuse on node-b",
                "ansible.builtin.fail": {"msg": "node-b refuses: " + "because " * 30},
                "when": "inventory_hostname == 'node-b'",
            },
            {"name": "After the refusal", "ansible.builtin.debug": {"msg": "still here"}},
        ],
    }
]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    playbook = root / "every-ending.yml"
    playbook.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = root / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": local, "node-b": local}}}))
    state_dir = root / "state"
    result = run_playbook(str(playbook), hosts, work_dir=runs_dir(state_dir) / "5-check")
    assert result.rc != 0 and result.hosts["node-b"].failed and not result.hosts["node-a"].failed
    return state_dir


def logs(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["logs", *args], env={"COLUMNS": "80"})
    return result.exit_code, result.output


def test_the_list_names_each_kept_run_and_the_run_its_hosts(state: Path) -> None:
    code, out = logs("--state-dir", str(state), "--json")
    assert code == 0, out
    (run,) = json.loads(out)["runs"]
    assert (run["run"], run["label"], run["rc"]) == (5, "check", 2)
    assert run["hosts"]["node-a"] == {"ok": 2, "changed": 1, "ignored": 1, "skipped": 2}
    assert run["hosts"]["node-b"] == {"ok": 1, "changed": 1, "ignored": 1, "skipped": 1, "failed": 1}
    code, out = logs("5", "--state-dir", str(state))
    assert code == 0 and "node-b: 1 ok, 1 changed, 1 failed, 1 ignored, 1 skipped" in out, out


def test_a_nodes_tasks_in_order_with_what_the_failure_said_and_no_log_hidden(state: Path) -> None:
    code, out = logs("5", "node-b", "--state-dir", str(state), "--json")
    assert code == 0, out
    (run,) = json.loads(out)["runs"]
    assert [(t["task"], t["status"]) for t in run["tasks"]] == [
        ("Say hello", "ok"),
        ("Change something", "changed"),
        ("Fail quietly with a secret", "ignored"),
        ("Never run", "skipped"),
        ("Refuse on node-b", "failed"),
    ]
    assert run["tasks"][2]["message"] == "output hidden (no_log)"
    assert run["tasks"][4]["message"].startswith("node-b refuses: because")
    code, human = logs("5", "node-b", "--state-dir", str(state))
    assert code == 0, human
    assert "FAILED   Refuse on node-b" in human and "node-b refuses" in human
    assert all(len(line) <= 80 for line in human.splitlines()), human  # the long message wrapped below
    for text in (out, human, logs("5", "--state-dir", str(state))[1]):
        assert SECRET not in text


def test_an_unknown_run_or_node_names_the_ones_there_are(state: Path) -> None:
    code, out = logs("9", "--state-dir", str(state))
    assert code == 2 and "run 9 kept no Ansible output" in out and "one of: 5" in out, out
    code, out = logs("5", "node-z", "--state-dir", str(state))
    assert code == 2 and "one of: node-a, node-b" in out, out
    code, out = logs("--state-dir", str(state.parent / "empty"))
    assert code == 0 and "no playbook output kept" in out, out


def test_last_lists_only_the_newest_playbook_runs_and_says_how_many_there_are(state: Path, tmp_path: Path) -> None:
    """A long-lived state dir keeps hundreds of runs: the list reads only the newest --last (default 20)."""
    import shutil

    copy = tmp_path / "state"
    shutil.copytree(state, copy)
    kept = runs_dir(copy)
    for run in (6, 7, 8):  # the same playbook run kept again under later journal runs
        shutil.copytree(kept / "5-check", kept / f"{run}-check")
    code, out = logs("--state-dir", str(copy), "--last", "2", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert [r["run"] for r in data["runs"]] == [7, 8] and data["kept"] == 4
    code, human = logs("--state-dir", str(copy), "--last", "2")
    assert code == 0 and "the last 2 of 4 playbook runs kept (--last for more)" in human, human
    code, everything = logs("--state-dir", str(copy), "--json")
    assert [r["run"] for r in json.loads(everything)["runs"]] == [5, 6, 7, 8]  # fewer than the default 20
    code, out = logs("--state-dir", str(copy), "--last", "0")
    assert code == 2 and "Traceback" not in out, out
    code, out = logs("9", "--state-dir", str(copy))
    assert code == 2 and "one of: 5, 6, 7, 8" in out, out
