"""The cluster side in a process of its own, for the real test's SIGKILL of rackctl mid-join.

``python -m tests.ansible.cluster_side_process SPEC.json`` runs :func:`cluster_side` the way the stage does
(its own journal run, the product's Ansible driver over SSH through the lab's relay) on the inventory,
state directory, admin key and host-side reports the spec names; the test kills its whole process group
(rackctl, ansible-playbook, ssh) with SIGKILL while a join runs on a node.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.stages.base import NodeResult, RunOptions, StageContext
from bootstrap.stages.kubernetes_cluster import cluster_side
from tests.ansible.test_kubernetes_cluster_real import NODES, NetnsEnvironment
from tests.ansible.test_playbook_stage import Recorder


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
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
