"""Build the OS image the deploy ramdisk writes: debootstrap → GPT raw disk bootable by BIOS and UEFI → gzip.

No loop devices, no mounts (they are unreliable without udev): the root filesystem is made from a directory
with ``mke2fs -d``, the ESP is a file made with ``mkfs.vfat -C`` and filled with mtools, both are written
into the raw file at their partition offsets, and GRUB goes in with ``grub-mkimage`` +
GRUB's boot.img/core.img are embedded the way ``grub-bios-setup`` does (see :func:`install_grub_bios`).
The image carries no SSH host key and no machine-id: the deploy
ramdisk installs each node's pinned key, hostname and network files (its overlay) after writing the disk.

Layout (GPT): 1 BIOS boot (1 MiB), 2 ESP (64 MiB, FAT), 3 root (ext4, label ``rackctl-root``).
Results are cached under ``~/.cache/rackctl/image/<key>/`` by the content of every input; the debootstrap
tree is cached separately (by suite, mirror and package list) so changing admin keys only re-assembles.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.fsutil import atomic_write_text
from bootstrap.provision.blockmap import build_block_map, ensure_block_map, map_path, ranges_path
from bootstrap.provision.ramdisk import _run, cache_lock, cache_root, mark_used, remove_tree
from bootstrap.resources import roles_dir
from bootstrap.tool_progress import Milestones, debootstrap_line, run_lines

PACKAGES = ("systemd-sysv", "udev", "openssh-server", "linux-image-amd64", "python3", "iproute2", "kmod", "fdisk")
#: Node roles whose ``<role>_packages`` every installed node gets in the image already: the network stage's
#: first run then installs none of them (each role still declares them, the head node's mirror still has
#: them, apt still checks them; a node installed otherwise, e.g. by the Debian installer, gets them from the
#: role). Not container_runtime: its containerd and runc are the site's pins, installed from the mirror.
IMAGE_ROLES = ("baseline", "networks")
#: Kernel module trees dropped from the lab image (the VMs have virtio only); keeps net/, fs/, crypto/ etc.
LAB_TRIM_MODULES = ("sound", "drivers/gpu", "drivers/media", "drivers/iio", "drivers/infiniband", "drivers/staging",
                    "drivers/usb", "drivers/hwmon", "drivers/hid", "drivers/bluetooth", "drivers/input", "drivers/isdn",
                    "drivers/mmc", "drivers/mtd", "drivers/video", "drivers/net/wireless", "drivers/net/ethernet",
                    "drivers/net/usb", "drivers/net/can", "drivers/net/wwan", "net/wireless", "net/mac80211",
                    "net/bluetooth")  # fmt: skip
ROOT_LABEL = "rackctl-root"
#: Lab images: an initramfs with just what a virtio VM needs to mount its root (about 7 MB instead of the
#: 36 MB of MODULES=most: GRUB reads it through the BIOS and the kernel unpacks it, both slow under TCG).
#: Images for real hardware keep Debian's MODULES=most (PERC, BOSS, NVMe... whatever the server has).
LAB_INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod", "ext4")
#: Bump when _customise/_assemble change what they produce (cache key of built images).
RECIPE_VERSION = 2
ESP_MIB = 64
BIOS_BOOT_MIB = 1
GRUB_MODULES_COMMON = ("part_gpt", "ext2", "fat", "search", "search_label", "normal", "configfile", "linux",
                       "echo", "test", "gzio", "serial", "terminal", "boot", "ls", "cat")  # fmt: skip
TOOLS = {
    "debootstrap": "debootstrap",
    "mke2fs": "e2fsprogs",
    "mkfs.vfat": "dosfstools",
    "mcopy": "mtools",
    "sfdisk": "fdisk",
    "grub-mkimage": "grub2-common",
    "pigz": "pigz",
}
GRUB_DIRS = {"i386-pc": Path("/usr/lib/grub/i386-pc"), "x86_64-efi": Path("/usr/lib/grub/x86_64-efi")}

GRUB_CFG = """\
set timeout=0
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
menuentry "rackctl {release}" {{
    search --no-floppy --label --set=root {label}
    linux /boot/vmlinuz-{release} root=LABEL={label} ro console=tty0 console=ttyS0,115200{kernel_args}
    initrd /boot/initrd.img-{release}
}}
"""


def _silent(_message: str) -> None:
    """No progress wanted."""


EARLY_CFG = (
    f"search --no-floppy --label --set=root {ROOT_LABEL}\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n"
)
NETWORK_FALLBACK = "[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
GROWROOT_SCRIPT = """\
#!/bin/sh
# rackctl: grow the root partition and filesystem to the whole disk, once (the image is smaller than disks).
set -eu
src=$(findmnt -n -o SOURCE /)
disk=/dev/$(lsblk -n -o PKNAME "$src" | head -n 1)
part=$(cat "/sys/class/block/${src#/dev/}/partition")
sfdisk --force --no-reread --no-tell-kernel --relocate gpt-bkp-end "$disk" || true
echo ", +" | sfdisk --force --no-reread --no-tell-kernel -N "$part" "$disk"
partx -u -n "$part" "$disk"
resize2fs "$src"
touch /etc/rackctl-growroot.done
echo "rackctl-growroot: / on $src is now $(df -m / | awk 'NR==2 {print $2}') MiB" > /dev/console
"""
GROWROOT_UNIT = """\
[Unit]
Description=rackctl: grow the root filesystem to the whole disk (first boot)
ConditionPathExists=!/etc/rackctl-growroot.done
After=systemd-remount-fs.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/rackctl-growroot

