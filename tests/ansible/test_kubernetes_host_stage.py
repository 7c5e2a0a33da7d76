"""The kubernetes stage's host side (role kubernetes_packages) run by the real runner over real SSH, real journal.

The nodes are sshd on loopback (tests/ansible/test_playbook_stage.py's ``rack``: gpu-01 serves its pinned
host key, gpu-02 another one), so the role runs on this machine, whose apt sources have no kubeadm/kubelet:
the "not available" path, which must change nothing here (no package, hold, source or file). The install,
hold and refusal paths run on a lab VM (tests/inband/test_network_stage_lab.py): no package is installed
onto this machine by a test.

The control planes' part (role api_endpoint) runs on the cluster side's loopback rack
(tests/ansible/test_kubernetes_cluster_side.py: head-01, cp-02, cp-03, gpu-01, every path pointed into the
test's directory): kube-vip's static pods staged, and keepalived + haproxy with the real ``haproxy -c`` and
``keepalived -t`` checking the rendered configs. The packages are the ones scripts/setup.sh installs here
(apt finds them installed: nothing is installed by the test), and ``api_endpoint_manage_services`` is false:
no keepalived or haproxy daemon is enabled or started on this machine.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import STAGE_STEP, Journal
from bootstrap.stages.base import NodeResult, RunOptions
from bootstrap.stages.kubernetes.host import HOST_FACTS, host_side, package_repo, report_message
from bootstrap.stages.runner import EXIT_NOT_APPLIED, Runner, plan, select
from tests.ansible.test_kubernetes_cluster_side import NODES as RACK_NODES
from tests.ansible.test_kubernetes_cluster_side import Rack, build_rack
from tests.ansible.test_playbook_stage import Recorder, networked, rack  # noqa: F401 - the fixtures
from tests.sshnode import refused_host_key

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
    assert refused_host_key(said) or "data could not be sent to remote host" in said, said
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


def networked_rack(cp_rack: Rack) -> Path:
    """The rack's nodes installed and networked in the journal (the host side runs after the network stage),
    and the rendered bundle written where the stage writes it; returns that directory."""
    journal = cp_rack.ctx.journal
    for node in RACK_NODES:
        for to in (NodeState.DISCOVERED, NodeState.CONFIGURED, NodeState.PROVISIONING, NodeState.PROVISIONED):
            journal.transition(node, to, "test: installed")
        journal.record_step(cp_rack.ctx.run_id, node, "network", STAGE_STEP, status="completed", destructive=False)
    cluster_dir = cp_rack.ctx.state_dir / "cluster"
    for name, content in cp_rack.bundle.items():
        (cluster_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (cluster_dir / name).write_text(content)
    return cluster_dir


def applied(results: dict[str, NodeResult], node: str) -> str:
    """The node's message, asserting the host side ran there and succeeded."""
    assert results[node].ok, results[node]
    return results[node].message


def test_the_control_planes_stage_kube_vips_static_pods_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    with build_rack(tmp_path, staged=False) as cp_rack:
        cluster_dir = networked_rack(cp_rack)
        stale = cp_rack.staged("cp-02", "kube-vip-init.yaml")  # from a bundle that had it: removed
        stale.write_text("stale\n")
        results = host_side(cp_rack.ctx, cluster_dir)
        for cp in ("head-01", "cp-02", "cp-03"):
            names = ["kube-vip.yaml", "kube-vip-init.yaml"] if cp == "head-01" else ["kube-vip.yaml"]
            paths = [cp_rack.staged(cp, n) for n in names]
            message = applied(results, cp)
            assert f"kube-vip static pod staged at {', '.join(map(str, paths))} (placed by the cluster side" in message
            assert "changed): kubeadm/kubelet/kubectl not installed" in message and "nothing changed" not in message
            for name, path in zip(names, paths, strict=True):
                assert path.read_text() == cp_rack.bundle[f"static-pods/{cp}/{name}"]
                assert path.stat().st_mode & 0o777 == 0o600
            assert not (cp_rack.node_dir(cp) / "etc" / "kubernetes" / "manifests").exists()  # not placed yet
            assert results[cp].data[HOST_FACTS]["api_endpoint"]["staged"] == [str(p) for p in paths]
        assert not stale.exists()
        assert "kube-vip" not in applied(results, "gpu-01") and not list(cp_rack.staged("gpu-01", "").glob("kube-vip*"))
        with Journal(cp_rack.ctx.state_dir, readonly=True) as journal:
            facts = journal.latest_facts("head-01")["kubernetes"][HOST_FACTS]
            assert facts["api_endpoint"]["kind"] == "kube-vip"

        again = host_side(cp_rack.ctx, cluster_dir)
        for node in RACK_NODES:
            message = applied(again, node)
            assert "host side applied (0 changed)" in message and message.endswith("; nothing changed"), message


