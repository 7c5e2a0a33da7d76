"""The kubernetes stage's cluster side (playbooks/kubernetes_cluster.yml) over real SSH, with a STAND-IN kubeadm.

Run by the project's Ansible driver (ansible-runner) against four loopback sshd "nodes" (the ``rack``
pattern of tests/ansible/test_playbook_stage.py: pinned host keys, the relay as ProxyCommand): head-01,
cp-02, cp-03 (control planes) and gpu-01 (worker). Every node is THIS machine, so every path the roles use
(``kube_config_dir``, ``kubeadm_bin_dir``, the node's kubeadm config, the snapshot directory) is pointed into
the test's tmp_path. kubeadm and etcdctl there are STAND-INS (tests/ansible/kubeadm_standin.py): a real
kubeadm cannot run on these loopback "nodes" (all are this machine). They record each call and write the
files the real ones write; no cluster is built. What is real: Ansible, SSH, the roles' order, serial joins,
idempotence, no_log, the driver's artefacts, the stage's gate and messages, the kubeconfig fetch, the
journal. The same roles against a REAL kubeadm 1.37.2 on native lab nodes (keepalived + haproxy):
tests/ansible/test_kubernetes_cluster_real.py.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import yaml

from bootstrap.cluster.render import render_cluster
from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.provision.hostkeys import ensure_host_key, known_hosts_path, write_known_hosts
from bootstrap.stages.base import NodeResult, RunOptions, StageContext
from bootstrap.stages.kubernetes.cluster import cluster_side, gate
from bootstrap.stages.kubernetes.host import HOST_FACTS
from bootstrap.stages.playbook import runs_dir
from tests.ansible import kubeadm_standin as standin
from tests.ansible.test_playbook_stage import SSHD, Recorder, RelayEnvironment
from tests.lab.vmlab import write_inventory
from tests.sshnode import start_ssh_node

pytestmark = pytest.mark.skipif(
    not Path(SSHD).exists(), reason="openssh-server not installed (scripts/setup.sh installs it)"
)

NODES = ["head-01", "cp-02", "cp-03", "gpu-01"]
CONTROL_PLANES = ["head-01", "cp-02", "cp-03"]


@dataclasses.dataclass
class Rack:
    ctx: StageContext
    root: Path
    calls: Path
    version: str
    #: the rendered bundle: path -> content
    bundle: dict[str, str]

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def staged(self, node: str, name: str) -> Path:
        """Where role api_endpoint stages ``name`` on ``node`` (its api_endpoint_stage_dir here)."""
        return self.node_dir(node) / "etc" / "rackctl" / name

    def recorded(self) -> list[dict]:
        return standin.calls(self.calls)

    def steps(self, since: int = 0) -> list[tuple[str, str, str]]:
        """(node, tool, subcommand) of each recorded call from the ``since``-th on."""
        return [(c["node"], c["tool"], command(c["argv"])) for c in self.recorded()[since:]]


@contextmanager
def build_rack(tmp_path: Path, staged: bool = True, **kubernetes: str) -> Iterator[Rack]:
    """Four installed, networked nodes (sshd on loopback), each with its rendered kubeadm config, a stand-in
    kubeadm/etcdctl and, on the control planes, the kube-vip static pods the host side stages (role api_endpoint;
    tests/ansible/test_kubernetes_host_stage.py runs that part) in its own directory; a StageContext whose
    extravars point the roles there. ``staged``: False leaves the staging to the host side; ``kubernetes``:
    ``software_profile`` (cluster) and ``kubernetes:`` fields."""
    client = tmp_path / "admin" / "id_ed25519"
    client.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client)], check=True)
    path = write_inventory(tmp_path, NODES[1:], client.with_suffix(".pub").read_text().strip())
    data = yaml.safe_load(path.read_text())
    for node in data["nodes"]:
        if node["hostname"].startswith("cp-"):
            node.update(role="control-plane", model="R660")
            node.pop("gpus", None)
    if "software_profile" in kubernetes:
        data["cluster"]["software_profile"] = kubernetes.pop("software_profile")
    if kubernetes:
        data["kubernetes"] = {**data.get("kubernetes", {}), **kubernetes}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = load_inventory(path)
    version = inventory.cluster.resolved_versions().kubernetes
    state = tmp_path / "state"
    root = tmp_path / "rack"
    calls = root / "calls.jsonl"
    pins, sshds = {}, {}
    bundle = {f.path: f.content() for f in render_cluster(inventory).files}
    for hostname in NODES:
        pins[hostname] = (ensure_host_key(state, hostname), [str(inventory.node(hostname).address_on("pxe"))])
        node_dir = root / "nodes" / hostname
        standin.install(node_dir, hostname, calls, version)
        config = node_dir / "etc" / "rackctl" / "kubeadm.yaml"
        config.parent.mkdir(parents=True)
        config.write_text(bundle[f"kubeadm/{hostname}.yaml"])
        for name, content in bundle.items():  # what the host side stages (a stand-in here for its own test)
            if staged and name.startswith(f"static-pods/{hostname}/"):
                (config.parent / Path(name).name).write_text(content)
        sshds[hostname] = start_ssh_node(
            tmp_path / "sshd" / hostname, host_key=pins[hostname][0].private_path, client_key=client
        )
    write_known_hosts(known_hosts_path(state), pins)
    port_map = tmp_path / "ports.json"
    port_map.write_text(json.dumps({pins[h][1][0]: sshds[h].port for h in NODES}))
    per_node = f"{root}/nodes/{{{{ inventory_hostname }}}}"
    extravars = {
        "kube_config_dir": f"{per_node}/etc/kubernetes",
        "kubeadm_bin_dir": f"{per_node}/bin",
        "kubeadm_config_file": f"{per_node}/etc/rackctl/kubeadm.yaml",
        "etcd_snapshot_dir": f"{root}/snapshots",
        "etcd_snapshot_data_dir": f"{per_node}/var/lib/etcd",
        # role api_endpoint: the staged files, the configs, and no daemon started on this machine
        "api_endpoint_stage_dir": f"{per_node}/etc/rackctl",
        "api_endpoint_keepalived_conf": f"{per_node}/etc/keepalived/keepalived.conf",
        "api_endpoint_haproxy_cfg": f"{per_node}/etc/haproxy/haproxy.cfg",
        "api_endpoint_manage_services": False,
        # the stand-in API answers at once or never: the init role's wait for a restarting one kept short
        "kubeadm_init_api_retries": 2,
        "kubeadm_init_api_delay": 1,
        "kubeadm_join_api_retries": 2,
        "kubeadm_join_api_delay": 1,
        "kubeadm_join_register_retries": 2,
    }
    options = RunOptions(environment=RelayEnvironment(client, port_map), extravars={"kubernetes": extravars})
    try:
        with Journal(state) as journal:
            journal.register_nodes([n.hostname for n in inventory.nodes])
            run_id = journal.begin_run("test: cluster side")
            ctx = StageContext("kubernetes", inventory, NODES, journal, state, run_id, options, Recorder())
            yield Rack(ctx, root, calls, version, bundle)
    finally:
        for sshd in sshds.values():
            sshd.stop()


@pytest.fixture
def rack(tmp_path: Path) -> Iterator[Rack]:
    """The rack with the inventory's defaults: kube-vip, Kubernetes 1.37 (super-admin.conf during init)."""
    with build_rack(tmp_path) as built:
        yield built


