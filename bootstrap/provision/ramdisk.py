"""Build the deploy ramdisk: a Debian kernel, busybox-static and the modules a hardware profile needs.

The kernel comes from the distribution package (``linux-image-amd64`` → the actual ``linux-image-*``),
unpacked once into ``~/.cache/rackctl/kernel/<package>_<version>/`` where ``depmod -b`` writes the
modules.dep Debian does not ship. The profile's modules are resolved with their dependencies from that
modules.dep, decompressed, copied into the initramfs with their own ``depmod``-made modules.dep, and listed
in load order (dependencies first, so ``virtio_ring`` precedes ``virtio``) in ``/etc/rackctl/modules``.
``/init`` is :file:`templates/ramdisk/init`. Results are cached by the content of every input.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.fsutil import atomic_write_bytes, atomic_write_text

#: Modules per hardware profile (their dependencies are added from modules.dep).
PROFILES: dict[str, tuple[str, ...]] = {
    # qemu/libvirt lab VMs: virtio NIC and disk, ext4 to install the host key.
    "lab": ("virtio_pci", "virtio_net", "virtio_blk", "virtio_scsi", "sd_mod", "ext4", "crc32c_generic"),
    # Dell PowerEdge R660/R760xa/XE8640/XE9680: Broadcom/Intel/Mellanox NICs, BOSS-N1 (NVMe), PERC, SATA.
    "dell": (
        "tg3",
        "bnxt_en",
        "igb",
        "ixgbe",
        "i40e",
        "ice",
        "mlx5_core",
        "nvme",
        "megaraid_sas",
        "mpi3mr",
        "mpt3sas",
        "ahci",
        "sd_mod",
        "ext4",
        "crc32c_generic",
    ),
}
KERNEL_META_PACKAGE = "linux-image-amd64"
BUSYBOX = Path("/bin/busybox")
#: util-linux's fallocate (busybox's cannot): ``fallocate -z`` zeroes the image's holes on the node's disk with
#: the kernel's ZERO_RANGE (WRITE ZEROES on the device), copied with the libraries it links (libc only).
FALLOCATE = Path("/usr/bin/fallocate")
#: zstd decompresses the image's ranges (zstd frames, see :mod:`bootstrap.provision.blockmap`); pigz (zlib's
#: inflate, about twice as fast as busybox's gunzip in a TCG guest) the whole gzipped image of maps-less
#: installs; coreutils' sha256sum hashes about twice as fast as busybox's. All copied with their libraries.
ZSTD = Path("/usr/bin/zstd")
PIGZ = Path("/usr/bin/pigz")
SHA256SUM = Path("/usr/bin/sha256sum")
#: Native tools in the ramdisk besides busybox, each with the Debian package that has it.
NATIVE_TOOLS: dict[Path, str] = {FALLOCATE: "util-linux", PIGZ: "pigz", SHA256SUM: "coreutils", ZSTD: "zstd"}


def cache_root() -> Path:
    """``$RACKCTL_CACHE`` or ``~/.cache/rackctl``."""
    return Path(os.environ.get("RACKCTL_CACHE") or Path.home() / ".cache" / "rackctl")


@dataclass(frozen=True)
class KernelTree:
    """An unpacked kernel package."""

    package: str
    version: str  #: package version, e.g. 6.1.192-2
    release: str  #: ``uname -r``, e.g. 6.1.0-56-amd64
    root: Path

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.release


@dataclass
class Ramdisk:
    """A built deploy ramdisk (kernel + initrd) and what went into it."""

    kernel: Path
    initrd: Path
    release: str
    profile: str
    modules: list[str] = field(default_factory=list)  #: load order, paths relative to lib/modules/<release>
    sha256: str = ""

    def as_dict(self) -> dict[str, object]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` so concurrent builds of the same cache wait instead of racing."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def mark_used(entry: Path) -> None:
    """Record that a build reused the cache entry ``entry`` (its mtime): ``rackctl image prune`` keeps the recent."""
    with contextlib.suppress(OSError):  # a read-only cache still serves; it is only pruned less well
        os.utime(entry)


def remove_tree(path: Path) -> None:
    """Delete a build directory, first unmounting anything a tool left mounted below it (never follow mounts)."""
    resolved = str(path.resolve())
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m == resolved or m.startswith(resolved + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    if any(line.split()[1].startswith(resolved + "/") for line in Path("/proc/self/mounts").read_text().splitlines()):
        raise RackctlError(f"{path} still has mounts below it; not deleting it")
    shutil.rmtree(path, ignore_errors=True)


def _run(argv: list[str], **kwargs: object) -> str:
    try:
        done = subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    except FileNotFoundError as exc:
        raise EnvironmentMissing(f"{argv[0]} not found; install it (see scripts/apt-packages.txt)") from exc
    except subprocess.CalledProcessError as exc:
        raise RackctlError(f"{' '.join(argv[:3])} failed: {exc.stderr.strip()[-500:]}") from exc
    return done.stdout


def resolve_kernel_package(meta: str = KERNEL_META_PACKAGE) -> tuple[str, str]:
    """The real kernel package behind the meta package and its candidate version (``apt-cache``)."""
    deps = [
        line.split(":", 1)[1].strip()
        for line in _run(["apt-cache", "depends", meta]).splitlines()
        if line.strip().startswith("Depends:") and "linux-image-" in line
    ]
    if not deps:
        raise EnvironmentMissing(f"apt-cache knows no kernel behind {meta}; run apt-get update")
    package = deps[0]
    version = next(
        (
            line.split(":", 1)[1].strip()
            for line in _run(["apt-cache", "policy", package]).splitlines()
            if line.strip().startswith("Candidate:")
        ),
        "",
    )
    return package, version


def fetch_kernel(cache: Path | None = None, meta: str = KERNEL_META_PACKAGE) -> KernelTree:
    """Download and unpack the kernel package once (``apt-get download`` + ``dpkg-deb -x`` + ``depmod -b``)."""
    package, version = resolve_kernel_package(meta)
    release = package.removeprefix("linux-image-").removesuffix("-unsigned")
    root = (cache or cache_root()) / "kernel" / f"{package}_{version}".replace(":", "%")
    tree = KernelTree(package, version, release, root)
    if (root / ".complete").exists():
        return tree
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".kernel.", dir=root.parent))
    try:
        os.chmod(work, 0o755)  # noqa: S103 - apt's _apt user writes the download here
        _run(["apt-get", "download", f"{package}={version}"], cwd=work)
        deb = next(work.glob("*.deb"))
        unpacked = work / "tree"
        _run(["dpkg-deb", "-x", str(deb), str(unpacked)])
        deb.unlink()
        _run(["depmod", "-b", str(unpacked), release])
        (unpacked / ".complete").write_text(f"{package} {version}\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(unpacked, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tree


def parse_modules_dep(text: str) -> dict[str, tuple[str, list[str]]]:
    """``modules.dep`` → module name (``-`` as ``_``) → (path, dependency paths)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        path, deps = line.split(":", 1)
        out[module_name(path)] = (path, deps.split())
    return out


