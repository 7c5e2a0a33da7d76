"""The site's package-signing key: an ed25519 GnuPG key made once, kept 0600/0700 under the state dir.

Only the public half (armored) ever leaves the GnuPG home; nothing here logs key material.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, RackctlError
from bootstrap.fsutil import atomic_write_text
from bootstrap.mirror.layout import MirrorLayout


class SiteKeyError(RackctlError):
    """gpg failed to make or export the site key."""


#: the longest GnuPG home whose agent sockets still fit a Unix socket's path (108 bytes, the longest
#: name "S.gpg-agent.browser" after it); without /run/user/UID, as for root on a plain server, GnuPG puts
#: them in the home itself, and a longer state dir made every gpg call fail to start its agent
MAX_HOME = 80


@contextlib.contextmanager
def agent_safe_home(home: Path) -> Iterator[Path]:
    """``home``, or for a home too long for its agent's sockets a short symlink to it for the block.

    Through the symlink the sockets are made in ``home`` under a name that fits; the agent started
    through it is stopped when the block ends (the link goes with its temporary directory).
    """
    if len(os.fsencode(home.absolute())) <= MAX_HOME:  # gpg makes a relative home absolute
        yield home
        return
    with tempfile.TemporaryDirectory(prefix="rackctl-gpg-") as tmp:
        link = Path(tmp) / "home"
        link.symlink_to(home.resolve(), target_is_directory=True)
        try:
            yield link
        finally:
            stop_agent(link)


def _gpg(home: Path, *args: str) -> str:
    if shutil.which("gpg") is None:
        raise EnvironmentMissing("gpg not found; install the Debian package 'gnupg'")
    with agent_safe_home(home) as usable:
        proc = subprocess.run(
            ["gpg", "--homedir", str(usable), "--batch", "--no-tty", *args],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise SiteKeyError(f"gpg {args[0]} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout


def fingerprint(home: Path) -> str | None:
    """The site key's fingerprint, or None when there is none yet."""
    if not (home / "pubring.kbx").exists():
        return None
    out = _gpg(home, "--with-colons", "--list-secret-keys")
    return next((line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")), None)


def ensure_site_key(layout: MirrorLayout, uid: str) -> str:
    """The site key's fingerprint, making the key first when there is none; writes the public half."""
    home = layout.gnupg_home
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    fpr = fingerprint(home)
    if fpr is None:
        _gpg(
            home, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"
        )
        fpr = fingerprint(home)
        if fpr is None:
            raise SiteKeyError("gpg made no secret key")
    atomic_write_text(layout.public_key, _gpg(home, "--armor", "--export", fpr))
    return fpr


def stop_agent(home: Path) -> None:
    """Stop the gpg-agent this GnuPG home started (signing starts one)."""
    if shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