[Install]
WantedBy=multi-user.target
"""
HOSTKEY_FALLBACK_UNIT = """\
[Unit]
Description=rackctl: generate SSH host keys only if the deploy did not install the pinned one
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStartPre=/bin/sh -c 'echo "rackctl: no pinned host key; generating one (pinning will refuse it)" > /dev/console'
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class DiskImage:
    """A built image: gzipped raw disk, sha256 and size of the *uncompressed* disk.

    Beside it: its block map (``<path>.bmap``) and the zstd frames of its mapped ranges (``<path>.ranges``),
    which is what the deploy ramdisk downloads and writes (:mod:`bootstrap.provision.blockmap`).
    """

    path: Path
    sha256: str
    size: int

    @property
    def bmap(self) -> Path:
        return map_path(self.path)

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "sha256": self.sha256, "size": self.size, "bmap": str(self.bmap)}


def default_mirror() -> str:
    """The Debian mirror of this machine's apt sources (deb822 or one-line), else deb.debian.org."""
    for src in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if not src.exists():
            continue
        for raw in src.read_text().splitlines():
            line = raw.strip()
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
            if line.startswith("deb ") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def check_tools() -> None:
    """Raise :class:`EnvironmentMissing` naming the Debian packages of missing tools."""
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if not (GRUB_DIRS["i386-pc"] / "boot.img").exists():
        missing.append("grub-pc-bin")
    if not GRUB_DIRS["x86_64-efi"].is_dir():
        missing.append("grub-efi-amd64-bin")
    if missing:
        raise EnvironmentMissing(f"image build needs the Debian packages: {' '.join(missing)}")
    if os.geteuid() != 0:
        raise EnvironmentMissing("image build runs debootstrap and needs root")


def _key(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode() + b"\0")
    return digest.hexdigest()[:16]


def _recipe_digest() -> str:
    """What the image is made of besides the caller's inputs; bump :data:`RECIPE_VERSION` when code changes it."""
    parts = (RECIPE_VERSION, GRUB_CFG, EARLY_CFG, NETWORK_FALLBACK, HOSTKEY_FALLBACK_UNIT, GROWROOT_SCRIPT,
             GROWROOT_UNIT, LAB_TRIM_MODULES, LAB_INITRAMFS_MODULES, GRUB_MODULES_COMMON, ESP_MIB, BIOS_BOOT_MIB,
             ROOT_LABEL)  # fmt: skip
    return _key(*parts)


