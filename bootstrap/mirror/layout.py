"""Where the mirror keeps its files: ``<state-dir>/mirror/`` (defined once)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MirrorLayout:
    """Paths of the site key, the served repository and its lock, and the registry's images."""

    state_dir: Path

    @property
    def root(self) -> Path:
        return Path(self.state_dir) / "mirror"

    @property
    def gnupg_home(self) -> Path:
        """The site key's GnuPG home (0700; the private key never leaves it)."""
        return self.root / "gnupg"

    @property
    def public_key(self) -> Path:
        """The site key's armored public half (what nodes trust)."""
        return self.root / "site-key.asc"

    @property
    def repo(self) -> Path:
        """The served tree: ``dists/`` and ``pool/`` (plus ``rackctl-lock.json``), swapped in whole."""
        return self.root / "repo"

    @property
    def lock(self) -> Path:
        """Every package in the repository with its exact version (written with the repository)."""
        return self.repo / "rackctl-lock.json"

    @property
    def archive(self) -> Path:
        """The served tree as one ``.tar.gz`` (what role ``head_mirror`` unpacks on a head node)."""
        return self.root / "repo.tar.gz"

    def revision(self) -> str | None:
        """The repository's revision: the first 16 hex digits of its lock's SHA-256 (None: not built)."""
        try:
            return hashlib.sha256(self.lock.read_bytes()).hexdigest()[:16]
        except FileNotFoundError:
            return None

    @property
    def apt_state(self) -> Path:
        """The private apt state used to resolve and download (never the host's)."""
        return self.root / "apt-state"

    @property
    def images(self) -> Path:
        """OCI layouts of the images the registry is filled with."""
        return self.root / "images"
