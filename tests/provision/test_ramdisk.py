"""The deploy ramdisk: module resolution from modules.dep, and the real initramfs built from Debian's kernel
package and busybox-static (downloaded once into the cache, as in CI)."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.provision.ramdisk import PROFILES, build_ramdisk, parse_modules_dep, resolve_modules

MODULES_DEP = """\
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko \
kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/fs/ext4/ext4.ko.xz: kernel/fs/jbd2/jbd2.ko.xz
kernel/fs/jbd2/jbd2.ko.xz:
"""


def test_resolution_puts_dependencies_first_and_skips_builtins() -> None:
    order = resolve_modules(
        ["virtio_net", "ext4", "af-packet"], MODULES_DEP, builtin="kernel/net/packet/af_packet.ko\n"
    )
    names = [Path(p).name.split(".ko")[0] for p in order]
    assert names.index("virtio_ring") < names.index("virtio") < names.index("virtio_net")
    assert names.index("failover") < names.index("net_failover") < names.index("virtio_net")
    assert names.index("jbd2") < names.index("ext4")
    assert len(names) == len(set(names)) == 7
    assert parse_modules_dep(MODULES_DEP)["ext4"][0] == "kernel/fs/ext4/ext4.ko.xz"


def test_a_module_the_kernel_lacks_is_named() -> None:
    with pytest.raises(InvalidInput) as exc:
        resolve_modules(["virtio_net", "nosuch_nic"], MODULES_DEP)
    assert "nosuch_nic" in exc.value.message
    assert exc.value.problems[0].fix


def test_unknown_profile_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as exc:
        build_ramdisk("cray")
    assert "lab" in exc.value.problems[0].fix


def _unpack(initrd: Path, dest: Path) -> None:
    dest.mkdir()
    subprocess.run(["cpio", "-id", "--quiet"], input=gzip.decompress(initrd.read_bytes()), cwd=dest, check=True)


@pytest.mark.slow
def test_lab_ramdisk_has_init_busybox_and_modules_whose_dependencies_resolve(tmp_path: Path) -> None:
    ramdisk = build_ramdisk("lab")
    assert ramdisk.kernel.read_bytes()[0x202:0x206] == b"HdrS"  # a bzImage
    root = tmp_path / "root"
    _unpack(ramdisk.initrd, root)
    init = root / "init"
    assert init.stat().st_mode & 0o111
    assert subprocess.run(["/bin/busybox", "sh", "-n", str(init)], capture_output=True, check=False).returncode == 0
    assert (root / "bin" / "busybox").read_bytes() == Path("/bin/busybox").read_bytes()
    # util-linux fallocate (zeroes the image's holes) runs inside the initramfs with the libraries copied along
    argv = ["chroot", str(root), "/usr/bin/fallocate", "--version"]
    ran = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and "util-linux" in ran.stdout, ran.stderr
    mods = root / "lib" / "modules" / ramdisk.release
    listed = (root / "etc" / "rackctl" / "modules").read_text().split()
    assert listed == ramdisk.modules
    names = [Path(p).name.removesuffix(".ko") for p in listed]
    for wanted in PROFILES["lab"]:
        assert wanted.replace("-", "_") in [n.replace("-", "_") for n in names], wanted
    assert names.index("virtio_ring") < names.index("virtio") < names.index("virtio_net")
    # The ramdisk's own modules.dep (made by depmod) resolves: every entry and dependency is present,
    # and each module's dependencies load before it.
    table = parse_modules_dep((mods / "modules.dep").read_text())
    assert set(table) == {n.replace("-", "_") for n in names}
    for path, deps in table.values():
        assert (mods / path).is_file(), path
        for dep in deps:
            assert listed.index(dep) < listed.index(path), (dep, path)
    again = build_ramdisk("lab")
    assert again.sha256 == ramdisk.sha256  # cached by the content of its inputs


@pytest.mark.slow
def test_dell_profile_carries_the_server_drivers(tmp_path: Path) -> None:
    ramdisk = build_ramdisk("dell", out_dir=tmp_path / "out")
    names = {Path(p).name.removesuffix(".ko") for p in ramdisk.modules}
    assert {"bnxt_en", "mlx5_core", "nvme", "megaraid_sas", "mpi3mr", "tg3", "ahci"} <= names
    assert ramdisk.initrd == tmp_path / "out" / "initrd.img" and ramdisk.initrd.is_file()
