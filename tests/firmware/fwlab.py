"""The firmware tests' lab: a small emulated rack and an inventory pointing at it (imported by tests)."""

from __future__ import annotations

import copy
import os
import secrets
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from bench_inventory import generate  # noqa: E402 - the bench's generated inventory, reused

from tests.timing import seconds  # noqa: E402

api = pytest.importorskip("rackctl_lab.idrac.api", reason="the emulated iDRAC rack is not available")

GPUS = {"R760xa": ("NVIDIA L40S", 4), "XE8640": ("NVIDIA H100 80GB HBM3", 4), "XE9680": ("NVIDIA H100 80GB HBM3", 8)}
MIRROR = "http://10.0.0.1/mirror/firmware/"
IDRAC_IMAGE = "iDRAC-with-Lifecycle-Controller_Firmware_7XF2K_LN64_7.20.10.50_A00.EXE"
BIOS_IMAGE = "BIOS_{tag}_WN64_2.4.1.EXE"
NIC_IMAGE = "Network_Firmware_9K3W2_LN64_22.50.6.EXE"
BASELINE_VERSIONS = {"idrac": "7.20.10.50", "bios": "2.4.1", "nic": "22.50.6"}
PASSWORD_ENV = "FW_TEST_BMC_PASSWORD"

# The emulated iDRACs' timings, from this one place. A job runs ``JOB_S`` and the iDRAC "resets" for
# ``RESET_S`` when an iDRAC job starts: short, since every node of a rollout pays them serially (a node costs
# about 1.6 s with these, 5.5 s with the window's). Only the nodes a test stops a run on (``slow=``) get the
# window's timings, long enough for the stop to land inside a job or a reset, and scaled by the tests' time
# factor (a slower machine sees the window later).
JOB_S = 0.3
RESET_S = 0.6
WINDOW_JOB_S = 1.5
WINDOW_RESET_S = 1.0


def baseline(models: set[str]) -> dict[str, Any]:
    """iDRAC, BIOS and NIC targets per model, images under the mirror (relative) or absolute."""
    out = {}
    for model in sorted(models):
        out[model] = {
            **BASELINE_VERSIONS,
            "images": {
                "idrac": IDRAC_IMAGE,
                "bios": MIRROR + BIOS_IMAGE.format(tag=model.upper()),
                "nic": NIC_IMAGE,
            },
        }
    return out


@dataclass
class FwLab:
    """A running rack plus the inventory file for it."""

    rack: Any
    specs: dict[str, Any]
    inventory: Path
    data: dict[str, Any]
    password: str
    order: list[str] = field(default_factory=list)

    def updates(self, name: str) -> list[dict[str, Any]]:
        """Every SimpleUpdate the emulated iDRAC accepted (its own record)."""
        return list(self.rack.state(name)["firmware_updates"])

    def firmware(self, name: str) -> dict[str, str]:
        return dict(self.rack.state(name)["firmware"])

    def write(self, **firmware: Any) -> Path:
        data = copy.deepcopy(self.data)
        data["firmware"].update(firmware)
        self.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        return self.inventory


def start_lab(
    tmp: Path,
    nodes: int,
    *,
    job_seconds: float = JOB_S,
    reset_s: float = RESET_S,
    slow: Collection[int] = (),
    processes: int = 1,
) -> FwLab:
    """``nodes`` emulated iDRACs (3 control planes, the rest workers) and an inventory with a baseline; the
    nodes at the indexes in ``slow`` get the window's timings (``WINDOW_JOB_S``, ``WINDOW_RESET_S``)."""
    data = generate(nodes)
    password = f"pw-{secrets.token_hex(8)}"
    specs = []
    window = (seconds(WINDOW_JOB_S), seconds(WINDOW_RESET_S))
    for index, node in enumerate(data["nodes"]):
        job_s, node_reset_s = window if index in slow else (job_seconds, reset_s)
        gpu, count = GPUS.get(node["model"], (None, 0))
        nics = {i["fqdd"]: i.get("mac") or f"b0:7b:26:00:{len(specs):02x}:02" for i in node["interfaces"]}
        specs.append(
            api.EmulatedBmcSpec(
                name=node["hostname"],
                model=node["model"],
                service_tag=node["service_tag"],
                gpu_model=gpu,
                gpu_count=count,
                nics=nics,
                username="root",
                password=password,
                power_delay_s=0.2,
                job_seconds=job_s,
                power_state="On",
                faults=api.FaultSpec(reset_s=node_reset_s),
            )
        )
    rack = api.EmulatedRack(specs, tmp / "rack", processes=processes)
    endpoints = {e.name: e for e in rack.start()}
    for node in data["nodes"]:
        node["bmc"] = {
            "address": endpoints[node["hostname"]].url,
            "fingerprint": endpoints[node["hostname"]].fingerprint,
        }
    data["cluster"]["lab"] = True
    data["credentials"] = {"idrac": {"username": "root", "password_env": PASSWORD_ENV}}
    data["bmc"] = {"defaults": {"credentials": "idrac"}}
    data["firmware"] = {
        "image_base_url": MIRROR,
        "rollout": {"max_unavailable": 1, "failure_threshold": 1},
        "baseline": baseline({n["model"] for n in data["nodes"]}),
    }
    os.environ[PASSWORD_ENV] = password
    path = tmp / "cluster.yml"
    lab = FwLab(rack, {s.name: s for s in specs}, path, data, password, [n["hostname"] for n in data["nodes"]])
    lab.write()
    return lab
