"""Resolve and download a manifest's dependency closure with a private apt state (the host's is untouched).

apt runs with its own sources, lists, cache, preferences and an empty dpkg status, so the closure is
what a node needs from nothing but its essential set; ``apt-get install -s`` gives the exact versions
(the lock), ``--download-only`` fetches exactly those ``.deb`` files. Beside the distribution, flat
repositories (:class:`FlatSource`: Kubernetes', NVIDIA's) and suite-layout ones (Docker's) can be read, each
trusted through its own keyring.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.tool_progress import Milestones, apt_download_line, run_lines

DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
ARCHIVE_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
INST_RE = re.compile(r"^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) ")
#: ``apt-cache madison``: `` name | version | uri suite/component arch Packages`` (flat: ``uri  Packages``)
MADISON_RE = re.compile(r"^\s*(\S+)\s*\|\s*(\S+)\s*\|\s*(\S+)\s")


class FetchError(RackctlError):
    """apt could not resolve or download the manifest (its message is in the error)."""


@dataclass(frozen=True)
class Upstream:
    """Where the packages are downloaded from (a connected machine's view of the distribution)."""

    archive: str = DEBIAN_ARCHIVE
    security: str | None = DEBIAN_SECURITY
    keyring: Path = ARCHIVE_KEYRING

    def sources(self, suite: str, components: list[str]) -> str:
        comps = " ".join(components)
        lines = [
            f"deb [signed-by={self.keyring}] {self.archive} {suite} {comps}",
            f"deb [signed-by={self.keyring}] {self.archive} {suite}-updates {comps}",
        ]
        if self.security:
            lines.append(f"deb [signed-by={self.keyring}] {self.security} {suite}-security {comps}")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class FlatSource:
    """A repository beside the distribution's archive: flat (``deb [signed-by=keyring] uri /``) or, with
    ``suite``, a suite layout (``deb [signed-by=keyring] uri suite component``)."""

    name: str
    uri: str
    keyring: Path
    suite: str | None = None
    component: str | None = None

    def line(self) -> str:
        where = f"{self.suite} {self.component or 'main'}" if self.suite else "/"
        return f"deb [signed-by={self.keyring}] {self.uri} {where}"

    def names(self, where: str) -> bool:
        """Whether ``where`` (a URI as apt prints it) is this repository."""
        return where.rstrip("/") == self.uri.rstrip("/")


class PrivateApt:
    """apt-get with every directory under ``root`` (lists, cache, status, sources, preferences)."""

    def __init__(
        self,
        root: Path,
        upstream: Upstream,
        suite: str,
        components: list[str],
        extra: Sequence[FlatSource] = (),
    ) -> None:
        self.root = Path(root)
        self.upstream = upstream
        self.suite = suite
        self.components = components
        self.extra = list(extra)

    @property
    def keys(self) -> Path:
        """Where the extra repositories' keyrings are kept (written by :mod:`bootstrap.mirror.upstream_keys`)."""
        return self.root / "keys"

    @property
    def archives(self) -> Path:
        return self.root / "cache" / "archives"

    def options(self) -> list[str]:
        r = self.root
        opts = {
            "Dir::Etc::SourceList": r / "sources.list",
            "Dir::Etc::SourceParts": r / "empty",
            "Dir::Etc::Parts": r / "empty",
            "Dir::Etc::Preferences": r / "empty" / "preferences",
            "Dir::Etc::PreferencesParts": r / "empty",
            "Dir::State": r / "state",
            "Dir::State::status": r / "status",
            "Dir::Cache": r / "cache",
            "Debug::NoLocking": "1",
            "APT::Architecture": "amd64",
            "APT::Install-Recommends": "0",
            "Acquire::Languages": "none",
        }
        return [arg for key, value in opts.items() for arg in ("-o", f"{key}={value}")]

    def prepare(self) -> None:
        """Write the private state's sources and empty status (idempotent)."""
        if shutil.which("apt-get") is None:
            raise EnvironmentMissing("apt-get not found: `rackctl mirror build` runs on a Debian/Ubuntu machine")
        if not self.upstream.keyring.exists():
            raise EnvironmentMissing(
                f"{self.upstream.keyring} not found; install the Debian package 'debian-archive-keyring'"
            )
        for sub in ("empty", "state/lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        extra = "".join(f"{source.line()}\n" for source in self.extra)
        (self.root / "sources.list").write_text(self.upstream.sources(self.suite, self.components) + extra)
        (self.root / "status").touch()

    def _call(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool, *self.options(), *args], capture_output=True, text=True, check=False, env=_apt_env()
        )

    def run(self, *args: str) -> str:
        proc = self._call("apt-get", *args)
        if proc.returncode != 0:
            raise FetchError(f"apt-get {' '.join(args[:2])} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
        return proc.stdout

    def update(self) -> str:
        """``apt-get update``; its warnings (``W:`` lines, e.g. an index it could not fetch), '' if none."""
        proc = self._call("apt-get", "update")
        if proc.returncode != 0:
            raise FetchError(f"apt-get update failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
        return "\n".join(line for line in proc.stderr.splitlines() if line.startswith("W:"))

    def madison(self, names: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Every version of each package the lists have, highest first, with the URI it comes from."""
        found: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
        if not names:
            return found
        proc = self._call("apt-cache", "madison", *names)
        for line in proc.stdout.splitlines():
            match = MADISON_RE.match(line)
            if match and match.group(1) in found:
                found[match.group(1)].append((match.group(2), match.group(3)))
        return found

    def resolve(self, packages: Mapping[str, str | None]) -> dict[str, str]:
        """The closure of ``packages`` (``name -> version or None``) as ``name -> exact version``."""
        args = [f"{n}={v}" if v else n for n, v in sorted(packages.items())]
        try:
            out = self.run("install", "-s", "-y", *args)
        except FetchError as exc:
            raise InvalidInput(
                "the manifest cannot be resolved in the distribution",
                problems=[Problem("manifest", exc.message.splitlines()[-1] if exc.message else "", _RESOLVE_FIX)],
            ) from None
        return {m.group(1): m.group(2) for line in out.splitlines() if (m := INST_RE.match(line))}

    def download(self, lock: Mapping[str, str], progress: Callable[[str], None] | None = None) -> list[Path]:
        """Download exactly ``lock`` (``name -> version``); the ``.deb`` paths. ``progress`` is told the first
        package fetched and every 25th, with the count."""
        args = ["install", "-y", "--download-only", *[f"{n}={v}" for n, v in sorted(lock.items())]]
        if progress is None:
            self.run(*args)
        else:
            shown = Milestones(progress, apt_download_line, prefix="downloading ", total=len(lock))
            rc, tail = run_lines(["apt-get", *self.options(), *args], shown, env=_apt_env())
            if rc != 0:
                raise FetchError(f"apt-get {' '.join(args[:2])} failed:\n{tail[-3000:]}")
        debs = sorted(self.archives.glob("*.deb"))
        wanted = {(n, _file_version(v)) for n, v in lock.items()}
        return [d for d in debs if tuple(d.name.split("_")[:2]) in wanted]

    def prune(self, keep: list[Path]) -> None:
        """Drop downloaded ``.deb`` files the last build did not use (older versions)."""
        wanted = {p.name for p in keep}
        for deb in self.archives.glob("*.deb"):
            if deb.name not in wanted:
                deb.unlink()


_RESOLVE_FIX = "check the package names and pinned versions the roles and site_services.packages.pins ask for"


def _file_version(version: str) -> str:
    """A version as it appears in a ``.deb`` file name (apt writes ``:`` as ``%3a``)."""
    return version.replace(":", "%3a")


def _apt_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APT_")}
    env.update({"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"})
    return env