def image_packages() -> tuple[str, ...]:
    """:data:`PACKAGES` and the packages of the :data:`IMAGE_ROLES` (names only: a pin is the role's to apply).

    Read from each role's ``defaults/main.yml`` (``<role>_packages``), the list the mirror is built from
    (:func:`bootstrap.mirror.manifest.role_requests` checks the names there).
    """
    names: list[str] = []
    for role in IMAGE_ROLES:
        defaults = yaml.safe_load((roles_dir() / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
        names += [str(item).partition("=")[0].strip() for item in (defaults or {}).get(f"{role}_packages") or []]
    return tuple(dict.fromkeys([*PACKAGES, *names]))


def check_kernel_args(kernel_args: tuple[str, ...]) -> None:
    """Refuse an argument a GRUB ``linux`` line would split or misread (``--kernel-arg`` names it)."""
    bad = [a for a in kernel_args if not a or any(c.isspace() or c in "\"'{};" for c in a)]
    if bad:
        raise InvalidInput(
            f"kernel argument {bad[0]!r} cannot go on a GRUB command line",
            problems=[Problem("--kernel-arg", repr(bad[0]), "one argument per value, no spaces, quotes or braces")],
        )


def debootstrap_tree(
    suite: str,
    mirror: str,
    cache: Path,
    progress: Callable[[str], None] = _silent,
    *,
    packages: tuple[str, ...] | None = None,
) -> Path:
    """A minbase root tree with ``packages`` (by default :func:`image_packages`), cached by suite, mirror and
    packages."""
    packages = image_packages() if packages is None else packages
    target = cache / "image" / f"rootfs-{suite}-{_key(suite, mirror, packages)}"
    if (target / ".rackctl-complete").exists():
        mark_used(target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".rootfs.", dir=target.parent))
    progress(f"debootstrap {suite} with {len(packages)} packages (minutes; cached after)")
    try:
        argv = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(work / "root"),
            mirror,
        ]
        _run_shown(argv, Milestones(progress, debootstrap_line, prefix="debootstrap: "))
        (work / "root" / ".rackctl-complete").write_text(f"{suite} {mirror}\n")
        if not (target / ".rackctl-complete").exists():  # another builder may have finished meanwhile
            if target.exists():
                shutil.rmtree(target)
            os.replace(work / "root", target)
    finally:
        remove_tree(work)  # debootstrap mounts proc/sys inside the target while it runs
    return target


def _run_shown(argv: list[str], on_line: Callable[[str], None]) -> None:
    """Run a long tool, each line of its output to ``on_line`` as it comes; an error with its last lines."""
    try:
        rc, tail = run_lines(argv, on_line)
    except FileNotFoundError as exc:
        raise EnvironmentMissing(f"{argv[0]} not found; install it (see scripts/apt-packages.txt)") from exc
    if rc != 0:
        raise RackctlError(f"{' '.join(argv[:3])} failed (exit {rc}): {tail.strip()[-500:]}")


def _customise(root: Path, admin_keys: list[str], *, trim: bool, kernel_args: tuple[str, ...] = ()) -> str:
    """Make the copied tree a generic, key-less image (``trim``: lab drivers only); returns the kernel release."""
    (root / ".rackctl-complete").unlink(missing_ok=True)
    (root / "etc" / "machine-id").write_text("")
    (root / "var" / "lib" / "dbus" / "machine-id").unlink(missing_ok=True)
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc" / "hostname").write_text("localhost\n")
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
    (root / "etc" / "fstab").write_text(f"LABEL={ROOT_LABEL} / ext4 errors=remount-ro 0 1\n")
    ssh_dir = root / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text("\n".join(admin_keys) + "\n")
    os.chmod(ssh_dir / "authorized_keys", 0o600)
    network = root / "etc" / "systemd" / "network"
    network.mkdir(parents=True, exist_ok=True)
    (network / "99-rackctl-fallback.network").write_text(NETWORK_FALLBACK)
    systemd = root / "etc" / "systemd" / "system"
    (systemd / "rackctl-hostkeys.service").write_text(HOSTKEY_FALLBACK_UNIT)
    (systemd / "rackctl-growroot.service").write_text(GROWROOT_UNIT)
    growroot = root / "usr" / "local" / "sbin" / "rackctl-growroot"
    growroot.parent.mkdir(parents=True, exist_ok=True)
    growroot.write_text(GROWROOT_SCRIPT)
    os.chmod(growroot, 0o755)  # noqa: S103 - a system script
    wants = {
        "multi-user.target.wants": ["systemd-networkd.service", "rackctl-hostkeys.service", "rackctl-growroot.service"],
        "sockets.target.wants": ["systemd-networkd.socket"],
        "network-online.target.wants": ["systemd-networkd-wait-online.service"],
    }
    for folder, units in wants.items():
        (systemd / folder).mkdir(parents=True, exist_ok=True)
        for unit in units:
            link = systemd / folder / unit
            link.unlink(missing_ok=True)
            unit_dir = "/etc/systemd/system" if unit.startswith("rackctl") else "/lib/systemd/system"
            link.symlink_to(f"{unit_dir}/{unit}")
    for folder in ("usr/share/doc", "usr/share/man", "usr/share/info", "var/cache/apt/archives", "var/lib/apt/lists"):
        for child in (root / folder).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            elif child.name not in {"lock", "partial"}:
                child.unlink()
    release = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))[-1]
    if trim:
        for folder in LAB_TRIM_MODULES:
            shutil.rmtree(root / "usr" / "lib" / "modules" / release / "kernel" / folder, ignore_errors=True)
        shutil.rmtree(root / "usr" / "share" / "locale", ignore_errors=True)
        _run(["depmod", "-b", str(root), release])
        conf = root / "etc" / "initramfs-tools"
        (conf / "conf.d" / "rackctl.conf").write_text("# rackctl lab image: only the listed modules\nMODULES=list\n")
        (conf / "modules").write_text("\n".join(LAB_INITRAMFS_MODULES) + "\n")
        _run(["chroot", str(root), "update-initramfs", "-u", "-k", release])
    grub = root / "boot" / "grub"
    grub.mkdir(parents=True, exist_ok=True)
    args = "".join(f" {a}" for a in kernel_args)
    (grub / "grub.cfg").write_text(GRUB_CFG.format(release=release, label=ROOT_LABEL, kernel_args=args))
    for platform, source in GRUB_DIRS.items():
        dest = grub / platform
        dest.mkdir(exist_ok=True)
        for mod in source.glob("*.mod"):
            shutil.copyfile(mod, dest / mod.name)
        for extra in ("*.lst",):
            for item in source.glob(extra):
                shutil.copyfile(item, dest / item.name)
    return release


