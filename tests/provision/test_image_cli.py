"""``rackctl image`` commands (plans, errors) and the GRUB BIOS embedding on a real GPT made by sfdisk."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.provision.image import GRUB_DIRS, build_image, install_grub_bios

REPO = Path(__file__).resolve().parents[2]


def test_ramdisk_dry_run_names_the_kernel_package_and_modules() -> None:
    result = CliRunner().invoke(cli, ["image", "ramdisk", "--profile", "dell", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kernel_package"].startswith("linux-image-")
    assert {"bnxt_en", "mlx5_core", "mpi3mr"} <= set(data["modules"])


def test_build_dry_run_trims_for_lab_inventories_and_builds_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["image", "build", "-i", str(REPO / "inventory" / "lab.yml"), "--dry-run", "--json"],
        env={"HOME": str(tmp_path)},
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["trim"] is True and data["admin_keys"] == 1 and "openssh-server" in data["packages"]
    # the node roles' own packages (baseline, networks) come in the image; the container runtime's pins do not
    assert {"chrony", "unattended-upgrades", "netplan.io"} <= set(data["packages"])
    assert "containerd" not in data["packages"]
    assert data["kernel_args"] == []  # none unless asked
    assert not (tmp_path / ".cache").exists()


def test_kernel_args_are_planned_and_a_bad_one_is_refused_naming_it(tmp_path: Path) -> None:
    lab = str(REPO / "inventory" / "lab.yml")
    result = CliRunner().invoke(
        cli,
        ["image", "build", "-i", lab, "--kernel-arg", "iommu=pt", "--dry-run", "--json"],
        env={"HOME": str(tmp_path)},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kernel_args"] == ["iommu=pt"]
    refused = CliRunner().invoke(
        cli, ["image", "build", "-i", lab, "--kernel-arg", "quiet splash", "--dry-run", "--json"],
        env={"HOME": str(tmp_path)},
    )  # fmt: skip
    assert refused.exit_code == 2 and "Traceback" not in refused.output, refused.output
    assert json.loads(refused.output)["errors"][0]["path"] == "--kernel-arg"
    keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ2M0Jt2 test"]
    for bad in ("quiet splash", "a}b", ""):
        with pytest.raises(InvalidInput) as exc:
            build_image(keys, kernel_args=(bad,), cache=tmp_path / "cache")
        assert exc.value.problems[0].path == "--kernel-arg" and repr(bad) in exc.value.message
    assert not (tmp_path / "cache").exists()  # refused before anything was built


def test_build_with_a_missing_inventory_is_invalid_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["image", "build", "-i", str(tmp_path / "nope.yml"), "--dry-run"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_grub_bios_embedding_keeps_the_gpt_and_points_boot_img_at_core(tmp_path: Path) -> None:
    disk = tmp_path / "disk.raw"
    with disk.open("wb") as fh:
        fh.truncate(64 << 20)
    layout = "label: gpt\nstart=2048, size=2048, type=21686148-6449-6e6f-744e-656564454649\nstart=4096, type=L\n"
    subprocess.run(["sfdisk", "-q", str(disk)], input=layout, text=True, check=True)
    before = disk.read_bytes()[:512]
    boot = (GRUB_DIRS["i386-pc"] / "boot.img").read_bytes()
    core = bytes(range(256)) * 200  # 51200 bytes: 100 sectors
    install_grub_bios(disk, boot, core, lba=2048)
    data = disk.read_bytes()
    mbr = data[:512]
    assert mbr[0x1B8:0x1FE] == before[0x1B8:0x1FE]  # protective MBR entry intact
    assert mbr[:0x03] == boot[:0x03] and mbr[0x5A:0x5C] == boot[0x5A:0x5C]
    assert struct.unpack("<Q", mbr[0x5C:0x64])[0] == 2048
    assert mbr[0x1FE:] == b"\x55\xaa"
    first = data[2048 * 512 : 2049 * 512]
    assert struct.unpack("<QHH", first[-12:]) == (2049, 99, 0x820)
    assert data[2049 * 512 : 2148 * 512] == core[512:]
    table = subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, text=True, check=True).stdout
    assert len(json.loads(table)["partitiontable"]["partitions"]) == 2  # GPT still valid
