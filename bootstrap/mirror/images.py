"""The registry's images rackctl builds itself, pushed with skopeo.

Today that is ``rackctl/check``, the lab checks' busybox-static image, written as an OCI layout (no container
engine, no internet). The upstream images the cluster pulls (CUDA, NCCL, Triton, ...) are imported from
archives by :mod:`bootstrap.mirror.upstream_images`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.oci import Entry, write_layout

BUSYBOX = Path("/bin/busybox")
#: How long one manifest lookup may take (a registry address nothing answers on would stall for minutes).
INSPECT_TIMEOUT = "120s"
#: the applets the checks use (each a symlink to busybox)
BUSYBOX_APPLETS = ("sh", "echo", "cat", "sleep", "true", "uname", "ls", "hostname")


class PushError(RackctlError):
    """skopeo could not push or inspect an image (its message is in the error)."""


@dataclass(frozen=True)
class Image:
    """An image the nodes pull: its repository and tag in the registry, and how rackctl makes it."""

    repository: str
    tag: str
    build: Callable[[Path], str]
    purpose: str

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}"


def busybox_version() -> str:
    """busybox-static's Debian version as an image tag (``1.35.0-4+b3`` -> ``1.35.0-4-b3``)."""
    if not BUSYBOX.exists():
        raise EnvironmentMissing(f"{BUSYBOX} not found; install the Debian package 'busybox-static'")
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "busybox-static"], capture_output=True, text=True, check=False
    )
    version = proc.stdout.strip().split(":")[-1] if proc.returncode == 0 else "local"
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in version)


def build_check_image(out: Path) -> str:
    """The checks' image: busybox-static with a few applets; ``CMD ["/bin/sh"]``. Returns the manifest digest."""
    entries = [Entry("bin/busybox", source=BUSYBOX)] + [Entry(f"bin/{a}", link="busybox") for a in BUSYBOX_APPLETS]
    return write_layout(out, entries, tag=busybox_version(), cmd=["/bin/sh"])


def required_images(inventory: Any) -> list[Image]:
    """The images the stages need in the registry (today: the lab checks' image)."""
    return [Image("rackctl/check", busybox_version(), build_check_image, "containerd check (runs a container)")]


def skopeo(wrap: Callable[[list[str]], list[str]], *args: str) -> str:
    """Run ``skopeo ARGS`` (through ``wrap``); its stdout, else :class:`PushError` with its stderr."""
    if shutil.which("skopeo") is None:
        raise EnvironmentMissing("skopeo not found; install the Debian package 'skopeo'")
    proc = subprocess.run(wrap(["skopeo", *args]), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        verb = next(a for a in args if not a.startswith("-"))
        raise PushError(f"skopeo {verb} failed: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def registry_address(registry: dict[str, Any]) -> str:
    """The registry's ``host:port`` (``rackctl_registry.address``), else a clear error."""
    address = registry.get("address")
    if not address:
        raise InvalidInput(
            "no registry address",
            problems=[
                Problem(
                    "site_services.registry",
                    "the registry has no host",
                    "give the head node a PXE address or set site_services.registry.host",
                )
            ],
        )
    return str(address)


@contextmanager
def registry_certs(registry: dict[str, Any]) -> Iterator[str | None]:
    """A directory holding the registry's CA as ``ca.crt`` for skopeo's ``--*cert-dir``; None: system trust."""
    if not registry.get("ca_pem"):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="rackctl-certs-") as certs:
        (Path(certs) / "ca.crt").write_text(registry["ca_pem"])
        yield certs


def served_digest(wrap: Callable[[list[str]], list[str]], ref: str, certs: str | None) -> str:
    """The digest of the manifest the registry serves for ``ref`` (``host:port/repository:tag``)."""
    cert_args = [f"--cert-dir={certs}"] if certs else []
    raw = skopeo(wrap, f"--command-timeout={INSPECT_TIMEOUT}", "inspect", "--raw", *cert_args, f"docker://{ref}")
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


def push_images(
    layout: MirrorLayout,
    images: list[Image],
    registry: dict[str, Any],
    *,
    wrap: Callable[[list[str]], list[str]] = list,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[dict[str, Any]]:
    """Build each image's OCI layout and copy it into ``registry`` (``rackctl_registry`` vars); then read
    each back from the registry and compare digests. One result per image."""
    address = registry_address(registry)
    results = []
    with registry_certs(registry) as certs:
        cert_args = [f"--dest-cert-dir={certs}"] if certs else []
        for image in images:
            progress(f"building {image.ref}")
            local = layout.images / image.repository.replace("/", "_")
            digest = image.build(local)
            progress(f"pushing {image.ref} to {address}")
            dest = f"docker://{address}/{image.ref}"
            skopeo(wrap, "copy", "--quiet", "--preserve-digests", *cert_args, f"oci:{local}:{image.tag}", dest)
            served = served_digest(wrap, f"{address}/{image.ref}", certs)
            results.append(
                {
                    "image": f"{address}/{image.ref}",
                    "purpose": image.purpose,
                    "digest": digest,
                    "registry_digest": served,
                    "ok": served == digest,
                }
            )
    return results


def plan_images(images: list[Image], registry: dict[str, Any]) -> list[dict[str, Any]]:
    """What :func:`push_images` would push, and where."""
    return [{"image": f"{registry.get('address')}/{i.ref}", "purpose": i.purpose} for i in images]
