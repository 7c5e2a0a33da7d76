"""``rackctl image``: build what the head node serves: the deploy ramdisk and the OS image."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, escape, handle_errors, phases
from bootstrap.inventory import load_inventory
from bootstrap.provision.cache import prune
from bootstrap.provision.image import build_image, check_kernel_args, default_mirror, image_packages
from bootstrap.provision.ramdisk import PROFILES, build_ramdisk, cache_root, resolve_kernel_package

#: where `rackctl provision` (the provision stage) looks for vmlinuz, initrd.img and disk.raw.gz by default
ARTEFACTS = "artefacts"


@click.group("image")
def image_group() -> None:
    """Deploy ramdisk and OS image for network installs (cached under ~/.cache/rackctl)."""


@image_group.command("ramdisk")
@click.option(
    "--profile",
    type=click.Choice(["lab", "dell"]),
    default="lab",
    show_default=True,
    help="Drivers to include: lab (virtio) or dell (Broadcom/Mellanox/Intel NICs, BOSS-N1, PERC, NVMe).",
)
@click.option("--module", "extra_modules", multiple=True, help="Extra kernel module (repeatable).")
@flags.out(ARTEFACTS, "Copy vmlinuz + initrd.img here")
@flags.state_dir
@flags.plan("Show the kernel package and modules; build nothing.", "dry_run")
@flags.json
@handle_errors()
def ramdisk_cmd(  # noqa: PLR0917 - click passes options as arguments
    profile: str,
    extra_modules: tuple[str, ...],
    out_dir: Path | None,
    state_dir: Path,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Build the deploy ramdisk from Debian's kernel package and busybox-static (copied where provision looks)."""

    out = out_dir_of(out_dir, state_dir)
    if dry_run:
        package, version = resolve_kernel_package()
        data = {"ok": True, "dry_run": True, "kernel_package": f"{package}={version}", "profile": profile,
                "modules": [*PROFILES[profile], *extra_modules], "out": str(out)}  # fmt: skip
        emit(data, as_json, _show_ramdisk_plan)
        return
    with phases(f"building the {profile} deploy ramdisk", quiet=as_json):
        ramdisk = build_ramdisk(profile, extra_modules=extra_modules, out_dir=out)
    emit({"ok": True, **ramdisk.as_dict()}, as_json, _show_ramdisk)


def _show_ramdisk_plan(data: dict[str, Any]) -> None:
    console.print(f"would build the {data['profile']} ramdisk from {escape(data['kernel_package'])}")
    console.print(f"modules (plus their dependencies): {', '.join(data['modules'])}")


def _show_ramdisk(data: dict[str, Any]) -> None:
    console.print(f"kernel  {escape(data['kernel'])}")
    console.print(f"initrd  {escape(data['initrd'])}  ({len(data['modules'])} modules, kernel {data['release']})")


