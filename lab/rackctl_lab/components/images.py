"""The images a kubeadm cluster with Flannel and local-path storage runs, from the lab's own builds (no
container engine).

kubeadm's static pods and add-ons run ``registry.k8s.io/<name>:<tag>`` images, Flannel's chart
``ghcr.io/flannel-io/flannel`` and ``ghcr.io/flannel-io/flannel-cni-plugin``, local-path-provisioner's chart
``rancher/local-path-provisioner`` and, for its helper pods, ``busybox`` (this machine's busybox-static,
Debian's build of the same program, with the applets the helper scripts run). The lab has the programs
themselves (:mod:`rackctl_lab.components.build`), so each image holds the program(s) where upstream's image
has them (``/usr/local/bin`` for the Kubernetes components and etcd, the root for CoreDNS, pause and
flannel's CNI plugin, ``/opt/bin`` for flanneld), written as an OCI layout with
:func:`bootstrap.mirror.oci.write_layout` under the names kubeadm and the chart ask for. The programs that
run iptables or a shell (kube-proxy, flanneld, the plugin's installer, which is ``cp``) sit on a Debian
bookworm minbase layer with :data:`BASE_PACKAGES` (debootstrap, like the OS image; upstream uses
distroless-iptables and Alpine). Layouts are cached beside the binaries, keyed by the binaries' digests
and the base's packages, and packed as a tar that ``ctr images import`` (or ``skopeo copy oci-archive:``)
takes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bootstrap.mirror.oci import Entry, tree_layer, write_layout
from bootstrap.provision.image import debootstrap_tree, default_mirror
from bootstrap.provision.ramdisk import cache_lock, cache_root
from rackctl_lab.components.build import Built, cache_dir
from rackctl_lab.components.pins import (
    KEDA_VERSION,
    PROMETHEUS_OPERATOR_VERSION,
    KubernetesRelease,
    prometheus_release,
)

REGISTRY = "registry.k8s.io"
FLANNEL_REGISTRY = "ghcr.io/flannel-io"
#: Docker Hub, where local-path-provisioner's chart names its images (containerd's name for a bare ``name:tag``)
HUB = "docker.io"
#: the storage class's helper pods (mkdir and rm of a volume's directory): Debian's busybox-static as
#: ``busybox:latest``, the chart's default helper image, with the applets its scripts use
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = ("sh", "mkdir", "rm", "chmod", "ls")
PATH_ENV = "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Bump when what an image holds changes for the same binaries (part of every image's cache key).
RECIPE = 1
#: The Debian userland under kube-proxy and flanneld (iptables-nft, as Debian selects it, and its helpers).
BASE_PACKAGES = ("iptables", "nftables", "conntrack", "ipset", "iproute2", "kmod", "ca-certificates")
#: Emptied in the base layer (the directories stay): the runtime mounts over them, apt's caches and lists
#: are not needed in an image.
BASE_EMPTY = ("proc", "sys", "dev", "run", "tmp", "var/cache", "var/lib/apt")
#: where kube-prometheus-stack's images and keda's chart's live
QUAY = "quay.io"
KEDA_REGISTRY = "ghcr.io/kedacore"
#: flannel's CNI plugin image tag (upstream's tag shape: the CNI plugins' version, then ``-flannel<N>``)
FLANNEL_CNI_TAG = "v1.10.0-flannel1"


@dataclass(frozen=True)
class ImageRecipe:
    """One image: its repository under ``registry.k8s.io``, tag, programs (name -> path) and entrypoint."""

    repository: str
    tag: str
    programs: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...] = ()
    #: on a Debian bookworm minbase layer with these packages (:data:`BASE_PACKAGES` for the programs that run
    #: iptables or a shell); none: no base layer
    base_packages: tuple[str, ...] = ()
    registry: str = REGISTRY
    #: files of this machine the image holds (image path, path here) and symbolic links (image path, target)
    files: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    env: tuple[str, ...] = (PATH_ENV,)

    @property
    def ref(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"


@dataclass(frozen=True)
class Image:
    """An assembled image: its reference, the OCI archive (a tar of the layout) and the manifest digest."""

    ref: str
    archive: Path
    digest: str


def recipes(release: KubernetesRelease) -> list[ImageRecipe]:
    """The images a kubeadm cluster of ``release`` with Flannel runs."""
    tag = f"v{release.version}"
    bin_ = "usr/local/bin"
    return [
        *(
            ImageRecipe(name, tag, ((name, f"{bin_}/{name}"),))
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        ImageRecipe("kube-proxy", tag, (("kube-proxy", f"{bin_}/kube-proxy"),), base_packages=BASE_PACKAGES),
        # kubeadm's etcd image tag carries a "-0" revision; etcdctl rides along for snapshots (`crictl exec`).
        ImageRecipe(
            "etcd", f"{release.etcd.removeprefix('v')}-0", (("etcd", f"{bin_}/etcd"), ("etcdctl", f"{bin_}/etcdctl"))
        ),
        ImageRecipe("coredns/coredns", release.coredns, (("coredns", "coredns"),), entrypoint=("/coredns",)),
        ImageRecipe("pause", release.pause, (("pause", "pause"),), entrypoint=("/pause",)),
        ImageRecipe(
            "flannel",
            release.flannel,
            (("flanneld", "opt/bin/flanneld"),),
            base_packages=BASE_PACKAGES,
            registry=FLANNEL_REGISTRY,
        ),
        # its initContainer copies /flannel onto the node (``cp``: the base's coreutils)
        ImageRecipe(
            "flannel-cni-plugin",
            FLANNEL_CNI_TAG,
            (("flannel", "flannel"),),
            base_packages=BASE_PACKAGES,
            registry=FLANNEL_REGISTRY,
        ),
        # the storage class: the provisioner on PATH as its chart's command expects, its helper pods' busybox
        ImageRecipe(
            "rancher/local-path-provisioner",
            release.local_path_provisioner,
            (("local-path-provisioner", "usr/bin/local-path-provisioner"),),
            registry=HUB,
        ),
        ImageRecipe(
            "library/busybox",
            "latest",
            (),
            registry=HUB,
            files=(("bin/busybox", str(BUSYBOX)),),
            links=tuple((f"bin/{applet}", "busybox") for applet in BUSYBOX_APPLETS),
        ),
    ]


def _program_image(repository: str, tag: str, program: str, path: str, registry: str) -> ImageRecipe:
    """An image of one program at ``path``, which is also its entrypoint."""
    return ImageRecipe(repository, tag, ((program, path),), entrypoint=(f"/{path}",), registry=registry)


def autoscaling_recipes() -> list[ImageRecipe]:
    """The images the lab's stand-in charts of kube-prometheus-stack and keda run, under upstream's names,
    each program where upstream's image has it (``/bin`` for Prometheus' projects, the root for KEDA's)."""
    keda = KEDA_VERSION.removeprefix("v")
    operator = PROMETHEUS_OPERATOR_VERSION
    return [
        _program_image("prometheus/prometheus", prometheus_release(), "prometheus", "bin/prometheus", QUAY),
        _program_image(
            "prometheus-operator/prometheus-operator", operator, "prometheus-operator", "bin/operator", QUAY
        ),
        _program_image(
            "prometheus-operator/prometheus-config-reloader",
            operator,
            "prometheus-config-reloader",
            "bin/prometheus-config-reloader",
            QUAY,
        ),
        _program_image("keda", keda, "keda", "keda", KEDA_REGISTRY),
        _program_image("keda-metrics-apiserver", keda, "keda-adapter", "keda-adapter", KEDA_REGISTRY),
    ]