def host_reports(rack: Rack, **first: str) -> dict[str, NodeResult]:
    """What the host side reports where it installed kubeadm (a STAND-IN for its apt run: no Kubernetes
    package can be installed here); ``first``: fields overriding the first control plane's report."""
    out = {}
    for node in NODES:
        report = {
            "installed": {p: f"{rack.version}-1.1" for p in ("kubeadm", "kubelet", "kubectl")},
            "kubeadm_version": f"v{rack.version}",
        }
        if node == NODES[0]:
            report |= first
        out[node] = NodeResult(node, ok=True, message="host side applied", data={HOST_FACTS: report})
    return out


def command(argv: list[str]) -> str:
    """The subcommand words of a recorded call (``init phase preflight``), without flags and their values."""
    words = [a for i, a in enumerate(argv) if not a.startswith("-") and not (i and argv[i - 1] in VALUED)]
    return " ".join(w for w in words if not w.startswith("/"))


#: the flags the roles pass a separate value to
VALUED = {"--config", "--ttl", "--kubeconfig", "--runtime-endpoint", "--name", "--label", "--state", "--output"}


def everything_written(rack: Rack) -> str:
    """Every output of the runs: ansible-runner's artefacts (stdout, events), the journal, the kubeconfig."""
    texts = [p.read_text(errors="replace") for p in runs_dir(rack.ctx.state_dir).rglob("*") if p.is_file()]
    with closing(sqlite3.connect(rack.ctx.journal.path)) as db:
        journal = "\n".join(db.iterdump())
    return "\n".join(texts) + journal


