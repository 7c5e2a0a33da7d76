"""The lab head node's time service: chronyd in the lab's namespace, serving the nodes.

On a real site the head nodes run chrony (role ``baseline``: they follow the site's NTP and serve the
cluster). In the lab the head node is this machine's side of the lab bridge, so chronyd runs there with
``ip netns exec`` as a child of this process, on the head node's address, and never touches this
machine's clock (``-x``): it serves that clock at a fixed stratum, as an air-gapped head node would.
It is stopped by PID; detached (``rackctl lab serve up``) it outlives this process and
:func:`stop_recorded_time` stops it by the PID it recorded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, RackctlError
from bootstrap.fsutil import atomic_write_text
from bootstrap.provision.services import stop_process
from rackctl_lab.netns import LabNetwork

NTP_PORT = 123
PID_FILE = "chronyd.pid.child"
#: seconds between 1900 (NTP's epoch) and 1970
NTP_EPOCH_OFFSET = 2208988800


class TimeServerError(RackctlError):
    """chronyd did not come up or does not answer NTP (its log is in the message)."""


def chrony_conf(address: str, run_dir: Path, stratum: int) -> str:
    """chronyd serving its own clock on ``address`` (no upstream, no command socket)."""
    return (
        f"bindaddress {address}\n"
        "allow all\n"
        f"local stratum {stratum}\n"
        "cmdport 0\n"
        "bindcmdaddress /\n"
        f"pidfile {run_dir / 'chronyd.pid'}\n"
        f"driftfile {run_dir / 'chrony.drift'}\n"
    )


def ntp_query(sock_factory: socket.socket, address: str, timeout: float = 2.0) -> tuple[int, float]:
    """One NTP client request (mode 3) to ``address``; returns (stratum, server transmit time, Unix)."""
    with sock_factory as sock:
        sock.settimeout(timeout)
        sock.sendto(b"\x23" + bytes(47), (address, NTP_PORT))  # LI 0, version 4, mode 3 (client)
        data, _ = sock.recvfrom(512)
    if len(data) < 48:
        raise TimeServerError(f"short NTP answer from {address}: {len(data)} bytes")
    stratum = data[1]
    seconds, fraction = struct.unpack("!II", data[40:48])
    return stratum, seconds - NTP_EPOCH_OFFSET + fraction / 2**32


@dataclass
class LabTimeServer:
    """chronyd on the head node's address in the lab namespace; a context manager."""

    network: LabNetwork
    lab_dir: Path
    stratum: int = 8
    #: detached: chronyd outlives this process (``rackctl lab serve up``); stop it with :func:`stop_recorded_time`
    detach: bool = False
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        return Path(self.lab_dir) / "head-time"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "chronyd.log"

    def start(self, timeout: float = 20.0) -> None:
        """Start chronyd; return once it answers an NTP request with its stratum, else stop it and raise."""
        chronyd = shutil.which("chronyd") or "/usr/sbin/chronyd"
        if not Path(chronyd).exists():
            raise EnvironmentMissing("chronyd not found; install the Debian package 'chrony'")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        conf = atomic_write_text(
            self.run_dir / "chrony.conf", chrony_conf(self.network.ip, self.run_dir.resolve(), self.stratum)
        )
        with self.log_file.open("ab") as out:
            # -d: foreground, log to stderr; -x: never change this machine's clock; -u root: no user switch
            self._proc = subprocess.Popen(
                [*self.network.exec_prefix(), chronyd, "-d", "-x", "-u", "root", "-f", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.detach,
            )
        (self.run_dir / PID_FILE).write_text(f"{self._proc.pid}\n")
        try:
            self._wait_serving(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise TimeServerError(f"chronyd exited with {self._proc.returncode}:\n{self.log()}")
            try:
                stratum, _ = self.query()
                if 0 < stratum < 16:
                    return
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise TimeServerError(f"chronyd does not serve time after {timeout:.0f}s ({last}):\n{self.log()}")

    def query(self) -> tuple[int, float]:
        """Ask the server for the time from inside the namespace: (stratum, its time)."""
        return ntp_query(self.network.socket(socket.AF_INET, socket.SOCK_DGRAM), self.network.ip)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:] if self.log_file.exists() else ""

    def stop(self) -> None:
        """Stop chronyd by PID (TERM, then KILL after 5 s)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.run_dir / PID_FILE)

    def __enter__(self) -> LabTimeServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def recorded_time_pid(lab_dir: Path) -> int | None:
    """The chronyd a detached :class:`LabTimeServer` recorded, while it is still that process."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((Path(lab_dir) / "head-time" / PID_FILE).read_text().strip())
        if b"chronyd" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    return None


def stop_recorded_time(lab_dir: Path, timeout: float = 5.0) -> int | None:
    """Stop the recorded chronyd by PID (TERM, then KILL); the PID that was stopped."""
    pid = recorded_time_pid(lab_dir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
    (Path(lab_dir) / "head-time" / PID_FILE).unlink(missing_ok=True)
    return pid
