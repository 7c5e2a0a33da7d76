"""``rackctl lab bmc up|down|status`` on a copy of the built-in lab inventory (real detached workers)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
import requests
import yaml
from click.testing import CliRunner

from rackctl_lab.cli import lab_group
from rackctl_lab.idrac.rack import is_worker
from tests.ports import free_ports

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab_inventory(tmp_path: Path) -> Path:
    """inventory/lab.yml with free ports, in a temp tree (paths ../.lab/... resolve inside it)."""
    text = (REPO / "inventory" / "lab.yml").read_text()
    for port, free in zip(("8441", "8442", "8443"), free_ports(3), strict=True):
        text = text.replace(f'"127.0.0.1:{port}"', f'"127.0.0.1:{free}"')
    target = tmp_path / "inventory" / "lab.yml"
    target.parent.mkdir()
    target.write_text(text)
    return target


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(lab_group, list(args))
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


def test_dry_run_plans_without_writing(lab_inventory: Path, tmp_path: Path):
    code, data = run(
        "bmc", "up", "-i", str(lab_inventory), "--state-dir", str(tmp_path / ".lab"), "--dry-run", "--json"
    )
    assert code == 0 and data["dry_run"] is True
    assert [b["name"] for b in data["bmcs"]] == ["head-01", "gpu-01", "gpu-02"]
    assert data["bmcs"][2]["gpus"] == "8 x NVIDIA H100 80GB HBM3"
    assert data["bmcs"][0]["nics"]["NIC.Embedded.1-1-1"] == "52:54:00:99:00:11"
    assert not (tmp_path / ".lab").exists()


def test_up_status_down(lab_inventory: Path, tmp_path: Path):
    lab = tmp_path / ".lab"
    code, up = run("bmc", "up", "-i", str(lab_inventory), "--state-dir", str(lab), "--json")
    try:
        assert code == 0, up
        inventory = yaml.safe_load(lab_inventory.read_text())
        urls = {b["name"]: b["url"] for b in up["bmcs"]}
        assert urls == {n["hostname"]: f"https://{n['bmc']['address']}" for n in inventory["nodes"]}
        secrets_file = tmp_path / ".lab" / "secrets" / "bmc.yml"
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        passwords = yaml.safe_load(secrets_file.read_text())
        assert set(passwords) == set(inventory["credentials"])
        assert not any(pw in json.dumps(up) for pw in passwords.values())
        ca = tmp_path / ".lab" / "pki" / "ca.pem"
        assert ca.read_text().startswith("-----BEGIN CERTIFICATE-----")

        http = requests.Session()
        http.trust_env = False
        http.verify = str(ca)  # the CA the inventory references
        head = inventory["nodes"][0]
        system = http.get(
            f"{urls['head-01']}/redfish/v1/Systems/System.Embedded.1",
            auth=("root", passwords[head["bmc"]["credentials"]]),
            timeout=10,
        ).json()
        assert system["SKU"] == head["service_tag"]
        nics = http.get(
            f"{urls['head-01']}/redfish/v1/Systems/System.Embedded.1/EthernetInterfaces?$expand=*",
            auth=("root", passwords[head["bmc"]["credentials"]]),
            timeout=10,
        ).json()
        assert {n["Id"]: n["MACAddress"] for n in nics["Members"]} == {i["fqdd"]: i["mac"] for i in head["interfaces"]}

        code, status = run("status", "--state-dir", str(lab), "--json")
        assert code == 0 and status["running"] and all(b["answers"] for b in status["bmcs"])
        code, again = run("bmc", "up", "-i", str(lab_inventory), "--state-dir", str(lab), "--json")
        assert code == 1 and "lab down" in json.dumps(again)
    finally:
        code, down = run("bmc", "down", "--state-dir", str(lab), "--json")
    assert code == 0 and down["stopped"] == up["pids"]
    assert not any(is_worker(pid) for pid in up["pids"])
    code, status = run("bmc", "status", "--state-dir", str(lab), "--json")
    assert code == 0 and status["running"] is False


def test_non_loopback_bmc_is_refused_with_the_field(lab_inventory: Path, tmp_path: Path):
    text = re.sub(r'"127\.0\.0\.1:(\d+)"', r'"10.200.0.5:\1"', lab_inventory.read_text(), count=1)
    lab_inventory.write_text(text)
    code, data = run("bmc", "up", "-i", str(lab_inventory), "--state-dir", str(tmp_path / ".lab"), "--json")
    assert code == 2 and data["ok"] is False
    problem = next(p for p in data["errors"] if p["path"] == "nodes[0].bmc.address")
    assert "10.200.0.5" in problem["message"] and "127.0.0.1" in problem["fix"]