def test_init_then_control_planes_one_at_a_time_then_workers_and_a_second_run_changes_nothing(rack: Rack) -> None:
    """The order on the nodes, the secrets' path (made on the node, in the config, never in any output),
    the kubeconfig fetched 0600, and a second run that joins nothing again."""
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None
    assert {n: (r.ok, r.applied) for n, r in results.items()} == dict.fromkeys(NODES, (True, True)), results
    manifest = rack.node_dir("head-01") / "etc" / "kubernetes" / "manifests" / "kube-vip.yaml"
    assert results["head-01"].message == (
        f"initialised; kube-vip static pod {manifest}: {rack.staged('head-01', 'kube-vip-init.yaml')} placed before "
        f"init, switched to {rack.staged('head-01', 'kube-vip.yaml')} (admin.conf) after it"
    )
    for cp in ("cp-02", "cp-03"):
        assert results[cp].message.startswith("joined as control plane (etcd snapshot ")
        assert results[cp].message.endswith(
            f" on head-01 first); kube-vip static pod placed as {rack.node_dir(cp)}/etc/kubernetes/manifests/"
            "kube-vip.yaml before the join (--ignore-preflight-errors=DirAvailable--etc-kubernetes-manifests)"
        )
    assert results["gpu-01"].message == "joined as worker"

    calls = rack.recorded()
    steps = [(c["node"], c["tool"], command(c["argv"])) for c in calls]
    init_at = steps.index(("head-01", "kubeadm", "init"))
    assert steps[:init_at] == [
        ("head-01", "kubeadm", "token generate"),
        ("head-01", "kubeadm", "certs certificate-key"),
        ("head-01", "kubeadm", "config validate"),
        ("head-01", "kubeadm", "init phase preflight"),
    ], steps
    init = calls[init_at]
    assert "--upload-certs" in init["argv"]
    # kube-vip held the VIP while init ran: the super-admin.conf variant (1.29+), placed before the checks;
    # init's preflight has no check on other files in the directory, so nothing is ignored
    init_pod = rack.bundle["static-pods/head-01/kube-vip-init.yaml"]
    assert "/etc/kubernetes/super-admin.conf" in init_pod
    for call in calls[init_at - 1 : init_at + 1]:
        assert call["manifests"] == {"kube-vip.yaml": init_pod} and call["ignored"] == [], call["argv"]
    # after init: switched to the admin.conf one (init's kube-apiserver.yaml beside it)
    assert manifest.read_text() == rack.bundle["static-pods/head-01/kube-vip.yaml"] != init_pod
    assert manifest.stat().st_mode & 0o777 == 0o600 and manifest.parent.stat().st_mode & 0o777 == 0o700
    assert standin.INIT_TOKEN in init["config"] and standin.INIT_CERT_KEY in init["config"]  # filled on the node
    # each other control plane, one after the other: whether it joined (its Node, its etcd member: neither),
    # token + certificates on head-01, checks, snapshot, join
    per_cp = [
        ("head-01", "kubectl", "get node {cp}"),
        ("head-01", "etcdctl", "member list"),
        ("head-01", "kubeadm", "token create"),
        ("head-01", "kubeadm", "certs certificate-key"),
        ("head-01", "kubeadm", "token generate"),
        ("head-01", "kubeadm", "init phase upload-certs"),
        ("{cp}", "kubeadm", "config validate"),
        ("{cp}", "kubeadm", "join phase preflight"),
        ("head-01", "etcdctl", "snapshot save"),
        ("{cp}", "kubeadm", "join"),
        ("head-01", "kubectl", "get node {cp}"),  # registered: the join is done
    ]
    after = steps[init_at + 1 :]
    expected = [(n.format(cp=cp), t, s.format(cp=cp)) for cp in ("cp-02", "cp-03") for n, t, s in per_cp]
    assert after[: len(expected)] == expected, after
    assert after[len(expected) :] == [
        ("head-01", "kubectl", "get node gpu-01"),
        ("head-01", "kubeadm", "token create"),
        ("gpu-01", "kubeadm", "config validate"),
        ("gpu-01", "kubeadm", "join phase preflight"),
        ("gpu-01", "kubeadm", "join"),
        ("head-01", "kubectl", "get node gpu-01"),
    ], after
    # each control plane's kube-vip.yaml was in its manifests dir for its join's checks and the join, which let
    # through that one check (kubeadm before 1.23 refuses a non-empty directory; the stand-in does too)
    for call in calls:
        if call["tool"] == "kubeadm" and command(call["argv"]) in ("join phase preflight", "join"):
            want = (
                {}
                if call["node"] == "gpu-01"
                else {"kube-vip.yaml": rack.bundle[f"static-pods/{call['node']}/kube-vip.yaml"]}
            )
            assert call["manifests"] == want, call
            assert call["ignored"] == ([] if call["node"] == "gpu-01" else ["diravailable--etc-kubernetes-manifests"])
    joins = [c for c in calls if c["argv"][0] == "join" and c["tool"] == "kubeadm"]
    for join in joins:
        assert standin.JOIN_TOKEN in join["config"] and standin.CA_HASH in join["config"]
        # the key the certificates were uploaded under: made on head-01, given to upload-certs in its config
        assert (standin.INIT_CERT_KEY in join["config"]) == (join["node"] != "gpu-01")
        assert "${KUBEADM_" not in join["config"]
    snapshots = [c for c in calls if c["tool"] == "etcdctl"]
    assert all(c["env"]["ETCDCTL_API"] == "3" for c in snapshots)
    assert all(f"--cacert={rack.node_dir('head-01')}/etc/kubernetes/pki/etcd/ca.crt" in c["argv"] for c in snapshots)
    assert sorted(p.name.split("-2")[0] for p in (rack.root / "snapshots").iterdir()) == [
        "etcd-before-join-cp-02",
        "etcd-before-join-cp-03",
    ]
    # the resolved configs were temp files, removed; the node's own config still holds only placeholders
    for node in NODES:
        assert not list((rack.node_dir(node) / "etc" / "kubernetes").glob("rackctl-kubeadm-*"))
        assert "${KUBEADM_BOOTSTRAP_TOKEN}" in (rack.node_dir(node) / "etc" / "rackctl" / "kubeadm.yaml").read_text()
    kubeconfig = rack.ctx.state_dir / "kubeconfig"
    assert kubeconfig.read_text().startswith("# STAND-IN admin.conf of head-01")
    assert kubeconfig.stat().st_mode & 0o777 == 0o600
    assert not list(rack.ctx.state_dir.glob(".kubeconfig-fetch.*"))

    again, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None
    assert {n: (r.ok, r.message) for n, r in again.items()} == dict.fromkeys(NODES, (True, "already joined"))
    # not even kubeadm's checks: only the first control plane's cluster asked whether init finished and each
    # node whether it joined (read-only)
    assert rack.steps(len(calls)) == [
        ("head-01", "kubectl", "get configmap cluster-info"),
        ("head-01", "kubectl", "get node cp-02"),
        ("head-01", "etcdctl", "member list"),
        ("head-01", "kubectl", "get node cp-03"),
        ("head-01", "etcdctl", "member list"),
        ("head-01", "kubectl", "get node gpu-01"),
    ]
    assert manifest.read_text() == rack.bundle["static-pods/head-01/kube-vip.yaml"]

    written = everything_written(rack)
    assert "kubeadm_cluster_report" in written and "etcd-before-join-cp-02" in written  # artefacts and journal read
    for secret in standin.SECRETS:
        assert secret not in written, secret


