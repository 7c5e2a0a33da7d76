"""``rackctl doctor`` reports real lookups on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap import ansible_plugins, doctor
from bootstrap.ansible_plugins import Plugin
from bootstrap.cli import cli
from bootstrap.doctor import Check, run_check

ROOT = Path(__file__).resolve().parents[2]


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
    used = ansible_plugins.plugins_used()
    assert ansible_plugins.collections_used() == set()  # the base install runs every shipped playbook
    # the scan finds what the roles really use, each kind
    assert Plugin("module", "ansible.builtin.command") in used
    assert Plugin("module", "ansible.builtin.import_playbook") in used  # a play's key (site.yml)
    assert Plugin("lookup", "ansible.builtin.fileglob") in used  # query('ansible.builtin.fileglob', ...)
    assert Plugin("filter", "from_yaml_all") in used  # a short name, inside a templated string
    assert Plugin("test", "version") in used
    assert ansible_plugins.unresolved(used) == []


def _role(tmp_path: Path, tasks: str) -> Path:
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(tasks)
    return tmp_path


def test_a_role_naming_an_absent_collection_is_missing_with_its_install_command(monkeypatch, tmp_path):
    share = _role(
        tmp_path,
        "- name: x\n  rackctlnosuch.things.modprobe:\n    name: overlay\n"
        "- name: y\n  ansible.builtin.command: 'true'\n  changed_when: result is rackctlnosuch.things.odd\n",
    )
    monkeypatch.setattr(ansible_plugins.resources, "SHARE", share)
    assert ansible_plugins.collections_used() == {"rackctlnosuch.things"}
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 3
    entry = next(c for c in json.loads(result.output)["checks"] if c["name"] == "shipped roles' collections")
    assert entry["found"] == "not resolved: module rackctlnosuch.things.modprobe, test rackctlnosuch.things.odd"
    assert entry["install"].endswith("ansible-galaxy collection install rackctlnosuch.things")


def test_a_filter_ansible_core_lacks_is_found_by_its_short_name(monkeypatch, tmp_path):
    share = _role(
        tmp_path,
        '- name: x\n  ansible.builtin.debug:\n    msg: "{{ data | rackctl_no_such_filter }}"\n'
        '- name: y\n  ansible.builtin.debug:\n    msg: !unsafe "{{ never | templated }}"\n',  # Ansible never renders it
    )
    monkeypatch.setattr(ansible_plugins.resources, "SHARE", share)
    assert ansible_plugins.collections_used() == set()  # nothing names a collection: syntax checks pass
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 3
    entry = next(c for c in json.loads(result.output)["checks"] if c["name"] == "shipped roles' collections")
    assert entry["found"] == "not resolved: filter rackctl_no_such_filter"
    assert entry["install"].endswith(f"pip install '{doctor.declared('ansible-core')}'")
    assert ">=2.17" in entry["install"]  # rackctl's own range, from its installed metadata


def test_an_unparsable_shipped_file_fails_the_check_naming_it(monkeypatch, tmp_path):
    share = _role(tmp_path, '- name: x\n  ansible.builtin.debug:\n    msg: "{{ data | }}"\n')
    monkeypatch.setattr(ansible_plugins.resources, "SHARE", share)
    finding = run_check(next(c for c in doctor.CHECKS if c.kind == "collections"))
    assert not finding.ok and "roles/r/tasks/main.yml" in finding.found


def test_without_ansible_core_the_plugins_do_not_resolve(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    with pytest.raises(RuntimeError, match="plugin loader failed"):
        ansible_plugins.unresolved({Plugin("module", "ansible.builtin.command")}, python=str(bare / "bin" / "python"))


def _fake_dist(tmp_path: Path, requires: list[str]) -> None:
    info = tmp_path / "rackctl_doctor_fake-1.0.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", "Name: rackctl-doctor-fake", "Version: 1.0"]
    (info / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")


def test_an_extra_is_checked_against_the_installed_metadata(monkeypatch, tmp_path):
    _fake_dist(
        tmp_path,
        [
            "click>=8",  # a base requirement: no extra's
            'click>=8.1; extra == "one"',
            'rackctl-no-such-package>=1; extra == "two"',
            'click>=999; extra == "old"',
            'rackctl-doctor-fake[one,two]; extra == "both"',
            'click>=8; extra == "merged"',
            'click<1; extra == "merged"',  # one package named twice must meet both
        ],
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [r.name for r in doctor.extra_requirements("both", "rackctl-doctor-fake")] == [
        "click",
        "rackctl-no-such-package",
    ]
    monkeypatch.setattr(doctor, "DIST", "rackctl-doctor-fake")

    def check(extra):
        return run_check(Check(f"fake[{extra}]", "extra", "x", extra, f"pip install 'fake[{extra}]'", target=extra))

    one = check("one")
    assert one.ok and one.found.startswith("click ")
    two = check("two")
    assert not two.ok and two.found == "rackctl-no-such-package missing"
    assert not check("old").ok and "(wants >=999)" in check("old").found
    assert not check("both").ok
    merged = check("merged")
    assert not merged.ok and merged.found.startswith("click ") and "(wants <1,>=8)" in merged.found
    none = check("none")
    assert not none.ok and "declares no extra 'none'" in none.found


def test_the_extras_doctor_checks_are_those_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    checked = {c.target for c in doctor.CHECKS if c.kind == "extra"}
    assert checked == set(declared) - {"test", "lab"}  # lab: its own package; test: the suite's tools
    for check in doctor.CHECKS:
        if check.kind == "extra":
            assert check.needed_by and check.install.endswith(f"'rackctl[{check.target}]'")
            assert doctor.extra_requirements(check.target), check.target  # this install's metadata has it


def test_the_human_table_names_each_extra_with_its_brackets():
    result = CliRunner().invoke(cli, ["doctor"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "rackctl[cluster]" in result.output and "rackctl[triton]" in result.output


def test_a_roles_files_are_copied_not_templated_so_not_scanned(monkeypatch, tmp_path):
    share = _role(tmp_path, "- name: x\n  ansible.builtin.copy:\n    src: values.yml\n    dest: /tmp/values.yml\n")
    (share / "roles" / "r" / "files").mkdir()
    (share / "roles" / "r" / "files" / "values.yml").write_text("image: '{{ .Values.image | quote }}'\n")  # Go's
    (share / "roles" / "r" / "templates").mkdir()
    (share / "roles" / "r" / "templates" / "unit.service").write_text("Exec={{ bin | rackctl_tmpl_filter }}\n")
    used = ansible_plugins.plugins_used(share)
    assert used == {Plugin("module", "ansible.builtin.copy"), Plugin("filter", "rackctl_tmpl_filter")}
