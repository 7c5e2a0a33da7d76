"""Loading files and the inventory CLI (validate, init, inventory render) through click's runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import check_inventory, load_inventory
from bootstrap.inventory.secrets import resolve_bmc_credentials
from tests.inventory.conftest import SAMPLE

runner = CliRunner()


def write(tmp_path: Path, data) -> Path:
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return path


def test_duplicate_yaml_key_is_an_error_with_line(tmp_path):
    path = write(tmp_path, "cluster:\n  name: a\n  name: b\n")
    with pytest.raises(InvalidInput) as exc:
        load_inventory(path)
    problem = exc.value.problems[0]
    assert "duplicate key 'name' (first at line 2)" in problem.message
    assert problem.line == 3


def test_yaml_syntax_error_points_at_line(tmp_path):
    path = write(tmp_path, "cluster:\n  name: [unclosed\nnodes: []\n")
    with pytest.raises(InvalidInput) as exc:
        load_inventory(path)
    assert exc.value.problems[0].line is not None


def test_missing_file_says_how_to_start(tmp_path):
    with pytest.raises(InvalidInput) as exc:
        load_inventory(tmp_path / "nope.yml")
    assert "rackctl init" in exc.value.problems[0].fix


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_documents(tmp_path, text):
    with pytest.raises(InvalidInput) as exc:
        load_inventory(write(tmp_path, text))
    assert "mapping" in exc.value.message


def test_problems_carry_line_numbers(data, tmp_path):
    data["nodes"][3]["model"] = "R760"
    path = write(tmp_path, data)
    with pytest.raises(InvalidInput) as exc:
        check_inventory(path)
    [problem] = [p for p in exc.value.problems if p.path == "nodes[3].model"]
    lines = path.read_text().splitlines()
    assert lines[problem.line - 1].strip().startswith("model: R760")


def test_validate_ok_json(data, tmp_path):
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] is True and doc["errors"] == []
    assert doc["summary"]["gpus"] == 12
    assert all({"path", "message"} <= set(w) for w in doc["warnings"])


def test_validate_errors_json_exit_2_no_traceback(data, tmp_path):
    data["nodes"][4]["gpus"] = {"type": "H100-SXM", "count": "two"}
    data["nodes"][0]["bmc"]["adress"] = "x"
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.output)
    assert doc["ok"] is False
    paths = {e["path"] for e in doc["errors"]}
    assert {"nodes[4].gpus.count", "nodes[0].bmc.adress"} <= paths
    assert "Traceback" not in result.output


def test_validate_human_output_exit_2(data, tmp_path):
    data["nodes"][4]["model"] = "XE9860"
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data))])
    assert result.exit_code == 2
    assert "did you mean 'XE9680'?" in result.output


def test_init_writes_sample_and_refuses_overwrite(tmp_path):
    out = tmp_path / "inv" / "cluster.yml"
    first = runner.invoke(cli, ["init", "--example", "dvd-inference", "-o", str(out), "--json"])
    assert first.exit_code == 0, first.output
    assert out.read_text() == SAMPLE.read_text()
    again = runner.invoke(cli, ["init", "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    unknown = runner.invoke(cli, ["init", "--example", "nope", "-o", str(tmp_path / "x.yml"), "--json"])
    assert unknown.exit_code == 2
    assert "dvd-inference" in json.loads(unknown.output)["errors"][0]["fix"]


def test_render_produces_an_inventory_ansible_reads(data, tmp_path):
    inv_path = write(tmp_path, data)
    out, state = tmp_path / "ansible", tmp_path / "state"
    args = ["inventory", "render", "-i", str(inv_path), "-o", str(out), "--state-dir", str(state), "--json"]
    dry = runner.invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0 and not out.exists()
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    # The real ansible-core inventory parser reads what we wrote.
    listed = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(out / "hosts.yml"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_WARNING": "true"},
    )
    doc = json.loads(listed.stdout)
    assert doc["fabric_manager"]["hosts"] == ["gpu-xe9680-01"]
    assert set(doc["kube_control_plane"]["hosts"]) == {"head-01", "cp-02", "cp-03"}
    assert set(doc["model_r760xa"]["hosts"]) == {"gpu-l40s-01"}
    assert doc["_meta"]["hostvars"]["gpu-l40s-01"]["ansible_host"] == "10.10.0.24"  # its pxe address (inband.access)
    gpu_host = doc["_meta"]["hostvars"]["gpu-l40s-01"]
    assert gpu_host["gpu_count"] == 4
    # layered group_vars: all/*.yml for everyone, gpu.yml only for the gpu group
    assert gpu_host["cluster_name"] == data["cluster"]["name"] and gpu_host["pod_cidr"]
    assert gpu_host["gpu_operator_enabled"] is True
    assert "gpu_operator_enabled" not in doc["_meta"]["hostvars"]["cp-02"]
    # how it is reached: the state dir's pinned known_hosts, strictly
    assert gpu_host["ansible_user"] == "rackctl"  # autoinstall: the seeded admin user
    assert f"UserKnownHostsFile={state.resolve()}/hostkeys/known_hosts" in gpu_host["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in gpu_host["ansible_ssh_common_args"]
    rendered = (out / "hosts.yml").read_text() + "".join(p.read_text() for p in (out / "group_vars").rglob("*.yml"))
    assert "RACKCTL_BMC_PASSWORD" not in rendered and "fingerprint" not in rendered


def test_render_replaces_the_tree_whole(data, tmp_path):
    inv_path = write(tmp_path, data)
    out = tmp_path / "ansible"
    out.mkdir()
    (out / "stale.yml").write_text("old")
    assert runner.invoke(cli, ["inventory", "render", "-i", str(inv_path), "-o", str(out)]).exit_code == 0
    assert not (out / "stale.yml").exists() and (out / "hosts.yml").exists()
    assert not list(tmp_path.glob(".ansible.*"))


def test_credentials_from_env_and_file(data, tmp_path, monkeypatch):
    inv = load_inventory(write(tmp_path, data))
    creds = resolve_bmc_credentials(inv, inv.nodes[0])
    assert creds.password.get_secret_value() == "not-used-here"
    assert "not-used-here" not in repr(creds) and "not-used-here" not in str(creds.password)
    secrets = tmp_path / "bmc.yml"
    secrets.write_text("idrac: s3cret-value\n")
    secrets.chmod(0o600)
    data["credentials"]["idrac"] = {"username": "root", "password_file": "bmc.yml"}
    inv = load_inventory(write(tmp_path, data))
    assert resolve_bmc_credentials(inv, inv.nodes[0]).password.get_secret_value() == "s3cret-value"
    secrets.chmod(0o640)
    with pytest.raises(InvalidInput) as exc:
        resolve_bmc_credentials(inv, inv.nodes[0])
    assert "chmod 600" in exc.value.problems[0].fix
    assert "s3cret-value" not in str(exc.value) + str(exc.value.problems)


def test_validate_warns_when_the_password_variable_or_file_is_absent_here(data, tmp_path, monkeypatch):
    monkeypatch.delenv("RACKCTL_BMC_PASSWORD")
    data["credentials"]["spare"] = {"username": "root", "password_file": "secrets/bmc-spare.yml"}
    data["nodes"][0]["bmc"]["credentials"] = "spare"
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 0, result.output  # still a valid file
    doc = json.loads(result.output)
    assert doc["ok"] is True
    warned = {w["path"]: w for w in doc["warnings"]}
    env = warned["credentials.idrac.password_env"]
    assert env["message"] == "on this machine: environment variable RACKCTL_BMC_PASSWORD is not set"
    assert "export RACKCTL_BMC_PASSWORD=" in env["fix"]
    assert "does not exist" in warned["credentials.spare.password_file"]["message"]
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "pw-set-here-123")
    again = json.loads(runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"]).output)
    assert "credentials.idrac.password_env" not in {w["path"] for w in again["warnings"]}
    assert "pw-set-here-123" not in json.dumps(again)


def test_plan_warns_as_validate_does_when_a_password_source_is_absent_here(data, tmp_path, monkeypatch):
    monkeypatch.delenv("RACKCTL_BMC_PASSWORD")
    data["credentials"]["spare"] = {"username": "root", "password_file": "secrets/bmc-spare.yml"}
    data["nodes"][4]["bmc"]["credentials"] = "spare"
    path = write(tmp_path, data)
    state = ["--state-dir", str(tmp_path / "state")]
    result = runner.invoke(cli, ["plan", "-i", str(path), *state, "--json"])
    assert result.exit_code == 0, result.output  # a warning, not a failure
    warnings = json.loads(result.stdout)["warnings"]
    assert any(
        w.startswith("credentials.idrac.password_env: on this machine: environment variable RACKCTL_BMC_PASSWORD")
        and "fix: export RACKCTL_BMC_PASSWORD=" in w
        for w in warnings
    ), warnings
    assert any(w.startswith("credentials.spare.password_file:") and "does not exist" in w for w in warnings)
    human = runner.invoke(cli, ["plan", "-i", str(path), *state])
    assert human.exit_code == 0, human.output
    assert "RACKCTL_BMC_PASSWORD is not set" in human.stderr
    assert "Traceback" not in human.output
    # only the selected nodes' sources: gpu-xe9680-01 alone uses the spare file
    limited = runner.invoke(cli, ["plan", "-i", str(path), *state, "--limit", "head-01", "--json"])
    assert not [w for w in json.loads(limited.stdout)["warnings"] if "spare" in w]
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "pw-set-here-123")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "bmc-spare.yml").write_text("spare: pw-in-a-file-456\n")
    (tmp_path / "secrets" / "bmc-spare.yml").chmod(0o600)
    quiet = runner.invoke(cli, ["plan", "-i", str(path), *state, "--json"])
    assert not [w for w in json.loads(quiet.stdout).get("warnings", []) if "on this machine" in w]
    assert "pw-set-here-123" not in quiet.output and "pw-in-a-file-456" not in quiet.output


def test_validate_reports_all_four_mistakes_of_a_file_at_once(data, tmp_path):
    data["nodes"][0]["rool"] = "head"  # schema: an unknown key
    data["nodes"][3]["service_tag"] = "not a tag!"  # schema: a bad value
    data["nodes"][1]["interfaces"][0]["ip"] = "10.99.0.22"  # rule: outside the pxe network
    data["nodes"][4]["interfaces"][1]["ip"] = "10.20.0.21"  # rule: head-01's management address
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2, result.output
    errors = json.loads(result.output)["errors"]
    paths = sorted(e["path"] for e in errors)
    assert len(errors) == 4, errors
    assert paths[0] == "nodes[0].rool"
    assert paths[1] == "nodes[1].interfaces[0].ip"
    assert paths[2] == "nodes[3].service_tag"
    assert paths[3] in ("nodes[4].interfaces[1].ip", "nodes[0].interfaces[1].ip")
    assert all(e.get("line") for e in errors), errors  # each at its line in the file


def test_rule_findings_after_a_removed_list_item_keep_their_place_in_the_file(data, tmp_path):
    data["nodes"][1]["role"] = "kontrol-plane"  # schema: the whole node is left out of the rules' view
    data["nodes"][4]["interfaces"][0]["ip"] = "10.99.0.25"  # rule: outside the pxe network
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2, result.output
    paths = [e["path"] for e in json.loads(result.output)["errors"]]
    # the file's index (not the fourth node that parsed), and no count rule echoing the node left out
    assert sorted(paths) == ["nodes[1].role", "nodes[4].interfaces[0].ip"]


def test_a_refused_cluster_key_still_lets_every_rule_check_the_rest(data, tmp_path):
    """A bad required key of a section (cluster.name) used to take the whole document out of the rules."""
    data["cluster"]["name"] = "Bad Name!"  # schema, a required key
    data["nodes"][3]["service_tag"] = "x y"  # schema, a node's
    data["networks"]["management"]["gateway"] = "10.99.0.1"  # rule: outside its network
    data["nodes"][1]["interfaces"][0]["ip"] = "10.99.0.22"  # rule: outside the pxe network
    data["nodes"][4]["interfaces"][1]["ip"] = "10.20.0.21"  # rule: head-01's management address
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2, result.output
    errors = {e["path"]: e for e in json.loads(result.output)["errors"]}
    assert sorted(errors) == [
        "cluster.name",
        "networks.management.gateway",
        "nodes[1].interfaces[0].ip",
        "nodes[3].service_tag",
        "nodes[4].interfaces[1].ip",
    ], errors
    values = {
        "cluster.name": "Bad Name!",
        "networks.management.gateway": "10.99.0.1",
        "nodes[1].interfaces[0].ip": "10.99.0.22",
        "nodes[3].service_tag": "x y",
        "nodes[4].interfaces[1].ip": "10.20.0.21",
    }
    for path, error in errors.items():
        assert values[path] in error["message"], error  # the value
        assert error["fix"] and error["line"], error  # the fix, and where it is in the file
    assert "dvd-inference" not in result.output  # the sample's name stood in for the rules, never shown


def test_a_refused_network_value_gives_its_error_and_no_echoes(data, tmp_path):
    data["networks"]["management"]["cidr"] = "10.20.0.0/33"  # schema
    data["nodes"][2]["rool"] = "head"  # schema
    data["nodes"][1]["interfaces"][0]["ip"] = "10.99.0.22"  # rule
    data["nodes"][4]["interfaces"][1]["ip"] = "10.20.0.21"  # rule
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2, result.output
    paths = sorted(e["path"] for e in json.loads(result.output)["errors"])
    # not "networks.management.cidr: no cidr", nor "network 'management' is not defined" on every node
    assert paths == [
        "networks.management.cidr",
        "nodes[1].interfaces[0].ip",
        "nodes[2].rool",
        "nodes[4].interfaces[1].ip",
    ], paths


def test_a_missing_section_is_reported_and_nothing_is_made_up_from_its_stand_in(data, tmp_path):
    del data["networks"]
    data["nodes"][1]["interfaces"][0]["ip"] = "10.99.0.22"  # outside no network the file defines
    data["nodes"][4]["interfaces"][1]["ip"] = "10.20.0.21"  # rule: head-01's address, networks or not
    result = runner.invoke(cli, ["validate", "-i", str(write(tmp_path, data)), "--json"])
    assert result.exit_code == 2, result.output
    errors = json.loads(result.output)["errors"]
    assert sorted(e["path"] for e in errors) == ["networks", "nodes[4].interfaces[1].ip"], errors
