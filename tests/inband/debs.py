"""Debian packages onto lab nodes without a mirror: a stand-in until the head node's mirror (issue 10, h3) lands.

The lab's image has no apt sources. :func:`preinstall` asks this machine's apt (same release as the image)
what ``packages`` need beyond what the node has (the node's own dpkg status file), downloads exactly
those .debs from Debian, copies them to the node and installs them with ``dpkg -i``. The roles then find
the packages installed (``ansible.builtin.apt: state=present`` needs no source for that).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

CACHE = Path.home() / ".cache" / "rackctl" / "debs"


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
    lab.ssh(host, "dpkg -i /var/cache/rackctl-debs/*.deb && rm -rf /var/cache/rackctl-debs", timeout=600)
    return [d.name for d in debs]
