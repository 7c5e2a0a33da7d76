"""``Kubectl.remove_etcd_member``: an etcd snapshot on the control plane it acts through, then the member
removed, all through ``kubectl exec`` into kubeadm's etcd pod.

``kubectl exec`` needs a kubelet and an etcd pod, neither of which runs here, so ``kubectl`` on PATH is a
STAND-IN (a test double, ``STANDIN`` below): it records each argv and answers ``member list``
with etcdctl's JSON shape (member IDs as uint64 numbers). What is real: the argument lists, their order, the
hex member IDs etcdctl wants, the snapshot's path and the text returned to the day-2 commands.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bootstrap.kube import ETCD_DATA_DIR, Kubectl

MEMBERS = {
    "members": [
        {"ID": 1311035234598740290, "name": "head-01", "peerURLs": ["https://10.0.0.11:2380"]},
        {"ID": 16285235713493217075, "name": "cp-02", "peerURLs": ["https://10.0.0.12:2380"]},
    ]
}
STANDIN = """#!{python}
# STAND-IN kubectl (a test double): records argv; answers etcdctl's member list in the etcd pod
import json, sys
argv = sys.argv[1:]
with open({calls!r}, "a") as fh:
    fh.write(json.dumps(argv) + "\\n")
if "member" in argv and "list" in argv:
    print(json.dumps({members}))
elif "snapshot" in argv:
    print("Snapshot saved at " + argv[-1])
elif "remove" in argv:
    print("Member " + argv[-1] + " removed from cluster 0")
"""


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Kubectl, Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(STANDIN.format(python=sys.executable, calls=str(calls), members=json.dumps(MEMBERS)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("# not read by the stand-in\n")
    return Kubectl(kubeconfig, timeout_s=30), calls


def _etcdctl_args(call: list[str]) -> list[str]:
    """What ran in the etcd pod: the words after ``--`` without etcdctl's connection flags."""
    assert call[call.index("exec") : call.index("--")] == ["exec", "-n", "kube-system", "etcd-head-01"]
    return [a for a in call[call.index("--") + 1 :] if not a.startswith("--")]


def test_a_snapshot_is_saved_through_the_peer_before_the_member_is_removed(kubectl: tuple[Kubectl, Path]) -> None:
    cluster, calls = kubectl
    said = cluster.remove_etcd_member("cp-02", via="head-01")
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    steps = [_etcdctl_args(c) for c in recorded]
    assert [s[:3] for s in steps] == [
        ["etcdctl", "member", "list"],
        ["etcdctl", "snapshot", "save"],
        ["etcdctl", "member", "remove"],
    ]
    snapshot = steps[1][3]
    assert re.fullmatch(rf"{ETCD_DATA_DIR}/rackctl-etcd-before-remove-cp-02-\d{{8}}T\d{{6}}Z\.db", snapshot)
    assert steps[2][3] == format(16285235713493217075, "x")  # etcdctl takes the member ID in hex
    # every call reaches etcd with kubeadm's etcd server certificate, on the pod's own loopback
    assert all(
        "--cert=/etc/kubernetes/pki/etcd/server.crt" in c and "--endpoints=https://127.0.0.1:2379" in c
        for c in recorded
    )
    assert said == f"etcd snapshot {snapshot} on head-01 first, then member {steps[2][3]} removed"


def test_a_node_that_is_no_member_is_left_alone(kubectl: tuple[Kubectl, Path]) -> None:
    cluster, calls = kubectl
    said = cluster.remove_etcd_member("cp-03", via="head-01")
    steps = [_etcdctl_args(json.loads(line)) for line in calls.read_text().splitlines()]
    assert steps == [["etcdctl", "member", "list", "-w", "json"]]  # no snapshot, nothing removed
    assert said == "cp-03 is no etcd member (listed through etcd-head-01): nothing removed"
