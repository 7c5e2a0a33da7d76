"""The network stage's wiring: registration, plan, and what a failed host leaves in the journal.

The nodes are OpenSSH sshds on loopback (tests/ansible/test_playbook_stage.py's ``rack``): gpu-01 serves
the host key rackctl pinned, gpu-02 another one. The roles change a machine, and the sshd runs on this
one, so here the play is made to stop at its first task on gpu-01 (the package source's check, given a
source without a URI); the VM tests (tests/inband/test_network_stage_lab.py) apply the roles for real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bootstrap.ansible_driver import run_playbook
from bootstrap.inband.render import group_vars, write_ansible_inventory
from bootstrap.inventory import load_inventory
from bootstrap.inventory.environment_checks import OperatorEnvironmentError
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.base import RunOptions, get_stage, load_stages
from bootstrap.stages.network import NetworkStage, playbook_roles
from bootstrap.stages.playbook import runs_dir
from bootstrap.stages.runner import Runner, plan, select
from tests.ansible.test_playbook_stage import NODES, KeepsGpu02Out, Recorder, rack  # noqa: F401 - the fixture
from tests.sshnode import refused_host_key


def test_network_is_a_real_stage_on_the_network_playbook() -> None:
    load_stages()
    stage = get_stage("network")
    assert isinstance(stage, NetworkStage) and stage.implemented
    assert stage.playbook == "network.yml"
    roles = playbook_roles("network.yml")
    assert roles.index("baseline") < roles.index("container_runtime")
    life = stage.get_lifecycle()
    assert life.requires is NodeState.PROVISIONED


def test_plan_says_what_each_role_would_set_and_skips_what_the_environment_keeps_out(
    request: pytest.FixtureRequest,
) -> None:
    inventory, state, environment = request.getfixturevalue("rack")
    environment = KeepsGpu02Out(environment.key, environment.port_map)
    selection = select(inventory, stages=["network"], limit=NODES)
    planned = plan(inventory, state, selection, RunOptions(environment=environment))
    (stage,) = planned["stages"]
    assert stage["implemented"] and planned["stops_at"] is None
    actions = {a["node"]: a for a in stage["actions"]}
    assert actions["gpu-02"]["skip"] == "this machine is not configured over SSH here"
    action = actions["gpu-01"]["action"]
    assert actions["gpu-01"]["skip"] is None
    assert "chrony from 10.200.0.101" in action  # the head node's address: workers follow the head
    assert "/etc/hosts with 3 nodes" in action and "containerd" in action
    assert not runs_dir(state).exists()  # planning ran nothing


def test_without_the_mirror_built_the_run_stops_before_any_node_is_touched(request: pytest.FixtureRequest) -> None:
    inventory, state, environment = request.getfixturevalue("rack")
    assert inventory.site_services.packages.source == "mirror"
    selection = select(inventory, stages=["network"], limit=NODES)
    with pytest.raises(OperatorEnvironmentError) as caught:
        Runner(inventory, state, selection, options=RunOptions(environment=environment)).run()
    assert caught.value.exit_code == 2
    assert any(p.path.startswith("mirror:") for p in caught.value.problems)
    assert not runs_dir(state).exists()  # no playbook ran
    with Journal(state, readonly=True) as journal:
        assert all(journal.state(n) is NodeState.PROVISIONED for n in NODES)


def test_failed_hosts_are_reported_with_their_last_known_state_and_not_marked_done(
    request: pytest.FixtureRequest,
) -> None:
    inventory, state, environment = request.getfixturevalue("rack")
    inventory.site_services.packages.source = "public"  # no mirror to check before the run
    progress = Recorder()
    selection = select(inventory, stages=["network"], limit=NODES)
    # gpu-01 is reached and stops at the play's first task, before anything is changed on this machine
    broken_source = {"source": "mirror", "uri": "", "key": None}
    options = RunOptions(environment=environment, extravars={"network": {"rackctl_package_source": broken_source}})
    outcome = Runner(inventory, state, selection, options=options, progress=progress).run()

    (stage,) = outcome.stages
    assert not outcome.ok and stage.status == "failed"
    gpu01, gpu02 = stage.nodes["gpu-01"], stage.nodes["gpu-02"]
    assert gpu01["status"] == "failed" and gpu01["message"].startswith("Check the package source rackctl rendered")
    assert gpu01["message"].endswith("(last known state: provisioned)")
    assert gpu02["status"] == "failed" and refused_host_key(gpu02["message"]), gpu02
    assert gpu02["message"].endswith("(last known state: provisioned)")
    assert progress.done["gpu-01"][0] is False and progress.done["gpu-02"][0] is False
    with Journal(state, readonly=True) as journal:
        for node in NODES:
            assert journal.state(node) is NodeState.FAILED
            assert journal.stage_done(node, "network") is None
    (run_dir,) = runs_dir(state).iterdir()
    assert run_dir.name == f"{outcome.run_id}-network"
    (artifacts,) = (run_dir / "artifacts").iterdir()
    stdout = (artifacts / "stdout").read_text()
    assert "Check the package source rackctl rendered" in stdout and "PLAY RECAP" in stdout


def test_the_recap_counts_changed_tasks_per_host_zeros_included(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The driver's ``changed_by_host`` comes from ansible-runner's stats: a read-only play changes nothing."""
    inventory, state, environment = request.getfixturevalue("rack")
    hosts = write_ansible_inventory(inventory, state, environment)
    result = run_playbook("preflight.yml", hosts, limit=["gpu-01"], work_dir=tmp_path / "run")
    assert result.ok, result.as_dict()
    assert result.stats["ok"]["gpu-01"] > 0
    assert result.changed_by_host() == {"gpu-01": 0}
    assert result.hosts["gpu-01"].changed_tasks == []
    assert json.loads(json.dumps(result.as_dict()))["changed_by_host"] == {"gpu-01": 0}


def test_the_kubelets_containerd_minimum_reaches_role_container_runtime(tmp_path: Path) -> None:
    """Rendered from the Kubernetes release (2.0 from 1.38, whose kubelet needs CRI RuntimeConfig; none before)
    into the group variable the role's read-back holds each node's containerd against."""
    example = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
    data = yaml.safe_load(example.read_text())
    for kubernetes, minimum in (("1.37.2", ""), ("1.38.0", "2.0")):
        data["cluster"]["versions"] = {"kubernetes": kubernetes, "containerd": "2.1.4"}
        path = tmp_path / f"{kubernetes}.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        rendered = group_vars(load_inventory(path))["all/versions.yml"]
        assert rendered["rackctl_containerd_minimum"] == minimum and rendered["containerd_version"] == "2.1.4"
