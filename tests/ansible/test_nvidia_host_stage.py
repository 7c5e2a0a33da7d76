"""The nvidia stage's host side (role nvidia_host) run by the real runner over real SSH, real journal.

The nodes are sshd on loopback (tests/ansible/test_playbook_stage.py's ``rack``: gpu-01 serves its pinned
host key, gpu-02 another one), so the role runs on this machine: its nouveau blacklist goes to a temporary
directory and the initramfs is not rebuilt (``RunOptions.extravars["nvidia"]``). What the role
reads is this machine's real PCI bus, which has no NVIDIA GPU: on a real site that fails the node, and in
an environment whose devices are emulated (the lab) it is a note. The lab VMs run the role unchanged
(tests/inband/test_nvidia_host_lab.py).
"""

from __future__ import annotations

from pathlib import Path

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.base import RunOptions
from bootstrap.stages.runner import EXIT_NOT_APPLIED, Runner, plan, select
from tests.ansible.test_playbook_stage import (  # noqa: F401 - the fixtures
    Recorder,
    RelayEnvironment,
    networked,
    rack,
)
from tests.sshnode import refused_host_key

NODES = ["gpu-01", "gpu-02"]


class EmulatedGpus(RelayEnvironment):
    """The relay environment, saying (as the lab does) that the nodes' GPUs exist only out of band."""

    def emulated_devices(self, inventory: object) -> dict[str, str]:
        return dict.fromkeys(NODES, "test nodes: their GPUs exist only in the inventory")


def options(environment: RelayEnvironment, tmp_path: Path, extravars: dict | None = None) -> RunOptions:
    """The run's options: the blacklist into ``tmp_path``, no initramfs rebuild, and ``extravars``."""
    extravars = {"nvidia_host_modprobe_dir": str(tmp_path), "nvidia_host_update_initramfs": False, **(extravars or {})}
    return RunOptions(environment=environment, extravars={"nvidia": extravars})


def run_nvidia(rack_: tuple, environment: RelayEnvironment, tmp_path: Path, extravars: dict | None = None):
    inventory, state, _ = rack_
    selection = select(inventory, stages=["nvidia"], limit=NODES)
    runner = Runner(inventory, state, selection, options=options(environment, tmp_path, extravars), progress=Recorder())
    return runner.run()


def test_the_plan_lists_the_host_side_per_gpu_node(rack) -> None:  # noqa: F811
    inventory, state, _ = rack
    planned = plan(inventory, state, select(inventory, stages=["nvidia"], limit=NODES))
    actions = [a for a in planned["stages"][0]["actions"] if a["node"] == "gpu-01"]
    host = [a for a in actions if "nvidia_host.yml" in a["action"]]
    assert len(host) == 1 and host[0]["applies"] and "2 x L40S" in host[0]["action"]
    assert any(not a["applies"] for a in actions)  # the GPU Operator part only renders


def test_where_devices_are_emulated_the_host_side_applies_and_the_rest_is_rendered(networked, tmp_path) -> None:  # noqa: F811
    inventory, state, relay = networked
    environment = EmulatedGpus(relay.key, relay.port_map)
    outcome = run_nvidia(networked, environment, tmp_path)
    stage = outcome.stages[0]
    gpu01 = stage.nodes["gpu-01"]
    assert gpu01["status"] == "rendered" and gpu01["applied"] is False, outcome.as_dict()
    assert "host side applied (1 changed)" in gpu01["message"]
    assert "0 NVIDIA GPU(s) on the PCI bus, the inventory says 2 x L40S: test nodes" in gpu01["message"]
    assert "no NVSwitch detected: Fabric Manager not needed" in gpu01["message"]
    blacklist = tmp_path / "rackctl-blacklist-nouveau.conf"
    assert "blacklist nouveau" in blacklist.read_text()
    # gpu-02 serves a host key rackctl never pinned: the host side fails there, and only there
    assert stage.nodes["gpu-02"]["status"] == "failed"
    assert refused_host_key(stage.nodes["gpu-02"]["message"]), stage.nodes["gpu-02"]
    assert not outcome.ok
    with Journal(state, readonly=True) as journal:
        assert journal.state("gpu-01") is NodeState.PROVISIONED  # nothing applied that moves it
        facts = journal.latest_facts("gpu-01")["nvidia"]
        assert facts["nvidia_host"]["gpus_found"] == 0 and facts["nvidia_host"]["gpus_expected"] == 2
        assert facts["nvidia_host_report"]["pci_sysfs"]  # the bus as read, kept
        assert journal.state("gpu-02") is NodeState.FAILED

    # a second run on gpu-01 alone changes nothing and ends "not applied"
    again = Runner(
        inventory,
        state,
        select(inventory, stages=["nvidia"], limit=["gpu-01"]),
        options=options(environment, tmp_path),
        progress=Recorder(),
    ).run()
    assert again.exit_code == EXIT_NOT_APPLIED, again.as_dict()
    assert "host side applied (0 changed)" in again.stages[0].nodes["gpu-01"]["message"]


def test_on_a_real_site_a_gpu_node_without_its_gpus_fails_naming_the_field(networked, tmp_path) -> None:  # noqa: F811
    _, state, environment = networked
    outcome = run_nvidia(networked, environment, tmp_path)
    gpu01 = outcome.stages[0].nodes["gpu-01"]
    assert gpu01["status"] == "failed", outcome.as_dict()
    assert "the inventory says 2 x L40S, the node's PCI bus shows 0 NVIDIA GPU(s)" in gpu01["message"]
    assert "nodes[gpu-01].gpus" in gpu01["message"]
    with Journal(state, readonly=True) as journal:
        assert journal.state("gpu-01") is NodeState.FAILED


def test_before_the_network_stage_the_host_side_does_not_run_and_says_why(rack, tmp_path) -> None:  # noqa: F811
    _, _, environment = rack
    outcome = run_nvidia(rack, environment, tmp_path)
    assert outcome.exit_code == EXIT_NOT_APPLIED, outcome.as_dict()
    for node in NODES:
        message = outcome.stages[0].nodes[node]["message"]
        assert "host side not run: the network stage has not completed on the node" in message
    assert not (tmp_path / "rackctl-blacklist-nouveau.conf").exists()
