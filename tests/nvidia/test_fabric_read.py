"""Which nvidia-smi gave a node's Fabric Manager state, and what the fabric-manager check says for each driver path
(bootstrap/nvidia/smi.py ``read_from_role``, bootstrap/validation/checks.py, bootstrap/stages/nvidia/fabric.py),
against the recorded ``nvidia-smi -q -x`` of an XE9680 (8 x H100 SXM, tests/nvidia/fixtures) in the shape role
``nvidia_host``'s ``tasks/smi.yml`` returns it. No GPU here: the real parsers on recorded text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.inventory.loader import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.nvidia.detect import NvSwitchReport, nvswitch_pci_slots
from bootstrap.nvidia.host import assess_report
from bootstrap.nvidia.smi import HOST, OPERATOR, parse, read_from_role
from bootstrap.stages.nvidia.fabric import operator_nvswitch_nodes, unreachable_facts
from bootstrap.validation.checks import GpuNodeFacts, validate_cluster

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
XE9680 = "gpu-xe9680-01"
LOOKED_AT = ["/usr/bin/nvidia-smi", "/run/nvidia/driver/usr/bin/nvidia-smi"]


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return load_inventory(EXAMPLE)


def role_report(source: str, xml: str = "", *, rc: object = 0, error: str = "") -> dict:
    """What ``tasks/smi.yml`` returns (``nvidia_host_smi_report``) when it read ``source`` (or found none)."""
    command = {HOST: "/usr/bin/nvidia-smi -q -x", OPERATOR: "chroot /run/nvidia/driver /usr/bin/nvidia-smi -q -x"}
    how = {"source": source, "command": command.get(source, ""), "rc": rc, "error": error, "looked_at": LOOKED_AT}
    return {"nvidia_smi_xml": xml, "nvidia_smi": how}


def xe9680_switches() -> NvSwitchReport:
    return NvSwitchReport(pci_slots=nvswitch_pci_slots((FIXTURES / "lspci-n-xe9680.txt").read_text()))


def fabric_check(inventory: Inventory, facts: GpuNodeFacts) -> dict:
    nodes = json.loads((FIXTURES / "kubectl-get-nodes-dvd.json").read_text())
    data = validate_cluster(inventory, nodes, {XE9680: facts}).as_dict()
    return next(c for c in data["checks"] if c["check"] == "fabric-manager" and c["node"] == XE9680)


def test_the_driver_containers_report_gives_every_gpus_fabric_state() -> None:
    xml = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
    read = read_from_role(role_report(OPERATOR, xml), XE9680)
    assert read.source == OPERATOR and read.why is None and read.report is not None
    assert len(read.report.gpus) == 8 and all(g.fabric_ready for g in read.report.gpus)
    assert read.where == "nvidia-smi in the GPU Operator's driver container"
    assert read_from_role(role_report(HOST, xml), XE9680).where == "the host's nvidia-smi"
    # a report recorded before the role said where it read (the XML alone) was the host's
    assert read_from_role({"nvidia_smi_xml": xml}, XE9680).source == HOST


def test_without_a_report_the_read_says_exactly_why() -> None:
    none = read_from_role(role_report(""), XE9680)
    assert none.report is None and none.source == ""
    assert none.why == (
        "no nvidia-smi on the node (looked for /usr/bin/nvidia-smi and /run/nvidia/driver/usr/bin/nvidia-smi): "
        "neither a host driver nor the GPU Operator's driver container is there (yet)"
    )
    error = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    failed = read_from_role(role_report(OPERATOR, rc=9, error=error), XE9680)
    assert failed.why == f"`chroot /run/nvidia/driver /usr/bin/nvidia-smi -q -x` exited 9: {error}"
    garbage = read_from_role(role_report(OPERATOR, "<oops"), XE9680)
    assert garbage.report is None and garbage.why is not None
    assert garbage.why.startswith(f"nvidia-smi -q -x on {XE9680} is not nvidia-smi XML: ")


def test_the_host_sides_verdict_records_which_nvidia_smi_it_read(inventory: Inventory) -> None:
    xml = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
    verdict = assess_report(inventory, inventory.node(XE9680), role_report(OPERATOR, xml), emulated="test")
    data = verdict.as_dict()
    assert data["nvidia_smi_source"] == OPERATOR and len(data["gpus_fabric"]) == 8 and "nvidia_smi_why" not in data
    assert any(
        n.startswith("nvidia-smi in the GPU Operator's driver container: 8 GPU(s), driver ") for n in verdict.notes
    )
    before = assess_report(inventory, inventory.node(XE9680), role_report(""), emulated="test").as_dict()
    assert before["nvidia_smi_source"] == "" and "gpus_fabric" not in before
    assert before["nvidia_smi_why"].startswith("no nvidia-smi on the node")


def test_an_operator_driver_node_without_a_report_fails_naming_where_it_is_read(inventory: Inventory) -> None:
    check = fabric_check(inventory, GpuNodeFacts(nvswitch=xe9680_switches()))
    assert not check["ok"]
    assert "no nvidia-smi report to check" not in check["message"]
    assert (
        "operator-managed driver, its nvidia-smi is in the driver container (read by the nvidia stage over SSH)"
        in (check["message"])
    )
    assert "`chroot /run/nvidia/driver nvidia-smi -q -x`" in check["message"]
    why = "no nvidia-smi on the node (looked for ...)"
    check = fabric_check(inventory, GpuNodeFacts(nvswitch=xe9680_switches(), smi_why=why))
    assert check["message"] == f"NVSwitches present, Fabric Manager state not read: {why}"


def test_the_check_names_which_nvidia_smi_gave_the_states(inventory: Inventory) -> None:
    xml = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
    where = "nvidia-smi in the GPU Operator's driver container, read over SSH at validation"
    check = fabric_check(inventory, GpuNodeFacts(parse(xml), xe9680_switches(), smi_where=where))
    assert check["ok"] and check["message"] == f"every GPU registered with Fabric Manager ({where})"
    waiting = xml.replace("<state>Completed</state>", "<state>In Progress</state>", 1)
    check = fabric_check(inventory, GpuNodeFacts(parse(waiting), xe9680_switches(), smi_where=where))
    assert not check["ok"] and f"(fabric state Completed/Success, In Progress/Success) ({where})" in check["message"]


def test_only_nvswitch_nodes_with_the_operators_driver_are_read_again(inventory: Inventory) -> None:
    l40s = NvSwitchReport(pci_slots=nvswitch_pci_slots((FIXTURES / "lspci-n-r760xa-l40s.txt").read_text()))
    facts = {XE9680: GpuNodeFacts(nvswitch=xe9680_switches()), "gpu-l40s-01": GpuNodeFacts(nvswitch=l40s)}
    assert operator_nvswitch_nodes(inventory, facts) == [XE9680]
    assert operator_nvswitch_nodes(inventory, {"gpu-l40s-01": facts["gpu-l40s-01"]}) == []


def test_an_unreachable_node_keeps_only_a_record_read_from_the_driver_container() -> None:
    xml = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
    container = GpuNodeFacts(parse(xml), xe9680_switches(), smi_source=OPERATOR)
    assert unreachable_facts(container, "the node is not installed (discovered)") is container
    host = GpuNodeFacts(parse(xml), xe9680_switches(), smi_source=HOST)
    kept = unreachable_facts(host, "the node is not installed (discovered)")
    assert kept.smi is None and kept.smi_why == (
        "operator-managed driver: its nvidia-smi is in the driver container, read by the nvidia stage over SSH, "
        "and the node is not reachable in-band here (the node is not installed (discovered))"
    )


def test_validate_cluster_without_nvidia_smi_for_an_operator_nvswitch_node() -> None:
    args = ["validate-cluster", "-i", str(EXAMPLE), "--nodes-json", str(FIXTURES / "kubectl-get-nodes-dvd.json")]
    args += ["--lspci", f"{XE9680}={FIXTURES / 'lspci-n-xe9680.txt'}", "--json"]
    result = CliRunner().invoke(cli, args)
    doc = json.loads(result.output)
    assert result.exit_code == 1 and not doc["ok"], result.output
    (failed,) = [c for c in doc["checks"] if not c["ok"]]
    assert failed["check"] == "fabric-manager" and "operator-managed driver" in failed["message"]
    assert "Traceback" not in result.output
