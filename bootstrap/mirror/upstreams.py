"""The extra upstream repositories of a mirror build, and the packages the inventory asks of them.

Beside Debian's archive, the private apt of ``rackctl mirror build`` reads the flat repositories that
``site_services.packages.upstreams`` turns on (:mod:`bootstrap.inventory.package_upstreams`):

- ``kubernetes``: kubeadm, kubelet and kubectl at exactly ``cluster.versions.kubernetes`` (``<version>-*``:
  the repository's revision, e.g. ``1.31.2-1.1``, resolved by apt); cri-tools and kubernetes-cni come in
  as their dependencies;
- ``nvidia``: ``cuda-drivers-<branch>`` at exactly each host driver the inventory pins, and Fabric Manager
  (:func:`bootstrap.nvidia.fabric_manager.fabric_manager_packages`) where the hardware model has NVSwitches;
- ``containerd``: ``containerd.io`` at exactly ``cluster.versions.containerd`` from Docker's repository (a
  suite layout: ``<uri> <suite> stable``), in place of the distribution's containerd and runc.

Only the inventory is read here; nothing is fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.package_upstreams import (
    CONTAINERD_COMPONENT,
    CONTAINERD_KEY_FINGERPRINT,
    CONTAINERD_KEY_NAME,
    CONTAINERD_REPOS,
    KUBERNETES_KEY_FINGERPRINT,
    KUBERNETES_KEY_NAME,
    KUBERNETES_REPO,
    NVIDIA_KEY_FINGERPRINT,
    NVIDIA_KEY_NAME,
    NVIDIA_REPO,
    NVIDIA_SUITE,
    PackageUpstream,
)
from bootstrap.nvidia.fabric_manager import branch_of, fabric_manager_packages

#: What role ``kubernetes_packages`` installs (its ``kubernetes_packages_names``).
KUBERNETES_PACKAGES = ("kubeadm", "kubelet", "kubectl")
#: The CNI plugins' package (its ``kubernetes_packages_cni_package``), the newest the repository has.
CNI_PACKAGE = "kubernetes-cni"
KUBERNETES_ROLE = "kubernetes_packages"
NVIDIA_ROLE = "nvidia_driver_upgrade"
#: Docker's package of containerd (with runc): it conflicts with the distribution's containerd and runc.
CONTAINERD_PACKAGE = "containerd.io"
CONTAINERD_ROLE = "container_runtime"
#: What role container_runtime installs from the distribution (its ``container_runtime_packages``), replaced
#: by :data:`CONTAINERD_PACKAGE` where the containerd upstream is on.
DISTRIBUTION_CONTAINERD = ("containerd", "runc")


@dataclass(frozen=True)
class ExtraRepo:
    """One flat repository beside Debian's, and how its signing key is had."""

    name: str
    title: str
    uri: str
    #: the operator's key (absolute path), or None: fetched from ``key_url`` and checked against ``fingerprint``
    key_file: Path | None
    key_url: str | None
    fingerprint: str | None
    #: a suite layout's suite and component (``bookworm``, ``stable``); None: a flat repository (``uri /``)
    suite: str | None = None
    component: str | None = None

    @property
    def field(self) -> str:
        """The inventory field that configures it."""
        return f"site_services.packages.upstreams.{self.name}"

    def key_described(self) -> str:
        if self.key_file is not None:
            return f"key_file {self.key_file}"
        return f"{self.key_url}, fingerprint {self.fingerprint} (pinned by rackctl)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "uri": self.uri,
            "key_file": str(self.key_file) if self.key_file else None,
            "key_url": self.key_url if self.key_file is None else None,
            "fingerprint": self.fingerprint if self.key_file is None else None,
            "suite": self.suite,
            "component": self.component,
        }


@dataclass(frozen=True)
class UpstreamPackage:
    """A package an extra upstream must provide, at a version glob decided by an inventory field."""

    name: str
    version: str
    role: str
    origin: str
    field: str


