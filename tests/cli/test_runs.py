"""``rackctl runs``: the journal's past runs (real journal, one real ansible-runner run kept as a stage keeps
its own), one line each in 80 columns with what went wrong below; ``rackctl logs`` of a journalled run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from bootstrap.ansible_driver import run_playbook
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import STAGE_STEP, Journal
from bootstrap.stages.playbook import runs_dir
from tests.cli.conftest import rackctl

NODES = ("head-01", "gpu-l40s-01", "gpu-xe9680-01")
STAGES = "preflight,discover,firmware,bios,provision,os-check,network"
LEAK = "pw-in-a-url-9c1"
WHY = (
    f"stage network failed on gpu-xe9680-01: the mirror https://admin:{LEAK}@10.10.0.21:8080 did not answer "
    "(connection refused); the other nodes finished"
)
PLAYBOOK = [
    {
        "name": "Two tasks, one failing on node-b",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Say hello", "ansible.builtin.debug": {"msg": "hello"}},
            {
                "name": "Refuse on node-b",
                "ansible.builtin.fail": {"msg": f"no answer from https://admin:{LEAK}@10.10.0.21:8080"},
                "when": "inventory_hostname == 'node-b'",
            },
        ],
    }
]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    state_dir = root / "state"
    with Journal(state_dir) as journal:
        journal.register_nodes(list(NODES))
        first = journal.begin_run(f"up --stages {STAGES}")
        for node in NODES:
            journal.record_step(first, node, "preflight", STAGE_STEP, status="completed", destructive=False)
        journal.record_step(first, "gpu-xe9680-01", "network", STAGE_STEP, status="failed", destructive=False)
        journal.transition("gpu-xe9680-01", NodeState.FAILED, "network: the mirror did not answer", run_id=first)
        journal.finish_run(first, "failed", WHY)
        second = journal.begin_run("journal mark gpu-xe9680-01 maintenance")
        journal.finish_run(second, "completed")
    playbook = root / "two.yml"
    playbook.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = root / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": local, "node-b": local}}}))
    result = run_playbook(str(playbook), hosts, work_dir=runs_dir(state_dir) / f"{first}-network")
    assert result.hosts["node-b"].failed and not result.hosts["node-a"].failed
    return state_dir


def test_each_run_with_its_stages_failed_nodes_and_output_in_json(state: Path) -> None:
    proc = rackctl("runs", "--state-dir", str(state), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    first, second = data["runs"]
    assert (first["id"], first["status"], first["command"]) == (1, "failed", f"up --stages {STAGES}")
    assert first["stages"] == ["preflight", "network"] and first["failed_nodes"] == ["gpu-xe9680-01"]
    assert first["playbooks"] == ["network"] and first["duration_s"] >= 0 and first["finished"]
    assert (second["id"], second["status"], second["failed_nodes"], second["playbooks"]) == (2, "completed", [], [])
    assert LEAK not in proc.stdout  # the journal recorded the message redacted
    failed = json.loads(rackctl("runs", "--state-dir", str(state), "--failed", "--json").stdout)
    assert [r["id"] for r in failed["runs"]] == [1]


@pytest.mark.parametrize("columns", ["80", "200"])
def test_one_line_per_run_in_80_columns_with_why_below(state: Path, columns: str) -> None:
    proc = rackctl("runs", "--state-dir", str(state), COLUMNS=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert [line.split()[0] for line in lines if line[:4].strip().isdigit()] == ["1", "2"]  # one line per run
    text = " ".join(proc.stdout.split())
    assert "firmware,bios,provision" in text.replace(", ", ",")  # the command wrapped after a comma, whole
    assert "failed (1): gpu-xe9680-01" in text and "(connection refused)" in text
    assert "ansible output: `rackctl logs 1` (network)" in text
    assert LEAK not in proc.stdout


def test_last_says_how_many_runs_there_are(state: Path) -> None:
    proc = rackctl("runs", "--state-dir", str(state), "--last", "1")
    assert proc.returncode == 0 and "the last 1 of 2 runs (--last for more)" in proc.stdout, proc.stdout
    assert "journal mark" in proc.stdout and "up --stages" not in proc.stdout


def test_a_state_dir_without_a_journal_says_what_makes_one(tmp_path: Path) -> None:
    for args in ((), ("--json",)):
        proc = rackctl("runs", "--state-dir", str(tmp_path / "none"), *args)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "no journal in" in out and "rackctl up" in out, out
        assert "Traceback" not in out


def test_logs_of_a_journalled_run_per_node_and_clear_errors(state: Path) -> None:
    proc = rackctl("logs", "1", "node-b", "--state-dir", str(state))
    assert proc.returncode == 0 and "FAILED   Refuse on node-b" in proc.stdout, proc.stdout + proc.stderr
    assert "no answer from https://admin:" in proc.stdout and LEAK not in proc.stdout  # a URL password masked
    unknown = rackctl("logs", "9", "--state-dir", str(state))
    out = unknown.stdout + unknown.stderr
    assert unknown.returncode == 2 and "no run 9 in the journal" in out and "`rackctl runs`" in out, out
    quiet = rackctl("logs", "2", "--state-dir", str(state))
    out = quiet.stdout + quiet.stderr
    assert quiet.returncode == 2 and "journal mark gpu-xe9680-01 maintenance: it ran no playbook" in out, out
    assert "one of: 1" in out
    node = rackctl("logs", "1", "gpu-01", "--state-dir", str(state), "--json")
    doc = json.loads(node.stdout)
    assert node.returncode == 2 and doc["ok"] is False and "node-a, node-b" in json.dumps(doc), node.stdout
    assert "Traceback" not in node.stdout + node.stderr


def test_failed_lists_a_run_that_completed_but_left_a_node_failed(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.register_nodes(["gpu-01", "gpu-02"])
        quiet = journal.begin_run("apply")
        journal.finish_run(quiet, "completed")
        partial = journal.begin_run("redeploy gpu-02")
        journal.record_step(partial, "gpu-02", "provision", "pxe", status="failed", destructive=True)
        journal.finish_run(partial, "completed")
        stopped = journal.begin_run("up")
        journal.finish_run(stopped, "interrupted", "interrupted (Ctrl-C)")
    proc = rackctl("runs", "--state-dir", str(tmp_path), "--failed", "--json")
    runs = json.loads(proc.stdout)["runs"]
    assert [(r["id"], r["failed_nodes"]) for r in runs] == [(2, ["gpu-02"]), (3, [])], proc.stdout
