"""The Ansible driver runs the project's real playbooks over real SSH (OpenSSH sshd on loopback).

Each host is reached with the connection variables of :class:`bootstrap.inband.access.NodeAccess`
(key, pinned known_hosts, strict checking), the ones ``rackctl inventory render`` writes.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook, strategy, strategy_env
from bootstrap.errors import InvalidInput
from bootstrap.inband.access import NodeAccess
from tests.sshnode import SSHD, refused_host_key, start_ssh_node

pytestmark = pytest.mark.skipif(
    not Path(SSHD).exists(), reason="openssh-server not installed (scripts/setup.sh installs it)"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    ssh = start_ssh_node(tmp_path_factory.mktemp("sshnode"))
    yield ssh
    ssh.stop()


def inventory_for(tmp_path: Path, node, known_hosts: Path | None = None, **hostvars) -> Path:
    access = NodeAccess(
        hostname="node-a",
        address="127.0.0.1",
        user=getpass.getuser(),
        known_hosts=known_hosts or node.known_hosts,
        private_key=node.private_key,
        port=node.port,
    )
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"hosts": {"node-a": {**access.ansible_vars(), **hostvars}}}}))
    return path


def test_preflight_runs_over_ssh_and_returns_the_fact_asked_for(node, tmp_path):
    path_before = os.environ.get("PATH")
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node), facts_var="preflight_report")
    assert result.ok, result.as_dict()
    assert result.hosts["node-a"].ok > 3
    report = result.facts["node-a"]
    assert int(report["memory_mb"]) > 0 and report["kernel"]
    assert os.environ.get("PATH") == path_before  # the driver leaves this process's environment alone


def test_ctrl_c_still_interrupts_after_a_playbook_run(node, tmp_path):
    """ansible-runner installs SIGINT/SIGTERM handlers unless given a cancel callback: the driver gives one."""
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    assert run_playbook("preflight.yml", inventory_for(tmp_path, node)).ok
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with pytest.raises(KeyboardInterrupt):  # a real SIGINT to this process still raises
        signal.raise_signal(signal.SIGINT)


def test_no_fact_is_returned_unless_asked_for(node, tmp_path):
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node))
    assert result.ok and result.facts == {}


def test_a_failing_check_is_reported_per_host(node, tmp_path):
    inv = inventory_for(tmp_path, node, preflight_min_memory_mb=10**9)
    result = run_playbook("preflight.yml", inv)
    assert not result.ok
    outcome = result.hosts["node-a"]
    assert outcome.failed and "needs 1000000000" in outcome.message


@pytest.mark.parametrize("strategy", ["mitogen", "linear"])
def test_each_strategy_runs_the_play_and_says_which_it_was(node, tmp_path, monkeypatch, strategy):
    """Mitogen's strategy (the default) and Ansible's own reach the same host with the same result."""
    monkeypatch.setenv("RACKCTL_ANSIBLE_STRATEGY", strategy)
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node), facts_var="preflight_report")
    assert result.ok, result.as_dict()
    assert result.strategy == strategy and result.as_dict()["strategy"] == strategy
    assert int(result.facts["node-a"]["memory_mb"]) > 0


def test_the_default_strategy_is_mitogen(monkeypatch):
    monkeypatch.delenv("RACKCTL_ANSIBLE_STRATEGY", raising=False)
    assert strategy() == "mitogen"
    assert strategy_env("mitogen")["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert Path(strategy_env("mitogen")["ANSIBLE_STRATEGY_PLUGINS"], "mitogen_linear.py").is_file()


def test_an_unknown_strategy_is_a_clear_error(node, tmp_path, monkeypatch):
    monkeypatch.setenv("RACKCTL_ANSIBLE_STRATEGY", "free")
    with pytest.raises(InvalidInput) as caught:
        run_playbook("preflight.yml", inventory_for(tmp_path, node))
    problem = caught.value.problems[0]
    assert problem.path == "RACKCTL_ANSIBLE_STRATEGY" and "free" in problem.message
    assert "mitogen, linear" in problem.fix


@pytest.fixture(params=["mitogen", "linear"])
def each_strategy(request, monkeypatch):
    monkeypatch.setenv("RACKCTL_ANSIBLE_STRATEGY", request.param)
    return request.param


def test_wrong_host_key_is_refused(node, tmp_path, each_strategy):
    bad_known = tmp_path / "known_hosts"
    other = node.known_hosts.read_text().split()
    bad_known.write_text(
        f"{other[0]} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb0N9b4tRr8yQ1QmWbqFf3gLhK3u3cO2N3zWq5sK9aT\n"
    )
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node, known_hosts=bad_known))
    assert not result.ok
    assert result.hosts["node-a"].unreachable


def test_an_unpinned_host_is_refused(node, tmp_path, each_strategy):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node, known_hosts=empty))
    assert result.hosts["node-a"].unreachable
    assert refused_host_key(result.hosts["node-a"].message), result.hosts["node-a"].message


def test_artifacts_are_kept_in_the_work_dir(node, tmp_path):
    result = run_playbook("preflight.yml", inventory_for(tmp_path, node), work_dir=tmp_path / "run")
    assert result.artifacts is not None and result.artifacts.is_relative_to(tmp_path / "run")
    assert "PLAY RECAP" in (result.artifacts / "stdout").read_text()


def test_secrets_are_refused_as_extravars(node, tmp_path):
    with pytest.raises(InvalidInput):
        run_playbook("preflight.yml", inventory_for(tmp_path, node), extravars={"bmc_password": "x"})


def test_an_unknown_playbook_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match=r"no playbook nope\.yml"):
        run_playbook("nope.yml", tmp_path / "hosts.yml")


RESCUE_PLAY = """
- name: A block whose failure a rescue handles
  hosts: all
  gather_facts: false
  tasks:
    - name: Guarded step
      block:
        - name: First try
          ansible.builtin.fail:
            msg: first try failed
      rescue:
        - name: Give up after the rescue
          ansible.builtin.fail:
            msg: rescued, then gave up on purpose
          when: give_up | bool
"""


@pytest.mark.parametrize("give_up", [False, True])
def test_a_rescued_failure_is_not_the_hosts_outcome(node, tmp_path, monkeypatch, give_up):
    """Events report a rescued task as failed; the outcome follows the recap and the last failure."""
    books = tmp_path / "playbooks"
    books.mkdir()
    (books / "rescue.yml").write_text(RESCUE_PLAY)
    monkeypatch.setattr("bootstrap.ansible_driver.playbooks_dir", lambda: books)
    result = run_playbook("rescue.yml", inventory_for(tmp_path, node, give_up=give_up))
    outcome = result.hosts["node-a"]
    if give_up:
        assert not result.ok and outcome.failed
        assert outcome.message == "Give up after the rescue: rescued, then gave up on purpose"
    else:
        assert result.ok, result.as_dict()
        assert outcome.success and outcome.message == ""
