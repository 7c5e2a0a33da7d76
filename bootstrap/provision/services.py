"""Run the head node's boot services on a rendered tree: dnsmasq (``dnsmasq-base``) and nginx.

Both run in the foreground as children of this process (their PIDs are kept and written next to the
logs), through the environment's command wrapper (on a real head node: as they are; in the lab: inside its
network namespace). :meth:`BootServices.start` waits
until nginx answers on its port and dnsmasq has bound its sockets; :meth:`BootServices.stop` ends exactly
those PIDs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, RackctlError
from bootstrap.provision.api import BootTree


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace_s: float = 5) -> None:
    """Stop ``proc`` if it still runs: SIGTERM, then SIGKILL after ``grace_s`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)


DNSMASQ_CANDIDATES = ("dnsmasq", "/usr/sbin/dnsmasq")
NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx")


class BootServicesError(RackctlError):
    """A boot service did not come up (its log is in the message)."""


def find_binary(candidates: tuple[str, ...], package: str) -> str:
    """The first existing binary, or an :class:`EnvironmentMissing` naming the Debian package."""
    for name in candidates:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    raise EnvironmentMissing(f"{candidates[0]} not found; install the Debian package '{package}'")


class BootServices:
    """dnsmasq + nginx serving one :class:`BootTree`."""

    def __init__(self, tree: BootTree, *, wrap: Callable[[list[str]], list[str]] | None = None, log_dir: Path) -> None:
        self.tree = tree
        self.wrap = wrap or list
        self.log_dir = Path(log_dir)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths -------------------------------------------------------------------------------------------
    @property
    def dnsmasq_log(self) -> Path:
        return self.log_dir / "dnsmasq.log"

    @property
    def nginx_error_log(self) -> Path:
        return self.log_dir / "nginx-error.log"

    @property
    def nginx_access_log(self) -> Path:
        return self.log_dir / "nginx-access.log"

    def _wrap(self, argv: list[str]) -> list[str]:
        return self.wrap(list(argv))

    # -- lifecycle ---------------------------------------------------------------------------------------
    def dnsmasq_argv(self) -> list[str]:
        """The dnsmasq command line (foreground, own log and PID file, the tree's config only)."""
        argv = [
            find_binary(DNSMASQ_CANDIDATES, "dnsmasq-base"),
            "--keep-in-foreground",
            f"--conf-file={self.tree.dnsmasq_conf}",
            f"--log-facility={self.dnsmasq_log}",
            f"--pid-file={self.log_dir / 'dnsmasq.pid'}",
            # our own lease file: a shared /var/lib/misc/dnsmasq.leases lets another run's stale lease
            # deny a node its address
            f"--dhcp-leasefile={self.log_dir / 'dnsmasq.leases'}",
        ]
        if os.geteuid() == 0:
            # Stay root so the log under the caller's state dir stays writable (TFTP files are 0644 anyway).
            argv.append("--user=root")
        return argv

    def nginx_argv(self) -> list[str]:
        """The nginx command line (foreground, the tree's config; ``log_dir`` is its prefix for logs and temp)."""
        prefix = self.log_dir.resolve()
        glob = f"daemon off; pid {self.log_dir / 'nginx.pid'};"
        if os.geteuid() == 0:
            glob += " user root root;"
        return [
            find_binary(NGINX_CANDIDATES, "nginx-light"),
            "-p",
            f"{prefix}/",
            "-e",
            str(self.nginx_error_log),
            "-c",
            str(self.tree.nginx_conf),
            "-g",
            glob,
        ]

    def start(self, timeout: float = 15.0) -> None:
        """Start dnsmasq and nginx; return once both serve, or stop both and raise with their logs."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "nginx-tmp").mkdir(exist_ok=True)
        for log in (self.dnsmasq_log, self.nginx_error_log, self.nginx_access_log):
            log.touch()
        try:
            self._spawn("nginx", self.nginx_argv())
            if self.tree.dnsmasq_conf.exists() and self.tree.interface:
                self._spawn("dnsmasq", self.dnsmasq_argv())
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = (self.log_dir / f"{name}.stdout").open("ab")
        self._procs[name] = subprocess.Popen(
            self._wrap(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        out.close()
        (self.log_dir / f"{name}.pid.rackctl").write_text(f"{self._procs[name].pid}\n")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        probe = self._wrap(
            [
                "python3",
                "-c",
                "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()",
                self.tree.server_ip,
                str(self.tree.http_port),
            ]
        )
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise BootServicesError(f"{name} exited with {proc.returncode}:\n{self.logs().get(name, '')}")
            nginx_up = subprocess.run(probe, capture_output=True, check=False).returncode == 0
            dnsmasq_up = "dnsmasq" not in self._procs or "started" in self.dnsmasq_log.read_text(errors="replace")
            if nginx_up and dnsmasq_up:
                return
            if time.monotonic() > deadline:
                raise BootServicesError(f"boot services not ready after {timeout:.0f}s:\n{self.logs()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop what :meth:`start` started, by PID (TERM, then KILL after 5 s)."""
        for name, proc in list(self._procs.items()):
            stop_process(proc)
            (self.log_dir / f"{name}.pid.rackctl").unlink(missing_ok=True)
            del self._procs[name]

    @property
    def pids(self) -> dict[str, int]:
        """PIDs of the running services (a wrapper such as ``ip netns exec`` execs the service itself)."""
        return {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}

    def logs(self) -> dict[str, str]:
        """dnsmasq and nginx logs (for dumping on failure)."""
        out: dict[str, str] = {}
        for name, paths in {
            "dnsmasq": [self.dnsmasq_log, self.log_dir / "dnsmasq.stdout"],
            "nginx": [self.nginx_error_log, self.nginx_access_log, self.log_dir / "nginx.stdout"],
        }.items():
            out[name] = "".join(
                f"--- {p.name}\n{p.read_text(errors='replace')}" for p in paths if p.exists() and p.stat().st_size
            )
        return out

    def __enter__(self) -> BootServices:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