@image_group.command("build")
@flags.inventory
@click.option("--suite", default="bookworm", show_default=True, help="Debian suite to debootstrap.")
@click.option("--mirror", default=None, help="Debian mirror (default: this machine's apt source).")
@click.option("--size-mib", type=click.IntRange(640, 65536), default=768, show_default=True, help="Raw disk size.")
@flags.out(ARTEFACTS, "Copy disk.raw.gz (+ .json) here")
@flags.state_dir
@click.option(
    "--trim/--all-drivers",
    default=None,
    help="Drop drivers virtio VMs never use (default: trim for lab inventories, all drivers otherwise).",
)
@click.option(
    "--kernel-arg",
    "kernel_args",
    multiple=True,
    metavar="ARG",
    help="Append ARG to the kernel command line (repeatable), e.g. iommu=pt.",
)
@click.option(
    "--authorized-key",
    "extra_keys",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A public key file (.pub) to authorise besides the inventory's admin keys (repeatable).",
)
@flags.plan("Show what would be built; build nothing.", "dry_run")
@flags.json
@handle_errors()
def build_cmd(
    *,
    inventory_path: Path,
    extra_keys: tuple[Path, ...],
    suite: str,
    mirror: str | None,
    size_mib: int,
    trim: bool | None,
    kernel_args: tuple[str, ...],
    out_dir: Path | None,
    state_dir: Path,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Build the OS image (debootstrap; GPT disk bootable by BIOS and UEFI; gzipped, sha256 of the raw disk).

    The admin SSH keys come from the inventory; the image carries no host key (each node gets its pinned
    one at deploy time). Takes minutes the first time, then it is reused from the cache.
    """

    inventory = load_inventory(inventory_path)
    out = out_dir_of(out_dir, state_dir)
    keys = list(inventory.cluster.admin_ssh_keys) + [k.read_text(encoding="utf-8").strip() for k in extra_keys]
    trim = inventory.cluster.lab if trim is None else trim
    check_kernel_args(kernel_args)
    if dry_run:
        data = {"ok": True, "dry_run": True, "suite": suite, "mirror": mirror or default_mirror(),
                "packages": list(image_packages()), "size_mib": size_mib, "admin_keys": len(keys), "trim": trim,
                "kernel_args": list(kernel_args), "out": str(out)}  # fmt: skip
        emit(data, as_json, lambda d: console.print(
            f"would debootstrap {d['suite']} from {escape(d['mirror'])} with {', '.join(d['packages'])} "
            f"into a {d['size_mib']} MiB disk with {d['admin_keys']} admin key(s)"))  # fmt: skip
        return
    with phases("building the OS image", quiet=as_json) as step:
        image = build_image(
            keys, suite=suite, mirror=mirror, size_mib=size_mib, trim=trim, kernel_args=kernel_args, out=out,
            progress=step,
        )  # fmt: skip
    emit({"ok": True, **image.as_dict()}, as_json, lambda d: console.print(
        f"image {escape(d['path'])}\nsha256 {d['sha256']} ({d['size']} bytes uncompressed)"))  # fmt: skip


@image_group.command("prune")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Built entries to keep per kind (OS images, debootstrap trees per suite, ramdisks per profile).",
)
@flags.plan("List what would be removed; remove nothing.")
@flags.json
@handle_errors()
def prune_cmd(keep: int, plan_only: bool, as_json: bool) -> None:
    """Remove old built images and ramdisks from the cache, keeping the most recently used of each kind.

    Each new admin key, recipe or kernel builds a new entry, so the cache only grows. Do not prune while an
    install is served from an entry that may go (``--plan`` shows which).
    """
    cache = cache_root()
    gone, kept = prune(cache, keep, apply=not plan_only)
    now = time.time()
    data = {
        "ok": True,
        "plan": plan_only,
        "cache": str(cache),
        "keep": keep,
        "removed" if not plan_only else "would_remove": [e.as_dict(now) for e in gone],
        "freed_bytes" if not plan_only else "would_free_bytes": sum(e.size for e in gone),
        "kept": [e.as_dict(now) for e in kept],
    }
    emit(data, as_json, _show_prune)


def _show_prune(data: dict[str, Any]) -> None:
    gone = data.get("removed", data.get("would_remove", []))
    freed = data.get("freed_bytes", data.get("would_free_bytes", 0))
    table = Table(title=f"{'would remove' if data['plan'] else 'removed'} from {escape(data['cache'])}")
    for col in ("kind", "entry", "MB", "last used (days ago)"):
        table.add_column(col)
    for e in gone:
        table.add_row(e["group"], escape(Path(e["path"]).name), f"{e['bytes'] / 1e6:.0f}", str(e["age_days"]))
    console.print(table)
    verb = "would free" if data["plan"] else "freed"
    console.print(f"{verb} {freed / 1e6:.0f} MB; kept {len(data['kept'])} entries (the {data['keep']} most recently "
                  "used of each kind)")  # fmt: skip


def out_dir_of(out: Path | None, state_dir: Path) -> Path:
    """``--out``, else ``<state-dir>/artefacts`` (where the provision stage finds them)."""
    return flags.out_dir(out, state_dir, ARTEFACTS)


def register(cli: click.Group) -> None:
    """Attach ``rackctl image``."""
    cli.add_command(image_group)
