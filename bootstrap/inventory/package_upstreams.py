"""The repositories beside Debian that ``rackctl mirror build`` puts into the head node's mirror.

``site_services.packages.upstreams`` (used with ``source: mirror`` only):

- ``kubernetes``: Kubernetes' ``pkgs.k8s.io`` repository of the cluster's minor version (kubeadm, kubelet,
  kubectl, cri-tools, kubernetes-cni). On by default: the kubernetes stage installs from the mirror.
- ``nvidia``: NVIDIA's CUDA repository for Debian 12 (the host driver, Fabric Manager). Unset: on exactly
  when a GPU profile (or ``cluster.gpu_driver``) installs the driver on the host.
- ``containerd``: Docker's apt repository for the mirror's suite (``containerd.io`` at exactly
  ``cluster.versions.containerd``; role ``container_runtime`` then installs that instead of the distribution's
  containerd and runc). Off unless set: it is a third party's archive a site chooses to trust, and Debian 12's
  containerd 1.6 runs the kubelet up to 1.37 (from 1.38 the inventory's rules ask for containerd 2 and name
  this switch).

Each is ``true``/``false`` or ``{uri, key_file}``: an air-gapped site points ``uri`` at its staging copy of
the flat repository and ``key_file`` (relative to the inventory) at the key that signs it. Without
``key_file`` the key is fetched from the documented URL at build time and its fingerprint checked against
the value pinned here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: pkgs.k8s.io: one flat repository per minor version, signed by the key it publishes as ``Release.key``.
KUBERNETES_REPO = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"
KUBERNETES_KEY_NAME = "Release.key"
#: "isv:kubernetes OBS Project <isv:kubernetes@build.opensuse.org>", the key of every pkgs.k8s.io minor
#: repository (gpg's listing of v1.26's and v1.27's Release.key in kubernetes/kubernetes#128609; its
#: expiry was extended in place, same fingerprint: kubernetes/release#3818).
KUBERNETES_KEY_FINGERPRINT = "DE15B14486CD377B9E876E1A234654DA9A296436"
#: NVIDIA's CUDA repository for Debian 12, a flat repository signed by ``3bf863cc.pub``.
NVIDIA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
NVIDIA_KEY_NAME = "3bf863cc.pub"
#: "cudatools <cudatools@nvidia.com>", key id 3BF863CC: the Debian/Ubuntu repositories' key since NVIDIA's
#: 2022 rotation (NVIDIA/cuda-repo-management#4); its full fingerprint as apt's verifier names it in
#: NVIDIA/cuda-repo-management#39.
NVIDIA_KEY_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
#: The Debian suite NVIDIA_REPO is built for.
NVIDIA_SUITE = "bookworm"
#: Docker's apt repositories (one per distribution, a suite per release, component ``stable``), signed by the
#: key each publishes as ``gpg``; the suites of each that Docker's install guides list.
CONTAINERD_REPOS = {
    "https://download.docker.com/linux/debian/": ("bullseye", "bookworm", "trixie"),
    "https://download.docker.com/linux/ubuntu/": ("jammy", "noble"),
}
CONTAINERD_KEY_NAME = "gpg"
CONTAINERD_COMPONENT = "stable"
#: "Docker Release (CE deb) <docker@docker.com>", the fingerprint Docker's install guides give for that key.
CONTAINERD_KEY_FINGERPRINT = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"


class PackageUpstream(BaseModel):
    """One extra repository: on/off (``None``: decided from the inventory), and where it is for this site."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    enabled: bool | None = Field(default=None, description="Mirror it (unset: the default of this upstream).")
    uri: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s]+/$",
        description="A copy of the flat repository (ends with /); unset: the upstream's own.",
    )
    key_file: Path | None = Field(
        default=None,
        description="The key that signs it (armored or binary, relative to the inventory); unset: fetched "
        "from the upstream's documented URL and checked against rackctl's pinned fingerprint.",
    )

    @property
    def customised(self) -> bool:
        return self.uri is not None or self.key_file is not None


def _shorthand(value: Any) -> Any:
    """``true``/``false`` for ``{enabled: ...}``; a mapping with ``uri``/``key_file`` only means "on"."""
    if isinstance(value, bool):
        return {"enabled": value}
    if isinstance(value, dict) and "enabled" not in value:
        return {**value, "enabled": True}
    return value


class PackageUpstreams(BaseModel):
    """``site_services.packages.upstreams``: the repositories beside Debian's the mirror carries."""

    model_config = ConfigDict(extra="forbid")

    kubernetes: PackageUpstream = Field(
        default_factory=lambda: PackageUpstream(enabled=True),
        description="pkgs.k8s.io for cluster.versions.kubernetes' minor (kubeadm, kubelet, kubectl); default on.",
    )
    nvidia: PackageUpstream = Field(
        default_factory=PackageUpstream,
        description="NVIDIA's CUDA repository for Debian 12 (host driver, Fabric Manager); default: on where a "
        "GPU profile installs the driver on the host.",
    )
    containerd: PackageUpstream = Field(
        default_factory=PackageUpstream,
        description="Docker's apt repository for the mirror's suite (containerd.io at exactly "
        "cluster.versions.containerd, installed instead of the distribution's containerd); default off.",
    )

    @field_validator("kubernetes", "nvidia", "containerd", mode="before")
    @classmethod
    def _bool_or_mapping(cls, value: Any) -> Any:
        return _shorthand(value)
