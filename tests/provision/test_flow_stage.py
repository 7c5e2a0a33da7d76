"""The provision stage's plan and settings: what `rackctl up`/`rackctl provision --dry-run` show."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.environment import HostEnvironment
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.stages.base import StageContext, get_stage
from bootstrap.stages.options import ProvisionOptions
from bootstrap.stages.provision import artefacts_for, settings_for
from rackctl_lab.environment import LabEnvironment

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


def test_plan_is_destructive_per_node_and_skips_the_head_node(tmp_path: Path) -> None:
    inventory = load_inventory(EXAMPLE)
    stage = get_stage("provision")
    assert stage.implemented and stage.destructive
    with Journal(tmp_path) as journal:
        ctx = StageContext("provision", inventory, [n.hostname for n in inventory.nodes], journal, tmp_path, 1)
        actions = {a.node: a for a in stage.plan(ctx)}
    for node in inventory.nodes:
        action = actions[node.hostname]
        if node.role.value == "head":
            assert action.skip == "installed already" and not action.destructive
        else:
            assert action.destructive and action.skip is None
            assert (node.root_disk_hint or "the largest disk") in action.action


def test_hardware_serves_from_the_head_nodes_pxe_address_and_defaults_follow_the_method(tmp_path: Path) -> None:
    inventory = load_inventory(EXAMPLE)
    head = next(n for n in inventory.nodes if n.role.value == "head")
    site = HostEnvironment().boot_site(inventory)
    assert site.server_ip == str(head.address_on("pxe")) and site.interface == head.interface_on("pxe").name
    assert HostEnvironment().wrap_command(["nginx"]) == ["nginx"]  # a real head node runs its services as they are
    assert settings_for(None, "image").ssh_user == "root"
    assert settings_for(None, "autoinstall").ssh_user == "rackctl"
    given = settings_for(ProvisionOptions(ssh_user="ops", callback_timeout_s=30.0))
    assert given.callback_timeout_s == 30.0 and given.ssh_user == "ops"
    arts = artefacts_for(tmp_path, ProvisionOptions(image=Path("/x/img.raw.gz")))
    assert arts.image == Path("/x/img.raw.gz") and arts.kernel == tmp_path / "artefacts" / "vmlinuz"


def test_lab_without_lab_up_says_what_to_run(tmp_path: Path) -> None:
    inventory = load_inventory(EXAMPLE)
    with pytest.raises(InvalidInput) as err:
        LabEnvironment(tmp_path / "nothing").boot_site(inventory)
    assert "rackctl lab up" in err.value.problems[0].fix


def test_a_provisioned_node_is_not_reinstalled_unless_forced(tmp_path: Path) -> None:
    """The runner skips provision for a node the journal shows provisioned; --force plans the reimage."""
    import json

    from click.testing import CliRunner

    from bootstrap.cli import cli
    from bootstrap.journal.states import NodeState
    from bootstrap.journal.store import Journal

    inventory = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
    state = tmp_path / "state"
    with Journal(state) as journal:
        journal.register_nodes(["gpu-l40s-01"])
        for to in ("discovered", "configured", "provisioning", "provisioned"):
            journal.transition("gpu-l40s-01", NodeState(to), "installed earlier")

    def plan(*extra: str) -> dict:
        args = ["plan", "-i", str(inventory), "--state-dir", str(state), "--stages", "provision", "--json"]
        result = CliRunner().invoke(cli, [*args, *extra], env={"RACKCTL_BMC_PASSWORD": "unused"})
        assert result.exit_code == 0, result.output
        stage = json.loads(result.stdout)["stages"][0]
        return next(a for a in stage["actions"] if a["node"] == "gpu-l40s-01")

    assert plan()["skip"], "a provisioned node must not be planned for reinstall"
    forced = plan("--force")
    assert forced["skip"] is None and forced["destructive"] is True