def assemble_autoscaling(built: list[Built]) -> list[Image]:
    """The stand-in charts' images from ``built`` (every program of ``AUTOSCALING_PROGRAMS``)."""
    return _assemble(autoscaling_recipes(), built)


def _assemble(wanted: list[ImageRecipe], built: list[Built]) -> list[Image]:
    """``wanted``'s images from ``built`` (refused, naming them, when a program they hold was not built)."""
    binaries = {b.name: b for b in built}
    missing = sorted({name for recipe in wanted for name, _ in recipe.programs} - set(binaries))
    if missing:
        raise ValueError(f"images need programs that were not built: {', '.join(missing)}")
    return [assemble_one(recipe, binaries) for recipe in wanted]


def _recipes(release: KubernetesRelease, skip: tuple[str, ...]) -> list[ImageRecipe]:
    return [r for r in recipes(release) if r.repository not in skip]


def needed_programs(release: KubernetesRelease, skip: tuple[str, ...] = ()) -> list[str]:
    """Every program the images hold (but those of the repositories in ``skip``), for ``--only``."""
    return sorted({name for recipe in _recipes(release, skip) for name, _ in recipe.programs})


def assemble(release: KubernetesRelease, built: list[Built], skip: tuple[str, ...] = ()) -> list[Image]:
    """The images of ``release`` (but ``skip``'s repositories) from ``built``, from the cache where it can."""
    return _assemble(_recipes(release, skip), built)


