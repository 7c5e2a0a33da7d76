"""A PlaybookStage end to end: the os-check stage run by the real runner, over real SSH, real journal.

Each node is an OpenSSH sshd on loopback serving the host key rackctl pinned for it (provisioning's own
``ensure_host_key``/``write_known_hosts``). The environment under test supplies the admin key and a
``ProxyCommand`` (tests/sshrelay.py) that carries each node's inventory address to its sshd, the part the
lab's namespace relay plays; everything else (rendered inventory, user, pinned known_hosts, strict host key
checking, ansible-runner, the journal) is the product's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bootstrap.ansible_log import kept_runs
from bootstrap.environment import HostEnvironment
from bootstrap.inband.render import inventory_dir
from bootstrap.inventory import load_inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import STAGE_STEP, Journal
from bootstrap.provision.hostkeys import ensure_host_key, known_hosts_path, write_known_hosts
from bootstrap.stages.base import STAGE_ORDER, RunOptions, StageContext, get_stage
from bootstrap.stages.playbook import PlaybookStage, runs_dir
from bootstrap.stages.runner import Runner, plan, select
from tests.lab.vmlab import write_inventory
from tests.sshnode import SSHD, refused_host_key, start_ssh_node

pytestmark = pytest.mark.skipif(
    not Path(SSHD).exists(), reason="openssh-server not installed (scripts/setup.sh installs it)"
)

RELAY = Path(__file__).resolve().parents[1] / "sshrelay.py"
NODES = ["gpu-01", "gpu-02"]


class RelayEnvironment(HostEnvironment):
    """The host environment, with an admin key and a proxy to the test's sshd (the lab relay's part)."""

    name = "test-relay"

    def __init__(self, key: Path, port_map: Path) -> None:
        self.key, self.port_map = key, port_map

    def ssh_proxy_command(self) -> str | None:
        return f"{sys.executable} {RELAY} {self.port_map} %h %p"

    def admin_key(self, inventory: object) -> Path | None:
        return self.key


class Recorder:
    """A progress reporter that remembers per-node results."""

    def __init__(self) -> None:
        self.done: dict[str, tuple[bool, str]] = {}

    def stage_started(self, stage, nodes):
        pass

    def node_done(self, stage, node, ok, message=""):
        self.done[node] = (ok, message)

    def stage_finished(self, stage, ok, message=""):
        pass

    def log(self, message):
        pass


class TaskRecorder(Recorder):
    """A reporter that also shows tasks (``TaskReporter``, ``RunningTaskReporter``): remembers each ended
    (node, count, task, status) and each started (node, count before it, task)."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[tuple[str, int, str, str]] = []
        self.started: list[tuple[str, int, str]] = []

    def task_done(self, stage, node, task, status, done):
        self.tasks.append((node, done, task, status))

    def task_started(self, stage, node, task, done):
        self.started.append((node, done, task))


@pytest.fixture
def rack(tmp_path: Path):
    """Two 'installed' nodes: gpu-01 serves its pinned key; gpu-02 serves another (a swapped machine)."""
    client = tmp_path / "admin" / "id_ed25519"
    client.parent.mkdir()
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client)], check=True)
    inventory = load_inventory(write_inventory(tmp_path, NODES, client.with_suffix(".pub").read_text().strip()))
    state = tmp_path / "state"
    pins = {}
    for hostname in NODES:
        node = inventory.node(hostname)
        pins[hostname] = (ensure_host_key(state, hostname), [str(node.address_on("pxe"))])
    write_known_hosts(known_hosts_path(state), pins)
    sshds = {
        "gpu-01": start_ssh_node(tmp_path / "gpu-01", host_key=pins["gpu-01"][0].private_path, client_key=client),
        "gpu-02": start_ssh_node(tmp_path / "gpu-02", client_key=client),  # a key rackctl never pinned
    }
    port_map = tmp_path / "ports.json"
    port_map.write_text(json.dumps({pins[h][1][0]: sshds[h].port for h in NODES}))
    with Journal(state) as journal:
        journal.register_nodes([n.hostname for n in inventory.nodes])
        for hostname in NODES:
            for to in (NodeState.DISCOVERED, NodeState.CONFIGURED, NodeState.PROVISIONING, NodeState.PROVISIONED):
                journal.transition(hostname, to, "test: installed")
    yield inventory, state, RelayEnvironment(client, port_map)
    for sshd in sshds.values():
        sshd.stop()


