"""The upstream images the cluster pulls, for air-gapped sites: derived from the inventory, looked up in the
site registry, and imported into it from archives the operator saved on a connected machine.

Nodes pull e.g. ``nvcr.io/nvidia/cuda:TAG`` through the site registry as a mirror (``roles/container_runtime``
writes a ``hosts.toml`` per upstream registry): containerd asks the site registry for the same repository path
without the upstream host (``nvidia/cuda:TAG``), so that is where each image goes. Each pin stays where the
stage uses it (:data:`~bootstrap.validation.workloads.CUDA_IMAGE`, ...); this module only collects them.

An archive is ``<DIR>/<ref with '/', ':' and '@' as '_'>.tar``, an ``oci-archive`` or a ``docker-archive``
(:meth:`UpstreamImage.save_command` writes one; ``docker save`` writes the other).
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.cluster.gpu_operator import driver_image
from bootstrap.cluster.vip import kube_vip_image, kube_vip_upstream
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.trtllm import version_info
from bootstrap.mirror.chart_images import ChartImages, normalised
from bootstrap.mirror.images import PushError, registry_address, registry_certs, served_digest, skopeo
from bootstrap.mirror.kubeadm_images import control_plane_images, sandbox_image
from bootstrap.validation.workloads import CUDA_IMAGE, NCCL_IMAGE, nccl_targets, smoke_targets

#: What the registry says (in skopeo's message) when it does not hold a repository or tag.
_ABSENT = ("manifest unknown", "name unknown", "not found")
#: The nodes' platform: skopeo keeps only this image of a multi-platform upstream.
SAVE_PLATFORM = "--override-os linux --override-arch amd64"


@dataclass(frozen=True)
class UpstreamImage:
    """One upstream image: its reference (host/repository:tag), its repository:tag in the site registry, and
    the stages or checks that pull it."""

    ref: str
    path: str
    needed_by: tuple[str, ...]
    #: set when rackctl does not know the tag: what to do instead (the image cannot be looked up or imported)
    unknown_pin: str = ""

    @property
    def archive(self) -> str:
        """The archive's file name under ``--from DIR``."""
        return re.sub(r"[/:@]", "_", self.ref) + ".tar"

    @property
    def pin(self) -> str:
        """``tag <tag>``, ``digest <digest>`` or ``unknown``: what fixes the image's content."""
        if self.unknown_pin:
            return "unknown"
        if "@" in self.ref:
            return "digest " + self.ref.split("@", 1)[1]
        return "tag " + self.ref.rsplit(":", 1)[1]

    def save_command(self, folder: Path | str = "DIR") -> str:
        """The command, run on a connected machine, that writes this image's archive into ``folder``."""
        return f"skopeo {SAVE_PLATFORM} copy docker://{self.ref} oci-archive:{folder}/{self.archive}"

    def describe(self, address: str) -> dict[str, Any]:
        out = {
            "image": self.ref,
            "target": f"{address}/{self.path}",
            "pin": self.pin,
            "needed_by": list(self.needed_by),
        }
        if not self.unknown_pin:  # no tag: no archive name either
            out["archive"] = self.archive
        return out


def registry_path(ref: str) -> str:
    """``ref`` without its registry host, as containerd asks a mirror for it (``nvcr.io/nvidia/cuda:1`` ->
    ``nvidia/cuda:1``; Docker Hub's ``busybox:1`` -> ``library/busybox:1``)."""
    return normalised(ref).partition("/")[2]


def upstream_images(inv: Inventory, charts: list[ChartImages] | None = None) -> list[UpstreamImage]:
    """The upstream images this inventory's cluster pulls, each once with every stage or check that needs it;
    with ``charts`` (:func:`~bootstrap.mirror.chart_images.chart_images`), the images of each rendered chart."""
    wanted: dict[str, tuple[str, list[str], str]] = {}

    def add(ref: str, needed_by: str, served_as: str | None = None, unknown_pin: str = "") -> None:
        wanted.setdefault(ref, (registry_path(served_as or ref), [], unknown_pin))[1].append(needed_by)

    for image in control_plane_images(inv):
        add(image.ref, image.needed_by, image.served_as or None, image.unknown_pin)
    upstream, named = sandbox_image(inv)
    add(upstream, "container_runtime: containerd's sandbox (pause) image of every pod", named)
    if inv.kubernetes.api_endpoint == "kube-vip":
        add(kube_vip_upstream(inv), "kubernetes: the kube-vip static pod on each control plane", kube_vip_image(inv))
    driver = driver_image(inv)
    if driver:
        add(driver, "nvidia: the GPU operator's driver container (driver: operator)")
    if smoke_targets(inv):
        add(CUDA_IMAGE, "validate-cluster: the cuda-smoke Job of each GPU product")
    if nccl_targets(inv)[0]:
        add(NCCL_IMAGE, "validate-cluster --nccl: the nccl-allreduce Job of each SXM node")
    for spec in inv.models:
        add(version_info(spec.trtllm_version).image, f"triton: model {spec.name}")
    for chart in charts or []:
        for ref, where in chart.images.items():
            add(ref, f"chart {chart.release.chart} {chart.release.version} ({where})")
    return [UpstreamImage(ref, path, tuple(needs), unknown) for ref, (path, needs, unknown) in wanted.items()]