def base_tree(packages: tuple[str, ...] = BASE_PACKAGES) -> Path:
    """The Debian bookworm minbase tree with ``packages`` (debootstrap, cached like the OS image's)."""
    return debootstrap_tree("bookworm", default_mirror(), cache_root(), packages=packages)


def _base_layer(packages: tuple[str, ...]) -> bytes:
    return tree_layer(base_tree(packages), empty=BASE_EMPTY)


def _sha256(path: Path) -> str:
    """A file of this machine's digest (a clear error naming it and its package where it is missing)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; install the Debian package that ships it (busybox-static)")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assemble_one(recipe: ImageRecipe, binaries: dict[str, Built]) -> Image:
    """One image of ``recipe`` from ``binaries`` (its programs) and this machine's files, from the cache where
    it can."""
    base = [recipe.base_packages, BASE_EMPTY] if recipe.base_packages else []
    env = [] if recipe.env == (PATH_ENV,) else [recipe.env]  # an image with the default env keeps its cache key
    spec = json.dumps(
        [
            recipe.ref,
            recipe.programs,
            recipe.entrypoint,
            RECIPE,
            [binaries[n].sha256 for n, _ in recipe.programs],
            [[path, _sha256(Path(source))] for path, source in recipe.files],
            recipe.links,
            *base,
            *env,
        ]
    )
    key = hashlib.sha256(spec.encode()).hexdigest()[:12]
    entry = cache_dir() / "images" / f"{recipe.repository.replace('/', '_')}-{recipe.tag}-{key}"
    archive, digest_file = entry / "image.tar", entry / "digest"
    with cache_lock(entry):
        if not (archive.is_file() and digest_file.is_file()):
            layout = entry / "layout"
            entries = [Entry(path, source=Path(binaries[name].path)) for name, path in recipe.programs]
            entries += [Entry(path, source=Path(source)) for path, source in recipe.files]
            entries += [Entry(path, link=target) for path, target in recipe.links]
            digest = write_layout(
                layout,
                entries,
                tag=recipe.tag,
                cmd=[],
                entrypoint=list(recipe.entrypoint) or None,
                env=recipe.env,
                name=recipe.ref,
                level=1,
                base=(_base_layer(recipe.base_packages),) if recipe.base_packages else (),
            )
            partial = archive.with_suffix(".part")
            with tarfile.open(partial, "w") as tar:
                for path in sorted(layout.rglob("*")):
                    tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
            partial.rename(archive)
            shutil.rmtree(layout)
            digest_file.write_text(digest)
    return Image(recipe.ref, archive, digest_file.read_text().strip())
