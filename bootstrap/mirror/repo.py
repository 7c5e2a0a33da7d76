"""The signed apt repository: reprepro builds it beside the served tree, which is then swapped in whole.

reprepro's own database and config stay outside the served tree (``--outdir``): the web server sees
``dists/``, ``pool/`` and ``rackctl-lock.json`` only. ``Release`` is signed (``InRelease`` and
``Release.gpg``) with the site key.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bootstrap.errors import EnvironmentMissing, RackctlError
from bootstrap.fsutil import swap_in
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.sitekey import agent_safe_home

LOCK_VERSION = 1


class RepoError(RackctlError):
    """reprepro failed (its output is in the message)."""


def distributions_conf(suite: str, components: list[str], key_fpr: str) -> str:
    """reprepro's ``conf/distributions`` for one suite signed with the site key."""
    return (
        f"Origin: rackctl\nLabel: rackctl site mirror\nSuite: {suite}\nCodename: {suite}\n"
        f"Architectures: amd64\nComponents: {' '.join(components)}\n"
        f"Description: packages the rackctl roles install, pinned\nSignWith: {key_fpr}\n"
    )


def _reprepro(base: Path, outdir: Path, home: Path, *args: str, options: tuple[str, ...] = ()) -> str:
    if shutil.which("reprepro") is None:
        raise EnvironmentMissing("reprepro not found; install the Debian package 'reprepro'")
    with agent_safe_home(home) as usable:
        proc = subprocess.run(
            ["reprepro", "--silent", "-b", str(base), "--outdir", str(outdir), *options, *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GNUPGHOME": str(usable), "LC_ALL": "C"},
        )
    if proc.returncode != 0:
        raise RepoError(f"reprepro {args[0]} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
    return proc.stdout


def _missing_fields(deb: Path) -> tuple[str, ...]:
    """reprepro refuses a ``.deb`` without Section or Priority: the options that fill in the missing ones
    (``misc``, ``optional``; an upstream's package may lack them, Debian's never do)."""
    proc = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Section", "Priority"], check=False, capture_output=True, text=True
    )
    fields = {
        line.split(":", 1)[0] for line in proc.stdout.splitlines() if ":" in line and line.split(":", 1)[1].strip()
    }
    return (
        *(() if "Section" in fields else ("--section", "misc")),
        *(() if "Priority" in fields else ("--priority", "optional")),
    )


def _include(base: Path, served: Path, home: Path, *, suite: str, debs: list[Path], origins: Mapping[str, str]) -> None:
    """``includedeb`` every package; an extra upstream's ones lacking Section or Priority get the defaults."""
    groups: dict[tuple[str, ...], list[Path]] = {}
    for deb in debs:
        upstream = origins.get(deb.name.split("_", 1)[0], "debian") != "debian"
        groups.setdefault(_missing_fields(deb) if upstream else (), []).append(deb)
    for options, group in groups.items():
        _reprepro(base, served, home, "includedeb", suite, *[str(d) for d in group], options=options)


def build_repo(
    layout: MirrorLayout,
    debs: list[Path],
    lock: Mapping[str, str],
    *,
    suite: str,
    components: list[str],
    key_fpr: str,
    manifest: Mapping[str, Any],
    origins: Mapping[str, str] | None = None,
) -> Path:
    """Build the repository from ``debs`` and swap it into ``layout.repo``; returns the served directory."""
    layout.root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build.", dir=layout.root))
    try:
        base, served = work / "reprepro", work / "repo"
        (base / "conf").mkdir(parents=True)
        served.mkdir()
        (base / "conf" / "distributions").write_text(distributions_conf(suite, components, key_fpr))
        _include(base, served, layout.gnupg_home, suite=suite, debs=debs, origins=origins or {})
        doc = {
            "version": LOCK_VERSION,
            "suite": suite,
            "components": components,
            "signed_by": key_fpr,
            "packages": dict(sorted(lock.items())),
            "origins": dict(sorted((origins or {}).items())),
            "manifest": manifest,
        }
        (served / "rackctl-lock.json").write_text(json.dumps(doc, indent=2) + "\n")
        for path in [served, *served.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        _write_archive(served, work / "repo.tar.gz")
        swap_in(served, layout.repo)
        os.replace(work / "repo.tar.gz", layout.archive)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return layout.repo


def _write_archive(tree: Path, out: Path) -> None:
    """``tree``'s content as a gzip tar (paths relative to it)."""
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(tree.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(tree)), recursive=False)
    os.chmod(out, 0o644)


def repo_packages(layout: MirrorLayout, suite: str, components: list[str]) -> dict[str, str]:
    """What the served repository's ``Packages`` indexes hold: ``name -> version``."""
    found: dict[str, str] = {}
    for comp in components:
        index = layout.repo / "dists" / suite / comp / "binary-amd64" / "Packages"
        with contextlib.suppress(FileNotFoundError):
            name = None
            for line in index.read_text(encoding="utf-8").splitlines():
                if line.startswith("Package: "):
                    name = line.split(": ", 1)[1].strip()
                elif line.startswith("Version: ") and name:
                    found[name] = line.split(": ", 1)[1].strip()
    return found


def read_lock(layout: MirrorLayout) -> dict[str, Any] | None:
    """The lock of the served repository, or None when no repository was built."""
    try:
        return json.loads(layout.lock.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
