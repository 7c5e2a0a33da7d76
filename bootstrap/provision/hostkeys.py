"""SSH host keys that rackctl generates per node, pins in ``known_hosts`` and verifies with paramiko.

A node never invents its own host key: rackctl generates an ed25519 key pair per node (kept 0600 under
``<state-dir>/hostkeys/<hostname>/``), hands the private half to that node only (its autoinstall seed, or
the deploy ramdisk writes it into the installed root), and every SSH connection afterwards checks the
pinned public half.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bootstrap.errors import RackctlError
from bootstrap.fsutil import atomic_write_bytes, atomic_write_text

KEY_NAME = "ssh_host_ed25519_key"


@dataclass(frozen=True)
class HostKey:
    """A node's pinned host key pair (the private half is only read when handed to that node)."""

    hostname: str
    private_path: Path
    public_line: str  #: ``ssh-ed25519 AAAA...`` (no comment)

    @property
    def fingerprint(self) -> str:
        """OpenSSH-style ``SHA256:...`` fingerprint of the public key."""
        return fingerprint_of(self.public_line)

    def private_pem(self) -> str:
        """The OpenSSH private key text (for the node's own seed or ramdisk only)."""
        return self.private_path.read_text()


class HostKeyMismatch(RackctlError):
    """The host presented another key than the pinned one (wrong node, reinstall, or an attacker)."""


def fingerprint_of(public_line: str) -> str:
    """``SHA256:<base64>`` of an OpenSSH public key line."""
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def ensure_host_key(state_dir: Path, hostname: str) -> HostKey:
    """Load the node's pinned key pair, generating it (0600, dir 0700) the first time."""
    key_dir = state_dir / "hostkeys" / hostname
    private_path = key_dir / KEY_NAME
    public_path = key_dir / f"{KEY_NAME}.pub"
    if private_path.exists() and public_path.exists():
        return HostKey(hostname, private_path, _strip_comment(public_path.read_text()))
    key_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(key_dir.parent, 0o700)
    os.chmod(key_dir, 0o700)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    atomic_write_bytes(private_path, private, mode=0o600)
    public_line = public.decode()
    atomic_write_text(public_path, f"{public_line} root@{hostname}\n", mode=0o644)
    return HostKey(hostname, private_path, public_line)


def _strip_comment(line: str) -> str:
    kind, blob, *_ = line.split()
    return f"{kind} {blob}"


def known_hosts_path(state_dir: Path) -> Path:
    """The pinned ``known_hosts`` of a state dir: provisioning writes it, every SSH and Ansible run reads it."""
    return Path(state_dir) / "hostkeys" / "known_hosts"


def write_known_hosts(path: Path, entries: dict[str, tuple[HostKey, list[str]]]) -> Path:
    """Write ``known_hosts``: for each node, its pinned key under its hostname and addresses.

    Lines of nodes not in ``entries`` that ``path`` already holds are kept (a render for some nodes
    leaves the others' pins alone); a node in ``entries`` gets exactly its new line.
    """
    kept: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                kept[line.split(",", 1)[0].split()[0]] = line
    for hostname, (key, addresses) in entries.items():
        names = ",".join(dict.fromkeys([hostname, *addresses]))
        kept[hostname] = f"{names} {key.public_line}"
    lines = [kept[name] for name in sorted(kept)]
    return atomic_write_text(path, "\n".join(lines) + "\n", mode=0o644)


def verify_host_key(host: str, port: int, expected: str, *, timeout: float = 10.0) -> str:
    """Connect to ``host:port``, read its SSH host key and compare it with ``expected``.

    ``expected`` is a public key line (``ssh-ed25519 AAAA...``) or a ``SHA256:`` fingerprint. Returns the
    fingerprint seen; raises :class:`HostKeyMismatch` when it differs and ``OSError``/``paramiko.SSHException``
    when the host cannot be reached (callers retry those while a node boots).
    """
    want = expected if expected.startswith("SHA256:") else fingerprint_of(expected)
    sock = socket.create_connection((host, port), timeout=timeout)
    transport = paramiko.Transport(sock)
    try:
        transport.get_security_options().key_types = ("ssh-ed25519",)
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
    finally:
        transport.close()
    seen = fingerprint_of(f"{key.get_name()} {key.get_base64()}")
    if seen != want:
        raise HostKeyMismatch(
            f"{host}:{port} presented host key {seen}, pinned is {want}; the cable or the node may be "
            "swapped, or the node was not installed by this rackctl state dir"
        )
    return seen


def load_private_key(path: Path) -> paramiko.PKey:
    """A paramiko key from an OpenSSH private key file (used by tests and the flow)."""
    return paramiko.Ed25519Key.from_private_key(io.StringIO(path.read_text()))
