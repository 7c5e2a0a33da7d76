"""Debian packages onto lab nodes without a mirror: a stand-in until the head node's mirror (issue 10, h3) lands.

The lab's image has no apt sources. :func:`preinstall` asks this machine's apt (same release as the image)
what ``packages`` need beyond what the node has (the node's own dpkg status file), downloads exactly
those .debs from Debian, copies them to the node and installs them with ``dpkg -i`` (again while dpkg's lock
is held by the node's own apt). The roles then find the packages installed (``ansible.builtin.apt:
state=present`` needs no source for that).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

CACHE = Path.home() / ".cache" / "rackctl" / "debs"
#: dpkg -i of a folder's .debs, run again every 2 s while dpkg's lock is held by another process
DPKG_WHEN_UNLOCKED = (
    "for i in $(seq {tries}); do "
    "if out=$(dpkg -i {folder}/*.deb 2>&1); then rm -rf {folder}; exit 0; fi; "
    'case "$out" in *"lock"*"locked by another process"*|*"database is locked"*) sleep 2;; '
    '*) echo "$out" >&2; exit 1;; esac; '
    'done; echo "$out" >&2; exit 1'
)


def download_for(status_file: Path, packages: list[str], folder: Path) -> list[Path]:
    """The .debs ``packages`` need on a system whose dpkg status is ``status_file`` (downloaded to ``folder``)."""
    (folder / "partial").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "apt-get",
            "-qq",
            "-y",
            "--download-only",
            "--no-install-recommends",
            "-o",
            f"Dir::State::status={status_file}",
            "-o",
            f"Dir::Cache::archives={folder}",
            "-o",
            "Debug::NoLocking=1",
            "install",
            *packages,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return sorted(folder.glob("*.deb"))


def preinstall(lab: Any, host: str, packages: list[str]) -> list[str]:
    """Install ``packages`` (with what they need) on ``host`` of the installed lab; the .deb names installed."""
    query = "dpkg-query -W -f '${{Status}}' {}"
    missing = [p for p in packages if lab.ssh(host, query.format(p), check=False).stdout != "install ok installed"]
    if not missing:
        return []
    folder = CACHE / host
    folder.mkdir(parents=True, exist_ok=True)
    status = folder / "status"
    status.write_text(lab.ssh(host, "cat /var/lib/dpkg/status").stdout)
    for old in folder.glob("*.deb"):
        old.unlink()
    debs = download_for(status, missing, folder)
    lab.copy_to(host, debs, "/var/cache/rackctl-debs")
    # the node's own apt timers (unattended-upgrades, which role baseline turns on) may hold dpkg's lock: dpkg
    # fails at once on it, so it is run again while (and only while) that lock is what stopped it, up to 300 s
    # (apt-get's DPkg::Lock::Timeout would wait, but apt refuses file names with an epoch's %3a in them)
    lab.ssh(host, DPKG_WHEN_UNLOCKED.format(folder="/var/cache/rackctl-debs", tries=150), timeout=600)
    return [d.name for d in debs]
