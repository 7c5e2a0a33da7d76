"""The lab's head node serves the site: the package mirror (nginx) and the container registry
(``docker-registry``, TLS from the lab CA), on the head node's address inside the lab's namespace.

On a real site these run on the head node itself (``rackctl mirror`` builds what they serve); in the lab
the head node is this machine's side of the lab bridge, so both run with ``ip netns exec`` as children of
this process and are stopped by PID. The nodes reach them on the PXE network before the network stage.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, RackctlError
from bootstrap.fsutil import atomic_write_bytes, atomic_write_text
from bootstrap.inventory.models import Inventory
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.provision.services import stop_process
from rackctl_lab.bmc_lab import rack_dir
from rackctl_lab.idrac.certs import LabCA
from rackctl_lab.netns import LabNetwork

REGISTRY_BINARY = "/usr/bin/docker-registry"


class HeadServicesError(RackctlError):
    """A head service did not come up (its log is in the message)."""


def lab_ca(lab_dir: Path) -> LabCA:
    """The lab's CA (the one that signs the emulated iDRACs' certificates)."""
    return LabCA(rack_dir(lab_dir) / "ca")


def nginx_conf(root: Path, address: str, port: int, log_dir: Path) -> str:
    """nginx serving the mirror's repository read-only on ``address:port``."""
    temp = log_dir / "nginx-tmp"
    temps = "".join(
        f"  {kind}_temp_path {temp}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "worker_processes 1;\n"
        "events { worker_connections 256; }\n"
        "http {\n"
        f"  access_log {log_dir / 'mirror-access.log'};\n"
        f"{temps}"
        "  default_type application/octet-stream;\n"
        "  sendfile on;\n"
        f"  server {{\n    listen {address}:{port};\n    root {root};\n    autoindex on;\n"
        "    location ~ /\\. { deny all; }\n  }\n"
        "}\n"
    )


def registry_conf(storage: Path, address: str, port: int, cert: Path, key: Path) -> str:
    """docker-registry's config: filesystem storage, TLS on ``address:port``."""
    return (
        "version: 0.1\nlog:\n  level: info\nstorage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {address}:{port}\n  tls:\n    certificate: {cert}\n    key: {key}\n"
    )