def test_a_failed_init_stops_the_joins_and_names_the_node_and_kubeadms_error(rack: Rack) -> None:
    (rack.node_dir("head-01") / "fail-init").write_text("")
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None
    head = results["head-01"]
    assert not head.ok and "kubeadm init failed on head-01 (rc 1)" in head.message, head
    assert standin.INIT_ERROR in head.message
    for node in NODES[1:]:
        assert results[node].ok and not results[node].applied, results[node]
        assert results[node].message == "not joined: the play stopped after head-01 failed"
    recorded = rack.recorded()
    assert [command(c["argv"]) for c in recorded] == [
        "token generate",
        "certs certificate-key",
        "config validate",
        "init phase preflight",
        "init",
    ]
    assert {c["node"] for c in recorded} == {"head-01"}  # nothing ran on the others, nothing was joined
    assert not (rack.ctx.state_dir / "kubeconfig").exists()
    for node in NODES:
        assert not (rack.node_dir(node) / "etc" / "kubernetes" / "kubelet.conf").exists()
        assert not list((rack.node_dir(node) / "etc" / "kubernetes").glob("rackctl-kubeadm-*"))
    written = everything_written(rack) + head.message
    for secret in standin.SECRETS:
        assert secret not in written, secret


def test_the_gate_stays_closed_unless_every_control_plane_has_the_pinned_kubeadm(rack: Rack) -> None:
    inv, version = rack.ctx.inventory, rack.version
    assert gate(inv, host_reports(rack)) is None
    closed = gate(inv, host_reports(rack, kubeadm_version="", kubeadm_version_error="rc 1: "))
    assert closed == f"`kubeadm version -o short` on head-01 did not answer (rc 1: ), not v{version}"
    closed = gate(inv, host_reports(rack, kubeadm_version="v1.20.2"))
    assert closed == f"`kubeadm version -o short` on head-01 answered 'v1.20.2', not v{version}"
    missing = host_reports(rack)
    missing["cp-03"].data[HOST_FACTS]["installed"] = {}
    assert gate(inv, missing) == f"the host side did not report kubeadm {version} installed on control plane cp-03"
    not_run = host_reports(rack)
    not_run["cp-02"] = NodeResult("cp-02", ok=True, message="host side not run: ...", applied=False)
    assert gate(inv, not_run) == f"the host side did not report kubeadm {version} installed on control plane cp-02"
    limited = {n: r for n, r in host_reports(rack).items() if n != "cp-03"}
    assert gate(inv, limited) == (
        "control plane cp-03 is not in this run (kubeadm init needs every control plane; once the cluster is "
        "initialised, nodes join without them)"
    )
    # a closed gate runs nothing
    results, why = cluster_side(rack.ctx, limited)
    assert results == {} and why and rack.recorded() == []
    # once the cluster is initialised: open for the run's nodes, each of which must answer the version
    worker = {n: r for n, r in host_reports(rack).items() if n == "gpu-01"}
    assert gate(inv, worker, initialised=True) is None
    worker["gpu-01"].data[HOST_FACTS]["kubeadm_version"] = "v1.20.2"
    assert gate(inv, worker, initialised=True) == (
        f"`kubeadm version -o short` on gpu-01 answered 'v1.20.2', not v{version}"
    )
    assert gate(inv, not_run, initialised=True) is None  # cp-02's host side did not run: the others may join
    assert gate(inv, {"cp-02": not_run["cp-02"]}, initialised=True) == (
        f"the host side did not report kubeadm {version} installed on any node of this run"
    )


