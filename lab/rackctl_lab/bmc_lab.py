"""The lab's emulated iDRACs from the inventory: plan (specs, passwords, CA paths), up, down, status.

One emulated iDRAC per inventory node, on the node's ``bmc.address`` (loopback only), with the credentials
the inventory references. Passwords missing from a referenced ``password_file`` are generated (mode 0600);
the lab CA is written to every ``ca_file`` the nodes' BMC settings reference. Workers run detached; their
PIDs are in ``<lab dir>/idrac/rack.json`` and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import importlib.util
import ipaddress
import secrets
import ssl
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.secrets import resolve_credentials
from rackctl_lab.idrac.api import SUPPORTED_MODELS, BmcEndpoint, EmulatedBmcSpec, EmulatedRack
from rackctl_lab.idrac.rack import RACK_STATE, RackRunner, is_worker

IDRAC_DIR = "idrac"


@dataclass
class LabBmcPlan:
    """What ``rackctl lab up`` will start and write (no secrets in :meth:`as_dict`)."""

    specs: list[EmulatedBmcSpec]
    password_files: dict[Path, dict[str, str]] = field(default_factory=dict)  # files to create
    ca_paths: list[Path] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # node -> fingerprint pinned in the inventory

    def as_dict(self) -> dict[str, Any]:
        return {
            "bmcs": [
                {
                    "name": s.name,
                    "address": f"{s.address}:{s.port}",
                    "model": s.model,
                    "service_tag": s.service_tag,
                    "gpus": f"{s.gpu_count} x {s.gpu_model}" if s.gpu_model else "none",
                    "nics": s.nics,
                    "username": s.username,
                }
                for s in self.specs
            ],
            "generate_passwords_in": [str(p) for p in self.password_files],
            "write_ca_to": [str(p) for p in self.ca_paths],
        }


#: Inventory problems about files ``rackctl lab up`` itself creates (lab CA, generated BMC passwords).
def _mac_for(hostname: str, fqdd: str) -> str:
    digest = hashlib.sha256(f"{hostname}/{fqdd}".encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def _service_tag_for(hostname: str) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    digest = hashlib.sha256(hostname.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:7])


def _address(node: Node, index: int) -> tuple[str, int]:
    url = urlparse(node.bmc.url)
    host, port = url.hostname or "", url.port or 443
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidInput(
            f"the lab only emulates BMCs on loopback, not on {node.bmc.address!r}",
            problems=[
                Problem(
                    f"nodes[{index}].bmc.address",
                    f"{node.bmc.address!r} is not a loopback address",
                    "use 127.0.0.1:PORT (any 127.0.0.0/8 address) for lab nodes",
                )
            ],
        )
    return ("127.0.0.1" if host == "localhost" else host), port


def plan_lab_bmcs(inventory: Inventory) -> LabBmcPlan:
    """Specs for every node; raises :class:`InvalidInput` listing every problem found."""
    problems: list[Problem] = []
    if not inventory.cluster.lab:
        problems.append(Problem("cluster.lab", "false", "set cluster.lab: true; rackctl lab only runs lab inventories"))
    plan = LabBmcPlan(specs=[])
    passwords = _lab_passwords(inventory, plan, problems)
    for index, node in enumerate(inventory.nodes):
        path = f"nodes[{index}]"
        if node.model not in SUPPORTED_MODELS:
            problems.append(
                Problem(
                    f"{path}.model",
                    f"{node.model!r} cannot be emulated",
                    f"use one of {', '.join(SUPPORTED_MODELS)}",
                )
            )
            continue
        try:
            address, port = _address(node, index)
        except InvalidInput as exc:
            problems.extend(exc.problems)
            continue
        settings = inventory.bmc_settings(node)
        cred_name = settings.credentials
        if cred_name is None or cred_name not in passwords:
            if cred_name is None:
                problems.append(Problem(f"{path}.bmc.credentials", "not set", "set bmc.defaults.credentials"))
            continue
        gpus = inventory.gpus_of(node)
        gpu_type = GPU_TYPES.get(gpus.type)
        nics = {i.fqdd: (i.mac or _mac_for(node.hostname, i.fqdd)) for i in node.interfaces if i.fqdd}
        hw = inventory.hardware(node.model)
        for fqdd in hw.nics.values() if hw else ():
            nics.setdefault(fqdd, _mac_for(node.hostname, fqdd))
        plan.specs.append(
            EmulatedBmcSpec(
                name=node.hostname,
                model=node.model,
                service_tag=node.service_tag or _service_tag_for(node.hostname),
                gpu_model=gpu_type.product if gpu_type and gpus.count else None,
                gpu_count=gpus.count if gpu_type else 0,
                nics=nics,
                username=passwords[cred_name][0],
                password=passwords[cred_name][1],
                address=address,
                port=port,
            )
        )
        if settings.ca_file is not None:
            ca_path = inventory.resolve_path(settings.ca_file)
            if ca_path not in plan.ca_paths:
                plan.ca_paths.append(ca_path)
        if settings.fingerprint:
            plan.pins[node.hostname] = settings.fingerprint
    if problems:
        raise InvalidInput("the inventory cannot be run as a lab", problems=problems)
    return plan


def _lab_passwords(inventory: Inventory, plan: LabBmcPlan, problems: list[Problem]) -> dict[str, tuple[str, str]]:
    """(username, password) per credential name; passwords for missing files are generated into the plan."""
    out: dict[str, tuple[str, str]] = {}
    for name, cred in inventory.credentials.items():
        if cred.password_file is not None:
            file = inventory.resolve_path(cred.password_file)
            if not file.exists():
                generated = plan.password_files.setdefault(file, {})
                generated[name] = secrets.token_urlsafe(18)
                out[name] = (cred.username, generated[name])
                continue
        try:
            creds = resolve_credentials(inventory, name)
        except InvalidInput as exc:
            problems.extend(exc.problems)
            continue
        out[name] = (creds.username, creds.password.get_secret_value())
    return out


def rack_dir(lab_dir: Path) -> Path:
    return Path(lab_dir) / IDRAC_DIR


def running_rack(lab_dir: Path) -> RackRunner | None:
    """The rack started from ``lab_dir`` if its state file exists."""
    if not (rack_dir(lab_dir) / RACK_STATE).exists():
        return None
    return RackRunner.attach(rack_dir(lab_dir))


def require_lab_packages() -> None:
    """The emulated iDRACs need sushy-tools, aiohttp and cryptography (the ``test`` extra)."""
    missing = [name for name in ("sushy_tools", "aiohttp", "cryptography") if importlib.util.find_spec(name) is None]
    if missing:
        raise EnvironmentMissing(
            f"the lab's emulated iDRACs need {', '.join(missing)}",
            problems=[Problem("python", f"missing: {', '.join(missing)}", "pip install 'rackctl[test]'")],
        )


def lab_up(plan: LabBmcPlan, lab_dir: Path, *, latency_ms: int = 0, processes: int | None = None) -> dict[str, Any]:
    """Write passwords and start the emulated iDRACs detached; write the CA where the inventory wants it."""
    require_lab_packages()
    existing = running_rack(lab_dir)
    if existing is not None and any(existing.alive().values()):
        raise RackctlError(
            f"the lab's emulated iDRACs already run from {lab_dir}",
            problems=[Problem("lab", f"PIDs {existing.pids}", "run `rackctl lab down` first")],
        )
    for file, entries in plan.password_files.items():
        atomic_write_text(file, yaml.safe_dump(entries, default_flow_style=False), mode=0o600)
    for spec in plan.specs:
        spec.latency_ms = latency_ms
    rack = EmulatedRack(plan.specs, rack_dir(lab_dir), processes=processes)
    try:
        endpoints = rack.start(detach=True)
    except (RuntimeError, TimeoutError) as exc:
        raise RackctlError(f"the emulated iDRACs did not start: {exc}") from None
    ca_pem = endpoints[0].ca_file.read_text() if endpoints else ""
    for path in plan.ca_paths:
        atomic_write_text(path, ca_pem)
    warnings = [
        f"{name}: the inventory pins fingerprint {pin[:11]}..., the lab BMC presents "
        f"{_ep(endpoints, name).fingerprint[:11]}...; use ca_file for lab nodes"
        for name, pin in plan.pins.items()
        if _ep(endpoints, name).fingerprint != pin
    ]
    return {
        "ok": True,
        "lab_dir": str(lab_dir),
        "ca_file": str(endpoints[0].ca_file) if endpoints else None,
        "ca_written_to": [str(p) for p in plan.ca_paths],
        "passwords_written_to": [str(p) for p in plan.password_files],
        "pids": rack.pids,
        "bmcs": [ep.to_json() for ep in endpoints],
        "warnings": warnings,
    }


def _ep(endpoints: list[BmcEndpoint], name: str) -> BmcEndpoint:
    return next(ep for ep in endpoints if ep.name == name)


def lab_down(lab_dir: Path) -> dict[str, Any]:
    """Stop the workers by PID (only PIDs that still are our workers)."""
    rack = running_rack(lab_dir)
    if rack is None:
        return {"ok": True, "stopped": [], "message": f"no emulated iDRACs recorded in {lab_dir}"}
    stopped = rack.stop()
    return {"ok": True, "stopped": stopped, "message": f"stopped {len(stopped)} worker process(es)"}


def lab_status(lab_dir: Path) -> dict[str, Any]:
    """Workers alive and whether each BMC answers its service root over verified TLS."""
    rack = running_rack(lab_dir)
    if rack is None:
        return {"ok": True, "running": False, "bmcs": []}
    alive = rack.alive()

    def probe(ep: BmcEndpoint) -> dict[str, Any]:
        answers = False
        if alive.get(ep.pid) and is_worker(ep.pid):
            ctx = ssl.create_default_context(cafile=str(ep.ca_file))
            try:
                opener = urllib.request.build_opener(
                    urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
                )  # loopback: never through a proxy
                with opener.open(f"{ep.url}/redfish/v1", timeout=5) as resp:
                    answers = resp.status == 200
            except OSError:
                answers = False
        return {
            "name": ep.name,
            "url": ep.url,
            "pid": ep.pid,
            "alive": bool(alive.get(ep.pid)),
            "answers": answers,
            "fingerprint": ep.fingerprint,
        }

    with ThreadPoolExecutor(max_workers=16) as pool:
        bmcs = list(pool.map(probe, rack.endpoints))
    running = any(alive.values())
    return {"ok": all(b["answers"] for b in bmcs), "running": running, "pids": rack.pids, "bmcs": bmcs}
