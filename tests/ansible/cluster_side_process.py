"""Parts of the kubernetes stage in a process of their own, for the real cluster test.

``python -m tests.ansible.cluster_side_process SPEC.json`` runs :func:`cluster_side` the way the stage does
(its own journal run, the product's Ansible driver over SSH through the lab's relay) on the inventory,
state directory, admin key and host-side reports the spec names; the test kills its whole process group
(rackctl, ansible-playbook, ssh) with SIGKILL while a join runs on a node.

With ``"part": "helm"`` in the spec it runs the stage's Helm part instead: the stage's releases
(:func:`bootstrap.stages.kubernetes.releases`) installed by :func:`install_releases` with the charts of
``"charts"``, on the cluster of the state directory's kubeconfig. The test starts it inside the lab
bridge's namespace, where the API VIP is, with the lab's kubectl on PATH.

With ``"part": "kubectl"`` it makes the product's :class:`Kubectl` of the state directory's kubeconfig (the
spec's ``drain_timeout_s``) and calls its methods in order (``"calls": [[method, arg..., {keyword: arg}],
...]``, the keywords optional), each
outcome printed as JSON: what the method returned, or the words of the :class:`KubeError` it raised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.kube import KUBECONFIG
from bootstrap.kube.api import KubeError
from bootstrap.kube.client import Kubectl, cluster_for
from bootstrap.stages.base import NodeResult, RunOptions, StageContext
from bootstrap.stages.helm_install import install_releases
from bootstrap.stages.kubernetes import releases
from bootstrap.stages.kubernetes.cluster import cluster_side
from tests.ansible.test_kubernetes_cluster_real import NODES, NetnsEnvironment
from tests.ansible.test_playbook_stage import Recorder


def helm(spec: dict[str, Any]) -> int:
    """The stage's releases installed on the state directory's cluster; each outcome printed as JSON."""
    state = Path(spec["state"])
    cluster = cluster_for(state)
    assert isinstance(cluster, Kubectl), cluster
    report = install_releases(
        releases(load_inventory(Path(spec["inventory"]))),
        kubeconfig=cluster.kubeconfig,
        api=cluster,
        charts_dir=Path(spec["charts"]),
        timeout_s=float(spec.get("timeout_s", 300)),
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps([o.as_fact() for o in report.outcomes]))
    return 0


def kubectl(spec: dict[str, Any]) -> int:
    """The product's Kubectl methods called in order; each outcome printed as JSON."""
    client = Kubectl(Path(spec["state"]) / KUBECONFIG, drain_timeout_s=float(spec.get("drain_timeout_s", 120)))
    outcomes: list[dict[str, Any]] = []
    for method, *args in spec["calls"]:
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        try:
            outcomes.append({"call": method, "ok": True, "result": getattr(client, method)(*args, **kwargs)})
        except KubeError as exc:
            outcomes.append({"call": method, "ok": False, "error": exc.message})
    print(json.dumps(outcomes))
    return 0


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("part") == "helm":
        return helm(spec)
    if spec.get("part") == "kubectl":
        return kubectl(spec)
    state = Path(spec["state"])
    inventory = load_inventory(Path(spec["inventory"]))
    reports = {n: NodeResult(n, ok=True, message="host side applied", data=d) for n, d in spec["reports"].items()}
    with Journal(state) as journal:
        run_id = journal.begin_run("test: cluster side in a process the test kills")
        options = RunOptions(environment=NetnsEnvironment(Path(spec["key"])))
        ctx = StageContext("kubernetes", inventory, NODES, journal, state, run_id, options, Recorder())
        results, _ = cluster_side(ctx, reports)
    print(json.dumps({n: r.message for n, r in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
