"""Fleet discovery benchmark: rackctl vs a sequential DMTF-library crawl vs Ansible redfish_info.

Runs N emulated iDRACs (default 50 and 500) with 200 ms added to every request, then, on the same
emulators in the same run:

- rackctl: ``redfish_tools.fleet.run_fleet(discover)`` (what ``rackctl discover`` runs, the one engine):
  all BMCs at once in threads, <= 2 requests in flight per BMC;
- (a) a sequential crawl with the DMTF ``redfish`` library (one BMC after the other; on large fleets a
  sample of BMCs is crawled and the total extrapolated: it says so);
- (b) ``community.general.redfish_info`` driven by ``ansible-playbook`` with ``forks=50``.

Prints wall and CPU time (this process's CPU for in-process tools, child CPU for ansible-playbook), ratios,
and the goals: >= 5x faster than (b), and the 500-BMC wall within 2x of one BMC's critical path
(its request count x the latency).

    .venv/bin/python bench/bench_fleet_discovery.py            # 50 and 500 BMCs (minutes)
    .venv/bin/python bench/bench_fleet_discovery.py --quick    # 10 BMCs, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redfish
from pydantic import SecretStr

from rackctl_lab.idrac.api import BmcEndpoint, EmulatedBmcSpec, EmulatedRack
from rackctl_lab.peer.ansible_redfish_info import FULL, ansible_available, run_redfish_info
from redfish_tools.connection import BmcTarget, ConnectionPolicy
from redfish_tools.discover import discover
from redfish_tools.fleet import run_fleet

MODELS = [
    ("R660", None, 0),
    ("R760xa", "NVIDIA L40S", 4),
    ("XE8640", "NVIDIA H100 80GB HBM3", 4),
    ("XE9680", "NVIDIA H100 80GB HBM3", 8),
]


def specs_for(n: int, latency_ms: int) -> list[EmulatedBmcSpec]:
    out = []
    for i in range(n):
        model, gpu, count = MODELS[i % len(MODELS)]
        nics = {
            "NIC.Embedded.1-1-1": f"b0:7b:25:{i >> 8:02x}:{i & 255:02x}:01",
            "NIC.Integrated.1-1-1": f"b0:7b:25:{i >> 8:02x}:{i & 255:02x}:02",
        }
        out.append(
            EmulatedBmcSpec(
                name=f"bmc-{i:04d}",
                model=model,
                service_tag=f"B{i:06d}",
                gpu_model=gpu,
                gpu_count=count,
                nics=nics,
                username="root",
                password=f"bench-{i}-pw",
                latency_ms=latency_ms,
            )
        )
    return out


def target(spec: EmulatedBmcSpec, ep: BmcEndpoint) -> BmcTarget:
    return BmcTarget(spec.name, ep.url, spec.username, SecretStr(spec.password), ca_file=ep.ca_file)


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    c0, w0 = cpu_now(), time.monotonic()
    value = fn()
    return value, time.monotonic() - w0, cpu_now() - c0


def dmtf_crawl(spec: EmulatedBmcSpec, ep: BmcEndpoint) -> int:
    """Sequential discovery of one BMC with the DMTF library: follow links, GET every member."""
    client = redfish.redfish_client(
        base_url=ep.url,
        username=spec.username,
        password=spec.password,
        cafile=str(ep.ca_file),
        timeout=30,
        max_retry=1,
    )
    client.login(auth="session")
    count = 0

    def get(uri: str) -> dict[str, Any]:
        nonlocal count
        count += 1
        return client.get(uri).dict

    def members(uri: str) -> list[dict[str, Any]]:
        return [get(m["@odata.id"]) for m in get(uri).get("Members", [])]

    try:
        root = get("/redfish/v1/")
        for system in members(root["Systems"]["@odata.id"]):
            for key in ("Processors", "Memory", "EthernetInterfaces", "Storage"):
                if key in system:
                    items = members(system[key]["@odata.id"])
                    if key == "Storage":
                        for ctrl in items:
                            for drive in ctrl.get("Drives", []):
                                get(drive["@odata.id"])
        for chassis in members(root["Chassis"]["@odata.id"])[:1]:
            if "PCIeDevices" in chassis:
                members(chassis["PCIeDevices"]["@odata.id"])
        members(root["Managers"]["@odata.id"])
        members(get(root["UpdateService"]["@odata.id"])["FirmwareInventory"]["@odata.id"])
    finally:
        client.logout()
    return count


def run_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    specs = specs_for(n, args.latency_ms)
    lat = args.latency_ms / 1000
    with tempfile.TemporaryDirectory(prefix="bench-rack-") as tmp:
        rack = EmulatedRack(specs, Path(tmp), processes=args.processes)
        t0 = time.monotonic()
        endpoints = rack.start(timeout_s=600)
        start_s = time.monotonic() - t0
        try:
            by_name = {e.name: e for e in endpoints}
            targets = [target(s, by_name[s.name]) for s in specs]
            policy = ConnectionPolicy(read_timeout=60)
            # One BMC alone: its request count gives the critical path.
            heavy = (
                next(t for t, s in zip(targets, specs, strict=True) if s.model == "XE9680") if n >= 4 else targets[0]
            )
            # One BMC alone (the heaviest model): its request count x latency is the critical path.
            one = run_fleet([heavy], discover, policy=policy)[0]
            one_requests = one.requests + 1  # + the logout, counted after the operation
            critical = one_requests * lat
            results, wall, cpu = timed(lambda: run_fleet(targets, discover, policy=policy))
            failed = [r.name for r in results if not r.ok]
            row: dict[str, Any] = {
                "bmcs": n,
                "latency_ms": args.latency_ms,
                "emulator_start_s": round(start_s, 1),
                "one_bmc": {
                    "requests": one_requests,
                    "wall_s": round(one.seconds, 2),
                    "critical_path_s": round(critical, 2),
                },
                "rackctl": {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "failed": len(failed)},
            }
            # (a) sequential DMTF crawl, on a sample when the fleet is large.
            sample = n if args.sequential_sample <= 0 else min(n, args.sequential_sample)
            counts, swall, scpu = timed(lambda: [dmtf_crawl(s, by_name[s.name]) for s in specs[:sample]])
            factor = n / sample
            row["sequential_dmtf"] = {
                "wall_s": round(swall * factor, 2),
                "cpu_s": round(scpu * factor, 2),
                "measured_bmcs": sample,
                "extrapolated": sample < n,
                "requests_per_bmc": round(sum(counts) / len(counts), 1),
            }
            # (b) ansible redfish_info, forks=50.
            if args.skip_ansible or not ansible_available():
                row["ansible_redfish_info"] = None
            else:
                measured = n if args.ansible_sample <= 0 else min(n, args.ansible_sample)
                peer = run_redfish_info(targets[:measured], forks=args.forks, queries=FULL)
                factor = n / measured
                row["ansible_redfish_info"] = {
                    "wall_s": round(peer.wall_s * factor, 2),
                    "cpu_s": round(peer.cpu_s * factor, 2),
                    "forks": args.forks,
                    "measured_bmcs": measured,
                    "extrapolated": measured < n,
                    "hosts_with_facts": len(peer.facts),
                    "rc": peer.returncode,
                }
        finally:
            rack.stop()
    r = row["rackctl"]
    row["ratios"] = {
        "sequential_wall_over_rackctl": round(row["sequential_dmtf"]["wall_s"] / r["wall_s"], 1),
        "ansible_wall_over_rackctl": (
            round(row["ansible_redfish_info"]["wall_s"] / r["wall_s"], 1) if row["ansible_redfish_info"] else None
        ),
        "rackctl_wall_over_critical_path": round(r["wall_s"] / critical, 2),
    }
    return row


def line(label: str, wall: float, cpu: float, ratio: float | None, note: str = "") -> None:
    """One row of the results table."""
    shown = f"{ratio:15.1f}" if ratio is not None else f"{'-':>15}"
    print(f"  {label:40} {wall:9.2f} {cpu:9.2f} {shown}" + (f"   ({note})" if note else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50,500", help="Comma-separated fleet sizes.")
    ap.add_argument("--latency-ms", type=int, default=200)
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--processes", type=int, default=None, help="Emulator worker processes (default: auto).")
    ap.add_argument("--sequential-sample", type=int, default=5, help="BMCs crawled sequentially (0: all).")
    ap.add_argument("--ansible-sample", type=int, default=100,
                    help="BMCs given to ansible-playbook; more: extrapolated (0: all).")  # fmt: skip
    ap.add_argument("--skip-ansible", action="store_true")
    ap.add_argument("--quick", action="store_true", help="One small fleet of 10 BMCs.")
    ap.add_argument("--json", action="store_true", help="Print the rows as JSON too.")
    args = ap.parse_args()
    sizes = [10] if args.quick else [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        print(f"== {n} BMCs, {args.latency_ms} ms per request ==", flush=True)
        row = run_size(n, args)
        rows.append(row)
        one = row["one_bmc"]
        print(
            f"  one XE9680 BMC: {one['requests']} requests -> critical path {one['critical_path_s']:.1f}s "
            f"(measured alone {one['wall_s']:.1f}s); emulators started in {row['emulator_start_s']}s"
        )
        print(f"  {'tool':40} {'wall s':>9} {'cpu s':>9} {'wall / rackctl':>15}")
        r = row["rackctl"]
        line("rackctl discover", r["wall_s"], r["cpu_s"], 1.0, f"{r['failed']} failed")
        s = row["sequential_dmtf"]
        extra = f" [x{n // s['measured_bmcs']} extrap.]" if s["extrapolated"] else ""
        ratios = row["ratios"]
        line(
            "(a) sequential DMTF crawl" + extra,
            s["wall_s"],
            s["cpu_s"],
            ratios["sequential_wall_over_rackctl"],
        )
        a = row["ansible_redfish_info"]
        if a:
            extra = f" [x{n // a['measured_bmcs']} extrap.]" if a["extrapolated"] else ""
            note = f"hosts with facts {a['hosts_with_facts']}/{a['measured_bmcs']}, rc {a['rc']}"
            line(f"(b) ansible redfish_info f={a['forks']}{extra}", a["wall_s"], a["cpu_s"],
                 ratios["ansible_wall_over_rackctl"], note)  # fmt: skip
        else:
            print("  (b) ansible redfish_info: skipped")
        ratio = row["ratios"]["rackctl_wall_over_critical_path"]
        goal_a = row["ratios"]["ansible_wall_over_rackctl"]
        print(f"  goal >= 5x faster than (b): {'met' if goal_a and goal_a >= 5 else 'NOT met'} ({goal_a}x)")
        print(f"  goal wall <= 2x critical path: {'met' if ratio <= 2 else 'NOT met'} ({ratio}x)")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
