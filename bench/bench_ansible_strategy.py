"""A playbook of small tasks over real SSH: Mitogen's strategy (rackctl's default) against Ansible's own.

One real OpenSSH sshd on loopback (``tests/sshnode.py``), reached the way rackctl reaches a node (pinned
known_hosts, strict checking), through :func:`bootstrap.ansible_driver.run_playbook`. The play runs
``--tasks`` module calls (stat, copy, file, command: what roles are made of) with no changes after its
first run. Peer: the ``linear`` strategy in the same run. Prints the median and max of ``--runs`` runs
each and the ratio. On a lab VM under qemu TCG the same difference is about 9x (the network stage's
second run, 357 s against 39 s, docs/operators.md); here, with native Python, expect much less.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap import ansible_driver
from bootstrap.inband.access import NodeAccess
from tests.sshnode import start_ssh_node

TASK = """
    - name: Stat {i}
      ansible.builtin.stat:
        path: /etc/hostname
    - name: Copy {i}
      ansible.builtin.copy:
        content: "bench {i}\\n"
        dest: "{{{{ bench_dir }}}}/f{i}"
        mode: "0644"
    - name: Directory {i}
      ansible.builtin.file:
        path: "{{{{ bench_dir }}}}/d{i}"
        state: directory
        mode: "0755"
    - name: Command {i}
      ansible.builtin.command: "true"
      changed_when: false
"""


def play(groups: int) -> str:
    tasks = "".join(TASK.format(i=i) for i in range(groups))
    return f"- name: Bench\n  hosts: all\n  gather_facts: false\n  tasks:\n{tasks}"


def timed(strategy: str, inventory: Path, runs: int) -> list[float]:
    os.environ[ansible_driver.STRATEGY_ENV] = strategy
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        result = ansible_driver.run_playbook("bench.yml", inventory)
        out.append(time.perf_counter() - start)
        if not result.ok or result.strategy != strategy:
            raise SystemExit(f"{strategy}: the play failed: {result.as_dict()}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=40, help="module calls per run (rounded to groups of 4)")
    parser.add_argument("--full", action="store_true", help="more runs and tasks (7 runs, 120 tasks)")
    args = parser.parse_args()
    runs, tasks = (7, 120) if args.full else (args.runs, args.tasks)
    with tempfile.TemporaryDirectory(prefix="rackctl-bench-") as work:
        root = Path(work)
        node = start_ssh_node(root / "node")
        try:
            books = root / "playbooks"
            books.mkdir()
            (books / "bench.yml").write_text(play(max(1, tasks // 4)))
            ansible_driver.playbooks_dir = lambda: books  # type: ignore[assignment]  # the bench's own play
            access = NodeAccess("node-a", "127.0.0.1", getpass.getuser(), node.known_hosts, node.private_key,
                                port=node.port)  # fmt: skip
            host = {**access.ansible_vars(), "bench_dir": str(root / "target")}
            inventory = root / "hosts.yml"
            inventory.write_text(json.dumps({"all": {"hosts": {"node-a": host}}}))
            (root / "target").mkdir()
            results = {name: timed(name, inventory, runs) for name in ("linear", "mitogen")}
        finally:
            node.stop()
    peer = statistics.median(results["linear"])
    print(f"{max(1, tasks // 4) * 4} module calls per run, {runs} runs each, real sshd on loopback")
    print(f"{'strategy':18} {'median s':>9} {'max s':>7} {'s/task':>7} {'x linear':>9}")
    for name, times in results.items():
        med = statistics.median(times)
        label = name + (" (peer)" if name == "linear" else " (default)")
        print(f"{label:18} {med:9.2f} {max(times):7.2f} {med / (max(1, tasks // 4) * 4):7.3f} {med / peer:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
