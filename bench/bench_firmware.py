"""Benchmark: the firmware plan for a 1000-node fleet, and a rollout across 200 emulated iDRACs.

Run: .venv/bin/python bench/bench_firmware.py --full     (the issue's sizes: 1000-node plan, 200 iDRACs)
     .venv/bin/python bench/bench_firmware.py            (quick: the same plan, a rollout of 20 iDRACs)

1. Plan: a generated 1000-node inventory with a baseline (iDRAC, BIOS, NIC per model) and every node's
   installed versions (synthetic: the plan is pure; reading them is `discover`'s bench) -> per node and
   component installed -> target, order, reboots, and the batches. Goal: under 1 s.
2. Rollout: 200 emulated iDRACs (the lab's rack, sushy-tools' fake driver) with update and reboot times
   scaled down from the field (update job ~6 min, iDRAC reset ~2 min, reboot ~3 min -> the same at 1/100),
   3 control planes and 197 workers at max_unavailable 20%. The lower bound is batches x the time one node
   takes alone, measured in the same run on the same emulator. Goal: the rollout within 1.2x of it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inventory import generate

from bootstrap.firmware.apply import ApplySettings, FirmwareRollout
from bootstrap.firmware.plan import plan_firmware
from bootstrap.firmware.read import read_installed
from bootstrap.inventory import check_inventory
from bootstrap.journal.store import Journal
from bootstrap.oob import targets_for
from bootstrap.rollout.gate import NoKubernetes
from rackctl_lab.idrac.api import EmulatedBmcSpec, EmulatedRack, FaultSpec
from redfish_tools.connection import ConnectionPolicy

GPUS = {"R760xa": ("NVIDIA L40S", 4), "XE8640": ("NVIDIA H100 80GB HBM3", 4), "XE9680": ("NVIDIA H100 80GB HBM3", 8)}
TARGETS = {"idrac": "7.20.10.50", "bios": "2.4.1", "nic": "22.50.6"}
IMAGES = {
    "idrac": "iDRAC-with-Lifecycle-Controller_Firmware_7XF2K_LN64_7.20.10.50_A00.EXE",
    "bios": "BIOS_8KX1R_WN64_2.4.1.EXE",
    "nic": "Network_Firmware_9K3W2_LN64_22.50.6.EXE",
}
PASSWORD_ENV = "BENCH_FW_BMC_PASSWORD"


def mac(index: int) -> str:
    return f"b0:7b:26:{index >> 8 & 255:02x}:{index & 255:02x}:02"


def with_firmware(data: dict[str, Any], max_unavailable: int | str) -> dict[str, Any]:
    models = {n["model"] for n in data["nodes"]}
    data["firmware"] = {
        "image_base_url": "http://10.0.0.1/mirror/firmware/",
        "rollout": {"max_unavailable": max_unavailable, "failure_threshold": 3},
        "baseline": {m: {**TARGETS, "images": dict(IMAGES)} for m in sorted(models)},
    }
    return data


def bench_plan(nodes: int, tmp: Path) -> dict[str, Any]:
    path = tmp / "plan.yml"
    path.write_text(yaml.safe_dump(with_firmware(generate(nodes), "10%")))
    os.environ.setdefault("BENCH_BMC_PASSWORD", "unused")
    inventory = check_inventory(path).inventory
    installed = {
        n.hostname: {"idrac": ["7.10.30.00"], "bios": ["2.3.5"], "nic": ["22.31.6", "22.31.6"]} for n in inventory.nodes
    }
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        plan = plan_firmware(inventory, list(inventory.nodes), installed)
        walls.append(time.perf_counter() - start)
    updates = sum(len(n.updates) for n in plan.nodes)
    return {"nodes": nodes, "wall_s": min(walls), "components": updates, "batches": len(plan.schedule.batches)}


def start_rack(count: int, tmp: Path, args: argparse.Namespace) -> tuple[EmulatedRack, Path, str]:
    data = with_firmware(generate(count), args.max_unavailable)
    password = secrets.token_hex(12)
    specs = []
    for node in data["nodes"]:
        gpu, gpus = GPUS.get(node["model"], (None, 0))
        specs.append(
            EmulatedBmcSpec(
                name=node["hostname"],
                model=node["model"],
                service_tag=node["service_tag"],
                gpu_model=gpu,
                gpu_count=gpus,
                nics={i["fqdd"]: i.get("mac") or mac(len(specs)) for i in node["interfaces"]},
                username="root",
                password=password,
                power_state="On",
                power_delay_s=args.reboot_s,
                job_seconds=args.job_s,
                faults=FaultSpec(reset_s=args.reset_s),
            )
        )
    rack = EmulatedRack(specs, tmp / f"rack-{count}")
    endpoints = {e.name: e for e in rack.start(timeout_s=600)}
    ca = next(iter(endpoints.values())).ca_file
    for node in data["nodes"]:
        node["bmc"] = {"address": endpoints[node["hostname"]].url}
    data["cluster"]["lab"] = True
    data["credentials"] = {"idrac": {"username": "root", "password_env": PASSWORD_ENV}}
    data["bmc"] = {"defaults": {"credentials": "idrac", "ca_file": str(ca)}}
    os.environ[PASSWORD_ENV] = password
    path = tmp / f"rack-{count}.yml"
    path.write_text(yaml.safe_dump(data))
    return rack, path, password


def roll_out(path: Path, state: Path, limit: list[str] | None, poll: float) -> tuple[float, int, bool]:
    """Plan (reading the BMCs) and roll out; (wall seconds of the rollout, batches, ok)."""
    inventory = check_inventory(path).inventory
    nodes = [n for n in inventory.nodes if limit is None or n.hostname in limit]
    targets = targets_for(inventory, nodes)
    policy = ConnectionPolicy(read_timeout=60)
    installed, _errors = read_installed(targets, policy)
    plan = plan_firmware(inventory, nodes, installed)
    with Journal(state) as journal:
        run_id = journal.begin_run("bench firmware apply")
        rollout = FirmwareRollout(
            inventory,
            plan,
            journal,
            run_id,
            {t.name: t for t in targets},
            gate=NoKubernetes(),
            conn_policy=policy,
            settings=ApplySettings(poll_s=poll),
        )
        start = time.monotonic()
        report = rollout.run()
        wall = time.monotonic() - start
        journal.finish_run(run_id, "completed" if report.ok else "failed", report.reason)
    if not report.ok:
        print("  rollout failed:", report.reason, file=sys.stderr)
        for node in report.nodes:
            if node.status == "failed":
                print("   ", node.node, node.message, file=sys.stderr)
    return wall, len(report.batches), report.ok


def bench_rollout(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rack, path, _ = start_rack(args.bmcs, tmp, args)
    try:
        names = [s.name for s in rack.specs]
        # one worker alone: the time one node takes on this emulator, this machine, now
        one, _, ok_one = roll_out(path, tmp / "state-one", [names[-1]], args.poll)
        rest = names[:-1]
        wall, batches, ok = roll_out(path, tmp / "state-fleet", rest, args.poll)
    finally:
        rack.stop()
    bound = batches * one
    return {
        "bmcs": len(rest),
        "one_node_s": round(one, 2),
        "batches": batches,
        "lower_bound_s": round(bound, 2),
        "wall_s": round(wall, 2),
        "ratio": round(wall / bound, 3),
        "ok": ok and ok_one,
        "scaled_times": {"job_s": args.job_s, "idrac_reset_s": args.reset_s, "power_s": args.reboot_s},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000, help="Fleet size of the plan.")
    ap.add_argument("--bmcs", type=int, default=None, help="Emulated iDRACs (one of them measures a node alone).")
    ap.add_argument("--max-unavailable", default="20%")
    ap.add_argument("--job-s", type=float, default=3.6, help="Update job (about 6 min in the field, / 100).")
    ap.add_argument("--reset-s", type=float, default=1.2, help="iDRAC reset after its update (2 min / 100).")
    ap.add_argument("--reboot-s", type=float, default=1.8, help="Power transition (3 min POST / 100).")
    ap.add_argument("--poll", type=float, default=0.25, help="Seconds between job polls.")
    ap.add_argument("--full", action="store_true", help="200 iDRACs rolled out (+1 measured alone); default 20.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.bmcs is None:
        args.bmcs = 201 if args.full else 21
    with tempfile.TemporaryDirectory(prefix="bench-fw-") as tmp_name:
        tmp = Path(tmp_name)
        plan = bench_plan(args.nodes, tmp)
        print(f"== firmware plan, {plan['nodes']} nodes ==")
        print(
            f"  {plan['wall_s']:.3f} s for {plan['components']} component updates in {plan['batches']} batches; "
            f"goal < 1 s: {'met' if plan['wall_s'] < 1 else 'NOT met'} ({plan['wall_s'] / 1.0:.2f}x of the goal)"
        )
        roll = bench_rollout(args, tmp)
    print(f"== firmware rollout, {roll['bmcs']} emulated iDRACs, max_unavailable {args.max_unavailable} ==")
    print(
        f"  one node alone: {roll['one_node_s']:.1f} s; {roll['batches']} batches "
        f"-> lower bound {roll['lower_bound_s']:.1f} s"
    )
    print(
        f"  rollout: {roll['wall_s']:.1f} s = {roll['ratio']:.2f}x the lower bound; goal <= 1.2x: "
        f"{'met' if roll['ratio'] <= 1.2 and roll['ok'] else 'NOT met'}{'' if roll['ok'] else ' (nodes failed)'}"
    )
    if args.json:
        print(json.dumps({"plan": plan, "rollout": roll}, indent=2))
    return 0 if roll["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
