"""Fabric Manager and the driver: exactly the same version, checked before anything is installed.

With a host driver, ``nvidia-fabricmanager-<branch>`` must match the driver to the last digit; a mismatch
leaves the GPUs unusable ("fabric manager NVIDIA GPU driver interface version X don't match with driver
version Y", then CUDA error 802). :func:`check_versions` refuses such a plan up front.
"""

from __future__ import annotations

import re

from bootstrap.errors import InvalidInput, Problem

_DRIVER_RE = re.compile(r"^(?P<branch>[0-9]{3})\.[0-9]{1,3}(\.[0-9]{1,3})?$")
# Debian/Ubuntu package version of the CUDA repository: "580.95.05-1", "1:580.95.05-0ubuntu1".
_PKG_VERSION_RE = re.compile(r"^(?:[0-9]+:)?(?P<upstream>[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)(?:-.*)?$")


def branch_of(driver: str) -> str:
    """'580.95.05' -> '580'."""
    match = _DRIVER_RE.match(driver)
    if not match:
        raise InvalidInput(
            f"{driver!r} is not an NVIDIA driver version",
            problems=[Problem("driver_version", f"got {driver!r}", "write it like 580.95.05")],
        )
    return match["branch"]


def upstream_version(package_version: str) -> str | None:
    """The driver version inside a package version ('1:580.95.05-0ubuntu1' -> '580.95.05')."""
    match = _PKG_VERSION_RE.match(package_version.strip())
    return match["upstream"] if match else None


def fabric_manager_packages(driver: str) -> dict[str, str]:
    """Host packages (name -> version glob) that pin Fabric Manager to ``driver``; both are held."""
    branch = branch_of(driver)
    return {f"nvidia-fabricmanager-{branch}": f"{driver}-*", f"cuda-drivers-fabricmanager-{branch}": f"{driver}-*"}


def check_versions(driver: str, fabric_manager: str, *, field: str = "nvidia.profiles.<model>.driver_version") -> None:
    """Refuse a driver / Fabric Manager pair that are not exactly the same version.

    ``fabric_manager`` may be a package version ('580.95.05-1'); ``field`` names the inventory field to fix.
    """
    fm = upstream_version(fabric_manager)
    if fm is None:
        raise InvalidInput(
            f"{fabric_manager!r} is not a Fabric Manager version",
            problems=[Problem(field, f"Fabric Manager version {fabric_manager!r}", "use the driver's, e.g. 580.95.05")],
        )
    branch_of(driver)
    if fm != driver:
        raise InvalidInput(
            f"Fabric Manager {fm} does not match driver {driver}; nothing was installed",
            problems=[
                Problem(
                    field,
                    f"driver {driver} with nvidia-fabricmanager {fm}: Fabric Manager must be exactly the driver's "
                    "version (else it exits with 'driver interface version ... don't match' and CUDA fails with 802)",
                    f"install nvidia-fabricmanager-{branch_of(driver)}={driver}-* or pin the driver to {fm}",
                )
            ],
        )
