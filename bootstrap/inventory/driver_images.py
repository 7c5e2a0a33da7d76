"""Which node OS has a published NVIDIA driver container, and the tag suffix the GPU Operator pulls for it.

The operator names the driver image ``<driver.repository>/<driver.image>:<driver.version>-<ID><VERSION_ID>`` of
the node's ``/etc/os-release`` (NVIDIA/gpu-operator#2225: ``580.105.08-debian13`` on a Debian 13 node). NVIDIA
publishes driver images only for the OSes the operator supports: Ubuntu 22.04 and 24.04, RHEL and Red Hat
CoreOS (maintainers in NVIDIA/gpu-operator#418 and #2225); a Debian tag is not published (#1212:
``550.90.07-debian12`` "not found"). rackctl's ``cluster.versions.os`` names the nodes' OS as ``<id>-<version>``.
"""

from __future__ import annotations

import re

#: Ubuntu releases with published driver images (the operator's supported Ubuntu LTS releases).
UBUNTU_PUBLISHED = ("22.04", "24.04")
#: OS ids whose driver images NVIDIA publishes per minor release (``rhel9.4``, ``rhcos4.16``).
RED_HAT_IDS = ("rhel", "rhcos")
#: What ``cluster.versions.os`` may name for an operator-managed driver, in words (for messages).
PUBLISHED_IN_WORDS = "ubuntu-22.04, ubuntu-24.04, rhel-<major>.<minor> or rhcos-<major>.<minor>"

_OS_RE = re.compile(r"^([a-z]+)-(\d+(?:\.\d+)*)$")


def os_release_tag(os_name: str) -> str | None:
    """``ubuntu-24.04`` -> ``ubuntu24.04``: the ``<ID><VERSION_ID>`` the operator appends; None if malformed."""
    match = _OS_RE.match(os_name)
    return f"{match.group(1)}{match.group(2)}" if match else None


def published_driver_tag(os_name: str) -> str | None:
    """The driver image suffix NVIDIA publishes for nodes running ``os_name``; None where it publishes none."""
    match = _OS_RE.match(os_name)
    if match is None:
        return None
    os_id, version = match.groups()
    if os_id == "ubuntu" and version in UBUNTU_PUBLISHED:
        return f"ubuntu{version}"
    if os_id in RED_HAT_IDS and re.fullmatch(r"\d+\.\d+", version):
        return f"{os_id}{version}"
    return None
