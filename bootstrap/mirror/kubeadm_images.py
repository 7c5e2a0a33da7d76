"""The control-plane images ``kubeadm init/join`` pulls for the inventory's Kubernetes version, and where the
kubelet pulls each from.

kube-apiserver, kube-controller-manager, kube-scheduler and kube-proxy carry the Kubernetes version; pause,
etcd and CoreDNS carry the versions that kubeadm release pins (``kubeadm config images list``). Those pins
move within a minor (kubeadm patch releases have raised etcd), so the table is keyed by exact release; a
version not in it is listed as an "unknown pin" with the command that answers it on a connected machine.

With ``kubernetes.image_repository`` set, kubeadm names ``<repository>/<name>:<tag>`` (CoreDNS as
``<repository>/coredns``); without it ``registry.k8s.io/...``, which nodes fetch through the site registry's
mirror (CoreDNS under ``coredns/coredns`` there, as upstream).
"""

from __future__ import annotations

from dataclasses import dataclass

from bootstrap.cluster.kubeadm import kubernetes_version
from bootstrap.inventory.models import Inventory

#: kubeadm's default image repository (``constants.DefaultImageRepository``).
DEFAULT_REPOSITORY = "registry.k8s.io"
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class KubeadmPins:
    """The pause, etcd and CoreDNS tags one kubeadm release pins."""

    pause: str
    etcd: str
    coredns: str


#: Exact Kubernetes release -> kubeadm's pins: ``PauseVersion``, ``SupportedEtcdVersion[minor]`` (the etcd
#: image kubeadm deploys for that control-plane minor) and ``CoreDNSVersion`` in
#: kubernetes/kubernetes ``cmd/kubeadm/app/constants/constants.go`` at the release's tag:
#: - v1.29.0: PauseVersion 3.9, SupportedEtcdVersion[29] 3.5.10-0, CoreDNSVersion v1.11.1.
#: - v1.32.0: PauseVersion 3.10, SupportedEtcdVersion[32] 3.5.16-0 (= DefaultEtcdVersion on release-1.32),
#:   CoreDNSVersion v1.11.3.
#: - v1.33.5 (profile ``current``): PauseVersion 3.10, SupportedEtcdVersion[33] 3.5.21-0, CoreDNSVersion
#:   v1.12.0 (CHANGELOG/CHANGELOG-1.33.md: no kubeadm pin change up to v1.33.5).
#: - v1.33.6: etcd 3.5.24-0 (CHANGELOG/CHANGELOG-1.33.md, v1.33.6: kubernetes/kubernetes#135018).
KUBEADM_PINS: dict[str, KubeadmPins] = {
    "1.29.0": KubeadmPins(pause="3.9", etcd="3.5.10-0", coredns="v1.11.1"),
    "1.32.0": KubeadmPins(pause="3.10", etcd="3.5.16-0", coredns="v1.11.3"),
    "1.33.5": KubeadmPins(pause="3.10", etcd="3.5.21-0", coredns="v1.12.0"),
    "1.33.6": KubeadmPins(pause="3.10", etcd="3.5.24-0", coredns="v1.12.0"),
}


@dataclass(frozen=True)
class ControlPlaneImage:
    """One image kubeadm pulls: its upstream reference, the reference the kubelet pulls (``served_as``), why,
    and (unknown pin) the fix instead of a tag."""

    ref: str
    served_as: str
    needed_by: str
    unknown_pin: str = ""


def unknown_pin_fix(version: str) -> str:
    """What an operator does when rackctl does not know kubeadm ``version``'s pins."""
    known = ", ".join(KUBEADM_PINS)
    return (
        f"run `kubeadm config images list --kubernetes-version {version}` on a connected machine and save + import "
        f"the pause, etcd and coredns images it names, or set cluster.versions.kubernetes to one rackctl knows "
        f"({known})"
    )


def control_plane_images(inv: Inventory) -> list[ControlPlaneImage]:
    """The images ``kubeadm init/join`` pulls for the inventory's version, upstream and as the kubelet names them."""
    version = kubernetes_version(inv)
    repository = inv.kubernetes.image_repository
    pins = KUBEADM_PINS.get(version.removeprefix("v"))
    why = f"kubernetes: kubeadm {version}"
    images = [
        ControlPlaneImage(f"{DEFAULT_REPOSITORY}/{name}:{version}", "", f"{why}: the {name} static pod")
        for name in CONTROL_PLANE
    ]
    images.append(
        ControlPlaneImage(f"{DEFAULT_REPOSITORY}/kube-proxy:{version}", "", f"{why}: the kube-proxy DaemonSet")
    )
    pinned = (
        ("pause", pins.pause if pins else "", "its pause image (image pull at init/join)"),
        ("etcd", pins.etcd if pins else "", "the etcd static pod"),
        ("coredns/coredns", pins.coredns if pins else "", "the CoreDNS Deployment"),
    )
    for upstream, tag, what in pinned:
        if tag:
            images.append(ControlPlaneImage(f"{DEFAULT_REPOSITORY}/{upstream}:{tag}", "", f"{why}: {what}"))
        else:
            images.append(
                ControlPlaneImage(f"{DEFAULT_REPOSITORY}/{upstream}", "", f"{why}: {what}", unknown_pin_fix(version))
            )
    if not repository:
        return images
    # kubeadm names every image under the repository by its last path element (coredns/coredns -> coredns)
    return [
        ControlPlaneImage(i.ref, f"{repository}/{i.ref.rsplit('/', 1)[1]}", i.needed_by, i.unknown_pin) for i in images
    ]
