"""``rackctl mirror build``: manifest -> private apt (resolve, download) -> signed reprepro repository.

The private apt reads Debian's archive and the manifest's extra upstreams (:mod:`bootstrap.mirror.upstreams`,
each trusted through its own keyring, :mod:`bootstrap.mirror.upstream_keys`). Before resolving, every
version the inventory pins in an upstream is looked up there (``apt-cache madison``), so a version the
repository lacks is refused naming the inventory field and what the repository has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.mirror.apt_fetch import FetchError, FlatSource, PrivateApt, Upstream
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, version_matches
from bootstrap.mirror.repo import build_repo
from bootstrap.mirror.sitekey import ensure_site_key, stop_agent
from bootstrap.mirror.upstream_keys import keyring_for
from bootstrap.provision.ramdisk import cache_lock

#: The origin of a package from the distribution's archive (the others are named by their upstream).
DEBIAN_ORIGIN = "debian"


@dataclass(frozen=True)
class Resolution:
    """The pinned closure (``name -> exact version``) and where each package comes from."""

    lock: dict[str, str]
    origins: dict[str, str]


@dataclass(frozen=True)
class BuildResult:
    """What was built: the served directory, the lock, the key that signed it."""

    repo: Path
    lock: dict[str, str]
    key_fingerprint: str
    public_key: Path
    origins: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "packages": len(self.lock),
            "lock": self.lock,
            "origins": self.origins,
            "key_fingerprint": self.key_fingerprint,
            "public_key": str(self.public_key),
        }


def apt_for(layout: MirrorLayout, manifest: Manifest, upstream: Upstream) -> PrivateApt:
    """The private apt state for this manifest's suite, with the upstreams' keyrings where they were written."""
    root = layout.apt_state / manifest.suite
    extra = [
        FlatSource(r.name, r.uri, root / "keys" / f"{r.name}.gpg", r.suite, r.component) for r in manifest.upstreams
    ]
    return PrivateApt(root, upstream, manifest.suite, manifest.components, extra)


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
    return plan_mirror(layout, manifest, upstream).lock


def plan_mirror(layout: MirrorLayout, manifest: Manifest, upstream: Upstream | None = None) -> Resolution:
    """The manifest's closure with exact versions and origins; downloads indices and keys, no package."""
    with cache_lock(layout.root):
        return _resolve(layout, manifest, upstream or Upstream())[1]


def _resolve(layout: MirrorLayout, manifest: Manifest, upstream: Upstream) -> tuple[PrivateApt, Resolution]:
    require_packages(manifest)
    apt = apt_for(layout, manifest, upstream)
    for repo in manifest.upstreams:
        keyring_for(repo, apt.keys)
    apt.prepare()
    _update(apt, manifest)
    _refuse_missing_versions(apt, manifest)
    lock = apt.resolve(manifest.pinned())
    return apt, Resolution(lock, origins_of(apt, lock))


#: apt's words for an index it did not take (apt only warns and keeps the old lists; a weak-algorithm
#: warning and the like do not leave the index unread)
_UNREAD_MARKS = ("Failed to fetch", "GPG error", "is not signed", "NO_PUBKEY", "EXPKEYSIG", "not updated")


def _update(apt: PrivateApt, manifest: Manifest) -> None:
    """``apt-get update``; an upstream apt cannot read (key, signature, network) is named with apt's words."""
    try:
        warnings, error = apt.update(), None
    except FetchError as exc:
        warnings, error = exc.message, exc
    problems = []
    for repo in manifest.upstreams:
        said = [
            line.strip()
            for line in warnings.splitlines()
            if repo.uri.rstrip("/") in line and any(m in line for m in _UNREAD_MARKS)
        ]
        if said:
            problems.append(
                Problem(
                    repo.field,
                    f"{repo.title} ({repo.uri}): " + " / ".join(said)[-600:],
                    f"check that the repository is reachable and signed by its key ({repo.key_described()})",
                )
            )
    if problems:
        names = ", ".join(p.path.rsplit(".", 1)[-1] for p in problems)
        raise InvalidInput(
            f"apt cannot read the upstream repositories: {names}; nothing was mirrored", problems=problems
        )
    if error is not None:
        raise error


def _refuse_missing_versions(apt: PrivateApt, manifest: Manifest) -> None:
    """Each version pinned in an upstream must be there (named by its inventory field otherwise)."""
    sources = {s.name: s for s in apt.extra}
    titles = {r.name: r for r in manifest.upstreams}
    asked = [r for r in manifest.requests if r.origin in sources and r.version]
    table = apt.madison(sorted({r.name for r in asked}))
    lacking: dict[tuple[str, str, str, tuple[str, ...]], list[str]] = {}
    for req in asked:
        assert req.version is not None
        have = tuple(v for v, where in table[req.name] if sources[req.origin].names(where))
        if not any(version_matches(req.version, v) for v in have):
            key = (req.field or req.role, req.origin, req.version.removesuffix("-*"), have)
            lacking.setdefault(key, []).append(req.name)
    problems = []
    for (where, origin, wanted, have), names in lacking.items():
        repo = titles[origin]
        listed = ", ".join(have[:8]) + (", ..." if len(have) > 8 else "")
        problems.append(
            Problem(
                where,
                f"{'/'.join(names)} {wanted} not in {repo.title} ({repo.uri}): "
                + (f"it has {listed}" if have else f"it has no {'/'.join(names)} at all"),
                f"set {where} to a version the repository has" if have else f"check {repo.field}.uri",
            )
        )
    if problems:
        raise InvalidInput(
            "the upstream repositories lack versions the inventory pins; nothing was mirrored", problems=problems
        )


def origins_of(apt: PrivateApt, lock: dict[str, str]) -> dict[str, str]:
    """Where each locked package comes from: an extra upstream's name, else :data:`DEBIAN_ORIGIN`."""
    table = apt.madison(sorted(lock))
    origins = {}
    for name, version in sorted(lock.items()):
        wheres = [where for v, where in table.get(name, []) if v == version]
        origins[name] = next((s.name for s in apt.extra for w in wheres if s.names(w)), DEBIAN_ORIGIN)
    return origins


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
    apt, resolution = _resolve(layout, manifest, upstream)
    lock = resolution.lock
    progress(f"downloading {len(lock)} packages")
    debs = apt.download(lock, progress)
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
            origins=resolution.origins,
        )
    finally:
        stop_agent(layout.gnupg_home)
    apt.prune(debs)
    return BuildResult(
        repo=repo, lock=lock, key_fingerprint=fpr, public_key=layout.public_key, origins=resolution.origins
    )
