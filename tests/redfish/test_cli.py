"""The out-of-band CLI against the emulated rack, with the sample inventory pointed at it."""

from __future__ import annotations

import difflib
import json
from io import StringIO
from pathlib import Path

import pytest
from click.testing import CliRunner
from rf_lab import NODES, Lab, assert_no_secret
from ruamel.yaml import YAML

from bootstrap.cli import cli

SAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.fixture
def inventory(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sample inventory with each node's BMC pointing at its emulated iDRAC (pinned fingerprint)."""
    yaml = YAML()
    data = yaml.load(SAMPLE.read_text())
    data["cluster"]["lab"] = True
    data["credentials"] = {}
    for node in data["nodes"]:
        name = node["hostname"]
        env = "RF_PW_" + name.upper().replace("-", "_")
        monkeypatch.setenv(env, lab.specs[name].password)
        data["credentials"][name] = {"username": "root", "password_env": env}
        node["bmc"]["address"] = lab.endpoints[name].url
        node["bmc"]["fingerprint"] = lab.endpoints[name].fingerprint
        node["bmc"]["credentials"] = name
    out = StringIO()
    yaml.dump(data, out)
    path = tmp_path / "cluster.yml"
    path.write_text(out.getvalue())
    return path


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


def test_discover_checks_inventory_and_writes_macs(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, out = run(["discover", "-i", str(inventory), "--state-dir", str(state), "--json"])
    data = json.loads(out)
    assert code == 0, out
    assert data["ok"] and len(data["nodes"]) == 5
    xe = next(n for n in data["nodes"] if n["name"] == "gpu-xe9680-01")
    assert xe["value"]["gpu_count"] == 8 and xe["value"]["service_tag"] == "GX01X96"
    offered = {(d["node"], d["fqdd"]): d["discovered"] for d in data["mac_diff"]}
    for name, spec in lab.specs.items():
        if name.startswith("spare"):
            continue
        for fqdd, mac in spec.nics.items():
            assert offered[(name, fqdd)] == mac
    assert_no_secret(out, lab.passwords)

    from bootstrap.journal.store import Journal

    with Journal(state, readonly=True) as journal:
        assert journal.latest_facts("head-01")["discover"]["service_tag"] == "HD01R66"

    original = inventory.read_text()
    code, out = run(["discover", "-i", str(inventory), "--state-dir", str(state), "--write", "--json"])
    assert code == 0 and json.loads(out)["written"] == len(offered)
    text = inventory.read_text()
    assert "# rackctl inventory" in text and text.count("\n") >= original.count("\n") - 1  # comments kept
    code, out = run(["discover", "-i", str(inventory), "--state-dir", str(state), "--json"])
    assert json.loads(out)["mac_diff"] == []  # applied: nothing left to offer


def test_discover_reports_mismatch_and_fails(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    text = inventory.read_text().replace("service_tag: GL01R76", "service_tag: WRONG77")
    inventory.write_text(text)
    code, out = run(
        ["discover", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "gpu-l40s-01", "--json"]
    )
    assert code == 1
    data = json.loads(out)
    assert data["mismatches"]["gpu-l40s-01"] == [
        {"field": "service_tag", "inventory": "WRONG77", "discovered": "GL01R76"}
    ]


def test_power_dry_run_changes_nothing_then_power_is_idempotent(lab: Lab, inventory: Path) -> None:
    name = "cp-02"
    run(["power", "off", "-i", str(inventory), "--limit", name, "--json"])
    code, out = run(["power", "on", "-i", str(inventory), "--limit", name, "--dry-run", "--json"])
    assert code == 0 and json.loads(out)["nodes"][0]["value"] == {"current": "Off", "would": "on"}
    assert lab.rack.state(name)["power_state"] == "Off"
    code, out = run(["power", "on", "-i", str(inventory), "--limit", name, "--json"])
    assert code == 0 and json.loads(out)["nodes"][0]["value"]["changed"] is True
    code, out = run(["power", "on", "-i", str(inventory), "--limit", name, "--json"])
    assert json.loads(out)["nodes"][0]["value"]["changed"] is False
    run(["power", "off", "-i", str(inventory), "--limit", name])


def test_boot_and_bios_plan_and_status(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    code, out = run(["boot", "Pxe", "-i", str(inventory), "--limit", "head-01", "--json"])
    assert code == 0 and json.loads(out)["nodes"][0]["value"]["after"]["target"] == "Pxe"
    bios_plan = ["bios", "plan", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "worker", "--json"]
    code, out = run(bios_plan)
    assert code == 0, out  # nothing discovered yet under this --state-dir: the stage would not run
    assert {n["name"]: n["status"] for n in json.loads(out)["nodes"]} == dict.fromkeys(
        ("gpu-l40s-01", "gpu-xe9680-01"), "skip"
    )
    assert "needs discovered" in json.loads(out)["nodes"][0]["skip"]
    run(["discover", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "worker"])
    code, out = run(bios_plan)
    assert code == 0, out
    plans = {n["name"]: n["value"] for n in json.loads(out)["nodes"]}
    assert set(plans) == {"gpu-l40s-01", "gpu-xe9680-01"}
    for plan in plans.values():
        assert not plan["problems"]
    code, out = run(["bmc", "status", "-i", str(inventory), "--json"])
    assert code == 0, out
    nodes = {n["name"]: n["value"] for n in json.loads(out)["nodes"]}
    assert nodes["head-01"]["tls"] == "pinned" and nodes["head-01"]["auth"] == "session"
    assert nodes["head-01"]["lc"]["ready"] is True
    assert_no_secret(out, lab.passwords)


def test_bad_input_is_a_clear_error_without_traceback(
    lab: Lab, inventory: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, out = run(["power", "on", "-i", str(inventory), "--limit", "nope-9"])
    assert code == 2 and "'nope-9' matches no node" in out and "Traceback" not in out
    monkeypatch.delenv("RF_PW_HEAD_01")
    code, out = run(["bmc", "status", "-i", str(inventory), "--limit", "head-01", "--json"])
    assert code == 2 and "RF_PW_HEAD_01" in out
    state = tmp_path / "state"
    for args in (["discover"], ["bios", "apply"]):
        code, out = run([*args, "-i", str(inventory), "--state-dir", str(state), "--limit", "head-01", "--json"])
        assert code == 2 and "RF_PW_HEAD_01" in out and "Traceback" not in out, (args, out)
    assert not state.exists()  # refused before the journal was touched


def test_unreachable_bmc_fails_that_node_only(lab: Lab, inventory: Path) -> None:
    text = inventory.read_text().replace(lab.endpoints["cp-03"].url, "https://127.0.0.1:1")
    inventory.write_text(text)
    code, out = run(["bmc", "status", "-i", str(inventory), "--limit", "cp-02,cp-03", "--json"])
    assert code == 1
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert nodes["cp-02"]["ok"] and not nodes["cp-03"]["ok"]
    assert nodes["cp-03"]["error"]["kind"] == "transport"


def test_human_output_renders_every_command(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path)]
    for args in (
        ["discover", "-i", str(inventory), *state, "--limit", "head-01"],
        ["discover", "-i", str(inventory), *state, "--limit", "head-01,gpu-xe9680-01"],
        ["power", "off", "-i", str(inventory), "--limit", "cp-03", "--dry-run"],
        ["boot", "Hdd", "-i", str(inventory), "--limit", "cp-03", "--dry-run"],
        ["bios", "plan", "-i", str(inventory), *state, "--limit", "head-01"],
        ["bios", "apply", "-i", str(inventory), *state, "--limit", "head-01", "--dry-run"],
        ["bmc", "status", "-i", str(inventory), "--limit", "head-01"],
    ):
        code, out = run(args)
        assert code == 0, (args, out)
        assert "Traceback" not in out and args[args.index("--limit") + 1].split(",")[0] in out, (args, out)
        assert_no_secret(out, lab.passwords)


def test_discover_moves_nodes_to_discovered_in_the_journal(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    from bootstrap.journal.store import Journal

    state = tmp_path / "state"
    code, out = run(["discover", "-i", str(inventory), "--state-dir", str(state), "--limit", "worker", "--json"])
    assert code == 0, out
    data = json.loads(out)
    assert {n["name"]: n["state"] for n in data["nodes"]} == dict.fromkeys(
        ("gpu-l40s-01", "gpu-xe9680-01"), "discovered"
    )
    with Journal(state, readonly=True) as journal:
        states = {name: s.state.value for name, s in journal.nodes().items()}
        assert states["gpu-l40s-01"] == states["gpu-xe9680-01"] == "discovered"
        assert states["head-01"] == "registered"  # not selected: untouched
        assert journal.stage_done("gpu-l40s-01", "discover") is not None  # journalled as in `up`
        assert journal.runs()[0].command == "discover --limit worker"
    # the same journal drives `up`: discover is done there, so `plan` skips it for these nodes
    code, out = run(["plan", "-i", str(inventory), "--state-dir", str(state), "--stages", "discover", "--json"])
    actions = {a["node"]: a for a in json.loads(out)["stages"][0]["actions"]}
    assert actions["gpu-l40s-01"]["skip"] == "already discovered" and actions["head-01"]["skip"] is None


def test_bios_apply_runs_the_stage_and_configures_the_node(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    from bootstrap.journal.store import Journal

    apply = ["bios", "apply", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "cp-02", "--json"]
    code, out = run(apply)
    assert code == 1 and "needs discovered" in json.loads(out)["message"]  # as in `up`: discover first
    run(["discover", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "cp-02"])
    code, out = run(apply)
    assert code == 0, out
    node = json.loads(out)["nodes"][0]
    assert node["state"] == "configured" and node["value"]["state"] in ("scheduled", "unchanged")
    with Journal(tmp_path, readonly=True) as journal:
        assert journal.state("cp-02").value == "configured"
        assert [s.status for s in journal.steps(node="cp-02") if s.step == "bios-profile"][-1] == "completed"


def _example_on_the_lab(lab: Lab, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped example, edited in place (one line per value) to point at the emulated iDRACs."""
    from bootstrap.inventory.yamledit import YamlEditor

    editor = YamlEditor(SAMPLE.read_text(), path)
    credentials = {}
    for index, name in enumerate(n[0] for n in NODES):
        env = "RF_PW_" + name.upper().replace("-", "_")
        monkeypatch.setenv(env, lab.specs[name].password)
        credentials[name] = {"username": "root", "password_env": env}
        editor.set_scalar(("nodes", index, "bmc", "address"), lab.endpoints[name].url)
        editor.set_scalar(("nodes", index, "bmc", "fingerprint"), lab.endpoints[name].fingerprint)
        editor.set_scalar(("nodes", index, "bmc", "credentials"), name)
    editor.set_top_level("credentials", credentials)
    editor.set_scalar(("cluster", "lab"), True)
    path.write_text(editor.text)


def test_discover_write_changes_one_line_per_mac(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yml"
    _example_on_the_lab(lab, path, monkeypatch)
    before = path.read_text()
    args = ["discover", "-i", str(path), "--state-dir", str(tmp_path / "s"), "--limit", "head-01", "--json"]
    code, out = run([*args, "--write"])
    assert code == 0, out
    data = json.loads(out)
    assert data["written"] == 2  # head-01's two NICs
    after = path.read_text()
    changed = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) == 2 * data["written"], changed  # one line out, one line in, per MAC
    for item in data["mac_diff"]:
        assert any(item["discovered"] in line and item["interface"] in line for line in changed if line[0] == "+")
    # the long admin key stays whole on one line, the same line
    keys = [(i, line) for i, line in enumerate(after.splitlines()) if "ops@example.com" in line]
    assert keys == [(i, line) for i, line in enumerate(before.splitlines()) if "ops@example.com" in line]
    assert len(keys) == 1 and keys[0][1].strip().startswith("- ssh-"), keys
    code, out = run(args)
    assert json.loads(out)["mac_diff"] == []


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_empty_limit_is_refused(lab: Lab, inventory: Path, tmp_path: Path, value: str) -> None:
    for args in (
        ["discover", "-i", str(inventory), "--state-dir", str(tmp_path)],
        ["bios", "plan", "-i", str(inventory), "--state-dir", str(tmp_path)],
        ["power", "on", "-i", str(inventory), "--dry-run"],
    ):
        code, out = run([*args, "--limit", value, "--json"])
        assert code == 2, (args, out)
        error = json.loads(out)["errors"][0]
        assert error["path"] == "--limit" and "empty" in error["message"] and "leave --limit out" in error["fix"]
    assert not (tmp_path / "journal.sqlite3").exists()


def test_discover_unreachable_bmc_fails_that_node_without_stale_facts(
    lab: Lab, inventory: Path, tmp_path: Path
) -> None:
    args = ["discover", "-i", str(inventory), "--state-dir", str(tmp_path), "--limit", "cp-02,cp-03", "--json"]
    code, out = run(args)
    assert code == 0, out
    inventory.write_text(inventory.read_text().replace(lab.endpoints["cp-03"].url, "https://127.0.0.1:1"))
    code, out = run(args)
    assert code == 1
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert nodes["cp-02"]["ok"] and nodes["cp-02"]["value"]["service_tag"] == "CP02R66"
    assert not nodes["cp-03"]["ok"] and nodes["cp-03"]["state"] == "failed"
    assert nodes["cp-03"]["message"].startswith("BMC: ") and nodes["cp-03"]["value"] is None  # not last run's