def _only(rack: Rack, *nodes: str) -> StageContext:
    """The rack's context limited to ``nodes`` (an ``up --limit`` of them)."""
    return dataclasses.replace(rack.ctx, nodes=list(nodes))


def _reports(rack: Rack, *nodes: str) -> dict[str, NodeResult]:
    return {n: r for n, r in host_reports(rack).items() if n in nodes}


def test_a_run_that_stopped_between_init_and_the_switch_is_switched_by_the_next(rack: Rack) -> None:
    """head-01 initialised by an earlier run that died before kube-vip's switch (init finished: admin.conf, the
    API server's pod, cluster-info; the super-admin.conf variant still in the manifests dir): the next run
    leaves init alone and switches it."""
    config_dir = rack.node_dir("head-01") / "etc" / "kubernetes"
    (config_dir / "manifests").mkdir(parents=True, mode=0o700)
    manifest = config_dir / "manifests" / "kube-vip.yaml"
    manifest.write_text(rack.bundle["static-pods/head-01/kube-vip-init.yaml"])
    (config_dir / "manifests" / "kube-apiserver.yaml").write_text("# STAND-IN kube-apiserver static pod\n")
    (config_dir / "admin.conf").write_text("# STAND-IN admin.conf of head-01, from the run that died\n")
    (config_dir / "kubelet.conf").write_text("# STAND-IN kubelet.conf\n")
    (config_dir / "standin-init-done").write_text("")
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None
    assert results["head-01"].ok, results["head-01"]
    assert results["head-01"].message == (
        f"already joined; kube-vip static pod {manifest}: switched to {rack.staged('head-01', 'kube-vip.yaml')} "
        "(admin.conf) after it"
    )
    assert manifest.read_text() == rack.bundle["static-pods/head-01/kube-vip.yaml"]
    assert not [c for c in rack.recorded() if c["node"] == "head-01" and command(c["argv"]) == "init"]


