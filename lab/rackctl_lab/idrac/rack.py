"""Starting, reaching and stopping the worker processes of an emulated rack.

Files in the rack's work directory: ``ca/`` (lab CA), ``certs/`` (leaf certificates), ``worker-N.json``
(config with passwords, mode 0600, deleted once the worker is up), ``worker-N.ready``, ``worker-N.log``,
``sushy-N/`` (sushy-tools state), ``rack.json`` (PIDs, ports, control token; mode 0600).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import http.client
import json
import math
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bootstrap.fsutil import atomic_write_text
from rackctl_lab.idrac.certs import LabCA
from rackctl_lab.idrac.hardware import model_hardware
from rackctl_lab.idrac.spec import BmcEndpoint, EmulatedBmcSpec, FaultSpec

RACK_STATE = "rack.json"
WORKER_MODULE = "rackctl_lab.idrac.worker"
BMCS_PER_WORKER = 64
REPO_ROOT = Path(__file__).resolve().parents[3]


def system_uuid(spec: EmulatedBmcSpec) -> str:
    """A Dell-style system UUID (``4c4c4544-...``), unique per BMC name and service tag."""
    digest = hashlib.sha256(f"{spec.name}/{spec.service_tag}".encode()).hexdigest()
    return f"4c4c4544-{digest[0:4]}-{digest[4:8]}-{digest[8:12]}-{digest[12:24]}"


def default_processes(count: int) -> int:
    return max(1, min(math.ceil(count / BMCS_PER_WORKER), 2 * (os.cpu_count() or 1)))


def is_worker(pid: int) -> bool:
    """True when ``pid`` is alive and is one of our worker processes (never signal a reused PID)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return WORKER_MODULE.encode() in cmdline