def archive_transport(archive: Path) -> str:
    """skopeo's transport for ``archive``: ``oci-archive`` or ``docker-archive``, told by its members."""
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name == "oci-layout":
                    return "oci-archive"
                if name == "manifest.json":
                    return "docker-archive"
    except (tarfile.TarError, OSError) as exc:
        raise ValueError(f"{archive} is not a readable tar archive ({exc})") from exc
    raise ValueError(f"{archive} is neither an oci-archive (no oci-layout) nor a docker-archive (no manifest.json)")


def sync_upstream(
    images: list[UpstreamImage],
    registry: dict[str, Any],
    *,
    from_dir: Path | None = None,
    apply: bool = False,
    wrap: Callable[[list[str]], list[str]] = list,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[dict[str, Any]]:
    """Look each image up in ``registry`` (``rackctl_registry`` vars); with ``from_dir``, find the archive of
    each one the registry lacks and (``apply``) copy it in under the image's registry path. Images the
    registry holds are left unchanged. One result per image: ``state``, ``ok``, and ``problem``/``fix``."""
    address = registry_address(registry)
    results: list[dict[str, Any]] = []
    unanswered: str | None = None  # the registry's error once it did not answer: not asked again
    with registry_certs(registry) as certs:
        for image in images:
            result = image.describe(address)
            if image.unknown_pin:
                result.update(
                    state="unknown pin",
                    ok=False,
                    problem=f"rackctl does not know the tag of {image.ref} for {'; '.join(image.needed_by)}",
                    fix=image.unknown_pin,
                )
                results.append(result)
                continue
            if unanswered is None:
                progress(f"looking up {image.path} in {address}")
                state, result["registry_digest"], unanswered = _look_up(wrap, f"{address}/{image.path}", certs)
            else:
                state, result["registry_digest"] = "unknown", None
            result["state"] = state
            if unanswered:
                result["registry_error"] = unanswered
            if state != "present" and from_dir is not None:
                _from_archive(result, image, from_dir, address, apply=apply, wrap=wrap, certs=certs, progress=progress)
            result["ok"] = "problem" not in result
            results.append(result)
    return results


def _look_up(wrap: Callable[[list[str]], list[str]], ref: str, certs: str | None) -> tuple[str, str | None, str | None]:
    """(state, digest, error) of ``ref`` in the registry: present, absent, or unknown (the registry's error)."""
    try:
        return "present", served_digest(wrap, ref, certs), None
    except PushError as exc:
        if any(m in str(exc).lower() for m in _ABSENT):
            return "absent", None, None
        return "unknown", None, str(exc)


def _from_archive(
    result: dict[str, Any],
    image: UpstreamImage,
    from_dir: Path,
    address: str,
    *,
    apply: bool,
    wrap: Callable[[list[str]], list[str]],
    certs: str | None,
    progress: Callable[[str], None],
) -> None:
    """Fill ``result`` for an image the registry lacks: its archive under ``from_dir``, and the import."""
    archive = from_dir.resolve() / image.archive
    result["archive_path"] = str(archive)
    if not archive.is_file():
        result.update(state="archive missing", problem=f"{archive} not found", fix=image.save_command(from_dir))
        return
    try:
        transport = archive_transport(archive)
    except ValueError as exc:
        result.update(state="bad archive", problem=str(exc), fix=image.save_command(from_dir))
        return
    result["archive_format"] = transport
    if not apply:
        result["state"] = "would import"
        return
    if result["state"] == "unknown":
        result.update(
            state="not imported",
            problem=f"the registry {address} did not answer",
            fix="start the registry (rackctl lab serve up in the lab; role head_mirror on a site), then run this again",
        )
        return
    target = f"{address}/{image.path}"
    progress(f"importing {image.archive} as {target}")
    try:
        cert_args = [f"--dest-cert-dir={certs}"] if certs else []
        skopeo(wrap, "copy", "--quiet", *cert_args, f"{transport}:{archive}", f"docker://{target}")
        result["registry_digest"] = served_digest(wrap, target, certs)
        result["state"] = "imported"
    except PushError as exc:
        result.update(
            state="import failed",
            problem=str(exc),
            fix=f"check that the archive is whole, else save it again: {image.save_command(from_dir)}",
        )