@dataclass
class UpstreamSet:
    """The repositories to read, the packages asked of them, and why the others are left out (words)."""

    repos: list[ExtraRepo] = field(default_factory=list)
    packages: list[UpstreamPackage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def minor_of(version: str) -> str:
    """``1.31.2`` -> ``1.31``."""
    return ".".join(version.split(".")[:2])


def _repo(inventory: Any, setting: PackageUpstream, upstream: ExtraRepo) -> ExtraRepo:
    """``upstream`` (its own repository, key fetched and pinned) as this site configures it."""
    uri = setting.uri or upstream.uri
    layout = {"suite": upstream.suite, "component": upstream.component}
    if setting.key_file is not None:
        key = inventory.resolve_path(setting.key_file)
        return ExtraRepo(upstream.name, upstream.title, uri, key, None, None, **layout)
    return ExtraRepo(upstream.name, upstream.title, uri, None, upstream.key_url, upstream.fingerprint, **layout)


def kubernetes_upstream(inventory: Any, out: UpstreamSet) -> None:
    """pkgs.k8s.io of the cluster's minor version, the three packages at exactly its version, and kubernetes-cni
    (the newest) where the pod network calls the node's CNI plugins."""
    setting = inventory.site_services.packages.upstreams.kubernetes
    if setting.enabled is False:
        out.notes.append(
            "kubernetes: off (site_services.packages.upstreams.kubernetes is false): the mirror has no kubeadm, "
            "kubelet or kubectl, and the kubernetes stage reports them missing on the nodes"
        )
        return
    version = inventory.cluster.resolved_versions().kubernetes
    uri = KUBERNETES_REPO.format(minor=minor_of(version))
    title = f"Kubernetes' pkgs.k8s.io v{minor_of(version)}"
    own = ExtraRepo("kubernetes", title, uri, None, uri + KUBERNETES_KEY_NAME, KUBERNETES_KEY_FINGERPRINT)
    out.repos.append(_repo(inventory, setting, own))
    out.packages.extend(
        UpstreamPackage(p, f"{version}-*", KUBERNETES_ROLE, "kubernetes", "cluster.versions.kubernetes")
        for p in KUBERNETES_PACKAGES
    )
    if inventory.kubernetes.cni == "flannel":  # its pod network calls the node's CNI plugins
        out.packages.append(UpstreamPackage(CNI_PACKAGE, "*", KUBERNETES_ROLE, "kubernetes", "kubernetes.cni"))


def host_drivers(inventory: Any) -> dict[str, tuple[str, bool]]:
    """Host drivers the inventory pins: driver version -> (the field that pins it, Fabric Manager wanted).

    A GPU node's driver is on the host where its model's ``nvidia.profiles.<model>.driver`` is ``host`` or
    ``cluster.gpu_driver`` is ``host``; pinned by the profile's ``driver_version``, else
    ``cluster.versions.nvidia_driver``. Fabric Manager is wanted where the hardware model has NVSwitches.
    """
    versions = inventory.cluster.resolved_versions()
    found: dict[str, tuple[str, bool]] = {}
    for node in inventory.nodes:
        if inventory.gpus_of(node).count <= 0:
            continue
        profile = inventory.nvidia.profile_for(node.model)
        if profile.driver != "host" and inventory.cluster.gpu_driver != "host":
            continue
        if profile.driver_version:
            driver, where = profile.driver_version, f"nvidia.profiles.{node.model}.driver_version"
        elif versions.nvidia_driver:
            driver, where = versions.nvidia_driver, "cluster.versions.nvidia_driver"
        else:
            continue
        hardware = inventory.hardware(node.model)
        nvswitch = bool(hardware and hardware.nvswitch)
        field_, fm = found.get(driver, (where, False))
        found[driver] = (field_, fm or nvswitch)
    return found


def nvidia_upstream(inventory: Any, out: UpstreamSet) -> None:
    """NVIDIA's CUDA repository and the host drivers (with Fabric Manager on NVSwitch models) it must give."""
    setting = inventory.site_services.packages.upstreams.nvidia
    drivers = host_drivers(inventory)
    if setting.enabled is False:
        if drivers:
            out.notes.append(
                "nvidia: off (site_services.packages.upstreams.nvidia is false) although the inventory pins host "
                f"driver {', '.join(sorted(drivers))}: the mirror has no driver packages"
            )
        return
    if not drivers:
        out.notes.append("nvidia: not used (no GPU profile installs a pinned driver on the host)")
        return
    suite = inventory.site_services.packages.suite
    if setting.uri is None and suite != NVIDIA_SUITE:
        raise InvalidInput(
            f"NVIDIA's repository {NVIDIA_REPO} is for Debian 12 ({NVIDIA_SUITE}); the mirror's suite is {suite}",
            problems=[
                Problem(
                    "site_services.packages.upstreams.nvidia",
                    f"no uri for suite {suite}",
                    "set uri (and key_file) to NVIDIA's repository for that distribution, or nvidia: false",
                )
            ],
        )
    title = "NVIDIA's CUDA repository (Debian 12)"
    own = ExtraRepo("nvidia", title, NVIDIA_REPO, None, NVIDIA_REPO + NVIDIA_KEY_NAME, NVIDIA_KEY_FINGERPRINT)
    out.repos.append(_repo(inventory, setting, own))
    for driver, (where, fabric_manager) in sorted(drivers.items()):
        out.packages.append(
            UpstreamPackage(f"cuda-drivers-{branch_of(driver)}", f"{driver}-*", NVIDIA_ROLE, "nvidia", where)
        )
        if fabric_manager:
            out.packages.extend(
                UpstreamPackage(name, glob, NVIDIA_ROLE, "nvidia", where)
                for name, glob in fabric_manager_packages(driver).items()
            )


def containerd_upstream(inventory: Any, out: UpstreamSet) -> None:
    """Docker's repository for the mirror's suite and ``containerd.io`` at exactly the cluster's containerd."""
    setting = inventory.site_services.packages.upstreams.containerd
    pin = inventory.cluster.resolved_versions().containerd
    if not setting.enabled:
        out.notes.append(
            f"containerd: off (site_services.packages.upstreams.containerd): the nodes install the distribution's "
            f"containerd, not cluster.versions.containerd {pin}"
        )
        return
    suite = inventory.site_services.packages.suite
    uri = next((uri for uri, suites in CONTAINERD_REPOS.items() if suite in suites), None)
    if uri is None and setting.uri is None:
        known = ", ".join(s for suites in CONTAINERD_REPOS.values() for s in suites)
        raise InvalidInput(
            f"Docker's repositories have no suite {suite} (they have {known})",
            problems=[
                Problem(
                    "site_services.packages.upstreams.containerd",
                    f"no uri for suite {suite}",
                    "set uri (and key_file) to a repository with containerd.io for that suite, or containerd: false",
                )
            ],
        )
    base = uri or str(setting.uri)
    title = f"Docker's apt repository ({suite} {CONTAINERD_COMPONENT})"
    own = ExtraRepo(
        "containerd", title, base, None, base + CONTAINERD_KEY_NAME, CONTAINERD_KEY_FINGERPRINT,
        suite=suite, component=CONTAINERD_COMPONENT,
    )  # fmt: skip
    out.repos.append(_repo(inventory, setting, own))
    out.packages.append(
        UpstreamPackage(CONTAINERD_PACKAGE, f"{pin}-*", CONTAINERD_ROLE, "containerd", "cluster.versions.containerd")
    )


def containerd_upstream_package(inventory: Any) -> dict[str, str] | None:
    """What role container_runtime installs in place of the distribution's containerd and runc: ``containerd.io``
    at exactly ``cluster.versions.containerd`` where the head node's mirror carries it; None: the distribution's."""
    source = inventory.site_services.packages
    if source.source != "mirror" or not source.upstreams.containerd.enabled:
        return None
    return {"package": CONTAINERD_PACKAGE, "version": inventory.cluster.resolved_versions().containerd}


def mirror_upstreams(inventory: Any) -> UpstreamSet:
    """The extra repositories a mirror build of ``inventory`` reads, and what it asks of each."""
    out = UpstreamSet()
    if inventory.site_services.packages.source != "mirror":
        return out
    kubernetes_upstream(inventory, out)
    nvidia_upstream(inventory, out)
    containerd_upstream(inventory, out)
    return out