def _assemble(root: Path, size_mib: int, work: Path) -> Path:
    """Root tree → GPT raw disk (BIOS boot + ESP + ext4 root) with GRUB for BIOS and UEFI."""
    disk = work / "disk.raw"
    root_start = BIOS_BOOT_MIB + 1 + ESP_MIB  # MiB; partition 1 starts at 1 MiB
    root_mib = size_mib - root_start - 1  # leave 1 MiB for the backup GPT
    with disk.open("wb") as fh:
        fh.truncate(size_mib << 20)
    mib = 2048  # 512-byte sectors per MiB (sfdisk takes sectors)
    bios_type, esp_type, linux_type = (
        "21686148-6449-6e6f-744e-656564454649",
        "c12a7328-f81f-11d2-ba4b-00a0c93ec93b",
        "0fc63daf-8483-4772-8e79-3d69d8477de4",
    )
    layout = (
        "label: gpt\n"
        f"start={mib}, size={BIOS_BOOT_MIB * mib}, type={bios_type}, name=bios-boot\n"
        f"start={(BIOS_BOOT_MIB + 1) * mib}, size={ESP_MIB * mib}, type={esp_type}, name=esp\n"
        f"start={root_start * mib}, size={root_mib * mib}, type={linux_type}, name=root\n"
    )
    subprocess.run(["sfdisk", "--no-reread", "--no-tell-kernel", "-q", str(disk)], input=layout, text=True,
                   check=True, capture_output=True)  # fmt: skip
    rootfs = work / "root.ext4"
    _run(["mke2fs", "-q", "-F", "-t", "ext4", "-L", ROOT_LABEL, "-d", str(root), str(rootfs), f"{root_mib}M"])
    esp = work / "esp.vfat"
    _run(["mkfs.vfat", "-C", "-n", "RACKCTL-ESP", str(esp), str(ESP_MIB * 1024)])
    early = work / "early.cfg"
    early.write_text(EARLY_CFG)
    efi = work / "BOOTX64.EFI"
    _run(["grub-mkimage", "-O", "x86_64-efi", "-o", str(efi), "-p", "/boot/grub", "-c", str(early),
          *GRUB_MODULES_COMMON, "efi_gop", "all_video"])  # fmt: skip
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    _run(["mmd", "-i", str(esp), "::/EFI", "::/EFI/BOOT"], env=env)
    _run(["mcopy", "-i", str(esp), str(efi), "::/EFI/BOOT/BOOTX64.EFI"], env=env)
    for part, offset_mib in ((esp, BIOS_BOOT_MIB + 1), (rootfs, root_start)):
        _run(["dd", f"if={part}", f"of={disk}", "bs=1M", f"seek={offset_mib}", "conv=notrunc,sparse", "status=none"])
        part.unlink()
    bios = work / "bios"
    bios.mkdir()
    shutil.copyfile(GRUB_DIRS["i386-pc"] / "boot.img", bios / "boot.img")
    _run(["grub-mkimage", "-O", "i386-pc", "-o", str(bios / "core.img"), "-p", "/boot/grub", "-c", str(early),
          "biosdisk", *GRUB_MODULES_COMMON])  # fmt: skip
    install_grub_bios(disk, (bios / "boot.img").read_bytes(), (bios / "core.img").read_bytes(), lba=2048)
    return disk