def _half_done_init(rack: Rack, *, api_manifest: bool) -> Path:
    """What a killed or failed kubeadm init leaves on head-01: admin.conf (its kubeconfig phase), the API
    server's static pod where it got that far, no cluster-info (its bootstrap-token phase never ran)."""
    config_dir = rack.node_dir("head-01") / "etc" / "kubernetes"
    (config_dir / "manifests").mkdir(parents=True, mode=0o700)
    (config_dir / "admin.conf").write_text("# STAND-IN admin.conf of head-01, from an init that stopped\n")
    if api_manifest:
        (config_dir / "manifests" / "kube-apiserver.yaml").write_text("# STAND-IN kube-apiserver static pod\n")
    return config_dir


@pytest.mark.parametrize(
    ("api_manifest", "why"),
    [
        # (stopped before its control-plane phase: the real module's formed cluster, real kubeadm)
        (True, "the API answers admin.conf without kube-public/cluster-info: init stopped before its bootstrap-token"),
    ],
    ids=["stopped-before-the-bootstrap-token"],
)
def test_a_half_done_init_is_reset_and_initialised_again_then_the_others_join(
    rack: Rack, api_manifest: bool, why: str
) -> None:
    _half_done_init(rack, api_manifest=api_manifest)
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None
    assert {n: r.ok for n, r in results.items()} == dict.fromkeys(NODES, True), results
    assert results["head-01"].message.startswith(f"initialised after kubeadm reset of a half-done init ({why}")
    head = [command(c["argv"]) for c in rack.recorded() if c["node"] == "head-01" and c["tool"] == "kubeadm"]
    assert head.index("reset") < head.index("init") and head.count("init") == 1, head
    assert results["gpu-01"].message == "joined as worker"