@pytest.fixture
def networked(rack):
    """The rack with the network stage recorded as completed on both nodes (the host side runs after it)."""
    _, state, _ = rack
    with Journal(state) as journal:
        run_id = journal.begin_run("test: network stage")
        for node in NODES:
            journal.record_step(run_id, node, "network", STAGE_STEP, status="completed", destructive=False)
        journal.finish_run(run_id, "completed")
    return rack


def test_os_check_sits_between_provision_and_network() -> None:
    assert STAGE_ORDER.index("provision") < STAGE_ORDER.index("os-check") < STAGE_ORDER.index("network")
    stage = get_stage("os-check")
    assert stage.get_lifecycle().requires is NodeState.PROVISIONED and stage.get_lifecycle().reaches is None


def test_os_check_runs_the_playbook_and_journals_each_host(rack) -> None:
    inventory, state, environment = rack
    progress = TaskRecorder()
    selection = select(inventory, stages=["os-check"], limit=NODES)
    outcome = Runner(inventory, state, selection, options=RunOptions(environment=environment), progress=progress).run()

    # each task as it ended, counted per node, while the run went on; the same tasks `rackctl logs` reads back
    ours = [(done, task, status) for node, done, task, status in progress.tasks if node == "gpu-01"]
    assert [done for done, _, _ in ours] == list(range(1, len(ours) + 1)) and len(ours) > 3, progress.tasks
    assert all(status in ("ok", "changed", "skipped") for _, _, status in ours), ours
    assert [(n, s) for n, _, _, s in progress.tasks if n == "gpu-02"] == [("gpu-02", "unreachable")]
    # each ended task was shown running first, with the count of those ended before it
    begun = [(done, task) for node, done, task in progress.started if node == "gpu-01"]
    assert begun == [(done - 1, task) for done, task, _ in ours], progress.started
    (kept,) = kept_runs(runs_dir(state))
    assert [(t.task, t.status) for t in kept.tasks if t.host == "gpu-01"] == [(task, st) for _, task, st in ours]

    stage = outcome.stages[0]
    assert stage.nodes["gpu-01"]["status"] == "completed", outcome.as_dict()
    assert stage.nodes["gpu-02"]["status"] == "failed"
    assert refused_host_key(stage.nodes["gpu-02"]["message"]), stage.nodes["gpu-02"]
    assert not outcome.ok  # one node failed: the run says so
    assert progress.done["gpu-01"][0] is True and progress.done["gpu-02"][0] is False

    with Journal(state, readonly=True) as journal:
        assert journal.state("gpu-01") is NodeState.PROVISIONED  # os-check moves no node
        assert journal.stage_done("gpu-01", "os-check") is not None
        report = journal.latest_facts("gpu-01")["os-check"]["preflight_report"]
        assert int(report["memory_mb"]) > 0 and report["kernel"]
        assert journal.state("gpu-02") is NodeState.FAILED
        assert journal.stage_done("gpu-02", "os-check") is None
        assert "os-check" not in journal.latest_facts("gpu-02")

    # the run used the inventory `rackctl inventory render` writes, and kept ansible's output
    (run_dir,) = runs_dir(state).iterdir()
    assert run_dir.name == f"{outcome.run_id}-os-check"
    (artifacts,) = (run_dir / "artifacts").iterdir()
    command = json.loads((artifacts / "command").read_text())["command"]
    assert str(inventory_dir(state) / "hosts.yml") in command
    assert "PLAY RECAP" in (artifacts / "stdout").read_text()
    hosts = json.loads((inventory_dir(state) / "hosts.yml").read_text().split("\n", 1)[1])
    gpu01 = hosts["all"]["hosts"]["gpu-01"]
    assert gpu01["ansible_host"] == "10.200.0.102" and gpu01["ansible_user"] == "root"
    assert f"UserKnownHostsFile={known_hosts_path(state).resolve()}" in gpu01["ansible_ssh_common_args"]


