"""``rackctl mirror build``: manifest -> private apt (resolve, download) -> signed reprepro repository."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.mirror.apt_fetch import PrivateApt, Upstream
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest
from bootstrap.mirror.repo import build_repo
from bootstrap.mirror.sitekey import ensure_site_key, stop_agent
from bootstrap.provision.ramdisk import cache_lock


@dataclass(frozen=True)
class BuildResult:
    """What was built: the served directory, the lock, the key that signed it."""

    repo: Path
    lock: dict[str, str]
    key_fingerprint: str
    public_key: Path

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "packages": len(self.lock),
            "lock": self.lock,
            "key_fingerprint": self.key_fingerprint,
            "public_key": str(self.public_key),
        }


def apt_for(layout: MirrorLayout, manifest: Manifest, upstream: Upstream) -> PrivateApt:
    """The private apt state for this manifest's suite."""
    return PrivateApt(layout.apt_state / manifest.suite, upstream, manifest.suite, manifest.components)


def require_packages(manifest: Manifest) -> None:
    """Refuse an empty manifest (nothing would be mirrored)."""
    if not manifest.requests:
        raise InvalidInput(
            "no role declares packages: the mirror would be empty",
            problems=[
                Problem("roles/*/defaults/main.yml", "no <role>_packages list", "declare the packages a role installs")
            ],
        )


def resolve(layout: MirrorLayout, manifest: Manifest, upstream: Upstream | None = None) -> dict[str, str]:
    """The manifest's closure with exact versions (updates the private apt lists first)."""
    with cache_lock(layout.root):
        return _resolve(layout, manifest, upstream)


def _resolve(layout: MirrorLayout, manifest: Manifest, upstream: Upstream | None) -> dict[str, str]:
    require_packages(manifest)
    apt = apt_for(layout, manifest, upstream or Upstream())
    apt.prepare()
    apt.update()
    return apt.resolve(manifest.pinned())


def build_mirror(
    layout: MirrorLayout,
    manifest: Manifest,
    *,
    key_uid: str,
    upstream: Upstream | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> BuildResult:
    """Resolve, download, sign and swap in the repository for ``manifest``."""
    with cache_lock(layout.root):  # one build (or plan) of a state dir at a time: apt's own locks are off
        return _build(layout, manifest, key_uid, upstream or Upstream(), progress)


def _build(
    layout: MirrorLayout, manifest: Manifest, key_uid: str, upstream: Upstream, progress: Callable[[str], None]
) -> BuildResult:
    progress("resolving the manifest with a private apt state")
    lock = _resolve(layout, manifest, upstream)
    progress(f"downloading {len(lock)} packages")
    apt = apt_for(layout, manifest, upstream)
    debs = apt.download(lock)
    missing = sorted(set(lock) - {d.name.split("_", 1)[0] for d in debs})
    if missing:
        raise InvalidInput(
            "apt did not download every resolved package",
            problems=[Problem("manifest", f"missing: {', '.join(missing)}", "run `rackctl mirror build` again")],
        )
    progress("making the site key" if not layout.public_key.exists() else "using the site key")
    fpr = ensure_site_key(layout, key_uid)
    try:
        progress("building the signed repository")
        repo = build_repo(
            layout,
            debs,
            lock,
            suite=manifest.suite,
            components=manifest.components,
            key_fpr=fpr,
            manifest=manifest.as_dict(),
        )
    finally:
        stop_agent(layout.gnupg_home)
    apt.prune(debs)
    return BuildResult(repo=repo, lock=lock, key_fingerprint=fpr, public_key=layout.public_key)