def module_name(path: str) -> str:
    """``kernel/drivers/net/virtio_net.ko.xz`` → ``virtio_net``."""
    return Path(path).name.split(".ko")[0].replace("-", "_")


def resolve_modules(wanted: list[str], modules_dep: str, builtin: str = "") -> list[str]:
    """Paths of ``wanted`` and all their dependencies, dependencies first (load order).

    A module built into the kernel is skipped; one the kernel lacks entirely is an :class:`InvalidInput`.
    """
    table = parse_modules_dep(modules_dep)
    by_path = {path: name for name, (path, _) in table.items()}
    builtins = {module_name(p) for p in builtin.split()}
    order: list[str] = []
    missing: list[str] = []

    def visit(path: str, seen: tuple[str, ...]) -> None:
        if path in order or path in seen:
            return
        for dep in table[by_path[path]][1]:
            visit(dep, (*seen, path))
        order.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key in table:
            visit(table[key][0], ())
        elif key not in builtins:
            missing.append(name)
    if missing:
        raise InvalidInput(
            f"module(s) not in this kernel: {', '.join(missing)}",
            problems=[
                Problem("profile.modules", f"{m!r} is neither a module nor built in", "check the name (modinfo)")
                for m in missing
            ],
        )
    return order


def _input_key(kernel: KernelTree, profile: str, modules: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for part in (kernel.package, kernel.version, profile, *modules):
        digest.update(part.encode() + b"\0")
    for name in ("init", "udhcpc.script"):
        digest.update(_asset(name))
    digest.update(str(BUSYBOX.stat().st_size).encode() if BUSYBOX.exists() else b"-")
    for binary in (BUSYBOX, *NATIVE_TOOLS):
        digest.update(hashlib.sha256(binary.read_bytes()).digest() if binary.exists() else b"-")
    return digest.hexdigest()[:16]


def _asset(name: str) -> bytes:
    return resources.files("bootstrap.provision").joinpath("templates", "ramdisk", name).read_bytes()


def build_ramdisk(
    profile: str = "lab",
    *,
    extra_modules: tuple[str, ...] = (),
    out_dir: Path | None = None,
    cache: Path | None = None,
) -> Ramdisk:
    """Build (or reuse from the cache) the deploy ramdisk for ``profile``; copies into ``out_dir`` if given."""
    if profile not in PROFILES:
        raise InvalidInput(
            f"unknown ramdisk profile {profile!r}",
            problems=[Problem("profile", repr(profile), f"use one of: {', '.join(PROFILES)}")],
        )
    if not BUSYBOX.is_file():
        raise EnvironmentMissing(f"{BUSYBOX} not found; install the Debian package 'busybox-static'")
    for binary, package in NATIVE_TOOLS.items():
        if not binary.is_file():
            raise EnvironmentMissing(f"{binary} not found; install the Debian package '{package}'")
    for tool in ("cpio", "depmod", "apt-get", "dpkg-deb", "ldd"):
        if shutil.which(tool) is None:
            raise EnvironmentMissing(f"{tool} not found; install it (see scripts/apt-packages.txt)")
    cache = cache or cache_root()
    with cache_lock(cache / "kernel"):
        kernel = fetch_kernel(cache)
    modules = (*PROFILES[profile], *extra_modules)
    target = cache / "ramdisk" / f"{profile}-{_input_key(kernel, profile, modules)}"
    manifest = target / "ramdisk.json"
    with cache_lock(cache / "ramdisk"):
        if not manifest.exists():
            _build_into(kernel, profile, modules, target)
        mark_used(target)
    data = json.loads(manifest.read_text())
    ramdisk = Ramdisk(
        kernel=target / "vmlinuz",
        initrd=target / "initrd.img",
        release=data["release"],
        profile=profile,
        modules=data["modules"],
        sha256=data["sha256"],
    )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for src in (ramdisk.kernel, ramdisk.initrd, manifest):
            shutil.copyfile(src, out_dir / src.name)
        ramdisk.kernel, ramdisk.initrd = out_dir / "vmlinuz", out_dir / "initrd.img"
    return ramdisk


def _build_into(kernel: KernelTree, profile: str, modules: tuple[str, ...], target: Path) -> None:
    modules_dep = (kernel.modules_dir / "modules.dep").read_text()
    builtin_file = kernel.modules_dir / "modules.builtin"
    order = resolve_modules(list(modules), modules_dep, builtin_file.read_text() if builtin_file.exists() else "")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".ramdisk.", dir=target.parent))
    try:
        root = work / "root"
        for folder in ("bin", "dev", "proc", "sys", "mnt", "tmp", "run", "etc/rackctl"):
            (root / folder).mkdir(parents=True)
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        (root / "bin" / "sh").symlink_to("busybox")
        for binary in NATIVE_TOOLS:
            copy_with_libraries(binary, root)
        (root / "init").write_bytes(_asset("init"))
        (root / "etc" / "rackctl" / "udhcpc.script").write_bytes(_asset("udhcpc.script"))
        os.chmod(root / "init", 0o755)  # noqa: S103 - executables inside the initramfs
        os.chmod(root / "etc" / "rackctl" / "udhcpc.script", 0o755)  # noqa: S103
        mod_root = root / "lib" / "modules" / kernel.release
        plain: list[str] = []
        for source in order:
            data, rel = (kernel.modules_dir / source).read_bytes(), source
            if source.endswith(".xz"):
                data, rel = lzma.decompress(data), source.removesuffix(".xz")
            elif source.endswith(".gz"):
                data, rel = gzip.decompress(data), source.removesuffix(".gz")
            elif source.endswith(".zst"):
                raise EnvironmentMissing(f"{source} is zstd-compressed; rackctl cannot unpack it yet")
            (mod_root / rel).parent.mkdir(parents=True, exist_ok=True)
            (mod_root / rel).write_bytes(data)
            plain.append(rel)
        for name in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            if (kernel.modules_dir / name).exists():
                shutil.copyfile(kernel.modules_dir / name, mod_root / name)
        _run(["depmod", "-b", str(root), kernel.release])
        (root / "etc" / "rackctl" / "modules").write_text("\n".join(plain) + "\n")
        listing = _run(["find", ".", "-mindepth", "1"], cwd=root).split()
        cpio = _cpio(root, sorted(listing))
        initrd = gzip.compress(cpio, compresslevel=6, mtime=0)
        out = work / "out"
        out.mkdir()
        atomic_write_bytes(out / "initrd.img", initrd)
        shutil.copyfile(kernel.vmlinuz, out / "vmlinuz")
        manifest = {
            "release": kernel.release,
            "kernel_package": f"{kernel.package}={kernel.version}",
            "profile": profile,
            "modules": plain,
            "sha256": hashlib.sha256(initrd).hexdigest(),
        }
        atomic_write_text(out / "ramdisk.json", json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_with_libraries(binary: Path, root: Path) -> None:
    """Copy a dynamically linked ``binary`` and every library ``ldd`` names into ``root`` at the same paths."""
    paths = [binary]
    for line in _run(["ldd", str(binary)]).splitlines():
        fields = line.split()
        found = [f for f in fields if f.startswith("/")]
        if found:
            paths.append(Path(found[0]))
    for path in paths:
        dest = root / path.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), dest)


def _cpio(root: Path, entries: list[str]) -> bytes:
    """A newc cpio archive of ``entries`` (relative to ``root``), owned by root."""
    done = subprocess.run(
        ["cpio", "-o", "-H", "newc", "-R", "0:0", "--quiet"],
        input=("\n".join(entries) + "\n").encode(),
        cwd=root,
        capture_output=True,
        check=True,
    )
    return done.stdout
