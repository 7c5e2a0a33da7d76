"""STAND-IN kubeadm, kubectl, etcdctl and crictl for the cluster side's tests (test doubles: a real kubeadm cannot
run on loopback "nodes" that are all this machine; the real one runs in test_kubernetes_cluster_real.py).

:func:`install` writes, for one "node" (all nodes are this machine, each with its own directory), a
``kubeadm``, a ``kubectl``, an ``etcdctl`` and a ``crictl`` script into ``<node>/bin``. Each records every
invocation (node, argv, the ``--config`` file's contents) as one JSON line in a shared calls file, prints
"STAND-IN" in its output, and writes what the real one writes (``admin.conf`` and the etcd PKI on init,
``kubelet.conf`` on join, the snapshot file from etcdctl; its crictl lists the "etcd container" that exists
once init made the etcd PKI, and its pod, removes nothing; the etcd pod's own etcdctl, which the roles use
where a node has none on PATH, runs on the real cluster only) under the
node's own directories; its kubectl answers the questions the roles ask (kube-public/cluster-info: there once
init finished, NotFound before, refused without the API server's manifest; a Node, there once init or a join
finished it, and its deletion), its etcdctl lists and removes the members init and each
control plane's join added (one JSON file beside the calls holds the Nodes and the members), and ``kubeadm
reset`` removes what init or join wrote on the node (a ``nodes-api-down`` file in the first control plane's
directory makes its API refuse the Node questions only; a ``pods-left`` file in a node's directory, an API
server pod that kubeadm reset did not remove, which ``crictl rmp`` removes unless a ``pods-stuck`` file is
there too). What it answers is fixed below; a ``fail-init`` file in the node's directory makes init fail the
way kubeadm does (stderr, rc 1). It refuses a config that still holds one of the rendered placeholders, as a
real kubeadm would refuse a malformed token.

Each call also records the node's static pod directory (``<kube_config_dir>/manifests``: file name -> content)
and the ``--ignore-preflight-errors`` it was given. Its preflight (``phase preflight``, init, join) refuses what
kubeadm's does there: init a ``kube-apiserver.yaml`` already in the directory (FileAvailable), join a non-empty
directory (DirAvailable--etc-kubernetes-manifests, as kubeadm before 1.23 did), unless that check is ignored.
Init writes the stand-in's own ``kube-apiserver.yaml`` there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: What the stand-in hands out: values shaped like the real ones, unique enough to grep every output for.
INIT_TOKEN = "inittk.secretinittoken1"  # a test double's token
JOIN_TOKEN = "jointk.secretjointoken1"
INIT_CERT_KEY = "c0ffee" * 10 + "c0ff"
UPLOAD_CERT_KEY = "d00d" * 16
CA_HASH = "sha256:" + "ab" * 32
SECRETS = (INIT_TOKEN, JOIN_TOKEN, INIT_CERT_KEY, UPLOAD_CERT_KEY, CA_HASH)
INIT_ERROR = "error execution phase wait-control-plane: STAND-IN kubelet did not come up (timed out after 4m0s)"

SCRIPT = r'''#!{python}
"""STAND-IN {tool} for rackctl's tests (a test double, not Kubernetes): records argv, writes kubeadm's files."""
import json, os, sys
from pathlib import Path
NODE, ROOT, CALLS, VERSION, ADMIN = {node!r}, Path({root!r}), Path({calls!r}), {version!r}, {admin!r}
CONFIG_DIR = ROOT / "etc" / "kubernetes"
MANIFESTS = CONFIG_DIR / "manifests"
argv = sys.argv[1:]
config = argv[argv.index("--config") + 1] if "--config" in argv else None
text = Path(config).read_text() if config else None
manifests = {{p.name: p.read_text() for p in sorted(MANIFESTS.glob("*"))}} if MANIFESTS.is_dir() else {{}}
ignored = [i.lower() for a in argv if a.startswith("--ignore-preflight-errors=") for i in a.split("=", 1)[1].split(",")]
with CALLS.open("a") as fh:
    fh.write(json.dumps({{"node": NODE, "tool": {tool!r}, "argv": argv, "config": text, "manifests": manifests,
                         "ignored": ignored, "env": {{"ETCDCTL_API": os.environ.get("ETCDCTL_API")}}}}) + "\n")
def out(line):
    print(line)
def fail(line):
    sys.stderr.write(line + "\n")
    sys.exit(1)
CLUSTER = CALLS.parent / "standin-cluster.json"  # the cluster's Nodes and etcd members, shared by the nodes
def cluster():
    return json.loads(CLUSTER.read_text()) if CLUSTER.exists() else {{"nodes": {{}}, "members": []}}
def save(state):
    CLUSTER.write_text(json.dumps(state))
def member(words):  # etcdctl's member list / member remove <hex id>, on the shared members
    state = cluster()
    if words[:2] == ["member", "list"]:
        out(json.dumps({{"header": {{}}, "members": state["members"]}}))
    elif words[:2] == ["member", "remove"]:
        state["members"] = [m for m in state["members"] if "%x" % m["ID"] != words[2]]
        save(state)
        out("Member " + words[2] + " removed from cluster")
    else:
        return False
    return True
def joined(control_plane):  # what a finished init or join leaves in the cluster: the Node, a member
    state = cluster()
    labels = {{"node-role.kubernetes.io/control-plane": ""}} if control_plane else {{}}
    state["nodes"][NODE] = {{"metadata": {{"name": NODE, "labels": labels}}}}
    if control_plane:
        address = [x.split(":", 1)[1].strip() for x in text.splitlines() if x.strip().startswith("advertiseAddress:")]
        url = "https://" + address[0] + ":2380"
        state["members"] = [m for m in state["members"] if url not in m["peerURLs"]]
        new_id = max([m["ID"] for m in state["members"]], default=4095) + 1
        state["members"].append({{"ID": new_id, "name": NODE, "peerURLs": [url]}})
    save(state)
if {tool!r} == "etcdctl":
    if member([a for a in argv if not a.startswith("-")]):
        sys.exit(0)
    Path(argv[-1]).write_text("STAND-IN etcd snapshot of " + NODE + "\n")
    out("STAND-IN etcdctl: Snapshot saved at " + argv[-1])
    sys.exit(0)
if {tool!r} == "kubectl":  # the first control plane's API "answers" once init made its manifest
    if not (MANIFESTS / "kube-apiserver.yaml").exists():
        fail("The connection to the server 10.200.1.10:6443 was refused - did you specify the right host or port?")
    if argv[-4:] == ["get", "configmap", "cluster-info", "--output=name"]:
        if not (CONFIG_DIR / "standin-init-done").exists():
            fail('Error from server (NotFound): configmaps "cluster-info" not found')
        out("configmap/cluster-info")
        sys.exit(0)
    words = [a for a in argv if not a.startswith("-")]
    if words[:2] == ["get", "node"]:
        if (ROOT / "nodes-api-down").exists():
            fail("The connection to the server 10.200.1.11:6443 was refused - did you specify the right host or port?")
        if words[2] not in cluster()["nodes"]:
            fail('Error from server (NotFound): nodes "' + words[2] + '" not found')
        out(json.dumps(cluster()["nodes"][words[2]]))
        sys.exit(0)
    if words[:2] == ["delete", "node"]:
        state = cluster()
        state["nodes"].pop(words[2], None)
        save(state)
        out('node "' + words[2] + '" deleted')
        sys.exit(0)
    fail("STAND-IN kubectl: unknown command " + " ".join(argv))
if {tool!r} == "crictl":  # the etcd static pod "runs" once init has made the etcd PKI
    etcd_runs = (CONFIG_DIR / "pki" / "etcd" / "ca.crt").exists()
    left, stuck = ROOT / "pods-left", ROOT / "pods-stuck"  # what a reset the runtime failed leaves
    if "pods" in argv:  # its pod (kubeadm reset removes the PKI: none is left after it), and those left
        if etcd_runs:
            out("standin-etcd-pod-" + NODE)
        if left.exists():
            out("standin-apiserver-pod-" + NODE)
        sys.exit(0)
    if "rmp" in argv:  # removes what was left, unless it is stuck
        if not stuck.exists():
            left.unlink(missing_ok=True)
        sys.exit(0)
    if "ps" in argv and "json" in argv:
        running = [{{"id": "standin-etcd-" + NODE, "metadata": {{"name": "etcd"}}}}] if etcd_runs else []
        if left.exists():
            running.append({{"id": "standin-apiserver-" + NODE, "metadata": {{"name": "kube-apiserver"}}}})
        out(json.dumps({{"containers": running}}))
        sys.exit(0)
    if "ps" in argv:
        if etcd_runs:
            out("standin-etcd-" + NODE)
        sys.exit(0)
    fail("STAND-IN crictl: unknown command " + " ".join(argv))
if text is not None and "${{KUBEADM_" in text:
    fail("STAND-IN kubeadm: a placeholder is left in " + config)
cmd = " ".join(a for i, a in enumerate(argv) if not a.startswith("-") and not (i and argv[i - 1].startswith("-")))
def preflight(phase):
    errors = []
    if phase == "init" and "kube-apiserver.yaml" in manifests:
        errors.append("FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]: " + str(MANIFESTS)
                      + "/kube-apiserver.yaml already exists")
    if phase == "join" and manifests and "diravailable--etc-kubernetes-manifests" not in ignored:
        errors.append("DirAvailable--etc-kubernetes-manifests]: " + str(MANIFESTS) + " is not empty")
    if errors:
        fail("STAND-IN kubeadm: [preflight] Some fatal errors occurred: " + " ".join("[ERROR " + e for e in errors))
if cmd in ("init", "join") or cmd.endswith("phase preflight"):
    preflight(cmd.split()[0])
if argv[:2] == ["version", "-o"]:
    out("v" + VERSION)
elif cmd == "token generate":
    out({init_token!r})
elif cmd == "certs certificate-key":
    out({init_key!r})
elif argv[:2] == ["config", "validate"] or cmd.endswith("phase preflight"):
    out("STAND-IN kubeadm: " + cmd + " accepted " + config)
elif cmd == "init phase upload-certs":
    # as kubeadm: with --config, the key in the config (and the node's own admin.conf); else a new one
    admin_conf = argv[argv.index("--kubeconfig") + 1] if "--kubeconfig" in argv else str(CONFIG_DIR / "admin.conf")
    if not Path(admin_conf).exists():
        fail("STAND-IN kubeadm: no admin.conf")
    out("[upload-certs] Using certificate key:")
    keyed = [x.split(":", 1)[1].strip() for x in (text or "").splitlines() if x.strip().startswith("certificateKey:")]
    out(keyed[0] if keyed else {upload_key!r})
elif cmd == "token create":
    if not Path(argv[argv.index("--kubeconfig") + 1]).exists():
        fail("STAND-IN kubeadm: no admin.conf")
    out("kubeadm join 10.200.1.10:6443 --token {join_token} --discovery-token-ca-cert-hash {ca_hash}")
elif cmd == "init":
    if (ROOT / "fail-init").exists():
        fail({init_error!r})
    (CONFIG_DIR / "pki" / "etcd").mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", "healthcheck-client.crt", "healthcheck-client.key"):
        (CONFIG_DIR / "pki" / "etcd" / name).write_text("STAND-IN\n")
    (CONFIG_DIR / "admin.conf").write_text(ADMIN)
    MANIFESTS.mkdir(mode=0o700, exist_ok=True)
    (MANIFESTS / "kube-apiserver.yaml").write_text("# STAND-IN kube-apiserver static pod\n")
    (CONFIG_DIR / "kubelet.conf").write_text("# STAND-IN kubelet.conf\n")
    (CONFIG_DIR / "standin-init-done").write_text("init's bootstrap-token phase made kube-public/cluster-info\n")
    joined(control_plane=True)
    out("STAND-IN kubeadm: Your Kubernetes control-plane has initialized successfully!")
    out("kubeadm join 10.200.1.10:6443 --token {init_token} --certificate-key {init_key}")  # as kubeadm prints it
elif cmd == "reset":  # as kubeadm reset -f: the node's kubeconfigs, PKI, static pods and etcd data go
    import shutil
    for name in ("admin.conf", "super-admin.conf", "kubelet.conf", "standin-init-done"):
        (CONFIG_DIR / name).unlink(missing_ok=True)
    for name in ("pki", "manifests"):
        shutil.rmtree(CONFIG_DIR / name, ignore_errors=True)
    out("STAND-IN kubeadm: [reset] Deleted contents of the etc directories")
elif cmd == "join":
    CONFIG_DIR.mkdir(parents=True, exist_ok=True)
    (CONFIG_DIR / "kubelet.conf").write_text("# STAND-IN kubelet.conf\n")
    if "controlPlane:" in text:  # control-plane-prepare's static pods, control-plane-join's etcd
        MANIFESTS.mkdir(mode=0o700, exist_ok=True)
        for name in ("kube-apiserver.yaml", "etcd.yaml"):
            (MANIFESTS / name).write_text("# STAND-IN " + name + " static pod\n")
    joined(control_plane="controlPlane:" in text)
    out("STAND-IN kubeadm: This node has joined the cluster")
else:
    fail("STAND-IN kubeadm: unknown command " + " ".join(argv))
'''


def install(root: Path, node: str, calls: Path, version: str, admin_conf: str = "") -> Path:
    """Write the stand-in kubeadm, kubectl, etcdctl and crictl of ``node`` into ``root/bin``; returns that directory.

    ``admin_conf``: what init writes as admin.conf (by default a stand-in kubeconfig that reaches nothing).
    """
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("kubeadm", "kubectl", "etcdctl", "crictl"):
        path = bin_dir / tool
        path.write_text(
            SCRIPT.format(
                python=sys.executable,
                tool=tool,
                node=node,
                root=str(root),
                calls=str(calls),
                version=version,
                init_token=INIT_TOKEN,
                join_token=JOIN_TOKEN,
                init_key=INIT_CERT_KEY,
                upload_key=UPLOAD_CERT_KEY,
                ca_hash=CA_HASH,
                init_error=INIT_ERROR,
                admin=admin_conf or f"# STAND-IN admin.conf of {node}\napiVersion: v1\nkind: Config\n",
            )
        )
        path.chmod(0o755)
    return bin_dir


def calls(path: Path) -> list[dict[str, Any]]:
    """The recorded invocations, in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
