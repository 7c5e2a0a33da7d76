"""Benchmark: validate + render a generated 1000-node inventory.

Run: .venv/bin/python bench/bench_inventory.py [--nodes 1000]
Prints wall time and peak memory (tracemalloc and RSS), and the ratio against a peer measured in the
same run: parsing the same file with ansible-core's own YAML inventory loader (`ansible-inventory`).
Goal (issue "Foundation"): under one second and 200 MB for 1000 nodes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import ipaddress
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap.fsutil import replace_tree
from bootstrap.inband.render import render_files
from bootstrap.inventory import check_inventory


def generate(nodes: int) -> dict:
    """A valid inventory with 3 control planes and ``nodes - 3`` GPU workers of mixed models."""
    oob = ipaddress.IPv4Network("10.0.0.0/16")
    mgmt = ipaddress.IPv4Network("10.1.0.0/16")
    models = [("R760xa", {"type": "L40S", "count": 4}), ("XE8640", None), ("XE9680", None)]
    items = []
    for i in range(nodes):
        role = "head" if i == 0 else ("control-plane" if i < 3 else "worker")
        model, gpus = ("R660", None) if i < 3 else models[i % 3]
        node = {
            "hostname": f"node-{i:04d}",
            "role": role,
            "model": model,
            "service_tag": f"T{i:06d}",
            "bmc": {"address": str(oob[1000 + i])},
            "interfaces": [
                {
                    "name": "pxe0",
                    "network": "pxe",
                    "fqdd": "NIC.Embedded.1-1-1",
                    "mac": f"b0:7b:25:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
                    "ip": str(oob[5000 + i]),
                },
                {
                    "name": "mgmt0",
                    "network": "management",
                    "fqdd": "NIC.Integrated.1-1-1",
                    "ip": str(mgmt[10 + i]),
                },
            ],
        }
        if gpus:
            node["gpus"] = gpus
        items.append(node)
    return {
        "cluster": {
            "name": "bench",
            "domain": "bench.example.com",
            "admin_ssh_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIbench bench@example"],
        },
        "networks": {
            "oob": {"cidr": str(oob), "gateway": str(oob[1])},
            "pxe": {"shared_with": "oob", "dhcp_range": {"start": str(oob[60000]), "end": str(oob[60500])}},
            "management": {"cidr": str(mgmt), "gateway": str(mgmt[1])},
            "kubernetes": {"api_vip": str(mgmt[5])},
        },
        "credentials": {"idrac": {"username": "root", "password_env": "BENCH_BMC_PASSWORD"}},
        "bmc": {"defaults": {"credentials": "idrac", "insecure": True}},
        "nodes": items,
    }


def run_once(path: Path, out: Path) -> int:
    """Validate + render + write; the node count."""
    inv = check_inventory(path).inventory
    replace_tree(out, render_files(inv))
    return len(inv.nodes)


def measure(path: Path, out: Path) -> tuple[float, float, int]:
    """(best wall seconds of 3 runs, tracemalloc peak MB of a separate run, node count)."""
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        count = run_once(path, out)
        walls.append(time.perf_counter() - start)
    tracemalloc.start()
    run_once(path, out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return min(walls), peak / 2**20, count


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "inventory.yml"
        src.write_text(yaml.safe_dump(generate(args.nodes), sort_keys=False))
        measure(src, Path(tmp) / "warmup")  # import and first-call costs out of the figure
        wall, peak, count = measure(src, Path(tmp) / "ansible")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        peer = subprocess.run(
            [
                str(Path(sys.executable).with_name("ansible-inventory")),
                "-i",
                str(Path(tmp) / "ansible" / "hosts.yml"),
                "--list",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        peer_wall = time.perf_counter() - start
    print(f"nodes: {count}")
    print(
        f"rackctl validate+render+write: {wall * 1000:.0f} ms (best of 3), "
        f"peak traced {peak:.1f} MB, process max RSS {rss:.0f} MB"
    )
    if peer.returncode == 0:
        print(
            f"peer ansible-inventory --list on the rendered inventory: {peer_wall * 1000:.0f} ms "
            f"(rackctl/peer = {wall / peer_wall:.2f})"
        )
    else:
        print(f"peer ansible-inventory failed: {peer.stderr.strip()[:300]}")
    goal = wall < 1.0 and rss < 200
    print(f"goal (< 1 s, < 200 MB): {'met' if goal else 'NOT met'}")


if __name__ == "__main__":
    main()
