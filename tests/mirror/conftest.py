"""Fixtures of the mirror tests: one real mirror built per session from Debian's archive (small set)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.mirror.build import BuildResult, build_mirror
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, build_manifest
from bootstrap.resources import roles_dir

REPO = Path(__file__).resolve().parents[2]
PROBE_ROLE = Path(__file__).parent / "roles" / "mirror_probe"


@dataclass
class BuiltMirror:
    inventory: Inventory
    roles: Path
    layout: MirrorLayout
    manifest: Manifest
    result: BuildResult
    said: list[str] = field(default_factory=list)  #: what the build reported as it went


def tools_missing() -> str:
    missing = [t for t in ("reprepro", "gpg", "gpgv", "apt-get") if shutil.which(t) is None]
    return f"missing tools: {', '.join(missing)} (scripts/apt-packages.txt)" if missing else ""


def gpgv_with_site_key(layout: MirrorLayout, signed: Path) -> subprocess.CompletedProcess[str]:
    """``gpgv`` of ``signed`` against the mirror's public key alone (dearmored into a throwaway keyring)."""
    keyring = layout.root / "verify.gpg"
    dearmor = ["gpg", "--batch", "--yes", "--homedir", str(layout.root), "--dearmor", "-o", str(keyring)]
    subprocess.run([*dearmor, str(layout.public_key)], check=True, capture_output=True)
    try:
        return subprocess.run(
            ["gpgv", "--keyring", str(keyring), str(signed)], check=False, capture_output=True, text=True
        )
    finally:
        keyring.unlink()


#: the shipped roles whose packages the test mirror holds (the others' would make it download far more)
MIRRORED_ROLES = ("package_source", "head_mirror")


def mirror_roles(folder: Path) -> Path:
    """:data:`MIRRORED_ROLES` plus the probe role (asks for `hello`), as a roles directory."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in MIRRORED_ROLES:
        (folder / name).symlink_to(roles_dir() / name)
    (folder / PROBE_ROLE.name).symlink_to(PROBE_ROLE)
    return folder


def lab_inventory_copy(folder: Path) -> Path:
    """``inventory/lab.yml`` copied into ``folder`` (its relative lab paths then point inside ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "inventory" / "lab.yml"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "inventory" / "lab.yml", target)
    return target


@pytest.fixture(scope="session")
def built_mirror(tmp_path_factory: pytest.TempPathFactory) -> BuiltMirror:
    """A mirror of :data:`MIRRORED_ROLES`' packages plus `hello`, built once per session (downloads ~20 MB)."""
    reason = tools_missing()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("mirror")
    inventory = load_inventory(lab_inventory_copy(base))
    roles = mirror_roles(base / "roles")
    layout = MirrorLayout(base / "state")
    manifest = build_manifest(inventory, roles)
    said: list[str] = []
    result = build_mirror(
        layout, manifest, key_uid="rackctl test mirror <mirror@lab.rackctl.test>", progress=said.append
    )
    return BuiltMirror(inventory, roles, layout, manifest, result, said)
