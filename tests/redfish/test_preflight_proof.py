"""Preflight proves each BMC against the emulated iDRACs: TLS verified against the pin, the credential
accepted (a session created and deleted), the Redfish version and the iDRAC firmware read. A wrong pin or a
wrong password fails that node with its cause; the other nodes still pass."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rackctl_lab.idrac.certs import LabCA
from tests.cli.conftest import ROOT, inventory_on_rack, rackctl_env
from tests.redfish import rf_lab

pytestmark = pytest.mark.slow
rack = rf_lab.rack  # the module's emulated iDRACs (a fixture shared with other modules)


def preflight(inventory: Path, env: dict[str, str], state: Path) -> tuple[int, dict[str, Any]]:
    argv = ["up", "-i", str(inventory), "--state-dir", str(state), "--stages", "preflight", "--yes", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "bootstrap", *argv],
        cwd=ROOT,
        env=rackctl_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stdout}{proc.stderr}") from None


def nodes_of(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (stage,) = out["stages"]
    return stage["nodes"]


def test_every_bmc_is_proved_and_its_session_deleted(rack: Any, tmp_path: Path) -> None:
    emulated, specs, endpoints = rack
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    code, out = preflight(inventory, env, tmp_path / "state")
    assert code == 0, out
    for name, node in nodes_of(out).items():
        assert node["status"] == "completed" and node["ok"] is True, node
        assert re.fullmatch(r"Redfish 1\.\d+\.\d+, iDRAC [\d.]+ \(session, tls pinned\)", node["message"]), node
        assert emulated.open_sessions(name) == 0  # the session it made is gone
        log = emulated.request_log(name)
        assert any(r["method"] == "POST" and r["path"].endswith("/Sessions") for r in log)
        assert any(r["method"] == "DELETE" and "/Sessions/" in r["path"] for r in log)
    assert not [p for p in specs.values() if p.password in json.dumps(out)]


def test_a_wrong_pin_and_a_wrong_password_fail_their_nodes_with_the_cause(rack: Any, tmp_path: Path) -> None:
    _, specs, endpoints = rack
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    data = yaml.safe_load(inventory.read_text())
    pinned, rejected = data["nodes"][0]["hostname"], data["nodes"][1]["hostname"]
    data["nodes"][0]["bmc"]["fingerprint"] = "AB" * 32  # another certificate than the one served
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    env["RF_PW_" + rejected.upper().replace("-", "_")] = "pw-not-this-one"
    code, out = preflight(inventory, env, tmp_path / "state")
    assert code == 1, out
    nodes = nodes_of(out)
    assert nodes[pinned]["status"] == nodes[rejected]["status"] == "failed"
    assert nodes[pinned]["ok"] is nodes[rejected]["ok"] is False
    assert nodes[pinned]["message"].startswith("BMC TLS not trusted:")
    assert "does not match the pinned fingerprint" in nodes[pinned]["message"]
    assert nodes[rejected]["message"].startswith("BMC credential rejected:"), nodes[rejected]
    var = "RF_PW_" + rejected.upper().replace("-", "_")  # the fix names the field and the variable
    assert f"fix: make credentials.{rejected} (user 'root', password from ${var})" in nodes[rejected]["message"]
    assert "pw-not-this-one" not in json.dumps(out)
    assert "pin the new one" in nodes[pinned]["message"]  # the fix comes with the cause
    passed = [n for n, v in nodes.items() if v["status"] == "completed"]
    assert passed == [n for n in nodes if n not in (pinned, rejected)]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_foreign_ca_fails_its_own_ca_passes_and_a_dead_address_is_no_answer(rack: Any, tmp_path: Path) -> None:
    _, specs, endpoints = rack
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    data = yaml.safe_load(inventory.read_text())
    foreign, trusted, dead = (n["hostname"] for n in data["nodes"][:3])
    other_ca = LabCA(tmp_path / "another-ca")  # a CA that signed none of the BMCs' certificates
    for node in data["nodes"][:3]:
        del node["bmc"]["fingerprint"]
    data["nodes"][0]["bmc"]["ca_file"] = str(other_ca.cert_file)
    data["nodes"][1]["bmc"]["ca_file"] = str(endpoints[trusted].ca_file)
    data["nodes"][2]["bmc"]["ca_file"] = str(endpoints[dead].ca_file)
    data["nodes"][2]["bmc"]["address"] = f"https://127.0.0.1:{closed_port()}"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = preflight(inventory, env, tmp_path / "state")
    assert code == 1, out
    nodes = nodes_of(out)
    assert {n: v["ok"] for n, v in nodes.items()} == {n: n not in (foreign, dead) for n in nodes}
    assert nodes[foreign]["message"].startswith("BMC TLS not trusted:"), nodes[foreign]
    assert "signed by a CA that the CA bundle" in nodes[foreign]["message"]
    assert "bmc.ca_file" in nodes[foreign]["message"]  # the fix names the field
    assert nodes[dead]["message"].startswith("BMC no answer:"), nodes[dead]
    assert f"fix: check bmc.address ({data['nodes'][2]['bmc']['address']})" in nodes[dead]["message"]
    assert re.fullmatch(r"Redfish 1\.\d+\.\d+, iDRAC [\d.]+ \(session, tls ca\)", nodes[trusted]["message"])
    (stage,) = out["stages"]
    bmcs = stage["data"]["bmcs"]
    assert bmcs[trusted]["ok"] is True and bmcs[trusted]["tls"] == "ca"
    assert bmcs[trusted]["idrac_firmware"] == specs[trusted].idrac_version  # what the emulated iDRAC says
    assert bmcs[trusted]["redfish_version"].startswith("1.")
    assert bmcs[foreign] == {"ok": False, "cause": "tls", "tls": "ca"}
    assert bmcs[dead]["ok"] is False and bmcs[dead]["cause"] in ("transport", "timeout", "deadline")


def test_the_text_output_names_each_failed_node_and_its_cause(rack: Any, tmp_path: Path) -> None:
    _, specs, endpoints = rack
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    rejected = next(iter(specs))
    env["RF_PW_" + rejected.upper().replace("-", "_")] = "pw-not-this-one"
    argv = ["up", "-i", str(inventory), "--state-dir", str(tmp_path / "state"), "--stages", "preflight", "--yes"]
    proc = subprocess.run(
        [sys.executable, "-m", "bootstrap", *argv],
        cwd=ROOT,
        env=rackctl_env(COLUMNS="80", **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "Traceback" not in text
    assert rejected in text and "credential rejected" in text
    assert "pw-not-this-one" not in text and specs[rejected].password not in text