def install_grub_bios(disk: Path, boot_img: bytes, core_img: bytes, *, lba: int, max_sectors: int = 2048) -> None:
    """Embed GRUB's core.img at ``lba`` (the BIOS boot partition) and point the MBR's boot.img at it.

    What ``grub-bios-setup`` does for an embedded core, done on a plain file: it refuses to work here
    because it insists on resolving the host device of its ``-d`` directory. boot.img keeps the disk's
    protective MBR partition table, gets core's first sector at 0x5c and the hard-disk drive check
    disabled (0x66); core's first sector (diskboot) gets the blocklist of the rest of core (contiguous, loaded
    at segment 0x820). No Reed-Solomon codes are added (core's redundancy field stays 0, as with
    ``--no-rs-codes``).
    """
    sector = 512
    if len(boot_img) != sector:
        raise ValueError(f"boot.img is {len(boot_img)} bytes, expected {sector}")
    core = bytearray(core_img + b"\0" * (-len(core_img) % sector))
    nsec = len(core) // sector
    if nsec > max_sectors:
        raise ValueError(f"core.img needs {nsec} sectors, the BIOS boot partition has {max_sectors}")
    core[sector - 12 : sector] = struct.pack("<QHH", lba + 1, nsec - 1, 0x820)
    with disk.open("r+b") as fh:
        mbr = bytearray(fh.read(sector))
        new = bytearray(boot_img)
        new[0x03:0x5A] = mbr[0x03:0x5A]  # BIOS parameter block
        new[0x1B8:0x1FE] = mbr[0x1B8:0x1FE]  # disk signature + partition table (GPT protective entry)
        new[0x5C:0x64] = struct.pack("<Q", lba)
        new[0x66:0x68] = b"\x90\x90"  # hard disk: do not trust the BIOS drive number check
        new[0x1FE:0x200] = b"\x55\xaa"
        fh.seek(0)
        fh.write(new)
        fh.seek(lba * sector)
        fh.write(core)


def build_image(
    admin_keys: list[str],
    *,
    suite: str = "bookworm",
    mirror: str | None = None,
    size_mib: int = 768,
    trim: bool = True,
    kernel_args: tuple[str, ...] = (),
    cache: Path | None = None,
    out: Path | None = None,
    progress: Callable[[str], None] = _silent,
) -> DiskImage:
    """Build (or reuse) the lab/generic image; writes ``disk.raw.gz`` + ``disk.raw.gz.json`` (sha256, size).

    ``trim`` drops driver modules a virtio lab VM never loads (keep them for real hardware); ``kernel_args``
    are appended to the kernel command line (e.g. ``iommu=pt``); ``progress`` is told each
    phase as it starts. The root filesystem grows to the whole disk on first boot. Takes minutes the first
    time (debootstrap); later calls with the same inputs return the cached image.
    """
    if not admin_keys:
        raise InvalidInput("no admin SSH keys", problems=[Problem("cluster.admin_ssh_keys", "[]", "add a .pub line")])
    if size_mib < 512:
        raise InvalidInput(
            f"image size {size_mib} MiB is too small", problems=[Problem("size", str(size_mib), ">= 768 MiB")]
        )
    check_kernel_args(kernel_args)
    check_tools()
    cache = cache or cache_root()
    mirror = mirror or default_mirror()
    key = _key(
        suite, mirror, image_packages(), sorted(admin_keys), size_mib, trim, tuple(kernel_args), _recipe_digest()
    )
    target = cache / "image" / f"disk-{key}"
    meta = target / "disk.raw.gz.json"
    with cache_lock(cache / "image"):
        if not meta.exists():
            _build_into(target, admin_keys, suite=suite, mirror=mirror, size_mib=size_mib, trim=trim,
                        kernel_args=kernel_args, cache=cache, progress=progress)  # fmt: skip
        else:
            progress("the image is cached")
        ensure_block_map(target / "disk.raw.gz")  # images cached before block maps existed get theirs now
        mark_used(target)
    info = json.loads(meta.read_text())
    image = DiskImage(target / "disk.raw.gz", info["sha256"], int(info["size"]))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        gz = target / "disk.raw.gz"
        for src in (image.path, meta, target / "disk.raw.gz.sha256", map_path(gz), ranges_path(gz)):
            shutil.copyfile(src, out / src.name)
        image = DiskImage(out / "disk.raw.gz", image.sha256, image.size)
    return image


