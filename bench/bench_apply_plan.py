"""Benchmark: ``rackctl apply --plan`` for a 1000-node fleet (snapshot, journal read, classification).

Run: .venv/bin/python bench/bench_apply_plan.py [--nodes 1000]

A generated inventory (``bench_inventory.generate``) is recorded as applied in a real journal (one ``apply``
facts row per node), then one worker's labels and the BIOS profile every worker uses are edited.
Timed: ``plan_apply`` (the per-node snapshots, reading the recorded ones from SQLite, classifying).
Peer measured in the same run: serialising the same inventory to JSON once (``model_dump_json``), a lower
bound for anything that looks at every node's configuration. Goal: the plan under 1 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from bench_inventory import generate

from bootstrap.day2.apply import plan_apply
from bootstrap.day2.snapshot import inventory_snapshot, record_applied
from bootstrap.inventory import Inventory, check_inventory
from bootstrap.journal.store import Journal


def load(folder: Path, data: dict, name: str) -> Inventory:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return check_inventory(path).inventory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--full", action="store_true", help="Accepted for scripts/bench.sh; the size is the same.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = generate(args.nodes)
        before = load(folder, data, "before.yml")
        state = folder / "state"
        start = time.perf_counter()
        with Journal(state) as journal:
            journal.register_nodes([n.hostname for n in before.nodes])
            for node, sections in inventory_snapshot(before).items():
                record_applied(journal, node, sections, run_id=1)
        record_s = time.perf_counter() - start
        data["nodes"][10].setdefault("labels", {})["rack"] = "r9"
        data["bios_profiles"] = {"gpu-worker": {"BootMode": "Uefi", "SysProfile": "PerfOptimized"}}
        after = load(folder, data, "after.yml")

        start = time.perf_counter()
        plan = plan_apply(after, state)
        plan_s = time.perf_counter() - start
        start = time.perf_counter()
        after.model_dump_json()
        peer_s = time.perf_counter() - start
    counts = plan.as_dict()["counts"]
    print(f"nodes: {args.nodes}  changed: {counts['changed']}  unchanged: {counts['unchanged']}")
    print(f"record the applied snapshot (once per apply): {record_s:.3f} s")
    print(f"apply --plan: {plan_s:.3f} s  (goal < 1 s: {'met' if plan_s < 1 else 'NOT met'})")
    print(f"peer, the inventory serialised to JSON once: {peer_s:.3f} s  ratio {plan_s / peer_s:.1f}x")


if __name__ == "__main__":
    main()
