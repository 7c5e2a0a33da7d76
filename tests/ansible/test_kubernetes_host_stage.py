"""The kubernetes stage's host side (role kubernetes_packages) run by the real runner over real SSH, real journal.

The nodes are sshd on loopback (tests/ansible/test_playbook_stage.py's ``rack``: gpu-01 serves its pinned
host key, gpu-02 another one), so the role runs on this machine, whose apt sources have no kubeadm/kubelet:
the "not available" path, which must change nothing here (no package, hold, source or file). The install,
hold and refusal paths run on a lab VM (tests/inband/test_network_stage_lab.py): no package is installed
onto this machine by a test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.base import RunOptions
from bootstrap.stages.kubernetes_host import package_repo, report_message
from bootstrap.stages.runner import EXIT_NOT_APPLIED, Runner, plan, select
from tests.ansible.test_playbook_stage import Recorder, networked, rack  # noqa: F401 - the fixtures

NODES = ["gpu-01", "gpu-02"]
SOURCES = Path("/etc/apt/sources.list.d/rackctl-kubernetes.sources")
CONFIG = Path("/etc/rackctl/kubeadm.yaml")


def selections() -> str:
    """dpkg's selections on this machine (what a hold would change)."""
    return subprocess.run(["dpkg", "--get-selections"], capture_output=True, text=True, check=True).stdout


def installed_here(package: str) -> str:
    """The package's version installed on this machine, '' if none."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version} ${Status}", package], capture_output=True, text=True, check=False
    ).stdout
    return out.split(" ")[0] if out.endswith(" installed") else ""


def run_kubernetes(rack_: tuple, limit: list[str] = NODES):
    inventory, state, environment = rack_
    selection = select(inventory, stages=["kubernetes"], limit=limit)
    return Runner(inventory, state, selection, options=RunOptions(environment=environment), progress=Recorder()).run()


def test_the_plan_lists_the_host_side_per_node(rack) -> None:  # noqa: F811
    inventory, state, _ = rack
    version = inventory.cluster.resolved_versions().kubernetes
    planned = plan(inventory, state, select(inventory, stages=["kubernetes"], limit=NODES))
    for node in NODES:
        actions = [a for a in planned["stages"][0]["actions"] if a["node"] == node]
        host = [a for a in actions if "kubernetes_host.yml" in a["action"]]
        assert len(host) == 1 and host[0]["applies"], actions
        assert f"kubeadm, kubelet, kubectl {version} from the head node's mirror, held" in host[0]["action"]
        assert any(not a["applies"] and "kubeadm" in a["action"] for a in actions)  # init/join only render


def test_where_the_sources_lack_the_packages_nothing_changes_and_the_node_says_so(networked) -> None:  # noqa: F811
    inventory, state, _ = networked
    version = inventory.cluster.resolved_versions().kubernetes
    before = selections()
    outcome = run_kubernetes(networked)
    stage = outcome.stages[0]
    gpu01 = stage.nodes["gpu-01"]
    assert gpu01["status"] == "rendered" and gpu01["applied"] is False, outcome.as_dict()
    assert "host side applied (0 changed)" in gpu01["message"]
    assert (
        "not installed: the node's package sources (the head node's mirror) have no "
        f"kubeadm/kubelet/kubectl {version}" in gpu01["message"]
    )
    assert gpu01["message"].endswith("; nothing changed")
    # a kubectl of another origin on this machine (e.g. the Google Cloud CLI's) is named and left alone
    other = installed_here("kubectl")
    assert (f"left as it is: kubectl {other}" in gpu01["message"]) == bool(other), gpu01["message"]
    # this machine is unchanged: no package, hold, source or kubeadm config
    assert selections() == before
    assert not SOURCES.exists() and not CONFIG.exists()
    # gpu-02 serves a host key rackctl never pinned: the host side fails there, and only there
    assert stage.nodes["gpu-02"]["status"] == "failed"
    # ssh refuses the unpinned key; under load Ansible may write to the exited ssh first and report that instead
    # (a race in its ssh connection plugin: "Data could not be sent ... Broken pipe"), still failing the node
    said = stage.nodes["gpu-02"]["message"].lower()
    assert "host key verification failed" in said or "data could not be sent to remote host" in said, said
    assert not outcome.ok
    with Journal(state, readonly=True) as journal:
        assert journal.state("gpu-01") is NodeState.PROVISIONED  # nothing applied that moves it
        report = journal.latest_facts("gpu-01")["kubernetes"]["kubernetes_packages_report"]
        assert report["missing"] == ["kubeadm", "kubelet", "kubectl"] and report["version"] == version
        assert report["installed"] == {} and not report["held"]
        assert journal.state("gpu-02") is NodeState.FAILED

    # gpu-01 alone: exit 5 (rendered + validated, not applied), still nothing changed
    again = run_kubernetes(networked, ["gpu-01"])
    assert again.exit_code == EXIT_NOT_APPLIED, again.as_dict()
    assert "host side applied (0 changed)" in again.stages[0].nodes["gpu-01"]["message"]


def test_before_the_network_stage_the_host_side_does_not_run_and_says_why(rack) -> None:  # noqa: F811
    outcome = run_kubernetes(rack)
    assert outcome.exit_code == EXIT_NOT_APPLIED, outcome.as_dict()
    for node in NODES:
        message = outcome.stages[0].nodes[node]["message"]
        assert "host side not run: the network stage has not completed on the node" in message


def test_the_repository_is_upstreams_only_with_the_public_archives(rack) -> None:  # noqa: F811
    inventory, _, _ = rack
    assert package_repo(inventory) is None  # the head node's mirror is the only source
    public = inventory.model_copy(
        update={
            "site_services": inventory.site_services.model_copy(
                update={"packages": inventory.site_services.packages.model_copy(update={"source": "public"})}
            )
        }
    )
    minor = ".".join(inventory.cluster.resolved_versions().kubernetes.split(".")[:2])
    repo = package_repo(public)
    assert repo is not None and repo["uri"] == f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"
    assert repo["key_url"] == f"{repo['uri']}Release.key"


def test_the_message_names_what_was_installed_and_validated() -> None:
    report = {
        "version": "1.33.5",
        "missing": [],
        "installed": {"kubeadm": "1.33.5-1.1", "kubelet": "1.33.5-1.1", "kubectl": "1.33.5-1.1"},
        "config_validated": True,
        "config": "/etc/rackctl/kubeadm.yaml",
    }
    text = report_message(report, "the head node's mirror")
    assert text.startswith("kubeadm/kubelet/kubectl 1.33.5 installed and held (kubeadm 1.33.5-1.1,")
    assert "kubeadm config validate --config /etc/rackctl/kubeadm.yaml passed" in text
    partial = {"version": "1.33.5", "missing": ["kubeadm", "kubelet"], "available": {"kubectl": "1.33.5-1.1"}}
    assert "have no kubeadm/kubelet 1.33.5 (they have kubectl 1.33.5-1.1)" in report_message(partial, "x")