def compress(disk: Path, out: Path, progress: Callable[[str], None]) -> str:
    """``disk`` gzipped into ``out`` by pigz in one read, its sha256 taken on the way; says each tenth done
    (a 3 GiB disk takes minutes). Returns the raw disk's sha256."""
    digest = hashlib.sha256()
    total = max(1, disk.stat().st_size)
    done = said = 0
    with out.open("wb") as gz:
        pigz = subprocess.Popen(["pigz", "-c", "-6"], stdin=subprocess.PIPE, stdout=gz)
        assert pigz.stdin is not None
        try:
            with disk.open("rb") as fh:
                while chunk := fh.read(4 << 20):
                    digest.update(chunk)
                    pigz.stdin.write(chunk)
                    done += len(chunk)
                    if done * 10 // total > said:
                        said = done * 10 // total
                        progress(f"compressing the disk: {said * 10} % of {total >> 20} MiB")
        except BrokenPipeError:
            pass  # pigz stopped reading: its exit status says it failed
        finally:
            with contextlib.suppress(BrokenPipeError):
                pigz.stdin.close()
            code = pigz.wait()
    if code != 0:
        raise subprocess.CalledProcessError(code, ["pigz", "-c", "-6"])
    return digest.hexdigest()


def _build_into(
    target: Path,
    admin_keys: list[str],
    *,
    suite: str,
    mirror: str,
    size_mib: int,
    trim: bool,
    kernel_args: tuple[str, ...],
    cache: Path,
    progress: Callable[[str], None],
) -> None:
    """debootstrap (cached) → customised copy → raw GPT disk → ``target/disk.raw.gz`` + metadata."""
    tree = debootstrap_tree(suite, mirror, cache, progress)
    work = Path(tempfile.mkdtemp(prefix=".disk.", dir=target.parent))
    try:
        root = work / "root"
        progress("copying the root tree")
        _run(["cp", "-a", str(tree), str(root)])
        progress("customising it (admin keys, units, GRUB, drivers)")
        release = _customise(root, admin_keys, trim=trim, kernel_args=kernel_args)
        progress(f"assembling a {size_mib} MiB GPT disk (BIOS and UEFI)")
        disk = _assemble(root, size_mib, work)
        shutil.rmtree(root)
        progress("checksumming and compressing the disk")
        digest = compress(disk, work / "disk.raw.gz", progress)
        out_dir = work / "out"
        out_dir.mkdir()
        progress("mapping the disk's used blocks")
        build_block_map(disk, out_dir / "disk.raw.gz")
        disk.unlink()
        gz_digest = hashlib.sha256()
        with (work / "disk.raw.gz").open("rb") as fh:
            while chunk := fh.read(4 << 20):
                gz_digest.update(chunk)
        os.replace(work / "disk.raw.gz", out_dir / "disk.raw.gz")
        info = {"sha256": digest, "gz_sha256": gz_digest.hexdigest(), "size": size_mib << 20,
                "suite": suite, "kernel": release, "root_partition": 3, "root_label": ROOT_LABEL}  # fmt: skip
        atomic_write_text(out_dir / "disk.raw.gz.sha256", f"{info['sha256']}  disk.raw\n")
        atomic_write_text(out_dir / "disk.raw.gz.json", json.dumps(info, indent=2) + "\n")
        if not (target / "disk.raw.gz.json").exists():  # another builder may have finished meanwhile
            if target.exists():
                shutil.rmtree(target)
            os.replace(out_dir, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
