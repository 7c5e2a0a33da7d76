"""Benchmark: `rackctl triton deliver` of N bytes of model files to k nodes, against the link bound.

Run: .venv/bin/python bench/bench_deliver.py [--mb 256] [--nodes 2] [--link-gbit 25] [--repeat 3]
The nodes are real sshd on this machine (tests/sshnode.py), so the "link" is loopback: what the figures
show is rackctl's own cost (sha256 on both ends, the SSH cipher, Python's copy loop), not a network's.
Peers measured in the same run: a plain `ssh node 'cat > file'` of the same bytes to every node at once
(the SSH transport floor, no hashing), and the head node's link bound: k x N bytes through one NIC of
--link-gbit Gbit/s (the design's management network is 10/25 GbE; delivery from the head node goes
through its one link whichever way it is split).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap.inband.access import NodeAccess
from bootstrap.triton.deliver import ModelPlan, NodeDelivery, deliver_model, source_files, ssh_command
from tests.sshnode import start_ssh_node

USER = os.environ.get("USER", "root")


def model_dir(root: Path, total_mb: int) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"num_attention_heads": 32, "num_hidden_layers": 40}))
    shards = 4
    for i in range(shards):
        with (root / f"model-{i:05d}.safetensors").open("wb") as f:
            for _ in range(total_mb // shards):
                f.write(os.urandom(1 << 20))
    return root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256, help="model size in MB")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--link-gbit", type=float, default=25.0)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each figure is the fastest round's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        source = model_dir(tmp / "src", args.mb)
        size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        nodes = {f"n{i}": start_ssh_node(tmp / f"n{i}", client_key=key) for i in range(args.nodes)}
        try:
            access = {
                name: NodeAccess(
                    name, "127.0.0.1", os.environ.get("USER", "root"), node.known_hosts, key, port=node.port
                )
                for name, node in nodes.items()
            }

            # Peer: the SSH floor, the same bytes to every node at once, plain `cat`, no hashing.
            def plain_copy(name: str) -> None:
                target = tmp / f"floor-{name}.bin"
                target.unlink(missing_ok=True)
                cmd = [*ssh_command(access[name], [])[:-1], shlex.join(["sh", "-c", f"cat > {target}"])]
                cat = subprocess.Popen(cmd, stdin=subprocess.PIPE)
                assert cat.stdin is not None
                for path in sorted(source.iterdir()):
                    with path.open("rb") as f:
                        while block := f.read(1 << 20):
                            cat.stdin.write(block)
                cat.stdin.close()
                assert cat.wait() == 0

            def run(plan: ModelPlan) -> list[NodeDelivery]:
                return deliver_model(plan, access, lambda node, sent: None, listing)

            # Rounds alternate the floor and delivery (the same page cache, the same neighbours); each
            # figure is its fastest round's.
            floors, firsts, seconds, hashes = [], [], [], []
            for round_no in range(args.repeat):
                started = time.perf_counter()
                with ThreadPoolExecutor(len(nodes)) as pool:
                    list(pool.map(plain_copy, nodes))
                floors.append(time.perf_counter() - started)

                started = time.perf_counter()
                listing = source_files(source)
                hashes.append(time.perf_counter() - started)
                # One model, k nodes in parallel (each node's dest differs only because they share this
                # machine); a fresh destination each round.
                plans = [ModelPlan("bench", source, str(tmp / f"dest{round_no}" / n), (n,)) for n in nodes]
                started = time.perf_counter()
                with ThreadPoolExecutor(len(plans)) as pool:
                    done = list(pool.map(run, plans))
                firsts.append(time.perf_counter() - started)
                assert all(r.error is None and r.sent_bytes == size for rs in done for r in rs), done
                started = time.perf_counter()
                with ThreadPoolExecutor(len(plans)) as pool:
                    again = list(pool.map(run, plans))
                seconds.append(time.perf_counter() - started)
                assert all(r.sent_bytes == 0 for rs in again for r in rs)
            floor_time, hashing, first, second = min(floors), min(hashes), min(firsts), min(seconds)
        finally:
            for node in nodes.values():
                node.stop()
    moved = size * args.nodes
    bound = moved * 8 / (args.link_gbit * 1e9)
    print(f"delivery of {size / 1e6:.0f} MB to {args.nodes} node(s) (loopback sshd, this machine)")
    print(f"  fastest of {args.repeat} round(s); load average now {os.getloadavg()[0]:.1f}")
    print(f"  source sha256 listing: {hashing:.2f} s ({size / hashing / 1e6:.0f} MB/s)")
    print(f"  first run:  {first:.2f} s, {moved / first / 1e6:.0f} MB/s in all")
    print(f"  second run (nothing to send, nodes re-hash): {second:.2f} s")
    print(f"  peer, plain ssh cat of the same bytes to every node: {floor_time:.2f} s")
    print(f"  ratio first run / plain ssh cat: {first / floor_time:.2f}x")
    print(f"  peer, {args.link_gbit:g} Gbit/s head-node link bound for {moved / 1e6:.0f} MB: {bound:.2f} s")
    print(f"  ratio first run / link bound: {first / bound:.1f}x")


if __name__ == "__main__":
    main()