@dataclass
class LabHeadServices:
    """nginx (mirror) + docker-registry in the lab namespace; a context manager."""

    inventory: Inventory
    state_dir: Path
    lab_dir: Path
    network: LabNetwork
    registry: bool = True
    #: detached: the services outlive this process (``rackctl lab serve up``); stop them with :func:`stop_recorded`
    detach: bool = False
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return Path(self.lab_dir) / "head-services"

    @property
    def mirror_port(self) -> int:
        return self.inventory.site_services.packages.port

    @property
    def registry_port(self) -> int:
        return self.inventory.site_services.registry.port

    def registry_tls(self) -> tuple[Path, Path, Path]:
        """Issue the registry's certificate for the head address from the lab CA; write it where the
        inventory's ``site_services.registry.tls`` says (else under the lab dir). (cert, key, CA)."""
        ca = lab_ca(self.lab_dir)
        leaf = ca.issue("registry", self.network.ip, self.run_dir / "tls")
        tls = self.inventory.site_services.registry.tls
        if tls is None:
            return leaf.cert_file, leaf.key_file, ca.cert_file
        cert, key, ca_file = (self.inventory.resolve_path(p) for p in (tls.cert_file, tls.key_file, tls.ca_file))
        atomic_write_bytes(cert, leaf.cert_file.read_bytes())
        atomic_write_bytes(key, leaf.key_file.read_bytes(), mode=0o600)
        if not ca_file.exists() or ca_file.read_bytes() != ca.cert_file.read_bytes():
            atomic_write_bytes(ca_file, ca.cert_file.read_bytes())
        return cert, key, ca_file

    def start(self, timeout: float = 20.0) -> None:
        """Start nginx (and the registry); return once each answers, else stop them and raise with the logs."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "nginx-tmp").mkdir(exist_ok=True)
        repo = MirrorLayout(self.state_dir).repo
        repo.mkdir(parents=True, exist_ok=True)
        conf = atomic_write_text(
            self.run_dir / "nginx.conf",
            nginx_conf(repo.resolve(), self.network.ip, self.mirror_port, self.run_dir.resolve()),
        )
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        try:
            self._spawn(
                "nginx",
                [
                    nginx,
                    "-p",
                    f"{self.run_dir.resolve()}/",
                    "-e",
                    str(self.run_dir / "mirror-error.log"),
                    "-c",
                    str(conf),
                    "-g",
                    "daemon off; user root root;",
                ],
            )
            if self.registry:
                if not Path(REGISTRY_BINARY).exists():
                    raise EnvironmentMissing(
                        f"{REGISTRY_BINARY} not found; install the Debian package 'docker-registry'"
                    )
                cert, key, _ca = self.registry_tls()
                storage = self.run_dir / "registry"
                storage.mkdir(exist_ok=True)
                rconf = atomic_write_text(
                    self.run_dir / "registry.yml",
                    registry_conf(storage.resolve(), self.network.ip, self.registry_port, cert, key),
                )
                self._spawn("registry", [REGISTRY_BINARY, "serve", str(rconf)])
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.run_dir / f"{name}.log").open("ab") as out:
            self._procs[name] = subprocess.Popen(
                [*self.network.exec_prefix(), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.detach,
            )
        (self.run_dir / f"{name}.pid").write_text(f"{self._procs[name].pid}\n")

    def _ports(self) -> dict[str, int]:
        return {"nginx": self.mirror_port, **({"registry": self.registry_port} if "registry" in self._procs else {})}

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = dict(self._ports())
        while waiting:
            for name, port in list(waiting.items()):
                proc = self._procs[name]
                if proc.poll() is not None:
                    raise HeadServicesError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
                with contextlib.suppress(OSError):
                    self.network.connect(self.network.ip, port, timeout=1).close()
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                raise HeadServicesError(
                    f"not serving after {timeout:.0f}s: {', '.join(waiting)}\n"
                    + "\n".join(self.log(n) for n in waiting)
                )
            if waiting:
                time.sleep(0.1)

    def log(self, name: str) -> str:
        files = [self.run_dir / f"{name}.log"] + ([self.run_dir / "mirror-error.log"] if name == "nginx" else [])
        return "".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in files if f.exists())

    def stop(self) -> None:
        """Stop what :meth:`start` started, by PID (TERM, then KILL after 5 s)."""
        for name, proc in list(self._procs.items()):
            stop_process(proc)
            (self.run_dir / f"{name}.pid").unlink(missing_ok=True)
            del self._procs[name]

    @property
    def mirror_uri(self) -> str:
        return f"http://{self.network.ip}:{self.mirror_port}/"

    @property
    def registry_address(self) -> str:
        return f"{self.network.ip}:{self.registry_port}"

    def __enter__(self) -> LabHeadServices:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: service -> what its process's command line contains (a recorded PID is only signalled when it still matches)
SERVICE_BINARIES = {"nginx": "nginx", "registry": "docker-registry"}


def recorded_pids(lab_dir: Path) -> dict[str, int]:
    """The head services ``rackctl lab serve up`` recorded that are still those processes."""
    found: dict[str, int] = {}
    for name, binary in SERVICE_BINARIES.items():
        pid_file = Path(lab_dir) / "head-services" / f"{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            if binary in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found[name] = pid
    return found


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one that is our child is reaped here)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_recorded(lab_dir: Path, timeout: float = 5.0) -> dict[str, int]:
    """Stop the recorded head services by PID (TERM, then KILL); the PIDs that were stopped."""
    stopped = recorded_pids(lab_dir)
    for pid in stopped.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in stopped.values():
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for name in SERVICE_BINARIES:
        (Path(lab_dir) / "head-services" / f"{name}.pid").unlink(missing_ok=True)
    return stopped
