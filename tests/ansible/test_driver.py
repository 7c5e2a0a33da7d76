"""The Ansible driver runs the project's real playbooks over real SSH (OpenSSH sshd on loopback)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook
from bootstrap.errors import InvalidInput
from tests.sshnode import SSHD, start_ssh_node

pytestmark = pytest.mark.skipif(
    not Path(SSHD).exists(), reason="openssh-server not installed (scripts/setup.sh installs it)"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    ssh = start_ssh_node(tmp_path_factory.mktemp("sshnode"))
    yield ssh
    ssh.stop()


def inventory_for(tmp_path: Path, node, **hostvars) -> Path:
    hosts = {
        "node-a": {
            "ansible_host": "127.0.0.1",
            "ansible_port": node.port,
            "ansible_user": getpass.getuser(),
            # this machine's PATH has pyenv shims; a real node's interpreter is the system one
            "ansible_python_interpreter": "/usr/bin/python3",
            **hostvars,
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"hosts": hosts}}))
    return path


def test_preflight_runs_over_ssh_and_reports_facts(node, tmp_path):
    result = run_playbook(
        "preflight.yml",
        inventory_for(tmp_path, node),
        private_key=node.private_key,
        known_hosts=node.known_hosts,
    )
    assert result.ok, result.as_dict()
    assert result.hosts["node-a"].ok > 3
    report = result.facts["node-a"]["preflight"]
    assert int(report["memory_mb"]) > 0 and report["kernel"]


def test_a_failing_check_is_reported_per_host(node, tmp_path):
    inv = inventory_for(tmp_path, node, preflight_min_memory_mb=10**9)
    result = run_playbook("preflight.yml", inv, private_key=node.private_key, known_hosts=node.known_hosts)
    assert not result.ok
    outcome = result.hosts["node-a"]
    assert outcome.failed and "needs 1000000000" in outcome.message


def test_wrong_host_key_is_refused(node, tmp_path):
    bad_known = tmp_path / "known_hosts"
    other = node.known_hosts.read_text().split()
    bad_known.write_text(
        f"{other[0]} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb0N9b4tRr8yQ1QmWbqFf3gLhK3u3cO2N3zWq5sK9aT\n"
    )
    result = run_playbook(
        "preflight.yml", inventory_for(tmp_path, node), private_key=node.private_key, known_hosts=bad_known
    )
    assert not result.ok
    assert result.hosts["node-a"].unreachable


def test_secrets_are_refused_as_extravars(node, tmp_path):
    with pytest.raises(InvalidInput):
        run_playbook("preflight.yml", inventory_for(tmp_path, node), extravars={"bmc_password": "x"})