def test_a_host_outside_the_stage_is_not_touched(rack) -> None:
    inventory, state, environment = rack
    selection = select(inventory, stages=["os-check"], limit=["gpu-01"])
    outcome = Runner(inventory, state, selection, options=RunOptions(environment=environment)).run()
    assert outcome.ok, outcome.as_dict()
    with Journal(state, readonly=True) as journal:
        assert journal.state("gpu-02") is NodeState.PROVISIONED and journal.stage_done("gpu-02", "os-check") is None


class CheckWithHelper(PlaybookStage):
    """A playbook stage whose play also needs gpu-02 (as a join needs the control planes)."""

    name = "os-check"
    playbook = "preflight.yml"
    facts_var = "preflight_report"

    def helper_hosts(self, ctx: StageContext) -> list[str]:
        return ["gpu-02"]


def test_helper_hosts_join_the_play_but_only_targets_are_reported(rack) -> None:
    inventory, state, environment = rack
    with Journal(state) as journal:
        run_id = journal.begin_run("test")
        ctx = StageContext(
            "os-check", inventory, ["gpu-01"], journal, state, run_id, options=RunOptions(environment=environment)
        )
        stage = CheckWithHelper()
        assert any("gpu-02" in a.action and a.node is None for a in stage.plan(ctx))
        result = stage.run(ctx)
        assert set(result.nodes) == {"gpu-01"} and result.ok, result
        assert "preflight_report" in result.nodes["gpu-01"].data
        assert "os-check" not in journal.latest_facts("gpu-02")
    (artifacts,) = (runs_dir(state) / f"{run_id}-os-check" / "artifacts").iterdir()
    command = json.loads((artifacts / "command").read_text())["command"]
    assert command[command.index("--limit") + 1] == "gpu-01,gpu-02"


class KeepsGpu02Out(RelayEnvironment):
    """An environment that does not let rackctl configure gpu-02 over SSH (as the lab does its head node)."""

    def out_of_band_only(self, inventory: object) -> dict[str, str]:
        return {"gpu-02": "this machine is not configured over SSH here"}


def test_nodes_the_environment_keeps_out_are_skipped_and_said_so(rack) -> None:
    inventory, state, environment = rack
    environment = KeepsGpu02Out(environment.key, environment.port_map)
    progress = Recorder()
    selection = select(inventory, stages=["os-check"], limit=NODES)
    planned = plan(inventory, state, selection, RunOptions(environment=environment))
    actions = {a["node"]: a for a in planned["stages"][0]["actions"]}
    assert actions["gpu-02"]["skip"] == "this machine is not configured over SSH here"
    outcome = Runner(inventory, state, selection, options=RunOptions(environment=environment), progress=progress).run()
    stage = outcome.stages[0]
    assert outcome.ok and stage.nodes["gpu-01"]["status"] == "completed"
    # gpu-02 (which serves an unpinned key) was never in the play, so it did not fail; the result says why
    assert "skipped, not run" in stage.nodes["gpu-02"]["message"]
    assert progress.done["gpu-02"] == (True, "skipped, not run: this machine is not configured over SSH here")


def test_driver_upgrades_host_path_shows_its_read_playbooks_tasks(rack) -> None:
    """``driver upgrade``'s host path runs its playbooks outside the stages: their tasks reach the reporter
    too, started then ended, under the run's title (the read playbook, over the same SSH as the stages)."""
    from bootstrap.day2.driver_host import AnsibleDriverNodes
    from bootstrap.stages.playbook import TaskProgress

    inventory, state, environment = rack
    progress = TaskRecorder()
    nodes = AnsibleDriverNodes(
        inventory, state, environment, "580.95.05", 7, tasks=TaskProgress(progress, "driver 580.95.05")
    )
    found = nodes.read(["gpu-01"])
    assert found["gpu-01"].error == "", found  # read: the packages asked for, none installed here
    ended = [(done, task) for node, done, task, _ in progress.tasks if node == "gpu-01"]
    begun = [(done, task) for node, done, task in progress.started if node == "gpu-01"]
    assert len(ended) > 1 and begun == [(done - 1, task) for done, task in ended], (progress.started, progress.tasks)
    (kept,) = kept_runs(runs_dir(state))
    assert kept.label == "driver-read" and [t.task for t in kept.tasks if t.host == "gpu-01"] == [t for _, t in ended]
