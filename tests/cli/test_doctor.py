"""``rackctl doctor`` reports real lookups on this machine."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bootstrap import doctor
from bootstrap.cli import cli
from bootstrap.doctor import Check, run_check


def test_present_and_absent_packages_and_commands():
    assert run_check(Check("click", "python", "x", "core", "pip install click", "1.0")).ok
    missing = run_check(Check("rackctl-no-such-package", "python", "x", "core", "pip install it"))
    assert not missing.ok and missing.found == "missing"
    assert missing.as_dict()["install"] == "pip install it"
    too_old = run_check(Check("click", "python", "x", "core", "pip install -U click", "999.0"))
    assert not too_old.ok and "too old" in too_old.found
    assert run_check(Check("sh", "command", "x", "core", "apt-get install dash")).ok
    assert not run_check(Check("rackctl-no-such-command", "command", "x", "lab", "apt-get install it")).ok


def test_doctor_json_ok_on_this_machine():
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    doc = json.loads(result.output)
    core = [c for c in doc["checks"] if c["group"] == "core"]
    assert core and all(c["ok"] for c in core), core
    assert result.exit_code == 0 and doc["ok"] is True


def test_doctor_exit_3_with_install_command_when_required_piece_missing(monkeypatch):
    bogus = Check("rackctl-no-such-tool", "command", "testing doctor", "lab", "apt-get install rackctl-no-such-tool")
    monkeypatch.setattr(doctor, "CHECKS", (*doctor.CHECKS, bogus))
    ok_core = CliRunner().invoke(cli, ["doctor", "--json"])
    assert ok_core.exit_code == 0  # lab is not required by default
    result = CliRunner().invoke(cli, ["doctor", "--require", "lab", "--json"])
    assert result.exit_code == 3
    entry = next(c for c in json.loads(result.output)["checks"] if c["name"] == "rackctl-no-such-tool")
    assert entry["install"] == "apt-get install rackctl-no-such-tool"


def test_the_shipped_roles_use_only_ansible_core_builtins():
    assert doctor.collections_used() == set()  # the base install runs every shipped playbook


def test_a_role_naming_an_absent_collection_is_missing_with_its_install_command(monkeypatch, tmp_path):
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tasks / "main.yml").write_text(
        "- name: x\n  rackctlnosuch.things.modprobe:\n    name: overlay\n- name: y\n  ansible.builtin.command: 'true'\n"
    )
    monkeypatch.setattr(doctor.resources, "SHARE", tmp_path)
    assert doctor.collections_used() == {"rackctlnosuch.things"}
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 3
    entry = next(c for c in json.loads(result.output)["checks"] if c["name"] == "shipped roles' collections")
    assert entry["found"] == "missing rackctlnosuch.things"
    assert entry["install"] == "ansible-galaxy collection install rackctlnosuch.things"
