"""``rackctl mirror check``: every package a role asks for is in the served repository, at its pinned version.

Checked from the files the web server serves (the ``Packages`` index and the lock), before any node
is touched; the signature of ``InRelease`` is verified against the site key's public half.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.errors import Problem
from bootstrap.inventory.environment_checks import OperatorEnvironmentError
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, build_manifest, version_matches
from bootstrap.resources import roles_dir

if TYPE_CHECKING:
    from bootstrap.inventory.models import Inventory
from bootstrap.mirror.repo import read_lock, repo_packages


@dataclass
class CheckResult:
    """The verdict, with one line per problem."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "problems": self.problems}


def check_mirror(layout: MirrorLayout, manifest: Manifest) -> CheckResult:
    """Compare the roles' requests with the repository (and its lock); verify the signature."""
    result = CheckResult()
    lock = read_lock(layout)
    if lock is None:
        result.problems.append(
            {"package": None, "problem": f"no repository at {layout.repo}", "fix": "run `rackctl mirror build`"}
        )
        return result
    served = repo_packages(layout, manifest.suite, manifest.components)
    pinned: dict[str, str] = lock.get("packages", {})
    for req in manifest.requests:
        result.checked += 1
        want = req.version or pinned.get(req.name)
        have = served.get(req.name)
        if have is None:
            result.problems.append(
                {
                    "package": req.name,
                    "role": req.role,
                    "problem": "not in the repository",
                    "fix": "run `rackctl mirror build` (the manifest changed)",
                }
            )
        elif want is not None and not version_matches(want, have):
            result.problems.append(
                {
                    "package": req.name,
                    "role": req.role,
                    "problem": f"repository has {have}, pinned {want}",
                    "fix": "run `rackctl mirror build`",
                }
            )
    for name, version in pinned.items():
        if served.get(name) != version:
            result.problems.append(
                {
                    "package": name,
                    "role": None,
                    "problem": f"locked {version}, repository has {served.get(name)}",
                    "fix": "run `rackctl mirror build`",
                }
            )
    if lock.get("suite") != manifest.suite:
        result.problems.append(
            {
                "package": None,
                "problem": f"repository is for {lock.get('suite')}, the inventory asks for {manifest.suite}",
                "fix": "run `rackctl mirror build`",
            }
        )
    signature = verify_signature(layout, manifest.suite)
    if signature:
        result.problems.append({"package": None, "problem": signature, "fix": "run `rackctl mirror build`"})
    return result


def verify_signature(layout: MirrorLayout, suite: str) -> str | None:
    """None when ``dists/<suite>/InRelease`` is signed by the site key, else what is wrong."""
    inrelease = layout.repo / "dists" / suite / "InRelease"
    if not inrelease.exists():
        return f"{inrelease} is missing (the repository is unsigned)"
    if not layout.public_key.exists() or shutil.which("gpgv") is None:
        return f"cannot verify: {layout.public_key} or gpgv is missing"
    with tempfile.TemporaryDirectory() as tmp:
        keyring = Path(tmp) / "site.gpg"
        dearmor = subprocess.run(
            ["gpg", "--homedir", tmp, "--batch", "--dearmor", "-o", str(keyring), str(layout.public_key)],
            capture_output=True,
            text=True,
            check=False,
        )
        if dearmor.returncode != 0:
            return f"the site key cannot be read: {dearmor.stderr.strip()}"
        proc = subprocess.run(
            ["gpgv", "--keyring", str(keyring), str(inrelease)], capture_output=True, text=True, check=False
        )
    return None if proc.returncode == 0 else f"InRelease is not signed by the site key: {proc.stderr.strip()[-300:]}"


def require_mirror_ready(inventory: Inventory, state_dir: Path, roles: Path | None = None) -> None:
    """For a stage's ``check_environment``: with ``source: mirror``, raise
    :class:`~bootstrap.inventory.environment_checks.OperatorEnvironmentError` listing every package a role
    would miss (nothing is touched; exit 2). Other sources: nothing to check here."""
    if inventory.site_services.packages.source != "mirror":
        return
    result = check_mirror(MirrorLayout(state_dir), build_manifest(inventory, roles or roles_dir()))
    if not result.ok:
        raise OperatorEnvironmentError(
            "the head node's package mirror does not hold what the roles install",
            problems=[
                Problem(f"mirror: {p['package'] or 'repository'}", p["problem"], p["fix"]) for p in result.problems
            ],
        )