class RackRunner:
    """Worker processes of one rack (see :class:`rackctl_lab.idrac.api.EmulatedRack`)."""

    def __init__(self, specs: list[EmulatedBmcSpec], workdir: Path, *, processes: int | None = None) -> None:
        for spec in specs:
            model_hardware(spec.model)  # ValueError naming the allowed models
        self.specs = specs
        self.workdir = Path(workdir).resolve()
        self.processes = processes or default_processes(len(specs))
        self.token = secrets.token_hex(16)
        self.workers: list[dict[str, Any]] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._endpoints: list[BmcEndpoint] = []
        self._ca_file: Path | None = None

    # ----- start ----------------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 120.0, detach: bool = False) -> list[BmcEndpoint]:
        if self._procs or self.workers:
            raise RuntimeError("this rack is already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca = LabCA(self.workdir / "ca")
        self._ca_file = ca.cert_file
        fingerprints: dict[str, str] = {}
        shards = self._shards()
        try:
            for index, shard in enumerate(shards):
                entries = []
                for spec in shard:
                    leaf = ca.issue(spec.name, spec.address, self.workdir / "certs")
                    fingerprints[spec.name] = leaf.fingerprint
                    entries.append(
                        {
                            "spec": spec.to_json(),
                            "uuid": system_uuid(spec),
                            "cert_file": str(leaf.cert_file),
                            "key_file": str(leaf.key_file),
                        }
                    )
                self._spawn(index, entries, detach)
            self._wait_ready(len(shards), timeout_s)
        except BaseException:
            self.stop()
            raise
        if not detach:
            atexit.register(self.stop)
        self._endpoints = self._build_endpoints(fingerprints)
        self._save_state()
        self._probe()
        return list(self._endpoints)

    def _shards(self) -> list[list[EmulatedBmcSpec]]:
        count = max(1, min(self.processes, len(self.specs)))
        size = math.ceil(len(self.specs) / count) if self.specs else 0
        return [self.specs[i : i + size] for i in range(0, len(self.specs), size)] if size else []

    def _spawn(self, index: int, entries: list[dict[str, Any]], detach: bool) -> None:
        state_dir = self.workdir / f"sushy-{index}"
        shutil.rmtree(state_dir, ignore_errors=True)
        ready = self.workdir / f"worker-{index}.ready"
        ready.unlink(missing_ok=True)
        config = {
            "index": index,
            "token": self.token,
            "state_dir": str(state_dir),
            "ready_file": str(ready),
            "parent_pid": None if detach else os.getpid(),
            "bmcs": entries,
        }
        config_file = self.workdir / f"worker-{index}.json"
        atomic_write_text(config_file, json.dumps(config), mode=0o600)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env["SUSHY_EMULATOR_STATE_DIR"] = str(state_dir)
        with open(self.workdir / f"worker-{index}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, str(config_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=self.workdir,
            )
        self._procs.append(proc)
        self.workers.append({"index": index, "pid": proc.pid, "config": str(config_file), "ready": str(ready)})

    def _wait_ready(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(range(count))
        while pending:
            for index in sorted(pending):
                worker = self.workers[index]
                ready = Path(worker["ready"])
                if ready.exists():
                    worker.update(json.loads(ready.read_text()))
                    Path(worker["config"]).unlink(missing_ok=True)  # it holds passwords
                    pending.discard(index)
                elif self._procs[index].poll() is not None:
                    log = self.workdir / f"worker-{index}.log"
                    raise RuntimeError(
                        f"emulated iDRAC worker {index} exited with code {self._procs[index].returncode}: "
                        f"{self.log_tail(index, 1)} (full log: {log})"
                    )
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"emulated iDRAC workers {sorted(pending)} not ready after {timeout_s:.0f}s")
            if pending:
                time.sleep(0.05)

    def log_tail(self, index: int, lines: int = 30) -> str:
        log = self.workdir / f"worker-{index}.log"
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _build_endpoints(self, fingerprints: dict[str, str]) -> list[BmcEndpoint]:
        where: dict[str, tuple[dict[str, Any], int]] = {}
        for worker in self.workers:
            for name, info in worker["bmcs"].items():
                where[name] = (info, worker["pid"])
        eps = []
        for spec in self.specs:
            info, pid = where[spec.name]
            eps.append(
                BmcEndpoint(
                    name=spec.name,
                    url=f"https://{info['address']}:{info['port']}",
                    ca_file=Path(str(self._ca_file)),
                    fingerprint=fingerprints[spec.name],
                    pid=pid,
                )
            )
        return eps

    def _probe(self) -> None:
        """One TLS request per worker to a BMC without faults, verified against the lab CA."""
        ctx = ssl.create_default_context(cafile=str(self._ca_file))
        seen: set[int] = set()
        for ep, spec in zip(self._endpoints, self.specs, strict=True):
            if ep.pid in seen or spec.faults != FaultSpec() or spec.latency_ms > 5000:
                continue
            seen.add(ep.pid)
            host, port = ep.url.removeprefix("https://").rsplit(":", 1)
            conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
            try:
                conn.request("GET", "/redfish/v1")
                conn.getresponse().read()
            finally:
                conn.close()

    # ----- state file (for rackctl lab down/status from another process) -------------------------------

    def _save_state(self) -> None:
        data = {
            "token": self.token,
            "workdir": str(self.workdir),
            "ca_file": str(self._ca_file),
            "workers": [{k: w[k] for k in ("index", "pid", "control_port", "bmcs")} for w in self.workers],
            "endpoints": [ep.to_json() for ep in self._endpoints],
        }
        atomic_write_text(self.workdir / RACK_STATE, json.dumps(data, indent=2), mode=0o600)

    @classmethod
    def attach(cls, workdir: Path) -> RackRunner:
        """A runner for a rack started earlier (by PID and ports in ``rack.json``)."""
        data = json.loads((Path(workdir) / RACK_STATE).read_text())
        runner = cls([], Path(workdir))
        runner.token = data["token"]
        runner.workers = data["workers"]
        runner._ca_file = Path(data["ca_file"])
        runner._endpoints = [
            BmcEndpoint(
                name=e["name"],
                url=e["url"],
                ca_file=Path(e["ca_file"]),
                fingerprint=e["fingerprint"],
                pid=e.get("pid", 0),
            )
            for e in data["endpoints"]
        ]
        return runner

    # ----- running rack -------------------------------------------------------------------------------

    @property
    def endpoints(self) -> list[BmcEndpoint]:
        return list(self._endpoints)

    @property
    def pids(self) -> list[int]:
        return [int(w["pid"]) for w in self.workers]

    def alive(self) -> dict[int, bool]:
        return {pid: is_worker(pid) for pid in self.pids}

    def control(self, name: str, method: str, what: str, payload: Any = None) -> Any:
        """Ask the worker serving ``name`` (its control API on 127.0.0.1)."""
        worker = next((w for w in self.workers if name in w.get("bmcs", {})), None)
        if worker is None:
            raise KeyError(f"no emulated BMC named {name!r}")
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{worker['control_port']}/bmc/{name}/{what}",
            data=data,
            method=method,
            headers={"X-Lab-Token": self.token, "Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        with opener.open(req, timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self, timeout_s: float = 5.0) -> list[int]:
        """TERM every worker (only PIDs that are still our workers), KILL what remains; returns the PIDs."""
        pids = [pid for pid in self.pids if is_worker(pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        while any(is_worker(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:
            if is_worker(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        for worker in self.workers:
            Path(worker.get("config", "")).unlink(missing_ok=True) if worker.get("config") else None
            shutil.rmtree(self.workdir / f"sushy-{worker['index']}", ignore_errors=True)
        self._procs = []
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / RACK_STATE).unlink()
        return pids