def test_pods_a_reset_left_are_removed_before_init_and_one_that_stays_stops_the_node(rack: Rack) -> None:
    """Role kubeadm_reset after a half-done init: a pod kubeadm reset did not remove (the runtime failed it;
    kubeadm only warns) is removed with crictl before init runs again; one that crictl cannot remove either
    stops head-01 naming its container, before any init. (The real module's resets found none left.)"""
    _half_done_init(rack, api_manifest=False)
    (rack.node_dir("head-01") / "pods-left").write_text("")
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None and results["head-01"].ok, results
    head = [(tool, step) for node, tool, step in rack.steps() if node == "head-01"]
    reset, removed = head.index(("kubeadm", "reset")), head.index(("crictl", "rmp"))
    assert reset < removed < head.index(("kubeadm", "init")), head
    assert not (rack.node_dir("head-01") / "pods-left").exists()


def test_a_container_still_running_after_the_reset_stops_the_node_before_init(rack: Rack) -> None:
    _half_done_init(rack, api_manifest=False)
    for name in ("pods-left", "pods-stuck"):
        (rack.node_dir("head-01") / name).write_text("")
    results, closed = cluster_side(rack.ctx, host_reports(rack))
    assert closed is None and not results["head-01"].ok
    said = results["head-01"].message
    assert "not initialised: head-01 still runs kube-apiserver after kubeadm reset and crictl rmp" in said, said
    assert "crictl ps" in said
    assert ("head-01", "kubeadm", "init") not in rack.steps()


def test_a_cluster_that_does_not_say_whether_a_node_joined_resets_nothing(rack: Rack) -> None:
    first, _ = cluster_side(rack.ctx, host_reports(rack))
    assert all(r.ok for r in first.values()), first
    built = len(rack.recorded())
    (rack.node_dir("gpu-01") / "etc" / "kubernetes" / "kubelet.conf").unlink()
    (rack.node_dir("head-01") / "nodes-api-down").write_text("")  # the API stops answering after init's check
    results, closed = cluster_side(_only(rack, "gpu-01"), _reports(rack, "gpu-01"))
    assert closed is None and not results["gpu-01"].ok
    said = results["gpu-01"].message
    assert "cannot tell whether gpu-01 has joined: the API on head-01 did not answer `kubectl get node`" in said
    assert "nothing was reset or joined" in said, said
    assert [s for s in rack.steps(built) if s[1] == "kubeadm"] == []


def test_below_1_29_the_first_control_plane_runs_kube_vip_on_admin_conf_from_the_start(tmp_path: Path) -> None:
    """Kubernetes 1.27 (the Dell design's profile): admin.conf has its rights during init, so the host side
    stages no kube-vip-init.yaml, kube-vip.yaml is placed before init and nothing is switched."""
    with build_rack(tmp_path, software_profile="dell-dvd-2024") as rack:
        assert rack.version == "1.27.6" and "static-pods/head-01/kube-vip-init.yaml" not in rack.bundle
        results, closed = cluster_side(rack.ctx, host_reports(rack))
        assert closed is None
        assert {n: r.ok for n, r in results.items()} == dict.fromkeys(NODES, True), results
        manifest = rack.node_dir("head-01") / "etc" / "kubernetes" / "manifests" / "kube-vip.yaml"
        pod = rack.bundle["static-pods/head-01/kube-vip.yaml"]
        assert "super-admin.conf" not in pod
        assert results["head-01"].message == (
            f"initialised; kube-vip static pod {manifest}: {rack.staged('head-01', 'kube-vip.yaml')} placed before init"
        )
        init = next(c for c in rack.recorded() if c["node"] == "head-01" and command(c["argv"]) == "init")
        assert init["manifests"] == {"kube-vip.yaml": pod} and init["ignored"] == []
        assert manifest.read_text() == pod
