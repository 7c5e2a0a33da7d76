"""A real SSH host for tests: OpenSSH's sshd on 127.0.0.1 with a generated host key and client key.

Used wherever in-band Ansible must run for real. The host key is pinned in a known_hosts file, so the
tests exercise strict host-key checking exactly as rackctl does on real nodes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


#: what a refused host key reads like: OpenSSH's words (Ansible's linear strategy) or Mitogen's (the default)
HOST_KEY_REFUSED = ("host key verification failed", "unrecognized or mismatching host key")


def refused_host_key(message: object) -> bool:
    """``message`` says the node's host key was refused, in either strategy's words."""
    said = str(message).lower()
    return any(words in said for words in HOST_KEY_REFUSED)


@dataclass
class SshNode:
    """A running sshd and the files a client needs."""

    port: int
    private_key: Path
    known_hosts: Path
    host_public_key: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_ssh_node(workdir: Path, *, host_key: Path | None = None, client_key: Path | None = None) -> SshNode:
    """Start sshd on a free loopback port; returns once it accepts connections.

    ``host_key``: the server's private key (e.g. the one rackctl pinned for a node), else a new one;
    ``client_key``: the private key that may log in (its ``.pub`` beside it), else a new one.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = host_key or workdir / "ssh_host_ed25519_key"
    client_key = client_key or workdir / "id_ed25519"
    for key in (host_key, client_key):
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = workdir / "authorized_keys"
    authorized.write_text((client_key.with_suffix(".pub")).read_text())
    authorized.chmod(0o600)
    port = free_port()
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {workdir / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {authorized}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = workdir / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log.open("w"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {log.read_text()}") from None
            time.sleep(0.1)
    return SshNode(port, client_key, known_hosts, " ".join(host_pub[:2]), proc, log)