def vip_interface() -> str:
    """An interface of this machine keepalived -t accepts (it refuses a missing one, and lo)."""
    names = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo")
    return "eth0" if "eth0" in names else (names[0] if names else "")


@pytest.mark.skipif(
    not (shutil.which("haproxy") and shutil.which("keepalived") and vip_interface()),
    reason="haproxy/keepalived not installed (scripts/setup.sh installs them) or no interface but lo",
)
def test_keepalived_haproxy_configs_are_checked_by_the_daemons_and_written(tmp_path: Path) -> None:
    """keepalived + haproxy: packages (already here), configs checked by the real haproxy -c and keepalived -t,
    written; a config haproxy rejects fails that node with haproxy's words and
    leaves its file; a package the sources lack fails the nodes naming it and the fix, nothing changed."""
    with build_rack(
        tmp_path, staged=False, api_endpoint="keepalived-haproxy", vip_interface=vip_interface()
    ) as cp_rack:
        cluster_dir = networked_rack(cp_rack)
        versions = {p: installed_here(p) for p in ("keepalived", "haproxy")}
        results = host_side(cp_rack.ctx, cluster_dir)
        for cp in ("head-01", "cp-02", "cp-03"):
            etc = cp_rack.node_dir(cp) / "etc"
            haproxy, keepalived = etc / "haproxy" / "haproxy.cfg", etc / "keepalived" / "keepalived.conf"
            assert applied(results, cp).endswith(
                f"; API VIP: keepalived {versions['keepalived']}, haproxy {versions['haproxy']} installed; "
                f"{haproxy} (haproxy -c passed), {keepalived} (keepalived -t passed); not enabled or started "
                "(api_endpoint_manage_services is false)"
            )
            assert haproxy.read_text() == cp_rack.bundle[f"host/{cp}/haproxy.cfg"]
            assert keepalived.read_text() == cp_rack.bundle[f"host/{cp}/keepalived.conf"]
            assert not list(cp_rack.staged(cp, "").glob("kube-vip*"))
        assert not (cp_rack.node_dir("gpu-01") / "etc" / "haproxy").exists()

        # (a second run changing nothing: the real module's `rackctl up` runs this host side, keepalived and
        # haproxy started, over an applied one: 0 changed, tests/ansible/test_kubernetes_cluster_real.py)

        good = (cp_rack.node_dir("cp-02") / "etc" / "haproxy" / "haproxy.cfg").read_text()
        bad = cluster_dir / "host" / "cp-02" / "haproxy.cfg"
        bad.write_text(bad.read_text().replace("balance roundrobin", "balance round-robin"))
        rejected = host_side(cp_rack.ctx, cluster_dir)
        said = rejected["cp-02"].message
        assert not rejected["cp-02"].ok and "Write haproxy.cfg (checked with haproxy -c) failed on cp-02" in said
        assert "[ALERT]" in said and "balance only supports" in said, said  # haproxy's own words
        assert (cp_rack.node_dir("cp-02") / "etc" / "haproxy" / "haproxy.cfg").read_text() == good
        assert all(rejected[n].ok for n in ("head-01", "cp-03", "gpu-01")), rejected

        bad.write_text(cp_rack.bundle["host/cp-02/haproxy.cfg"])
        extravars = cp_rack.ctx.options.extravars["kubernetes"]
        extravars["api_endpoint_packages"] = ["keepalived", "haproxy", "rackctl-no-such-package"]
        missing = host_side(cp_rack.ctx, cluster_dir)
        for cp in ("head-01", "cp-02", "cp-03"):
            said = missing[cp].message
            assert not missing[cp].ok and "rackctl-no-such-package not available from the head node's mirror" in said
            assert "`rackctl mirror build` puts them into the head node's mirror" in said and "nothing changed" in said
        assert missing["gpu-01"].ok
