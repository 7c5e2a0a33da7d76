"""The control-plane images kubeadm asks for, assembled from the lab's own builds (no container engine).

kubeadm's static pods and add-ons run ``registry.k8s.io/<name>:<tag>`` images. The lab has the programs
themselves (:mod:`rackctl_lab.components.build`), so each image is one layer holding the program(s) where
upstream's image has them (``/usr/local/bin`` for the Kubernetes components and etcd, the root for CoreDNS
and pause), written as an OCI layout with :func:`bootstrap.mirror.oci.write_layout` under the names
``kubeadm config images list`` prints. Layouts are cached beside the binaries, keyed by the binaries'
digests, and packed as a tar that ``ctr images import`` (or ``skopeo copy oci-archive:``) takes.

kube-proxy is not here: its image carries iptables/nft userland, which the lab does not assemble yet.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bootstrap.mirror.oci import Entry, write_layout
from bootstrap.provision.ramdisk import cache_lock
from rackctl_lab.components.build import Built, cache_dir
from rackctl_lab.components.pins import KubernetesRelease

REGISTRY = "registry.k8s.io"
PATH_ENV = "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Bump when what an image holds changes for the same binaries (part of every image's cache key).
RECIPE = 1


@dataclass(frozen=True)
class ImageRecipe:
    """One image: its repository under ``registry.k8s.io``, tag, programs (name -> path) and entrypoint."""

    repository: str
    tag: str
    programs: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{REGISTRY}/{self.repository}:{self.tag}"


@dataclass(frozen=True)
class Image:
    """An assembled image: its reference, the OCI archive (a tar of the layout) and the manifest digest."""

    ref: str
    archive: Path
    digest: str


def recipes(release: KubernetesRelease) -> list[ImageRecipe]:
    """The images a kubeadm control plane of ``release`` runs (kube-proxy excepted, see the module docstring)."""
    tag = f"v{release.version}"
    bin_ = "usr/local/bin"
    return [
        *(
            ImageRecipe(name, tag, ((name, f"{bin_}/{name}"),))
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        # kubeadm's etcd image tag carries a "-0" revision; etcdctl rides along for snapshots (`crictl exec`).
        ImageRecipe(
            "etcd", f"{release.etcd.removeprefix('v')}-0", (("etcd", f"{bin_}/etcd"), ("etcdctl", f"{bin_}/etcdctl"))
        ),
        ImageRecipe("coredns/coredns", release.coredns, (("coredns", "coredns"),), entrypoint=("/coredns",)),
        ImageRecipe("pause", release.pause, (("pause", "pause"),), entrypoint=("/pause",)),
    ]


def _recipes(release: KubernetesRelease, skip: tuple[str, ...]) -> list[ImageRecipe]:
    return [r for r in recipes(release) if r.repository not in skip]


def needed_programs(release: KubernetesRelease, skip: tuple[str, ...] = ()) -> list[str]:
    """Every program the images hold (but those of the repositories in ``skip``), for ``--only``."""
    return sorted({name for recipe in _recipes(release, skip) for name, _ in recipe.programs})


def assemble(release: KubernetesRelease, built: list[Built], skip: tuple[str, ...] = ()) -> list[Image]:
    """The images of ``release`` (but ``skip``'s repositories) from ``built``, from the cache where it can."""
    binaries = {b.name: b for b in built}
    missing = sorted(set(needed_programs(release, skip)) - set(binaries))
    if missing:
        raise ValueError(f"images need programs that were not built: {', '.join(missing)}")
    return [_assemble_one(recipe, binaries) for recipe in _recipes(release, skip)]


def _assemble_one(recipe: ImageRecipe, binaries: dict[str, Built]) -> Image:
    spec = json.dumps(
        [recipe.ref, recipe.programs, recipe.entrypoint, RECIPE, [binaries[n].sha256 for n, _ in recipe.programs]]
    )
    key = hashlib.sha256(spec.encode()).hexdigest()[:12]
    entry = cache_dir() / "images" / f"{recipe.repository.replace('/', '_')}-{recipe.tag}-{key}"
    archive, digest_file = entry / "image.tar", entry / "digest"
    with cache_lock(entry):
        if not (archive.is_file() and digest_file.is_file()):
            layout = entry / "layout"
            entries = [Entry(path, source=Path(binaries[name].path)) for name, path in recipe.programs]
            digest = write_layout(
                layout,
                entries,
                tag=recipe.tag,
                cmd=[],
                entrypoint=list(recipe.entrypoint) or None,
                env=(PATH_ENV,),
                name=recipe.ref,
                level=1,
            )
            partial = archive.with_suffix(".part")
            with tarfile.open(partial, "w") as tar:
                for path in sorted(layout.rglob("*")):
                    tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
            partial.rename(archive)
            shutil.rmtree(layout)
            digest_file.write_text(digest)
    return Image(recipe.ref, archive, digest_file.read_text().strip())
